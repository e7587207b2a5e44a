"""aipc doctor: the field self-test to run on a device (and attach to a bug report).

usage: aipc doctor [--json] [--canary NAME]... [--no-canaries] [--cache-dir DIR]

Reports the OS and the architecture of this Python process and of the OS (an x64 Python on ARM64
Windows only reaches the HTP simulator), package versions, the QNN SDK, the QNN execution
provider's devices and which one drives the HTP (NPU or simulator), the SoC, its HTP architecture
and FP16 support, the HTP skel library, and the compile cache (path, writable). Then it compiles
tiny canary models for the HTP (conv, matmul, LayerNorm, softmax, LSTM, and the HTP kernel bugs
known to us: dilated Conv1d at lengths 8/16, undilated Conv1d with 7 taps at 8/16/24, Pow(x, 2)
at x = -0), runs them on the HTP and on the CPU and judges them with aipc diff's rules, with
compile and run times. A known-bug canary says "known HTP kernel bug reproduced / not
reproduced" and does not change the verdict.

Exit status: 0 when a Hexagon NPU is usable (every capability canary agrees with the CPU and the
compile cache can be used); 69 when this machine has no usable NPU — only onnxruntime-qnn's
simulator (x86-64, or an x64 Python emulated on ARM64 Windows), or no HTP at all (the report says
why and what to do); 1 when the NPU is reached but a canary disagrees or the cache cannot be used;
64 for usage errors. The report is printed in every case.
"""

from __future__ import annotations

import argparse
import json
import sys

from aipc import _console
from aipc._exit_codes import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from aipc_loader._report import say

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``aipc doctor``."""
    parser.add_argument("--json", action="store_true", help="print the report as JSON (every field)")
    parser.add_argument("--canary", action="append", metavar="NAME",
                        help="run only this canary (repeatable; default: all). Names: conv, matmul, layernorm, "
                             "softmax, lstm, dilated_conv1d_len8, dilated_conv1d_len16, conv7tap_len8, "
                             "conv7tap_len16, conv7tap_len24, pow2_negzero")
    parser.add_argument("--no-canaries", action="store_true", help="report the platform facts only")
    parser.add_argument("--cache-dir", metavar="DIR", help="the compile cache to report on (default: the user's)")


def main(args: argparse.Namespace) -> int:
    """Run the doctor (:func:`onnxwrapper.toolkit.run_doctor`) and print its report."""
    from onnxwrapper.toolkit import run_doctor  # imports onnxruntime: not for `aipc --help`

    canaries = [] if args.no_canaries else args.canary
    progress = None
    if not args.json and sys.stderr.isatty():
        def progress(name: str) -> None:
            say(f"canary {name} …")
    try:
        report = run_doctor(canaries, cache_dir=args.cache_dir, progress=progress)
    except ValueError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=1, default=str) + "\n")
    else:
        sys.stdout.write(_console.clean(report.format_text()) + "\n")  # device and path names from elsewhere
    if report.npu_usable:
        return EXIT_OK
    return EXIT_FAILED if report.mode == "npu" else EXIT_UNAVAILABLE
