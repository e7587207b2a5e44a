"""``aipc run [options] script.py args…`` / ``aipc [options] -m module args…``.

Runs an unchanged onnxruntime script with ``onnxruntime.InferenceSession`` redirected to
onnxwrapper on the chosen backend (the hot patch of :mod:`aipc_loader`), with Python's own
semantics for the script (as :func:`aipc_loader.run_script`), and passes the activation to child
processes.

Options end at the first argument that is not one of ours (the script), at ``-m MODULE`` or at
``--``; everything after belongs to the script, even when it looks like our options
(``aipc -v s.py -v`` gives the script ``["s.py", "-v"]``). Abbreviated long options are not
accepted, so a script never loses an argument to a prefix match.

Our output goes to stderr, prefixed ``aipc:``: errors and onnxwrapper's warnings (among them the
progress lines of a long compile); with ``-v`` also the backend (and that its device is
simulated on this host), one line per session saying what runs where and, at exit, each
session's partition summary (also with ``--report-partition``). The levels are decided in one
place, :mod:`aipc_loader._verbosity`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Sequence

from aipc import _console
from aipc._exit_codes import EXIT_UNAVAILABLE, EXIT_USAGE, UsageError
from aipc.args import CommandParser, RunSettings, add_run_options, resolve_settings
from aipc_loader import _env, _patch, _script, _verbosity
from aipc_loader._bootstrap import export_to_environment
from aipc_loader._report import SessionReporter, say

__all__ = ["add_arguments", "main", "run_command", "run_help", "split_argv", "resolve_settings", "RunSettings",
           "SessionReporter", "UsageError", "EXIT_USAGE", "EXIT_UNAVAILABLE"]

_VALUE_OPTIONS = {"--backend", "--target", "--precision", "--cache-dir", "--repairs", "--compile-timeout",
                  "--compile-memory-mb"}


@dataclass
class _Invocation:
    options: list
    kind: str                  # "script" or "module"
    target: str
    args: list


def split_argv(argv: Sequence[str]) -> _Invocation:
    """Split ``argv`` into our option tokens, the script (or ``-m`` module) and its arguments.

    ``kind`` is ``"script"``, ``"module"`` or ``"none"`` (no script given: a usage error once the
    options are known to be valid).

    Raises:
        UsageError: ``-m`` or ``--`` without a name; a script from stdin (``-``) was asked for.
    """
    argv = list(argv)
    options: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            if i + 1 >= len(argv):
                raise UsageError("no script given after '--'")
            return _Invocation(options, "script", argv[i + 1], argv[i + 2:])
        if tok == "-m":
            if i + 1 >= len(argv):
                raise UsageError("argument -m: expected a module name")
            return _Invocation(options, "module", argv[i + 1], argv[i + 2:])
        if tok.startswith("-m") and not tok.startswith("--"):
            return _Invocation(options, "module", tok[2:], argv[i + 1:])
        if tok == "-":
            raise UsageError("reading the script from stdin is not supported; give a file")
        if tok.startswith("-"):
            name, eq, _ = tok.partition("=")
            options.append(tok)
            if name in _VALUE_OPTIONS and not eq and i + 1 < len(argv):
                options.append(argv[i + 1])
                i += 1
            i += 1
            continue
        return _Invocation(options, "script", tok, argv[i + 1:])
    return _Invocation(options, "none", "", [])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the run options to ``parser`` (:func:`aipc.args.add_run_options`; every option defaults to
    ``None`` so :func:`resolve_settings` can tell "not given" from an explicit value)."""
    add_run_options(parser)


def build_parser(prog: str = "aipc run") -> argparse.ArgumentParser:
    """The argparse parser for the run options (no positionals: see :func:`split_argv`)."""
    parser = CommandParser(prog=prog, add_help=True, allow_abbrev=False,
                           usage=f"{prog} [options] script.py [args…]  |  {prog} [options] -m module [args…]")
    add_run_options(parser)
    return parser


