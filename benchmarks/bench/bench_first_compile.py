"""The first QNN session of a process with an empty compile cache vs raw ORT + QNN EP compiling in-process.

Each pair is two fresh Python processes, interleaved (alternating which goes first):

* raw: ``import onnxruntime, onnxruntime_qnn``; the timed part registers the QNN plugin EP, adds its
  devices with the backend's default options (``soc_model=60``, ``htp_arch=73``: FP16 on the
  simulator) and creates ``onnxruntime.InferenceSession(model, so)`` — ORT compiles in-process;
* ours: ``import onnxwrapper``; the timed part is ``onnxwrapper.InferenceSession(model,
  backend="qnn", backend_options={"cache_dir": <empty folder>})`` — compiled in the compile worker,
  cached, then loaded.

The figure is the median of the paired ratios of the timed parts (target ≤ 1.15×); the whole
processes' wall times (interpreter start to exit) are printed too. Models: the onnx wheel's light
squeezenet, and RapidOCR's recognizer made static at 1×3×48×320 (``--ocr``; needs ``pip install
rapidocr``). By default the process's compile server may already run (``ONNXWRAPPER_COMPILE_SERVER``
unset: a fresh process finds the user's compile server of an earlier one, docs/backends/qnn.md);
``--no-server`` measures the per-process worker only.

Usage: ``python benchmarks/bench/bench_first_compile.py [--pairs 7] [--ocr] [--no-server]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _figures import Figure, load_average, paired_ratio, report, user_env

NAME = "first_compile"

_RAW = """
import json, sys, time
import onnxruntime, onnxruntime_qnn
start = time.perf_counter()
onnxruntime.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
so = onnxruntime.SessionOptions()
so.add_provider_for_devices([d for d in onnxruntime.get_ep_devices() if d.ep_name == "QNNExecutionProvider"],
                            {"backend_type": "htp", "soc_model": "60", "htp_arch": "73"})
onnxruntime.InferenceSession(sys.argv[1], so)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""

_OURS = """
import json, sys, time
import onnxwrapper
start = time.perf_counter()
session = onnxwrapper.InferenceSession(sys.argv[1], backend="qnn", backend_options={"cache_dir": sys.argv[2]})
seconds = time.perf_counter() - start
assert session.backend_session.artifacts[0].origin == "compiled", session.backend_session.artifacts
print(json.dumps({"seconds": seconds}))
"""


def _light_squeezenet() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")


def _ocr_recognizer(folder: str) -> str:
    import glob

    import onnx
    import rapidocr

    from onnxwrapper.kernel import specialize

    path = sorted(glob.glob(os.path.join(os.path.dirname(rapidocr.__file__), "models", "*rec*.onnx")))[0]
    model = onnx.load(path)
    name = model.graph.input[0].name
    static = os.path.join(folder, "rec_static.onnx")
    onnx.save(specialize(model, {name: (1, 3, 48, 320)}), static)
    return static


def _child(code: str, args: list[str], env: dict) -> tuple[float, float]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - start
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"], wall


def measure(model: str, label: str, pairs: int, env: dict, folder: str) -> Figure:
    """One figure: ``pairs`` interleaved fresh-process pairs on ``model``."""
    load = load_average()
    ours, raw, ours_wall, raw_wall = [], [], [], []
    for i in range(pairs):
        for which in (("ours", "raw") if i % 2 == 0 else ("raw", "ours")):
            if which == "ours":
                seconds, wall = _child(_OURS, [model, tempfile.mkdtemp(dir=folder)], env)
                ours.append(seconds), ours_wall.append(wall)
            else:
                seconds, wall = _child(_RAW, [model], env)
                raw.append(seconds), raw_wall.append(wall)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return Figure(NAME, f"cold first session, {label}", "s", med(ours), med(raw), paired_ratio(ours, raw), 1.15, pairs,
                  load, load_average(), against="raw ORT + QNN EP compiling in-process (fresh processes)",
                  details={"process_wall_ours_s": med(ours_wall), "process_wall_raw_s": med(raw_wall),
                           "process_wall_ratio": paired_ratio(ours_wall, raw_wall),
                           "server": env.get("ONNXWRAPPER_COMPILE_SERVER", "default")})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--ocr", action="store_true", help="also RapidOCR's recognizer made static (needs rapidocr)")
    parser.add_argument("--no-server", action="store_true", help="no shared compile server: a worker per process")
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)
    env = user_env()
    env.pop("ONNXWRAPPER_CACHE_DIR", None)
    if args.no_server:
        env["ONNXWRAPPER_COMPILE_SERVER"] = "0"
    figures = []
    with tempfile.TemporaryDirectory() as folder:
        models = [("light squeezenet", _light_squeezenet())]
        if args.ocr:
            models.append(("RapidOCR recognizer 1×3×48×320", _ocr_recognizer(folder)))
        for label, model in models:
            figures.append(measure(model, label, args.pairs, env, folder))
    for figure in figures:
        print(f"  whole processes: ours {figure.details['process_wall_ours_s']:.2f} s, raw "
              f"{figure.details['process_wall_raw_s']:.2f} s ({figure.details['process_wall_ratio']:.2f}×)")
    return report(figures, args.json_out)


if __name__ == "__main__":
    sys.exit(main())
