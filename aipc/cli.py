"""The ``aipc`` command line: ``python -m aipc …`` and the ``aipc`` console script.

Forms::

    aipc [run options] script.py [args…]        = aipc run …
    aipc [run options] -m module [args…]        = aipc run -m module …
    aipc run [run options] script.py [args…]
    aipc diff|fix|inspect|compile|capture|doctor [options…]
    aipc [run] MODEL.onnx [options]             = a model run (a path ending in .onnx is a model)
    aipc diff --model MODEL.onnx [options]      = compare a model's outputs across backends
    aipc compile --from-capture DIR [options]   = precompile a captured run's shapes (aipc.commands.precompile)

A subcommand other than ``run`` lives in ``aipc.commands.<name>``, a module exposing
``add_arguments(parser)`` and ``main(args) -> int``; it is imported only when invoked, and a
module that cannot be imported is an error of that subcommand only (exit status 69). A script
whose name equals a subcommand runs with ``aipc run NAME`` or ``aipc ./NAME``.

Before anything else, aipc turns onnxruntime's telemetry off for itself and every process it starts
(``ORT_DISABLE_TELEMETRY=1``, unless ``ONNXWRAPPER_ORT_TELEMETRY=1``: docs/security.md).

Exit status: one table for every command (:mod:`aipc._exit_codes`, printed by ``aipc --help``);
``aipc run SCRIPT`` returns the script's own status once it has started (as ``python`` computes
it; 130 after KeyboardInterrupt), and 64 (usage or input error: bad option, bad environment
value, unknown backend or backend option, a script or module that cannot be found, an unknown
subcommand) or 69 (backend or subcommand not available here) before.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import textwrap
from typing import Sequence

from aipc import _shadowing
from aipc import _console
from aipc._exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_UNAVAILABLE, EXIT_USAGE, UsageError, table_text
from aipc.args import CommandParser
from aipc.commands.run import build_parser, run_command, run_help
from aipc_loader import _env
from aipc_loader._report import say

__all__ = ["main", "SUBCOMMANDS", "help_text", "input_errors", "one_line"]

#: name -> (module, one-line description). ``run`` is implemented in :mod:`aipc.commands.run`.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("aipc.commands.run", "run an unchanged onnxruntime script on a backend (the default)"),
    "diff": ("aipc.commands.diff", "run a script on two backends and compare every session's outputs"),
    "fix": ("aipc.commands.fix", "turn a failing diff into a verified repair recipe (rewrites, CPU subgraphs, precision)"),
    "inspect": ("aipc.commands.inspect", "show backends, a model's operators and its partition"),
    "compile": ("aipc.commands.compile", "compile a model for the QNN HTP; --from-capture DIR: a captured run's shapes"),
    "capture": ("aipc.commands.capture", "record a script's session inputs (on CPU) as calibration data"),
    "doctor": ("aipc.commands.doctor", "field self-test: platform, NPU or simulator, SoC, and canary models vs the CPU"),
}


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def help_text() -> str:
    """The text of ``aipc --help``: usage, run options, subcommands, environment variables."""
    parser = build_parser(prog="aipc")
    parser.description = ("Run an unchanged ONNX Runtime script with onnxruntime.InferenceSession "
                          "redirected to onnxwrapper's, on the chosen backend (default: the QNN NPU).")
    lines = [parser.format_help().rstrip(), "", "subcommands:"]
    for name, (module, text) in SUBCOMMANDS.items():
        note = "" if _available(module) else "  (not available in this installation)"
        lines.append(f"  {name:<9} {text}{note}")
    lines += ["  'aipc SUBCOMMAND --help' shows a subcommand's options.", "",
              "models: a path ending in .onnx is a model, never a script — 'aipc [run] MODEL.onnx [options]'",
              "  runs it with generated or loaded inputs, 'aipc diff --model MODEL.onnx' compares backends",
              "  ('aipc run MODEL.onnx --help').", "", "environment variables:"]
    for var, option, text in _env.USER_VARIABLES:
        wrapped = textwrap.wrap(f"{text} (same as {option})", 100 - 25)
        lines.append(f"  {var:<22} {wrapped[0]}")
        lines += [f"  {'':<22} {more}" for more in wrapped[1:]]
    lines += [
        f"  {_env.ACTIVE_VARIABLE:<22} set by aipc for the processes it starts (JSON); do not set it",
        f"  {'PYTHONPATH':<22} aipc prepends its bootstrap directory for the processes it starts, so",
        f"  {'':<22} Python children inherit the patch (see docs/loader.md)",
        f"  {'ONNXWRAPPER_BACKEND':<22} not used by aipc (it selects for onnxwrapper.InferenceSession calls)",
        f"  {_env.ENV_ORT_TELEMETRY}",
        f"  {'':<22} 1: leave onnxruntime's telemetry on (aipc sets ORT_DISABLE_TELEMETRY=1 for",
        f"  {'':<22} itself and the processes it starts; docs/security.md)",
        "",
        "Options win over environment variables. An option set only by the environment is ignored",
        "(with a -v note) when the chosen backend has no such option; given on the command line it is",
        "an error.",
        "",
        "exit status (every command; 'aipc run SCRIPT': the script's own once it has started):",
        table_text(),
        "",
    ]
    return "\n".join(lines)


def _version() -> str:
    try:
        from onnxwrapper.kernel import __version__  # imports onnxruntime (~0.3 s): only for --version
    except ImportError:  # pragma: no cover - broken installation
        __version__ = "unknown"
    return f"aipc (onnxwrapper) {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``aipc`` command with ``argv`` (default ``sys.argv[1:]``) and return its exit status.

    Never raises for usage errors (they print ``aipc: error: …`` on stderr and return 64). Ctrl-C
    anywhere (``KeyboardInterrupt``) prints one line, ``aipc: interrupted (Ctrl-C)``, and returns 130.
    """
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        return _interrupted()


