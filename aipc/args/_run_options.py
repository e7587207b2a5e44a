"""The run options (``--backend``, ``--target``, ``--precision``, …, ``-v``): the options of ``aipc run
script.py``, shared by ``aipc run MODEL.onnx`` (:class:`aipc.args._model.BackendArgs`), ``aipc
capture`` and ``aipc compile --from-capture``, and their ``AIPC_*`` environment variables
(:mod:`aipc_loader._env`): an option given on the command line wins over the variable, which wins
over the default. Their compile budget (``--compile-timeout``, ``--compile-memory-mb``:
:func:`add_compile_budget`, :func:`compile_budget`) is also an option of every command that compiles
for the QNN HTP outside ``aipc run`` (``aipc diff``, ``aipc compile``).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

from aipc._exit_codes import UsageError
from aipc_loader import _env

__all__ = ["add_compile_budget", "add_run_options", "cache_dir_problem", "compile_budget", "resolve_settings", "RunSettings"]


def _positive(option: str, integer: bool = False):
    """argparse ``type=``: a positive number for ``option`` (an int when ``integer``)."""
    def convert(text: str):
        try:
            value = _integer(option, text) if integer else _env.parse_positive(option, text)
        except _env.EnvError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc
        return value
    return convert


def _integer(name: str, text: str) -> int:
    value = _env.parse_positive(name, text)
    if value != int(value):
        raise _env.EnvError(f"{name}={text!r} is not a whole number.")
    return int(value)


#: the compile budget's settings: (attribute, environment variable, parser of the variable)
_BUDGET = (("compile_timeout", _env.ENV_COMPILE_TIMEOUT, _env.parse_positive),
           ("compile_memory_mb", _env.ENV_COMPILE_MEMORY_MB, _integer),
           ("compile_budget", _env.ENV_COMPILE_BUDGET, _env.parse_positive))


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Add the run options (backend group) to ``parser``.

    Every option defaults to ``None`` so :func:`resolve_settings` can tell "not given" (then the
    environment variable, then the default applies) from an explicit value.
    """
    group = parser.add_argument_group("run options", "Each can also be set by the environment variable shown.")
    group.add_argument("--backend", metavar="NAME",
                       help=f"backend that runs the sessions: qnn, cpu, … [{_env.ENV_BACKEND}] "
                            f"(default: {_env.DEFAULT_BACKEND})")
    group.add_argument("--target", metavar="TARGET",
                       help=f"device target, backend option 'target' (qnn: a SoC name) [{_env.ENV_TARGET}]")
    group.add_argument("--precision", metavar="P",
                       help=f"backend option 'precision' (qnn: fp16, fp32) [{_env.ENV_PRECISION}]")
    group.add_argument("--strict", action=argparse.BooleanOptionalAction, default=None,
                       help=f"backend option 'strict': a node left on the CPU is an error [{_env.ENV_STRICT}]")
    group.add_argument("--shape-buckets", action=argparse.BooleanOptionalAction, default=None,
                       help=f"backend option 'shape_buckets' (qnn, default on): a dim that grows from call to call "
                            f"runs padded into a few compiled sizes where ORT's CPU certifies it exact "
                            f"[{_env.ENV_SHAPE_BUCKETS}]")
    group.add_argument("--cache-dir", metavar="DIR",
                       help=f"backend option 'cache_dir': compiled-artifact cache [{_env.ENV_CACHE_DIR}]")
    add_compile_budget(group)
    group.add_argument("-v", "--verbose", action="count", default=None,
                       help=f"say what aipc does on stderr; -vv also shows onnxwrapper's debug log "
                            f"[{_env.ENV_VERBOSE}=0|1|2]")
    group.add_argument("--report-partition", action=argparse.BooleanOptionalAction, default=None,
                       help=f"at exit print each session's partition summary [{_env.ENV_REPORT_PARTITION}]")
    group.add_argument("--repairs", metavar="FILE",
                       help="repair recipe (aipc fix): backend option 'repairs' for the models it names; other "
                            "models run unchanged")


def add_compile_budget(group) -> None:
    """Add ``--compile-timeout``, ``--compile-memory-mb`` and ``--compile-budget`` (the QNN compile budget; default ``None``:
    :func:`compile_budget` then reads the environment variables) to ``group`` (a parser or group)."""
    group.add_argument("--compile-timeout", metavar="SECONDS", type=_positive("--compile-timeout"),
                       help=f"backend option 'compile_timeout': wall time one compile may take before the "
                            f"recovery ladder takes over [{_env.ENV_COMPILE_TIMEOUT}]")
    group.add_argument("--compile-memory-mb", metavar="MIB", type=_positive("--compile-memory-mb", integer=True),
                       help=f"backend option 'compile_memory_mb': memory one compile may use "
                            f"[{_env.ENV_COMPILE_MEMORY_MB}]")
    group.add_argument("--compile-budget", metavar="SECONDS", type=_positive("--compile-budget"),
                       help=f"backend option 'compile_budget': wall time all compiles of one model may take "
                            f"together, recovery included; past it the model runs on the CPU for the run "
                            f"[{_env.ENV_COMPILE_BUDGET}]")


