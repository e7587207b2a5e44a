"""aipc diff: run a script on several backends (one process each) and compare every session's outputs.

usage:
  aipc diff [options] script.py [args…]
  aipc diff [options] -m module [args…]
  aipc diff --check DIR [tolerance options] [--localize]
  aipc diff --model MODEL.onnx [options]     (a model: 'aipc diff --model M.onnx --help')

Two levels are judged. Tensors: every InferenceSession.run of the script is recorded per backend
and each output compared with the reference backend's, call by call, relative to the output's own
scale: SNR ≥ 27.1 dB at FP16, 77.9 dB at FP32, 20 dB for quantized models (derivation in
docs/diff.md); --atol/--rtol/--tol switch an output to Polygraphy's abs/rel rule instead. App: the
script's stdout and exit status (and files named with --compare-output) are compared with the
reference run's, printed numbers within the same relative budget, timings masked.

Writes DIR/report.json and DIR/report.html (DIR defaults to ./aipc-diff-<date-time>; --check writes
new report-check-<date-time> files) and prints the table. Exit status: 0 tensors within tolerance
and app output identical · 1 mismatch at either level · 2 a run crashed, raised, timed out or was
unavailable (or nothing was compared) · 64 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys

from aipc import _console
from aipc._exit_codes import EXIT_USAGE, UsageError
from aipc.args import (ToleranceArgs, add_compile_budget, compile_budget, misplaced_script, parse_backend_options,
                       with_compile_budget)
from aipc.commands._progress import progress_bars
from onnxwrapper.diff import (check, console_safe, default_directory, default_jobs, estimate_run_memory,
                              localize_failures, parse_backends, parse_size, report_paths, run)
from onnxwrapper.errors import BackendNotFoundError

__all__ = ["add_arguments", "main", "labels_spec"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``aipc diff`` on ``parser`` (the dispatcher's parser)."""
    run = parser.add_argument_group("Runs")
    run.add_argument("--backends", default="cpu,qnn", metavar="LIST",
                     help="comma-separated runs, 'label=backend' for a second run of one backend (default: cpu,qnn)")
    run.add_argument("--reference", default="cpu", metavar="LABEL", help="reference run (default: cpu)")
    run.add_argument("--backend-option", action="append", default=[], metavar="LABEL:KEY=VALUE",
                     help="backend option of one run, e.g. qnn:precision=fp32 (repeatable; VALUE parsed as JSON "
                          "when possible)")
    run.add_argument("--replay", action="store_true",
                     help="run the script on the reference only and feed its recorded inputs to the other backends")
    run.add_argument("--no-auto-replay", action="store_true",
                     help="live mode: do not re-run calls fed other inputs than the reference's on the "
                          "reference's inputs (they are then compared as they are and reported as divergent)")
    run.add_argument("--check", metavar="DIR", help="re-judge a saved diff directory without running anything")
    run.add_argument("--jobs", type=int, metavar="N",
                     help="backend runs at once (default: as many as this host's processors and memory allow; "
                          "1 = one after another); a replay starts as soon as the run it needs has ended")
    run.add_argument("--timeout", type=float, metavar="SECONDS", help="limit per backend run")
    add_compile_budget(run)  # the run options' compile budget, passed to the runs whose backend compiles (qnn)
    run.add_argument("--dir", metavar="DIR", help="diff directory (default: ./aipc-diff-<date-time>)")
    run.add_argument("--max-capture-bytes", default="2G", metavar="SIZE",
                     help="stop recording a run beyond this size (default: 2G)")
    run.add_argument("--max-calls-per-model", type=int, metavar="N", help="record at most N calls per model")
    run.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE [ARGS]",
                     help="run a module as 'python -m' does")
    ToleranceArgs().add_parser_args(parser)  # shared with aipc diff --model / aipc run MODEL.onnx
    app = parser.add_argument_group("App output")
    app.add_argument("--compare-output", action="append", default=[], metavar="stdout|none|FILE",
                     help="what of the script's own result to compare across backends besides its exit status: "
                          "stdout (default), none, or files it writes (relative to the working directory); "
                          "repeatable or comma separated")
    app.add_argument("--output-filter", metavar="REGEX", help="compare only the output lines this regex matches")
    app.add_argument("--output-rtol", type=float, metavar="R",
                     help="relative tolerance of printed numbers (default: the run's tensor error budget, "
                          "4.4%% at FP16; 0 = exact)")
    loc = parser.add_argument_group("Localization")
    loc.add_argument("--localize", action="store_true",
                     help="for each failing model, name the cause: the node that breaks, the FP16 overflow, "
                          "or error accumulating through the graph")
    loc.add_argument("--localize-max-tensors", type=int, default=256, metavar="N",
                     help="tensors exposed per round; larger graphs are bisected (default: 256)")
    rep = parser.add_argument_group("Reports")
    rep.add_argument("--json", metavar="PATH", help="JSON report (default: DIR/report.json; with --check a new "
                                                    "DIR/report-check-<date-time>.json)")
    rep.add_argument("--html", metavar="PATH", help="HTML report (default: DIR/report.html; with --check a new "
                                                    "DIR/report-check-<date-time>.html)")
    rep.add_argument("--no-html", action="store_true", help="do not write the HTML report")
    rep.add_argument("--show-output", action="store_true", help="print each run's script output")
    rep.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="script.py [args…]")


def _say(message: str) -> None:
    for line in str(message).splitlines() or [""]:
        sys.stderr.write(f"aipc diff: {line}\n")