def _interrupted(prefix: str = "aipc: ") -> int:
    """Say, in one line, that Ctrl-C stopped the command; returns :data:`EXIT_INTERRUPTED` (130)."""
    say("interrupted (Ctrl-C)", prefix)
    return EXIT_INTERRUPTED


def _main(argv: list) -> int:
    _env.keep_ort_telemetry_off(os.environ)  # before onnxruntime is imported (docs/security.md, "telemetry")
    # one console for every command (aipc._console): stderr now; stdout where aipc writes it, not a script
    _console.prepare(stdout=not argv or argv[0] in ("-h", "--help", "--version") or argv[0] in SUBCOMMANDS
                     and argv[0] != "run")
    if not argv:
        say("error: no script given")
        say("usage: aipc [options] script.py [args…] | aipc [options] -m module [args…] | aipc SUBCOMMAND …")
        say("try 'aipc --help'")
        return EXIT_USAGE
    first = argv[0]
    if first in ("-h", "--help"):
        sys.stdout.write(help_text())
        return 0
    if first == "--version":
        sys.stdout.write(_version() + "\n")
        return 0
    shadows = _shadowing.shadowed()
    if shadows:
        for name, path in shadows:
            say(f"error: {path} shadows the installed '{name}' package: `python -m aipc` puts the working "
                         f"directory first on sys.path, so `import {name}` would load this file (as `python "
                         f"{os.path.basename(path)}` would). Rename it, or run aipc from another directory.")
        return EXIT_USAGE
    _shadowing.drop_working_directory()  # nothing aipc imports from now on comes from the working directory
    if first == "run":
        return run_command(argv[1:], help_text=run_help)
    if first == "diff" and _model_diff(argv[1:]):
        from aipc.commands.model import diff_model_command  # imports onnxwrapper.diff: not for `aipc --help`

        return diff_model_command(argv[1:])
    if first == "compile" and any(t == "--from-capture" or t.startswith("--from-capture=") for t in argv[1:]):
        return _subcommand(first, argv[1:], "aipc.commands.precompile")
    if first in SUBCOMMANDS:
        return _subcommand(first, argv[1:])
    typo = _subcommand_typo(first)
    if typo:
        say(f"error: can't open file '{first}': no such file; did you mean 'aipc {typo}'?")
        return EXIT_USAGE
    return run_command(argv, help_text=help_text)


