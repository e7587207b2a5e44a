"""Run every benchmark and write one JSON summary that CI can archive (not a timed test).

Each ``benchmarks/bench/bench_*.py`` runs in its own process (the creation benchmark needs fresh
processes anyway) and prints each figure as a ratio against raw onnxruntime measured in the same
run, with its target and whether it is met; this script collects their figures, the host, the
versions and the load averages into ``--json``. ``calibrate_diff.py`` is not a speed benchmark
(it checks verdicts on real apps, minutes per app) and is not run.

Usage::

    python benchmarks/run_all.py [--json PATH] [--only NAME,…] [--skip NAME,…] [--quick] [--strict]

NAME is a script's name without ``bench_`` and ``.py`` (overhead, dispatch, qnn, creation,
first_compile, no_node, buckets, capture, diff, precompile). ``precompile`` needs a real app (``$BENCH_APP_PYTHON``, ``$BENCH_TRYAII_SCRIPT``,
see its docstring) and is reported as skipped without it. ``--quick`` measures fewer repeats (a
smoke run; figures are noisier). Exit status: 0 when every benchmark ran (and, with ``--strict``,
met its targets), 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time

from bench._figures import host, load_average  # benchmarks/bench/_figures.py (a namespace package)

HERE = os.path.dirname(os.path.abspath(__file__))
#: in the order they run: the long ones last
ORDER = ["overhead", "dispatch", "qnn", "creation", "first_compile", "no_node", "buckets", "capture", "diff",
         "precompile"]
QUICK = {"overhead": ["--rounds", "5", "--calls", "5000"], "dispatch": ["--rounds", "7", "--calls", "1000"],
         "qnn": ["--repeats", "2", "--runs", "3"], "creation": ["--pairs", "3", "--warm", "4"],
         "capture": ["--repeat", "3"], "diff": ["--repeat", "1"], "precompile": ["--pairs", "1"],
         "first_compile": ["--pairs", "3"], "no_node": ["--pairs", "3"], "buckets": ["--steps", "16"]}
#: exit status of a benchmark whose app is not set up on this machine (it says how): skipped, not failed
EXIT_NOT_SET_UP = 2


def run_one(name: str, quick: bool) -> dict:
    """Run ``bench_<name>.py``; its exit status, seconds, figures and (on failure) its stderr tail."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        out = os.path.join(tmp, "figures.json")
        cmd = [sys.executable, os.path.join(HERE, "bench", f"bench_{name}.py"), "--json-out", out]
        cmd += QUICK[name] if quick else []
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        figures = []
        if os.path.exists(out):
            with open(out, encoding="utf-8") as f:
                figures = json.load(f)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    result = {"exit": proc.returncode, "seconds": round(seconds, 1), "figures": figures, "output": lines}
    if not figures and proc.returncode == EXIT_NOT_SET_UP:
        result["skipped"] = (proc.stderr.strip().splitlines() or ["not set up"])[0]
    elif not figures:
        result["error"] = proc.stderr.strip().splitlines()[-12:]
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument("--only", help="comma-separated benchmark names")
    parser.add_argument("--skip", default="", help="comma-separated benchmark names not to run")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is not met")
    args = parser.parse_args(argv)
    names = [n for n in ORDER if (not args.only or n in args.only.split(",")) and n not in args.skip.split(",")]
    unknown = set((args.only or "").split(",") + args.skip.split(",")) - set(ORDER) - {""}
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(ORDER)}")
    summary = {"schema": "onnxwrapper-benchmarks", "schema_version": 1,
               "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "host": host(),
               "quick": args.quick, "load_before": load_average(), "benchmarks": {}}
    for name in names:
        print(f"== {name}", flush=True)
        result = summary["benchmarks"][name] = run_one(name, args.quick)
        for line in result["output"]:
            print(f"   {line}")
        if "skipped" in result:
            print(f"   skipped: {result['skipped']}")
        if "error" in result:
            print(f"   FAILED (exit {result['exit']}): " + " | ".join(result["error"][-3:]))
        sys.stdout.flush()
    summary["load_after"] = load_average()
    figures = [f for r in summary["benchmarks"].values() for f in r["figures"]]
    judged = [f for f in figures if f.get("target") is not None]
    summary["targets"] = {"total": len(judged), "met": sum(bool(f["met"]) for f in judged),
                          "missed": [f"{f['benchmark']}: {f['name']} ({f['ratio']:.3f}× > {f['target']}×)"
                                     for f in judged if not f["met"]]}
    failed = [n for n, r in summary["benchmarks"].items() if "error" in r]
    print(f"\ntargets met: {summary['targets']['met']} of {summary['targets']['total']}"
          + "".join(f"\n  not met: {m}" for m in summary["targets"]["missed"])
          + (f"\nbenchmarks that failed to run: {', '.join(failed)}" if failed else ""))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
        print(f"summary written to {args.json}")
    return 1 if failed or (args.strict and summary["targets"]["missed"]) else 0


if __name__ == "__main__":
    sys.exit(main())