class _Usage(Exception):
    pass


def _tolerances(args):
    group = ToleranceArgs()
    try:
        group.parse(args)
    except UsageError as exc:
        raise _Usage(str(exc)) from exc
    return group.tolerances


def _app_options(args) -> dict:
    import re

    items = [i.strip() for value in args.compare_output for i in value.split(",") if i.strip()]
    if "none" in items and len(items) > 1:
        raise _Usage("--compare-output none cannot be combined with other items")
    if args.output_filter is not None:
        try:
            re.compile(args.output_filter)
        except re.error as exc:
            raise _Usage(f"--output-filter {args.output_filter!r}: not a regular expression ({exc})") from exc
    if args.output_rtol is not None and args.output_rtol < 0:
        raise _Usage("--output-rtol must be ≥ 0")
    return {"compare_output": items or None, "output_filter": args.output_filter, "output_rtol": args.output_rtol}


def _echo(label: str, text: str) -> None:
    sys.stdout.write(f"──── {console_safe(label)}: script output ────\n{console_safe(text)}")
    sys.stdout.flush()


def labels_spec(labels: dict) -> list[str]:
    """``{label: backend}`` back to ``["label=backend", …]`` for :func:`onnxwrapper.diff.run`."""
    return [f"{label}={backend}" for label, backend in labels.items()]


def main(args: argparse.Namespace) -> int:
    """Run ``aipc diff`` with parsed ``args``; returns 0, 1, 2 or 64 (see module docstring)."""

    progress, close_bars = progress_bars(args.quiet)
    try:
        tolerances = _tolerances(args)
        app = _app_options(args)
        command = list(args.command or [])
        if command and command[0] == "--":
            command = command[1:]
        if args.check:
            if command or args.module:
                raise _Usage("--check DIR re-judges a saved diff: give no script")
            if not os.path.isdir(args.check):
                raise _Usage(f"--check {args.check}: not a directory")
            result = check(args.check, tolerances=tolerances, timeout=args.timeout, progress=progress, **app)
        else:
            if args.module is not None:
                if not args.module:
                    raise _Usage("-m needs a module name")
                if command:
                    raise _Usage("give either a script or -m module, not both")
                target, target_args, module = args.module[0], args.module[1:], True
            elif command:
                target, target_args, module = command[0], command[1:], False
            else:
                raise _Usage(misplaced_script("--backends", args.backends, f"aipc diff --backends cpu,qnn "
                                                                           f"{args.backends} [args…]")
                             or "no script given (usage: aipc diff [options] script.py [args…] | -m module | "
                                "--check DIR)")
            if args.max_calls_per_model is not None and args.max_calls_per_model < 1:
                raise _Usage("--max-calls-per-model must be ≥ 1")
            if args.jobs is not None and args.jobs < 1:
                raise _Usage("--jobs must be ≥ 1")

            try:
                labels = parse_backends(args.backends)
                if args.reference not in labels:  # the reference runs even when not listed
                    labels = {**parse_backends([args.reference]), **labels}
                max_bytes = parse_size(args.max_capture_bytes)
            except (ValueError, BackendNotFoundError) as exc:
                raise _Usage(str(exc)) from exc
            if args.reference not in labels:
                raise _Usage(f"--reference {args.reference}: name one of the runs ({', '.join(labels)})")
            if len(labels) < 2:
                raise _Usage("give at least two runs to compare, e.g. --backends cpu,qnn")
            try:
                options = with_compile_budget(parse_backend_options(args.backend_option, labels), labels,
                                              compile_budget(args))
            except UsageError as exc:
                raise _Usage(str(exc)) from exc
            if not module and not os.path.isfile(target):
                raise _Usage(f"script not found: {target}")
            directory = args.dir or default_directory()
            echo = _echo if args.show_output else None
            if app["compare_output"] is None:
                app["compare_output"] = ["stdout"]
            jobs = args.jobs or default_jobs([estimate_run_memory(None)] * len(labels))
            at_once = f"{jobs} at a time" + ("" if args.jobs else ", from this host's processors and memory")
            _say(f"running {', '.join(labels)} ({'replay' if args.replay else 'live'}, {at_once}); results in "
                 f"{directory}")
            result = run(target, target_args, module=module, backends=labels_spec(labels), reference=args.reference,
                         replay=args.replay, auto_replay=not args.no_auto_replay, backend_options=options,
                         tolerances=tolerances, directory=directory,
                         timeout=args.timeout, max_bytes=max_bytes, max_calls_per_model=args.max_calls_per_model,
                         progress=progress, echo=echo, jobs=args.jobs, **app)
        if args.localize and result.mismatch:
            localize_failures(result, timeout=args.timeout, progress=progress,
                              max_tensors=args.localize_max_tensors)
    except _Usage as exc:
        close_bars()
        _say(f"error: {exc}")
        _say("try 'aipc diff --help'")
        return EXIT_USAGE
    finally:
        close_bars()
    sys.stdout.write(result.table(color=_console.use_color(sys.stdout)) + "\n")  # NO_COLOR, Windows VT mode
    default_json, default_html = report_paths(result.directory or os.getcwd(), check=bool(args.check))
    written = [os.path.abspath(result.write_json(args.json or default_json))]
    if not args.no_html:
        try:
            written.append(os.path.abspath(result.write_html(args.html or default_html)))
        except ImportError as exc:
            _say(f"HTML report skipped ({exc}); pip install 'onnxwrapper[report]'")
    _say("reports written: " + ", ".join(written))
    return result.exit_status