def _model_diff(argv: list) -> bool:
    """``aipc diff --model M.onnx …`` or ``aipc diff [options] M.onnx …``: the first positional (after
    the options of ``aipc diff script.py``) is a model, never a script."""
    from aipc.commands import diff  # imports onnxwrapper.diff: only for `aipc diff`

    probe = argparse.ArgumentParser(add_help=False)
    diff.add_arguments(probe)
    takes_value = {s for a in probe._actions if a.nargs is None and a.option_strings for s in a.option_strings}
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        if token == "--model" or token.startswith("--model="):
            return True
        if token in ("--", "-m"):
            return False
        if token.startswith("-"):
            skip = token in takes_value
            continue
        return token.lower().endswith(".onnx")
    return False


def _subcommand_typo(token: str) -> str | None:
    """The subcommand ``token`` is a misspelling of, when it names no file (``aipc dif x.py``)."""
    import difflib

    if token.startswith("-") or os.path.exists(token) or os.sep in token or "." in token:
        return None
    close = difflib.get_close_matches(token, list(SUBCOMMANDS), n=1, cutoff=0.6)
    return close[0] if close else None


def _subcommand(name: str, argv: list, module_name: str | None = None) -> int:
    default_module, text = SUBCOMMANDS[name]
    module_name = module_name or default_module
    prefix = f"aipc {name}: "  # errors of a subcommand name it, as its own messages do
    try:
        module = importlib.import_module(module_name)
        add_arguments, entry = module.add_arguments, module.main
    except Exception as exc:  # noqa: BLE001 - a broken subcommand must not break the others
        say(f"error: subcommand '{name}' is not available in this installation "
                     f"({type(exc).__name__}: {exc})", prefix)
        return EXIT_UNAVAILABLE
    parser = CommandParser(prog=f"aipc {name}", description=(module.__doc__ or text).strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        say(f"error: {exc}", prefix)
        say(f"try 'aipc {name} --help'", prefix)
        return EXIT_USAGE
    from onnxwrapper.errors import OnnxwrapperError  # imports onnxruntime: not for `aipc --help`

    try:
        return int(entry(args) or 0)
    except KeyboardInterrupt:
        return _interrupted(prefix)
    except input_errors() as exc:  # a refusal of what the user gave (a file, a folder, an option): bad input
        say(f"error: {one_line(exc)}", prefix)
        return EXIT_FAILED if getattr(exc, "transient", False) else EXIT_USAGE
    except OnnxwrapperError as exc:
        say(f"error: {one_line(exc)}", prefix)
        return EXIT_FAILED


def input_errors() -> tuple[type[BaseException], ...]:
    """The typed refusals of input that exit with status 64 (usage or input error) when a command
    does not handle them itself: a file or folder that is not what its format says
    (``MalformedFileError``), an unusable recipe (``RecipeError``), an unusable artifact or cache
    (``ArtifactError``), a bad backend name or option, a file that is missing, a FIFO, a device or
    a folder where a file belongs. An ``ArtifactError`` marked ``transient`` (a file in use, a lock
    held, a full disk) is no input error: status 1."""
    from onnxwrapper.errors import (ArtifactError, BackendNotFoundError, BackendOptionError, MalformedFileError,
                                    RecipeError)
    from onnxwrapper.kernel import NotRegularFileError

    return (MalformedFileError, RecipeError, ArtifactError, BackendNotFoundError, BackendOptionError,
            NotRegularFileError, FileNotFoundError)


def one_line(exc: BaseException) -> str:
    """``str(exc)`` on one line, control characters shown escaped (``\\x1b``): a message may quote
    names from a file from elsewhere, which must not move the cursor or recolour the terminal."""
    text = str(exc) or type(exc).__name__
    return "".join(ch if ch.isprintable() else (" " if ch in "\n\r\t" else ch.encode("unicode_escape").decode())
                   for ch in text)
