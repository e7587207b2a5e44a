"""Capture overhead of ``aipc diff``: the OCR example on the ``cpu`` backend, with and without capture.

Runs ``examples/ocr/ocr.py`` in this process three ways, in rotating order after one warm-up run
of each: with plain onnxruntime (no aipc loader: raw ORT), through the aipc loader
(``backend="cpu"``), and through the loader under :func:`onnxwrapper.diff.start_capture` (what
each ``aipc diff`` child does). Prints the medians, the median of the paired ratios (robust to
load drift on a shared machine) against raw onnxruntime, and the capture's own ratio against the
loader run without capture, with the CPU time of all threads; the target is a wall-time ratio
≤ 1.10 for the capture. The script's own output is discarded.

Usage: ``python benchmarks/bench/bench_capture.py [--repeat N] [--script PATH] [--json-out PATH]``
(default 15 repeats). Exit status 0 when the ratio is within the target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import sys
import tempfile
import time

from _figures import Figure, load_average, paired_ratio, report

TARGET = 1.10
NAME = "capture"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SCRIPT = os.path.join(HERE, os.pardir, os.pardir, "examples", "ocr", "ocr.py")


def _run_once(script: str, capture_dir: str | None, backend: str | None = "cpu") -> tuple[float, float, int, int]:
    """Wall and CPU seconds (all threads) of one run, calls recorded, bytes written (0, 0 without
    capture); ``backend=None``: plain onnxruntime, no aipc loader."""
    import aipc_loader

    from onnxwrapper.diff import start_capture

    sink = io.StringIO()
    handle = start_capture(capture_dir) if capture_dir else None
    start, cpu = time.perf_counter(), time.process_time()
    try:
        with contextlib.redirect_stdout(sink):
            code = aipc_loader.run_script(script, [], backend=backend)
    finally:
        if handle is not None:
            handle.stop()  # flushing the writes is part of the cost
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if code != 0:
        raise SystemExit(f"the script failed with exit status {code}")
    if handle is None:
        return seconds, cpu, 0, 0
    return seconds, cpu, handle.writer.calls_recorded, handle.writer.bytes_written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="measured runs of each kind (default 15)")
    parser.add_argument("--script", default=DEFAULT_SCRIPT, help="script to run (default: the OCR example)")
    parser.add_argument("--json-out", help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    script = os.path.abspath(args.script)
    work = tempfile.mkdtemp(prefix="bench-capture-")
    wall = {"raw": [], "plain": [], "cap": []}
    cpu = {"raw": [], "plain": [], "cap": []}
    calls = nbytes = 0
    kinds = ["raw", "plain", "cap"]
    try:
        _run_once(script, None, None)  # warm-up: imports, file cache
        _run_once(script, None)
        _run_once(script, os.path.join(work, "warm"))
        load_before = load_average()
        for k in range(args.repeat):
            for kind in kinds[k % 3:] + kinds[:k % 3]:
                directory = os.path.join(work, f"cap{k}") if kind == "cap" else None
                seconds, used, n, size = _run_once(script, directory, None if kind == "raw" else "cpu")
                wall[kind].append(seconds)
                cpu[kind].append(used)
                if kind == "cap":
                    calls, nbytes = n, size
                    shutil.rmtree(directory, ignore_errors=True)
        load_after = load_average()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    name = os.path.basename(script)
    figures = [
        Figure(NAME, f"{name} on backend cpu through the aipc loader", "s", med(wall["plain"]), med(wall["raw"]),
               paired_ratio(wall["plain"], wall["raw"]), None, args.repeat, load_before, load_after,
               {"cpu_ratio": med(cpu["plain"]) / med(cpu["raw"])}),
        Figure(NAME, f"{name} on backend cpu under capture (what each aipc diff child does)", "s", med(wall["cap"]),
               med(wall["raw"]), paired_ratio(wall["cap"], wall["raw"]), None, args.repeat, load_before, load_after,
               {"calls_recorded": calls, "bytes_per_run": nbytes, "cpu_ratio": med(cpu["cap"]) / med(cpu["raw"])}),
        Figure(NAME, f"{name}: capture overhead (under capture vs the loader run without it)", "s", med(wall["cap"]),
               med(wall["plain"]), paired_ratio(wall["cap"], wall["plain"]), TARGET, args.repeat, load_before,
               load_after, {"cpu_ratio": med(cpu["cap"]) / med(cpu["plain"])}, against="the same run without capture"),
    ]
    return report(figures, args.json_out)


if __name__ == "__main__":
    sys.exit(main())
