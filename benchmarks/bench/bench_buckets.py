"""Generative decoders on the qnn backend: shape buckets vs one specialization per shape vs ORT's CPU.

For each generated stand-in of tests/decoder_models.py — a T5-style decoder re-run on its prefix
(cross-attention), the same in a beam search whose batch goes from 1 to 4, and a GPT-style decoder
with a KV cache and an attention mask (rotary positions; learned positions) — the decoding loop runs
``--steps`` steps (default 40) three ways, each on a fresh compile cache:

* ``buckets``: ``backend="qnn"`` (shape buckets on, the default);
* ``per shape``: ``backend="qnn"``, ``shape_buckets=False`` (what the backend did before);
* ``ORT CPU``: ``onnxruntime.InferenceSession``.

Printed per stand-in and way: compiles, the first run's wall time (compiles included), the
steady-state time per call (the loop again, everything compiled), the tokens' agreement with the
unpadded (per-shape) NPU run and the lowest per-step logits SNR against it (the diff's FP16 bar is
27.1 dB); target: at most ``ceil(log2(steps)) + 2`` compiles per model.

With ``--app PYTHON SCRIPT`` (e.g. a venv with the tryaii app installed and its run script: a MiniLM
encoder fed 18 sequence lengths) the app runs under ``python -m aipc --backend qnn`` with and without
``--no-shape-buckets`` on fresh caches, and plainly on the CPU: wall times, compiles (the ``-v``
log's "compiling" lines), and whether its printed output is the same.

Usage: ``python benchmarks/bench/bench_buckets.py [--steps 40] [--app PYTHON SCRIPT]``
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import onnxwrapper  # noqa: E402
from _figures import Figure, load_average, report  # noqa: E402
from tests import decoder_models as dm  # noqa: E402 - the shared generated decoders

NAME = "buckets"

ROUND = 2


def _snr(ref, got) -> float:
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    noise = float(np.sum((ref - got) ** 2))
    return math.inf if noise == 0 else 10 * math.log10(float(np.sum(ref ** 2)) / noise)


def _standins(steps: int) -> dict:
    return {"prefix decoder (T5-style)": (dm.prefix_decoder(), lambda s: dm.greedy_prefix(s, steps)),
            "beam search 1 → 4": (dm.prefix_decoder(), lambda s: dm.beam_prefix(s, steps)),
            "KV cache, rotary": (dm.kv_decoder(), lambda s: dm.greedy_kv(s, steps)),
            "KV cache, learned": (dm.kv_decoder(positions="learned"),
                                  lambda s: dm.greedy_kv(s, steps, positions="learned"))}


def _run_way(model, loop, way: str, folder: str):
    """``(compiles, first wall s, steady s per call, tokens, logits, calls)`` of one way."""
    data = model.SerializeToString()
    start = time.perf_counter()
    if way == "ORT CPU":
        session = onnxruntime.InferenceSession(data)
    else:
        options = {"cache_dir": tempfile.mkdtemp(dir=folder), "shape_buckets": way == "buckets"}
        session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options=options)
    tokens, logits = loop(session)
    first = time.perf_counter() - start
    start = time.perf_counter()
    loop(session)
    steady = (time.perf_counter() - start) / len(logits)
    compiles = sum(a.origin == "compiled" for a in session.backend_session.artifacts) if way != "ORT CPU" else 0
    return compiles, first, steady, tokens, logits


def standins(steps: int, figures: list) -> int:
    """Print the stand-in table and add one figure per stand-in to ``figures`` (compiles with buckets
    over compiles per shape; target ``(ceil(log2(steps)) + 2) / steps``); returns 1 when a bound is
    missed or the tokens or logits differ, else 0."""
    bound = math.ceil(math.log2(steps)) + 2
    failed = 0
    print(f"{steps} decoding steps; bound: {bound} compiles per model")
    print(f"{'stand-in':<26} {'way':<10} {'compiles':>8} {'first run':>10} {'per call':>10}  vs unpadded NPU run")
    with tempfile.TemporaryDirectory() as folder:
        for name, (model, loop) in _standins(steps).items():
            load = load_average()
            results = {way: _run_way(model, loop, way, folder) for way in ("per shape", "buckets", "ORT CPU")}
            figures.append(Figure(NAME, f"{name}: compiles for {steps} steps", "compiles", results["buckets"][0],
                                  results["per shape"][0], results["buckets"][0] / max(1, results["per shape"][0]),
                                  bound / steps, 1, load, load_average(), against="one specialization per shape",
                                  details={"first_run_s": {w: round(r[1], 3) for w, r in results.items()},
                                           "per_call_ms": {w: round(r[2] * 1e3, 3) for w, r in results.items()}}))
            ref_tokens, ref_logits = results["per shape"][3], results["per shape"][4]
            for way, (compiles, first, steady, tokens, logits) in results.items():
                agree = "same tokens" if tokens == ref_tokens else "OTHER TOKENS"
                snr = min(_snr(a, b) for a, b in zip(ref_logits, logits))
                note = "(the reference)" if way == "per shape" else f"{agree}, logits ≥ {snr:.1f} dB"
                print(f"{name:<26} {way:<10} {compiles:>8} {first:>9.2f}s {steady * 1e3:>8.2f}ms  {note}")
                if way == "buckets" and (compiles > bound or tokens != ref_tokens or snr < 27.1):
                    failed = 1
    return failed


def _untimed(text: str) -> str:
    """``text`` without the durations apps print (``(3.45s)``): what must be the same on the NPU."""
    return re.sub(r"\d+(\.\d+)?\s?m?s\b", "<time>", text)


def _aipc_app(python: str, script: str, *flags: str) -> tuple[float, int, str]:
    env = dict(os.environ)
    env["ONNXWRAPPER_CACHE_DIR"] = tempfile.mkdtemp()
    start = time.perf_counter()
    done = subprocess.run([python, "-m", "aipc", "--backend", "qnn", "-v", *flags, script], capture_output=True,
                          text=True, env=env, cwd=os.path.dirname(script))
    return time.perf_counter() - start, done.stderr.count("compiling "), done.stdout


def app(python: str, script: str) -> None:
    """Print the app's three runs."""
    start = time.perf_counter()
    plain = subprocess.run([python, script], capture_output=True, text=True, cwd=os.path.dirname(script)).stdout
    cpu = time.perf_counter() - start
    print(f"\napp {os.path.basename(script)}: ORT CPU {cpu:.1f} s")
    for label, flags in (("per shape", ("--no-shape-buckets",)), ("buckets", ())):
        wall, compiles, out = _aipc_app(python, script, *flags)
        print(f"  {label:<10} first run {wall:6.1f} s, {compiles} compiles, printed output "
              f"{'the same as on the CPU' if _untimed(out) == _untimed(plain) else 'DIFFERENT from the CPU'} "
              f"(durations aside)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--app", nargs=2, metavar=("PYTHON", "SCRIPT"))
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)
    figures: list = []
    status = standins(args.steps, figures)
    if args.app:
        app(args.app[0], os.path.abspath(args.app[1]))
    return max(status, report(figures, args.json_out))


if __name__ == "__main__":
    sys.exit(main())
