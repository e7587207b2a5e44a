"""Probe kinds: threads sharing sessions, and control-flow models (If / Loop / Scan)."""

from __future__ import annotations

import threading

import numpy as np

from probe_qnn_common import DEVIATION, SAME, Outcome, attempt, kind, ort_cpu, ow, result, write
from probe_qnn_models import conv, if_feeds, if_lstm, loop, scan

X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


# -- threads -----------------------------------------------------------------------------------------------------
def _threads(fn, n):
    out, errors = [None] * n, []

    def work(i):
        try:
            out[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    if errors:
        raise errors[0]
    return out


@kind("conc.threads_runs", "8 threads x 100 runs on one static session (bit-identical?)")
def _threads_runs(k, ctx):
    s = ow(conv(), ctx)
    first = s.run(None, {"X": X})[0]
    got = attempt(
        lambda: _threads(lambda i: max(float(np.abs(s.run(None, {"X": X})[0] - first).max()) for _ in range(100)), 8)
    )
    if got.ok and max(got.value) != 0.0:
        return result(k, None, got, DEVIATION, f"runs differ across threads: max |Δ| {max(got.value)}")
    return result(
        k, attempt(lambda: None), got, SAME if got.ok else DEVIATION, "bit-identical" if got.ok else got.brief()
    )


@kind("conc.threads_new_shape", "4 threads hit the same new shape of a dynamic session at once")
def _threads_shape(k, ctx):
    s = ow(conv("N", ("H", "W")), ctx)
    x = np.ones((2, 3, 6, 10), np.float32)
    ref = ort_cpu(conv("N", ("H", "W"))).run(None, {"X": x})
    got = attempt(lambda: [a for i in _threads(lambda i: s.run(None, {"X": x}), 4) for a in i])
    return result(k, Outcome(True, ref * 4), got)


@kind("conc.threads_create", "4 threads create sessions of the same new model at once")
def _threads_create(k, ctx):
    path = write(ctx, "t.onnx", conv(1, (12, 12)))
    x = np.ones((1, 3, 12, 12), np.float32)
    ref = ort_cpu(path).run(None, {"X": x})
    got = attempt(lambda: [a for i in _threads(lambda i: ow(path, ctx).run(None, {"X": x}), 4) for a in i])
    return result(k, Outcome(True, ref * 4), got)


# -- control flow ----------------------------------------------------------------------------------------------
def _cf_kind(kind_id, title, build, feed):
    @kind(kind_id, title)
    def probe(k, ctx):
        data = build()
        holder = {}

        def run():
            s = holder["s"] = ow(data, ctx)
            return s.run(None, feed)

        r = result(k, attempt(lambda: ort_cpu(data).run(None, feed)), attempt(run))
        part = holder.get("s") and holder["s"].get_partition()
        if part is not None:
            r["reason"] += f"; partition: {part.summary()[:90]}"
        return r

    return probe


_cf_kind("cf.if_lstm_16k", "If + LSTM (silero-shaped), dynamic, 8 samples at sr=16000", if_lstm, if_feeds(8, 16000))
_cf_kind("cf.if_lstm_8k", "If + LSTM (silero-shaped), dynamic, 4 samples at sr=8000", if_lstm, if_feeds(4, 8000))
_cf_kind(
    "cf.if_lstm_static",
    "If + LSTM with static dims, both branches valid (only sr picks the branch)",
    lambda: if_lstm(static=True, stride8k=8),
    if_feeds(8, 16000),
)
_cf_kind(
    "cf.loop_static",
    "Loop (trip count input), static dims",
    lambda: loop(True),
    {"x": np.ones((2, 4), np.float32), "M": np.array(3, np.int64)},
)
_cf_kind(
    "cf.loop_dynamic",
    "Loop (trip count input), dynamic batch",
    loop,
    {"x": np.ones((3, 4), np.float32), "M": np.array(4, np.int64)},
)
_cf_kind(
    "cf.scan_static",
    "Scan (running sum), static",
    lambda: scan(True),
    {"x": np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)},
)
_cf_kind(
    "cf.scan_dynamic",
    "Scan (running sum), dynamic sequence",
    scan,
    {"x": np.linspace(-1, 1, 28, dtype=np.float32).reshape(7, 4)},
)


@kind("cf.if_lstm_stream", "If + LSTM, 20 calls with the state fed back (silero's loop)")
def _stream(k, ctx):
    data = if_lstm()

    def go(s):
        f = if_feeds(8, 16000)
        outs = []
        for i in range(20):
            out, state = s.run(None, f)
            outs.append(out)
            f = dict(f, state=state, input=np.roll(f["input"], i))
        return [np.concatenate(outs)]

    return result(k, attempt(lambda: go(ort_cpu(data))), attempt(lambda: go(ow(data, ctx))))
