"""Benchmark of the ``qnn`` backend: session creation (cold compile vs cache hit) and per-run overhead.

Usage::

    python benchmarks/bench_qnn.py [--model PATH] [--runs 10] [--dynamic-runs 30]

Default model: the onnx wheel's light squeezenet (``onnx/backend/test/data/light/light_squeezenet.onnx``,
1×3×224×224 → 1×1000×1×1; weights are computed by ConstantOfShape nodes that ORT constant-folds, so
the QNN EP takes 100 % of the nodes). Targets: cache hit ≥ 10× faster than a cold compile;
per-run time of an onnxwrapper session ≤ 1.03× a raw ``onnxruntime.InferenceSession`` with the same
QNN EP options on the same model, measured interleaved in the same process.

Rows:
* create, first QNN session of the process (cold compile, includes QNN backend initialisation);
* create, cold compile (median over fresh cache directories, QNN already initialised), each followed
  by two cache hits on the same entry; the speed-up is the median of per-pair ratios (cold / best
  hit), robust to the load drifts of a shared machine;
* new process: ``import onnxwrapper`` + first session, cold compile vs cache hit (includes imports and
  the QNN backend initialisation, which dominate for a small model);
* run: onnxwrapper session vs raw ORT JIT session (original model + same EP options) vs raw ORT on
  the cached EPContext model (isolates the wrapper from JIT-vs-context differences);
* dynamic-shape model (tiny conv, batch ``N``): run overhead of validation + specialization lookup.

All sessions use the backend's default configuration (Snapdragon X Elite target, FP16 emulation on
the x86-64 simulator). The cache lives in a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def _light_squeezenet() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def _create(model: str, cache: str):
    import onnxwrapper

    return _timed(lambda: onnxwrapper.InferenceSession(model, backend="qnn", backend_options={"cache_dir": cache}))


def _raw_session(model: str, ep_options: dict, configs: dict | None = None):
    import onnxruntime

    from onnxwrapper.backends.qnn._runtime import ensure_registered

    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    for key, value in (configs or {}).items():
        so.add_session_config_entry(key, value)
    so.add_provider_for_devices(ensure_registered(), dict(ep_options))
    return onnxruntime.InferenceSession(model, so, enable_fallback=0)


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


def _paired_ratio(ours: list, theirs: list) -> float:
    """Median of per-iteration ratios (robust to slow drifts of a shared machine)."""
    return statistics.median(a / b for a, b in zip(ours, theirs))


_FRESH = """
import sys, time
start = time.perf_counter()
import onnxwrapper
s = onnxwrapper.InferenceSession(sys.argv[1], backend="qnn", backend_options={"cache_dir": sys.argv[2]})
print(time.perf_counter() - start, s._ow_backend_session.artifacts[0].origin)
"""


def bench_creation(model: str, root: str, repeats: int) -> dict:
    first, session = _create(model, os.path.join(root, "first"))
    assert session._ow_backend_session.artifacts[0].origin == "compiled"
    cold, hits, ratios = [], [], []
    for i in range(repeats):  # pairs: a cold compile, then two cache hits on the same entry
        seconds, s = _create(model, os.path.join(root, f"cold{i}"))
        assert s._ow_backend_session.artifacts[0].origin == "compiled"
        del s
        pair = []
        for _ in range(2):
            hit, s = _create(model, os.path.join(root, f"cold{i}"))
            assert s._ow_backend_session.artifacts[0].origin == "cache"
            del s
            pair.append(hit)
        cold.append(seconds)
        hits.extend(pair)
        ratios.append(seconds / min(pair))

    def fresh(cache: str) -> tuple[float, str]:
        out = subprocess.run([sys.executable, "-c", _FRESH, model, cache], capture_output=True, text=True,
                             check=True).stdout.split()
        return float(out[0]), out[1]

    fresh_cold = fresh(os.path.join(root, "fresh_cold"))
    fresh_hit = fresh(os.path.join(root, "fresh_cold"))
    assert (fresh_cold[1], fresh_hit[1]) == ("compiled", "cache")
    return {"first_session_s": first, "cold_compile_s": statistics.median(cold), "cache_hit_s": statistics.median(hits),
            "hit_speedup": statistics.median(ratios),
            "fresh_process_cold_s": fresh_cold[0], "fresh_process_hit_s": fresh_hit[0], "session": session}


def bench_run(model: str, session, runs: int) -> dict:
    ep_options = session.get_provider_options()["QNNExecutionProvider"]
    name = session.get_inputs()[0].name
    shape = [d if isinstance(d, int) else 1 for d in session.get_inputs()[0].shape]
    feed = {name: np.random.default_rng(0).random(shape, np.float32)}
    raw_jit = _raw_session(model, ep_options)
    raw_ctx = _raw_session(session._ow_backend_session.artifacts[0].ctx_path, ep_options)
    t = _interleaved({"onnxwrapper": session, "raw_jit": raw_jit, "raw_ctx": raw_ctx}, feed, runs)
    return {"run_onnxwrapper_s": statistics.median(t["onnxwrapper"]), "run_raw_jit_s": statistics.median(t["raw_jit"]),
            "run_raw_ctx_s": statistics.median(t["raw_ctx"]),
            "run_ratio_vs_raw_jit": _paired_ratio(t["onnxwrapper"], t["raw_jit"]),
            "run_ratio_vs_raw_ctx": _paired_ratio(t["onnxwrapper"], t["raw_ctx"])}


def bench_dynamic(root: str, runs: int) -> dict:
    import onnxwrapper

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from tests import models

    path = os.path.join(root, "dyn_conv.onnx")
    with open(path, "wb") as f:
        f.write(models.smallconv(batch="N", hw=(32, 32)))
    options = {"cache_dir": os.path.join(root, "dyn")}
    session = onnxwrapper.InferenceSession(path, backend="qnn", backend_options=options)
    feed = {"X": np.random.default_rng(0).random((2, 3, 32, 32), np.float32)}
    session.run(None, feed)  # compiles the specialization for batch 2
    spec = next(iter(session._ow_backend_session._live.values()))
    t = _interleaved({"onnxwrapper": session, "raw": spec.session}, feed, runs)
    return {"dyn_run_onnxwrapper_s": statistics.median(t["onnxwrapper"]), "dyn_run_raw_s": statistics.median(t["raw"]),
            "dyn_ratio": _paired_ratio(t["onnxwrapper"], t["raw"]),
            "dyn_overhead_us": statistics.median(a - b for a, b in zip(t["onnxwrapper"], t["raw"])) * 1e6}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=_light_squeezenet(), help="static ONNX model (default: light squeezenet)")
    parser.add_argument("--runs", type=int, default=10, help="interleaved timed runs per session (default 10)")
    parser.add_argument("--repeats", type=int, default=5, help="cold-compile/cache-hit pairs (default 5)")
    parser.add_argument("--dynamic-runs", type=int, default=30, help="runs for the dynamic-shape row (default 30)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_qnn_") as root:
        creation = bench_creation(args.model, root, args.repeats)
        session = creation.pop("session")
        figures = {"model": os.path.basename(args.model), **creation, **bench_run(args.model, session, args.runs),
                   **bench_dynamic(root, args.dynamic_runs)}
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    ms = lambda s: f"{s * 1e3:9.1f} ms"  # noqa: E731
    print(f"QNN backend benchmark — {figures['model']} (default target, FP16 emulation)")
    print(f"  create, first QNN session (compile + QNN init) {ms(figures['first_session_s'])}")
    print(f"  create, cold compile (median)                  {ms(figures['cold_compile_s'])}")
    print(f"  create, cache hit (median)                     {ms(figures['cache_hit_s'])}"
          f"   → {figures['hit_speedup']:.1f}× faster, median of paired ratios (target ≥ 10×)")
    print(f"  new process: import + create, cold compile     {ms(figures['fresh_process_cold_s'])}")
    print(f"  new process: import + create, cache hit        {ms(figures['fresh_process_hit_s'])}"
          f"   (imports + QNN initialisation dominate)")
    print(f"  run, onnxwrapper session (median)              {ms(figures['run_onnxwrapper_s'])}")
    print(f"  run, raw ORT, same EP options, JIT (median)    {ms(figures['run_raw_jit_s'])}"
          f"   → paired ratio {figures['run_ratio_vs_raw_jit']:.3f} (target ≤ 1.03)")
    print(f"  run, raw ORT on the same EPContext (median)    {ms(figures['run_raw_ctx_s'])}"
          f"   → paired ratio {figures['run_ratio_vs_raw_ctx']:.3f}")
    print(f"  dynamic batch conv 2×3×32×32: onnxwrapper {ms(figures['dyn_run_onnxwrapper_s'])} vs raw "
          f"{ms(figures['dyn_run_raw_s'])} → paired ratio {figures['dyn_ratio']:.3f}, "
          f"overhead {figures['dyn_overhead_us']:.0f} µs/run (validation + specialization lookup)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
