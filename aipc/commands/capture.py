"""aipc capture: run a script and record every model's input feeds (and outputs) as calibration
data and as the shapes to precompile, in the capture format of `aipc diff` (docs/diff.md).

usage: aipc capture [-o DIR] [--backend qnn [--target T] [--precision P] [--cache-dir DIR]]
                    [--max-samples N] [--max-bytes SIZE] [--overwrite] script.py [args…]
       aipc capture [-o DIR] [...] -m module [args…]
       aipc capture script.py [args…] -o DIR [--max-samples N]     (trailing form, see below)

The script runs on the CPU (default) or, with --backend, on that backend: a model fed what an
earlier model computed (an OCR recognizer fed the detector's crops) sees the shapes the target's
numerics produce — the NPU's FP16 detector may find other boxes than the CPU's — so capture on
the target before `aipc compile --from-capture DIR`. That run compiles what the cache lacks, as
any first run does. --target, --precision and --cache-dir (or AIPC_TARGET, AIPC_PRECISION,
AIPC_CACHE_DIR) are the backend options, read as `python -m aipc` reads them. Without -o the
capture goes to a new folder ./aipc-capture-<date-time> (its path is printed).

Options come before the script; everything after the script belongs to it. As a convenience,
when -o was not given before the script, a trailing "-o DIR" / "--output DIR" (and
"--max-samples N", "--max-bytes SIZE" after it) at the very end of the command line is taken as
ours. The capture then feeds `aipc compile MODEL --precision w8a16 --calibration DIR`.

Library equivalent: onnxwrapper.diff.start_capture(DIR, max_bytes=…, max_calls_per_model=N)
around aipc_loader.run_script(script, args, backend="cpu"). Only sessions of this Python process
are recorded (not of child processes the script starts).
"""

from __future__ import annotations

import argparse
import os
import shutil

import aipc_loader
from aipc._exit_codes import EXIT_UNAVAILABLE, EXIT_USAGE, UsageError
from aipc.args import resolve_settings
from aipc_loader import _verbosity
from aipc_loader._report import say
from onnxwrapper._registry import default_registry
from onnxwrapper.diff import default_directory, read_capture, start_capture
from onnxwrapper.errors import BackendNotFoundError, BackendOptionError, BackendUnavailableError

__all__ = ["add_arguments", "main", "split_trailing_options"]

