"""Benchmark of the ``qnn`` backend in one process: compiles, cache hits, and runs, each against raw
onnxruntime with the same QNN EP options.

Usage::

    python benchmarks/bench/bench_qnn.py [--model PATH] [--runs 10] [--repeats 5] [--json-out PATH]

Default model: the onnx wheel's light squeezenet (``onnx/backend/test/data/light/light_squeezenet.onnx``,
1×3×224×224 → 1×1000×1×1; weights are computed by ConstantOfShape nodes that ORT constant-folds, so
the QNN EP takes 100 % of the nodes). Figures (medians of paired ratios, pairs interleaved):

* cold compile (into an empty cache directory; QNN already initialised) vs raw onnxruntime
  generating the EPContext model itself (``ep.context_enable=1``) — no target;
* cache hit vs that cold compile: target ≤ 0.10 (a hit at least 10× faster than compiling);
* run: onnxwrapper session vs raw onnxruntime on the original model with the same QNN EP options
  (target ≤ 1.03), and vs raw onnxruntime on the cached EPContext model (isolates the wrapper from
  JIT-vs-context differences; no target).

Cache-hit creation in a fresh process is ``benchmarks/bench/bench_creation.py``; runs on a compiled shape
of a dynamic model are ``benchmarks/bench/bench_dispatch.py``. All sessions use the backend's default
configuration (Snapdragon X Elite target, FP16 emulation on the x86-64 simulator). The caches live
in a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnxruntime

import onnxwrapper
from _figures import Figure, load_average, paired_ratio, report

NAME = "qnn"


def _light_squeezenet() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def _create(model: str, cache: str):
    return _timed(lambda: onnxwrapper.InferenceSession(model, backend="qnn", backend_options={"cache_dir": cache}))


def _raw_options(ep_options: dict, configs: dict | None = None):
    so = onnxruntime.SessionOptions()
    for key, value in (configs or {}).items():
        so.add_session_config_entry(key, value)
    so.add_provider_for_devices([d for d in onnxruntime.get_ep_devices() if d.ep_name == "QNNExecutionProvider"],
                                dict(ep_options))
    return so


def _raw_session(model: str, ep_options: dict, configs: dict | None = None):
    return onnxruntime.InferenceSession(model, _raw_options(ep_options, configs))


def _interleaved(sessions: dict, feed: dict, runs: int) -> dict:
    """Run times (s) per session, runs interleaved so that machine noise hits all alike."""
    times = {name: [] for name in sessions}
    for session in sessions.values():  # warm-up
        session.run(None, feed)
    for _ in range(runs):
        for name, session in sessions.items():
            start = time.perf_counter()
            session.run(None, feed)
            times[name].append(time.perf_counter() - start)
    return times


def bench_creation(model: str, root: str, repeats: int) -> tuple[list[Figure], object]:
    """Cold compiles vs raw EPContext generation, and cache hits vs cold compiles."""
    _first, session = _create(model, os.path.join(root, "first"))  # QNN initialisation, imports
    assert session.backend_session.artifacts[0].origin == "compiled"
    ep_options = session.get_provider_options()["QNNExecutionProvider"]
    cold, raw_generate, hits = [], [], []
    load_before = load_average()
    for i in range(repeats):
        for kind in (("ours", "raw") if i % 2 == 0 else ("raw", "ours")):
            if kind == "ours":
                seconds, s = _create(model, os.path.join(root, f"cold{i}"))
                assert s.backend_session.artifacts[0].origin == "compiled"
                cold.append(seconds)
                del s
                hit, s = _create(model, os.path.join(root, f"cold{i}"))
                assert s.backend_session.artifacts[0].origin == "cache"
                hits.append(hit)
                del s
            else:
                out = os.path.join(root, f"raw{i}")
                os.makedirs(out)
                configs = {"ep.context_enable": "1", "ep.context_embed_mode": "0",
                           "ep.context_file_path": os.path.join(out, "model_ctx.onnx")}
                seconds, s = _timed(lambda: _raw_session(model, ep_options, configs))
                raw_generate.append(seconds)
                del s
    load_after = load_average()
    med = statistics.median
    return [
        Figure(NAME, "create, cold compile (QNN initialised)", "s", med(cold), med(raw_generate),
               paired_ratio(cold, raw_generate), None, repeats, load_before, load_after,
               against="raw onnxruntime generating the EPContext model"),
        Figure(NAME, "create, cache hit vs a cold compile", "s", med(hits), med(cold), paired_ratio(hits, cold), 0.10,
               repeats, load_before, load_after, against="a cold compile"),
    ], session


def bench_run(model: str, session, runs: int) -> list[Figure]:
    ep_options = session.get_provider_options()["QNNExecutionProvider"]
    name = session.get_inputs()[0].name
    shape = [d if isinstance(d, int) else 1 for d in session.get_inputs()[0].shape]
    feed = {name: np.random.default_rng(0).random(shape, np.float32)}
    raw_jit = _raw_session(model, ep_options)
    raw_ctx = _raw_session(session.backend_session.artifacts[0].ctx_path, ep_options)
    load_before = load_average()
    t = _interleaved({"onnxwrapper": session, "raw_jit": raw_jit, "raw_ctx": raw_ctx}, feed, runs)
    load_after = load_average()
    med = statistics.median
    return [
        Figure(NAME, "run (one inference)", "s", med(t["onnxwrapper"]), med(t["raw_jit"]),
               paired_ratio(t["onnxwrapper"], t["raw_jit"]), 1.03, runs, load_before, load_after,
               against="raw onnxruntime, original model, same QNN EP options"),
        Figure(NAME, "run (one inference), vs the same EPContext model", "s", med(t["onnxwrapper"]), med(t["raw_ctx"]),
               paired_ratio(t["onnxwrapper"], t["raw_ctx"]), None, runs, load_before, load_after,
               against="raw onnxruntime, the cached EPContext model"),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=_light_squeezenet(), help="static ONNX model (default: light squeezenet)")
    parser.add_argument("--runs", type=int, default=10, help="interleaved timed runs per session (default 10)")
    parser.add_argument("--repeats", type=int, default=5, help="cold-compile / raw-generation pairs (default 5)")
    parser.add_argument("--json-out", help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_qnn_") as root:
        figures, session = bench_creation(args.model, root, args.repeats)
        figures += bench_run(args.model, session, args.runs)
        del session
    print(f"QNN backend — {os.path.basename(args.model)} (default target, FP16 emulation)")
    return report(figures, args.json_out)


if __name__ == "__main__":
    sys.exit(main())