def main(args: argparse.Namespace) -> int:
    """Subcommand-module entry point, for symmetry with the other ``_cmd_*`` modules.

    ``aipc run`` cannot be parsed by argparse alone (the script's arguments must stay untouched),
    so the dispatcher calls :func:`run_command` instead. Here ``args.argv`` must hold the whole
    argument list after ``run`` (options, script or ``-m module``, script arguments).
    """
    return run_command(list(args.argv))


def run_help() -> str:
    """The text of ``aipc run --help``: the run options, and where the model workflow is described."""
    return build_parser().format_help() + (
        "\nA path ending in .onnx is a model, never a script: 'aipc run MODEL.onnx [options]'\n(or 'aipc "
        "MODEL.onnx …') runs it with generated or loaded inputs; 'aipc run MODEL.onnx --help'\nlists its "
        "options.\n")


def run_command(argv: Sequence[str], *, help_text=None) -> int:
    """Run ``aipc run`` with ``argv`` (everything after ``run``). Returns the exit status.

    A script path ending in ``.onnx`` is a model: ``aipc.commands.model`` runs it instead.
    """
    try:
        invocation = split_argv(argv)
        if invocation.kind == "script" and invocation.target.lower().endswith(".onnx"):
            # here, not at the top: the model workflow imports onnxwrapper.diff (onnxruntime, ~0.3 s)
            from aipc.commands.model import run_model_command

            _console.prepare()  # a model run's stdout is aipc's report, not a script's
            return run_model_command(argv)
        parser = build_parser()
        if any(o in ("-h", "--help") for o in invocation.options):
            sys.stdout.write(help_text() if help_text else parser.format_help())
            return 0
        args = parser.parse_args(invocation.options)
        settings = resolve_settings(args)
        if invocation.kind == "none":
            raise UsageError("no script given (usage: aipc [options] script.py [args…] or "
                             "aipc [options] -m module [args…])")
    except UsageError as exc:
        say(f"error: {exc}")
        say("try 'aipc --help'")
        return EXIT_USAGE
    return _launch(invocation, settings)


def _launch(invocation: _Invocation, settings: RunSettings) -> int:
    # onnxwrapper imports onnxruntime (~0.3 s): imported when a script runs, not for `aipc --help`
    from onnxwrapper.errors import (BackendNotFoundError, BackendOptionError, BackendUnavailableError,
                                    BackendValidationError)

    _verbosity.configure(settings.verbose)
    try:
        name, options, availability = _validated(settings)
    except (BackendNotFoundError, BackendOptionError) as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    except (BackendUnavailableError, BackendValidationError) as exc:
        say(f"error: {exc}")
        return EXIT_UNAVAILABLE
    reason = availability.reason or "simulated device"
    simulated = (f"simulated on this host: {reason}"
                 + ("" if "not device speed" in reason else ": device numerics, not device speed"))
    if _verbosity.shows_sessions(settings.verbose):  # one line: the simulated-device notice is part of it
        say(f"backend '{name}' ({simulated if availability.simulated else availability.reason}), options "
            f"{options or '{}'}; running {'-m ' if invocation.kind == 'module' else ''}{invocation.target}")
    SessionReporter(verbose=settings.verbose, report_partition=settings.report_partition).start()
    config = _env.ChildConfig(name, options, settings.verbose, settings.report_partition)
    export_to_environment(config)
    _patch._activate(_patch.Activation(name, dict(options)))
    try:
        if invocation.kind == "module":
            return _script.run_module_as_main(invocation.target, invocation.args, restore=False)
        return _script.run_path_as_main(invocation.target, invocation.args, restore=False)
    except _script.LaunchError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE  # aipc's own error before the script started (Python would say 2 or 1)


def _validated(settings: RunSettings):
    """Canonical backend name, the options to use, and the backend's availability."""
    from onnxwrapper._registry import default_registry  # imports onnxruntime: not for `aipc --help`

    registry = default_registry()
    name = registry.resolve(settings.backend)
    declared = set(getattr(registry.get(name), "options", {}) or {})
    options = dict(settings.backend_options)
    for key in sorted(settings.env_only_options - declared):
        if settings.verbose:
            say(f"ignoring {key}={options[key]!r} from the environment: backend '{name}' has no option '{key}'")
        del options[key]
    _patch.validate(name, options)
    return name, options, registry.probe(name)
