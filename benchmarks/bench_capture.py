"""Capture overhead of ``aipc diff``: the OCR example on the ``cpu`` backend, with and without capture.

Runs ``examples/ocr/ocr.py`` in this process through the aipc loader (``backend="cpu"``), alternating
plain runs and runs under :func:`onnxwrapper.diff.start_capture` (what each ``aipc diff`` child
does), after one warm-up run of each. Prints the median wall time of both, the median of the
paired ratios (robust to load drift on a shared machine), the ratio of the minimums, and the CPU
time of all threads; the target is a wall-time ratio ≤ 1.10. The script's own output
is discarded.

Usage: ``python benchmarks/bench_capture.py [--repeat N] [--script PATH]`` (default 15 repeats).
Exit status 0 when the ratio is within the target, 1 otherwise.
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

TARGET = 1.10
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SCRIPT = os.path.join(HERE, os.pardir, "examples", "ocr", "ocr.py")


def _run_once(script: str, capture_dir: str | None) -> tuple[float, float, int, int]:
    """Wall and CPU seconds (all threads) of one run, calls recorded, bytes written (0, 0 without capture)."""
    import aipc_loader

    from onnxwrapper.diff import start_capture

    sink = io.StringIO()
    handle = start_capture(capture_dir) if capture_dir else None
    start, cpu = time.perf_counter(), time.process_time()
    try:
        with contextlib.redirect_stdout(sink):
            code = aipc_loader.run_script(script, [], backend="cpu")
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
    args = parser.parse_args(argv)
    script = os.path.abspath(args.script)
    work = tempfile.mkdtemp(prefix="bench-capture-")
    plain, captured, plain_cpu, captured_cpu = [], [], [], []
    calls = nbytes = 0
    try:
        _run_once(script, None)  # warm-up: imports, file cache
        _run_once(script, os.path.join(work, "warm"))
        for k in range(args.repeat):
            order = [None, "cap"] if k % 2 == 0 else ["cap", None]
            for kind in order:
                if kind is None:
                    seconds, cpu, _, _ = _run_once(script, None)
                    plain.append(seconds)
                    plain_cpu.append(cpu)
                else:
                    directory = os.path.join(work, f"cap{k}")
                    seconds, cpu, calls, nbytes = _run_once(script, directory)
                    captured.append(seconds)
                    captured_cpu.append(cpu)
                    shutil.rmtree(directory, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base, cap = statistics.median(plain), statistics.median(captured)
    ratio = statistics.median(c / p for c, p in zip(captured, plain))  # paired: robust to load drift
    print(f"script: {os.path.relpath(script)} on backend cpu, {args.repeat} runs each (medians)")
    print(f"without capture: {base * 1000:8.1f} ms   (min {min(plain) * 1000:.1f})")
    print(f"with capture:    {cap * 1000:8.1f} ms   (min {min(captured) * 1000:.1f}; "
          f"{calls} calls, {nbytes / 1e6:.2f} MB per run)")
    print(f"CPU time (all threads, medians): {statistics.median(plain_cpu) * 1000:.1f} ms without, "
          f"{statistics.median(captured_cpu) * 1000:.1f} ms with capture "
          f"(ratio {statistics.median(captured_cpu) / statistics.median(plain_cpu):.3f})")
    print(f"ratio (median of paired runs): {ratio:.3f}; ratio of minimums: {min(captured) / min(plain):.3f}  "
          f"(target ≤ {TARGET:.2f}: {'ok' if ratio <= TARGET else 'EXCEEDED'})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
