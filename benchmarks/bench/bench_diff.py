"""Wall time of ``aipc diff`` on the OCR example (cpu reference vs qnn, live mode, automatic replay).

``aipc diff`` runs each backend in its own process; independent runs overlap (``--jobs``, default
from the processors and memory). The yardstick is measured in the same diff: the runs themselves,
as the report records each one's own wall time — the slowest live run plus the replay run that
depends on it (``qnn`` + ``qnn+replay`` on the OCR example), i.e. what no scheduling can go below.
The figure is the whole command's wall time (start to exit, reports written) divided by that
yardstick; target ≤ 1.10×. With ``--sequential`` every repeat also runs with ``--jobs 1`` (the
runs one after another), alternating with the default, for comparison.

A temporary compile cache is filled by one warm-up diff first (the qnn compiles of every shape the
runs use), so the repeats measure cache hits, as a user's second diff does.

Usage: ``python benchmarks/bench/bench_diff.py [--repeat 2] [--sequential] [--script PATH] [--json-out PATH]``.
Exit status 0 when the target is met, 1 otherwise.
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

TARGET = 1.10
NAME = "diff"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SCRIPT = os.path.join(HERE, os.pardir, os.pardir, "examples", "ocr", "ocr.py")


def _diff(script: str, directory: str, env: dict, jobs: int | None) -> tuple[float, dict]:
    """Run ``aipc diff`` once: (wall s, report.json)."""
    cmd = [sys.executable, "-m", "aipc", "diff", "-q", "--dir", directory]
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    start = time.perf_counter()
    proc = subprocess.run(cmd + [script], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    path = os.path.join(directory, "report.json")
    if not os.path.exists(path):
        raise SystemExit(f"aipc diff wrote no report (exit {proc.returncode}): {proc.stderr[-2000:]}")
    with open(path, encoding="utf-8") as f:
        return wall, json.load(f)


def critical_path(runs: dict) -> tuple[float, list[str]]:
    """The slowest live run plus the replay that depends on it: (seconds, labels)."""
    best = (0.0, [])
    for label, run in runs.items():
        if run.get("replay_of") or run.get("rerun_of"):
            continue
        chain = [label] + [lb for lb, r in runs.items() if r.get("replay_of") == label]
        seconds = sum(runs[lb]["seconds"] for lb in chain)
        best = max(best, (seconds, chain))
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2, help="measured diffs (default 2)")
    parser.add_argument("--sequential", action="store_true", help="also measure --jobs 1, alternating")
    parser.add_argument("--script", default=DEFAULT_SCRIPT, help="script to diff (default: the OCR example)")
    parser.add_argument("--json-out", help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    script = os.path.abspath(args.script)
    root = tempfile.mkdtemp(prefix="bench-diff-")
    env = {**os.environ, "ONNXWRAPPER_CACHE_DIR": os.path.join(root, "cache")}
    kinds = [None, 1] if args.sequential else [None]
    walls: dict = {kind: [] for kind in kinds}
    paths: dict = {kind: [] for kind in kinds}
    details: dict = {}
    try:
        _diff(script, os.path.join(root, "warm-up"), env, None)
        load_before = load_average()
        for k in range(args.repeat):
            for kind in (kinds if k % 2 == 0 else kinds[::-1]):
                wall, rep = _diff(script, os.path.join(root, f"d{k}-{kind}"), env, kind)
                seconds, chain = critical_path(rep["runs"])
                walls[kind].append(wall)
                paths[kind].append(seconds)
                details.setdefault(f"runs_jobs_{kind or 'default'}", []).append(
                    {label: round(r["seconds"], 2) for label, r in rep["runs"].items()})
                details["critical_path"] = chain
                if rep["state"] != "pass":
                    print(f"note: the diff's verdict was {rep['state']}: {rep['verdict_line']}")
        load_after = load_average()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures = [Figure(NAME, f"aipc diff {os.path.basename(script)}, wall vs its slowest live run + its replay",
                      "s", statistics.median(walls[None]), statistics.median(paths[None]),
                      paired_ratio(walls[None], paths[None]), TARGET, args.repeat, load_before, load_after, details,
                      against="those runs")]
    if args.sequential:
        figures.append(Figure(NAME, f"aipc diff {os.path.basename(script)} --jobs 1, wall vs the same yardstick",
                              "s", statistics.median(walls[1]), statistics.median(paths[1]),
                              paired_ratio(walls[1], paths[1]), None, args.repeat, load_before, load_after,
                              {"speedup_default_vs_jobs_1": paired_ratio(walls[1], walls[None])}, against="those runs"))
    return report(figures, args.json_out)


if __name__ == "__main__":
    sys.exit(main())