_TRAILING = {"-o": "output", "--output": "output", "--max-samples": "max_samples", "--max-bytes": "max_bytes"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``aipc capture`` (see the module docstring)."""
    parser.add_argument("-o", "--output", metavar="DIR",
                        help="capture directory to create (default: ./aipc-capture-<date-time>)")
    target = parser.add_argument_group("backend (default cpu; the target's own shapes with e.g. --backend qnn)")
    target.add_argument("--backend", default="cpu", metavar="NAME",
                        help="backend the script runs on while it is recorded (default: cpu)")
    target.add_argument("--target", metavar="T", help="backend option 'target' [AIPC_TARGET]")
    target.add_argument("--precision", metavar="P", help="backend option 'precision' [AIPC_PRECISION]")
    target.add_argument("--cache-dir", metavar="DIR", help="backend option 'cache_dir' [AIPC_CACHE_DIR]")
    parser.add_argument("-v", "--verbose", action="count", default=None,
                        help="with --backend: each compile and cache hit on stderr [AIPC_VERBOSE]")
    parser.add_argument("--max-samples", type=int, default=None, metavar="N",
                        help="record at most N calls per model (default: all, within --max-bytes)")
    parser.add_argument("--max-bytes", default="2G", metavar="SIZE",
                        help="stop recording beyond SIZE of arrays, e.g. 500M, 2G (default 2G)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing capture directory")
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module (as python -m) instead of a script")
    parser.add_argument("script", nargs="?", help="the script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")


def split_trailing_options(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """Peel ``-o DIR`` / ``--output DIR`` and the options after it from the end of ``args``.

    Returns:
        ``(script args, {option dest: value})``; unchanged args and ``{}`` when the trailing form
        is absent (``-o`` must be among the peeled options).
    """
    found: dict[str, str] = {}
    rest = list(args)
    while len(rest) >= 2 and rest[-2] in _TRAILING and _TRAILING[rest[-2]] not in found:
        found[_TRAILING[rest[-2]]] = rest[-1]
        rest = rest[:-2]
    if "output" not in found:
        return list(args), {}
    return rest, found


def main(args: argparse.Namespace) -> int:
    """Run ``aipc capture``; returns the script's exit status (64 for usage errors)."""


    script_args = list(args.args or [])
    if args.module and args.script:
        script_args = [args.script] + script_args  # "-m mod a b": argparse took "a" as the script
    if not args.output:
        script_args, trailing = split_trailing_options(script_args)
        if trailing:
            args.output = trailing["output"]
            if "max_samples" in trailing:
                args.max_samples = trailing["max_samples"]
            if "max_bytes" in trailing:
                args.max_bytes = trailing["max_bytes"]
            say(f"taking the trailing '-o {args.output}' as the capture directory (put aipc options before "
                f"the script to pass -o to the script itself)")
    if not args.module and not args.script:
        say("error: no script given: aipc capture -o DIR script.py [args…] (or -m module)")
        return EXIT_USAGE
    try:
        max_samples = None if args.max_samples is None else int(args.max_samples)
    except ValueError:
        max_samples = 0
    if max_samples is not None and max_samples < 1:
        say(f"error: --max-samples must be an integer >= 1, got {args.max_samples!r}")
        return EXIT_USAGE
    try:
        backend, options, verbose = _backend(args)
    except UsageError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    out = os.path.abspath(args.output or default_directory(command="capture"))
    if os.path.exists(out):
        if not args.overwrite:
            say(f"error: {out} exists already; pass --overwrite to replace it")
            return EXIT_USAGE
        if not os.path.isfile(os.path.join(out, "capture.json")):
            say(f"error: {out} exists and is not a capture directory; refusing to delete it")
            return EXIT_USAGE
        shutil.rmtree(out)
    target = args.module or args.script
    metadata = {"command": "aipc capture", "target": target, "module": bool(args.module), "args": script_args,
                "backend": backend, "backend_options": options}
    try:
        handle = start_capture(out, max_bytes=args.max_bytes, max_calls_per_model=max_samples, metadata=metadata)
    except ValueError as exc:  # a bad --max-bytes
        say(f"error: --max-bytes: {exc}")
        return EXIT_USAGE
    say(f"results in {out} (recording on backend '{backend}')")
    _verbosity.configure(verbose)
    try:
        if args.module:
            status = aipc_loader.run_module(args.module, script_args, backend=backend, backend_options=options)
        else:
            status = aipc_loader.run_script(target, script_args, backend=backend, backend_options=options)
    except aipc_loader.LaunchError as exc:
        say(f"error: {exc}")
        status = EXIT_USAGE
    except (BackendNotFoundError, BackendOptionError) as exc:
        say(f"error: {exc}")
        status = EXIT_USAGE
    except BackendUnavailableError as exc:
        say(f"error: {exc}")
        status = EXIT_UNAVAILABLE
    finally:
        handle.stop()
    capture = read_capture(out)
    say(f"capture: {out} ({capture.status}), {len(capture.calls)} calls of {len(capture.models)} model(s)")
    for key, info in capture.models.items():
        calls = list(capture.calls_of(key))
        shapes = sorted({str([tuple(m.get('shape') or ()) for m in c.input_meta]) for c in calls})
        say(f"  {key}: {len(calls)} call(s), input shapes {', '.join(shapes[:4])}{' …' if len(shapes) > 4 else ''}"
            f"  ({info.path or 'model given as bytes'})")
    if capture.truncated:
        say(f"  recording stopped early: {capture.truncated.get('reason')}")
    return status


def _backend(args: argparse.Namespace) -> tuple[str, dict, int]:
    """The backend to record on, its options (as `python -m aipc` resolves them) and the verbosity.

    Raises:
        UsageError: an unknown backend, a bad environment value, or an option the backend lacks.
    """
    run = argparse.Namespace(backend=args.backend, target=args.target, precision=args.precision, strict=None,
                             cache_dir=args.cache_dir, verbose=args.verbose, report_partition=None, repairs=None)
    settings = resolve_settings(run)
    try:
        name = default_registry().resolve(settings.backend)
    except BackendNotFoundError as exc:
        raise UsageError(str(exc)) from exc
    declared = set(getattr(default_registry().get(name), "options", {}) or {})
    options = {k: v for k, v in settings.backend_options.items()
               if k in declared or k not in settings.env_only_options}  # AIPC_TARGET means nothing on cpu
    return name, options, settings.verbose