def _pick(args, attr: str, var: str, parse, env) -> tuple[Any, str | None]:
    """``(value, "option" | "env")`` of setting ``attr``: the parsed option, else the environment
    variable ``var`` (parsed by ``parse``), else ``(None, None)``.

    Raises:
        EnvError: the variable has an unusable value.
    """
    value = getattr(args, attr, None)  # commands that lack an option leave it to the variable
    if value is not None:
        return value, "option"
    raw = env.get(var)
    if raw is None or raw.strip() == "":
        return None, None
    return (parse(var, raw) if parse else raw.strip()), "env"


def compile_budget(args: argparse.Namespace, environ=None) -> dict[str, Any]:
    """The compile budget as backend options, ``{"compile_timeout": s, "compile_memory_mb": MiB,
    "compile_budget": s}`` (only those set): the options, else ``AIPC_COMPILE_TIMEOUT`` /
    ``AIPC_COMPILE_MEMORY_MB`` / ``AIPC_COMPILE_BUDGET``.

    Raises:
        UsageError: an environment variable has an unusable value, or the compile cache folder
            cannot be used (:func:`cache_dir_problem`; the message names ``--cache-dir`` or the
            variable it came from).
    """
    env = os.environ if environ is None else environ
    budget = {}
    try:
        for attr, var, parse in _BUDGET:
            value, _source = _pick(args, attr, var, parse, env)
            if value is not None:
                budget[_env.OPTION_KEYS[attr]] = value
    except _env.EnvError as exc:
        raise UsageError(str(exc)) from exc
    return budget


@dataclass
class RunSettings:
    """The resolved run settings.

    Attributes:
        backend: backend name as requested (resolved to the canonical name when validated).
        backend_options: options for the backend, e.g. ``{"target": "x_elite", "strict": True}``.
        verbose: 0, 1, 2. report_partition: print partition summaries at exit.
        env_only_options: option keys that came from environment variables (dropped, with a
            ``-v`` note, when the backend does not declare them).
    """

    backend: str
    backend_options: dict[str, Any] = field(default_factory=dict)
    verbose: int = 0
    report_partition: bool = False
    env_only_options: set = field(default_factory=set)


#: how the library's cache errors name the setting; the command line names its option instead
_LIBRARY_NAMES = "backend option 'cache_dir' or $ONNXWRAPPER_CACHE_DIR"


def cache_dir_problem(path: str) -> str | None:
    """Why the compile cache folder ``path`` cannot be used, or ``None``: checked when the option is
    read, before a script starts. A folder that does not exist is created (private, ``0700``, as the
    cache creates it); one that is not a directory, cannot be created, or is not private (another
    owner, writable by group or others: the cache refuses it) is a problem. A read-only cache is
    not: the cache uses what it holds and compiles the rest elsewhere."""
    if os.path.exists(path) and not os.path.isdir(path):
        return "it is not a directory; give a folder (it is created if missing)"
    if not os.path.isdir(path):
        try:
            os.makedirs(path, mode=0o700)
        except OSError as exc:
            return f"the folder cannot be created ({exc.strerror or exc}); give a folder you can write"
    from onnxwrapper.errors import ArtifactError  # onnxruntime's import time: only when a cache folder is given
    from onnxwrapper.kernel import ArtifactCache

    try:
        ArtifactCache(path)  # the cache's own check of its root
    except ArtifactError as exc:
        return str(exc)
    return None


def resolve_settings(args: argparse.Namespace, environ=None) -> RunSettings:
    """Combine parsed options with the ``AIPC_*`` environment variables (options win).

    Raises:
        UsageError: an environment variable has an unusable value, or the compile cache folder
            cannot be used (:func:`cache_dir_problem`; the message names ``--cache-dir`` or the
            variable it came from).
    """
    env = os.environ if environ is None else environ
    try:
        backend, _ = _pick(args, "backend", _env.ENV_BACKEND, None, env)
        settings = RunSettings(backend or _env.DEFAULT_BACKEND)
        for attr, var, parse in (("target", _env.ENV_TARGET, None), ("precision", _env.ENV_PRECISION, None),
                                 ("strict", _env.ENV_STRICT, _env.parse_bool),
                                 ("shape_buckets", _env.ENV_SHAPE_BUCKETS, _env.parse_bool),
                                 ("cache_dir", _env.ENV_CACHE_DIR, None)) + _BUDGET:
            value, source = _pick(args, attr, var, parse, env)
            if value is None:
                continue
            if attr == "cache_dir":
                value = os.path.abspath(os.path.expanduser(value))
                problem = cache_dir_problem(value)
                if problem is not None:  # before the script starts, naming what the user typed
                    where = "--cache-dir" if source != "env" else f"${var}"
                    raise UsageError(f"{where} {value}: {problem.replace(_LIBRARY_NAMES, where)}")
            key = _env.OPTION_KEYS[attr]
            settings.backend_options[key] = value
            if source == "env":
                settings.env_only_options.add(key)
        if getattr(args, "repairs", None):  # models without a recipe in the file run as they are
            settings.backend_options["repairs"] = {"file": os.path.abspath(args.repairs), "required": False}
        verbose, _ = _pick(args, "verbose", _env.ENV_VERBOSE, _env.parse_verbosity, env)
        settings.verbose = int(verbose or 0)
        report, _ = _pick(args, "report_partition", _env.ENV_REPORT_PARTITION, _env.parse_bool, env)
        settings.report_partition = bool(report)
        return settings
    except _env.EnvError as exc:
        raise UsageError(str(exc)) from exc
