"""Cache-hit session creation on the ``qnn`` backend vs raw onnxruntime loading the same EPContext model.

Two models: the onnx wheel's light squeezenet (1×3×224×224) and, when the ``rapidocr`` package is
installed, its text recognizer ``PP-OCRv6_rec_small.onnx`` (21 MB) fixed to 1×3×48×320 with
``onnxwrapper.toolkit.make_static``. Each is compiled once into a temporary compile cache; then:

* **fresh process** (target ≤ 1.25×): a new Python process runs ``import onnxwrapper`` and creates
  the session (a cache hit), against a new process running ``import onnxruntime`` + registering
  the QNN EP library + ``InferenceSession(<the cached EPContext model>, so)`` with the same QNN EP
  options — what a script does that loads a precompiled context itself. The pairs alternate which
  goes first; the figure is the median of the paired ratios of the whole processes' wall times
  (start to exit, as the user waits for it); their CPU times (user + system, from ``wait4``) are
  in the details, with each child's own import and creation times;
* **in process, once imported** (no target; apps such as rapidocr create several sessions): in
  one process, onnxwrapper cache-hit creations interleaved with raw onnxruntime loads of the same
  EPContext model with the same options.

Usage: ``python benchmarks/bench/bench_creation.py [--pairs 7] [--warm 10] [--models squeezenet,rec]
[--json-out PATH]``. Exit status 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from _figures import Figure, load_average, paired_ratio, report, user_env

TARGET = 1.25
NAME = "creation"
_EMPTY = tempfile.mkdtemp(prefix="bench-creation-cwd-")

_OURS = """
import json, sys, time
start = time.perf_counter()
import onnxwrapper
imported = time.perf_counter()
s = onnxwrapper.InferenceSession(sys.argv[1], backend="qnn", backend_options={"cache_dir": sys.argv[2]})
created = time.perf_counter()
artifact = s.backend_session.artifacts[0]
print(json.dumps({"import": imported - start, "create": created - imported, "origin": artifact.origin,
                  "ctx": artifact.ctx_path, "ep_options": s.get_provider_options()["QNNExecutionProvider"]}))
"""

_RAW = """
import json, sys, time
start = time.perf_counter()
import onnxruntime as ort
import onnxruntime_qnn
imported = time.perf_counter()
ort.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
so = ort.SessionOptions()
so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"],
                            json.loads(sys.argv[2]))
s = ort.InferenceSession(sys.argv[1], so)
created = time.perf_counter()
print(json.dumps({"import": imported - start, "create": created - imported}))
"""

_WARM = """
import json, sys, time
import onnxruntime as ort
import onnxwrapper
model, cache, ctx, options, n = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), int(sys.argv[5])
ours = lambda: onnxwrapper.InferenceSession(model, backend="qnn", backend_options={"cache_dir": cache})
ours()  # the first session of the process (imports, QNN initialisation)

def raw():
    so = ort.SessionOptions()
    so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"], options)
    return ort.InferenceSession(ctx, so)

raw()
times = {"ours": [], "raw": []}
for k in range(n):
    for kind in (("ours", "raw") if k % 2 == 0 else ("raw", "ours")):
        start = time.perf_counter()
        session = ours() if kind == "ours" else raw()
        times[kind].append(time.perf_counter() - start)
        del session
print(json.dumps(times))
"""


def _child(code: str, args: list[str]) -> tuple[float, float | None, dict]:
    """Run ``python -c code args`` to its end: (wall s, CPU s or None, the JSON it printed last).
    Its working directory (first on its ``sys.path``) is an empty temporary folder, so the
    installed onnxwrapper is measured even when this runs from a source checkout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, cwd=_EMPTY, env=user_env())
        cpu = None
        if hasattr(os, "wait4"):
            _pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
        else:
            proc.wait()
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        lines = [ln for ln in out.read().decode(errors="replace").splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise SystemExit(f"benchmark child failed (exit {proc.returncode}): "
                             f"{err.read().decode(errors='replace')[-2000:]}")
    return wall, cpu, json.loads(lines[-1])


def _models(root: str, wanted: set[str]) -> dict[str, str]:
    import onnx

    models = {}
    if "squeezenet" in wanted:
        source = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                              "light_squeezenet.onnx")
        models["light squeezenet"] = shutil.copy(source, os.path.join(root, "light_squeezenet.onnx"))
    if "rec" in wanted:
        try:
            import rapidocr
        except ImportError:
            print("rapidocr is not installed: the recognizer model is skipped (pip install rapidocr)")
            return models
        from onnxwrapper.toolkit import make_static

        source = os.path.join(os.path.dirname(rapidocr.__file__), "models", "PP-OCRv6_rec_small.onnx")
        path = os.path.join(root, "rec_1x3x48x320.onnx")
        onnx.save(make_static(onnx.load(source), {"x": (1, 3, 48, 320)}), path)
        models["rapidocr recognizer 1x3x48x320"] = path
    return models


def bench_model(label: str, model: str, cache: str, pairs: int, warm: int) -> list[Figure]:
    """The two figures of one model (module docstring)."""
    _w, _c, first = _child(_OURS, [model, cache])  # compiles into the cache
    ctx, options = first["ctx"], json.dumps(first["ep_options"])
    _child(_OURS, [model, cache])  # warm-up of both (file cache)
    _child(_RAW, [ctx, options])
    load_before = load_average()
    ours, raw = [], []
    for k in range(pairs):
        for kind in (("ours", "raw") if k % 2 == 0 else ("raw", "ours")):
            if kind == "ours":
                ours.append(_child(_OURS, [model, cache]))
                if ours[-1][2]["origin"] != "cache":
                    raise SystemExit(f"expected a cache hit, got {ours[-1][2]['origin']}")
            else:
                raw.append(_child(_RAW, [ctx, options]))
    load_after = load_average()
    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    child = lambda rows, key: statistics.median(r[2][key] for r in rows)  # noqa: E731
    details = {"ours_import_s": child(ours, "import"), "ours_create_s": child(ours, "create"),
               "raw_import_s": child(raw, "import"), "raw_register_load_s": child(raw, "create")}
    if ours[0][1] is not None:
        details.update(ours_cpu_s=med(ours, 1), raw_cpu_s=med(raw, 1),
                       cpu_ratio=paired_ratio([r[1] for r in ours], [r[1] for r in raw]))
    fresh = Figure(NAME, f"cache-hit creation, {label}, fresh process (wall, start to exit)", "s", med(ours, 0),
                   med(raw, 0), paired_ratio([r[0] for r in ours], [r[0] for r in raw]), TARGET, pairs,
                   load_before, load_after, details)
    load_before = load_average()
    _w, _c, times = _child(_WARM, [model, cache, ctx, options, str(warm)])
    in_process = Figure(NAME, f"cache-hit creation, {label}, in a process that has one already", "s",
                        statistics.median(times["ours"]), statistics.median(times["raw"]),
                        paired_ratio(times["ours"], times["raw"]), None, warm, load_before, load_average())
    return [fresh, in_process]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=7, help="fresh-process pairs per model (default 7)")
    parser.add_argument("--warm", type=int, default=10, help="in-process pairs per model (default 10)")
    parser.add_argument("--models", default="squeezenet,rec", help="squeezenet,rec (default both)")
    parser.add_argument("--json-out", help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench-creation-")
    figures = []
    try:
        for label, model in _models(root, set(args.models.split(","))).items():
            figures += bench_model(label, model, os.path.join(root, "cache"), args.pairs, args.warm)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(_EMPTY, ignore_errors=True)
    return report(figures, args.json_out)


if __name__ == "__main__":
    sys.exit(main())
