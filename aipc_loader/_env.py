"""Environment variables of the ``aipc`` command and its child processes: names, meaning, parsing.

One table, :data:`USER_VARIABLES`, is the single source of truth for the variables a user may set
(``aipc --help`` prints it); :data:`ACTIVE_VARIABLE` is the one aipc sets for the process tree it
starts. Precedence for every setting: command-line option, then environment variable, then the
default.

Child processes (``multiprocessing`` spawn/forkserver children, ``subprocess.run([sys.executable,
…])``) learn that they must activate the patch from :data:`ACTIVE_VARIABLE` only — never from the
user variables, so a shell that exports ``AIPC_BACKEND=qnn`` patches nothing by itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "ENV_BACKEND", "ENV_TARGET", "ENV_PRECISION", "ENV_STRICT", "ENV_CACHE_DIR", "ENV_VERBOSE",
    "ENV_REPORT_PARTITION", "ENV_COMPILE_TIMEOUT", "ENV_COMPILE_MEMORY_MB", "ENV_COMPILE_BUDGET", "ENV_SHAPE_BUCKETS", "ACTIVE_VARIABLE", "USER_VARIABLES", "OPTION_KEYS", "DEFAULT_BACKEND",
    "EnvError", "ChildConfig", "parse_bool", "parse_positive", "parse_verbosity", "encode_child_config",
    "decode_child_config", "ENV_ORT_TELEMETRY", "ORT_TELEMETRY_OFF", "keep_ort_telemetry_off",
]

ENV_BACKEND = "AIPC_BACKEND"
ENV_TARGET = "AIPC_TARGET"
ENV_PRECISION = "AIPC_PRECISION"
ENV_STRICT = "AIPC_STRICT"
ENV_SHAPE_BUCKETS = "AIPC_SHAPE_BUCKETS"
ENV_CACHE_DIR = "AIPC_CACHE_DIR"
ENV_VERBOSE = "AIPC_VERBOSE"
ENV_REPORT_PARTITION = "AIPC_REPORT_PARTITION"
ENV_COMPILE_TIMEOUT = "AIPC_COMPILE_TIMEOUT"
ENV_COMPILE_BUDGET = "AIPC_COMPILE_BUDGET"
ENV_COMPILE_MEMORY_MB = "AIPC_COMPILE_MEMORY_MB"

#: set by aipc for the processes it starts (JSON, see :class:`ChildConfig`); never set it by hand.
ACTIVE_VARIABLE = "AIPC_ACTIVE"
#: 1: leave onnxruntime's telemetry on (``onnxwrapper.kernel.ENV_ORT_TELEMETRY``; a test checks they agree)
ENV_ORT_TELEMETRY = "ONNXWRAPPER_ORT_TELEMETRY"
#: onnxruntime's own switch, read when onnxruntime is imported
ORT_TELEMETRY_OFF = "ORT_DISABLE_TELEMETRY"

#: the backend used when neither ``--backend`` nor ``AIPC_BACKEND`` says otherwise.
DEFAULT_BACKEND = "qnn"

#: (variable, option, description) for ``aipc --help``, in display order.
USER_VARIABLES: tuple[tuple[str, str, str], ...] = (
    (ENV_BACKEND, "--backend", f"backend name or alias (default: {DEFAULT_BACKEND})"),
    (ENV_TARGET, "--target", "device target passed as backend option 'target' (e.g. a SoC name)"),
    (ENV_PRECISION, "--precision", "backend option 'precision' (e.g. fp16, fp32)"),
    (ENV_STRICT, "--strict", "1/0: backend option 'strict' (any CPU-partitioned node is an error)"),
    (ENV_SHAPE_BUCKETS, "--shape-buckets", "1/0: backend option 'shape_buckets' (growing dims padded into a few "
                                           "compiled sizes, where certified exact)"),
    (ENV_CACHE_DIR, "--cache-dir", "backend option 'cache_dir' (compiled-artifact cache)"),
    (ENV_COMPILE_TIMEOUT, "--compile-timeout", "backend option 'compile_timeout' (seconds one compile may take)"),
    (ENV_COMPILE_MEMORY_MB, "--compile-memory-mb", "backend option 'compile_memory_mb' (MiB one compile may use)"),
    (ENV_COMPILE_BUDGET, "--compile-budget", "backend option 'compile_budget' (seconds all compiles of one model may "
                                             "take, recovery included)"),
    (ENV_VERBOSE, "-v", "0, 1, 2: verbosity of aipc's own stderr messages"),
    (ENV_REPORT_PARTITION, "--report-partition", "1/0: print each session's partition summary at exit"),
)

#: command-line/env settings that become backend options: attribute name -> backend option key.
OPTION_KEYS: Mapping[str, str] = {"target": "target", "precision": "precision", "strict": "strict",
                                  "shape_buckets": "shape_buckets",
                                  "cache_dir": "cache_dir", "compile_timeout": "compile_timeout",
                                  "compile_memory_mb": "compile_memory_mb", "compile_budget": "compile_budget"}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class EnvError(ValueError):
    """An environment variable has a value aipc cannot use; the message names variable and value."""


def parse_bool(name: str, value: str) -> bool:
    """Parse a boolean environment value (``1/true/yes/on`` or ``0/false/no/off``/empty, any case).

    Raises:
        EnvError: any other value.
    """
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise EnvError(f"{name}={value!r} is not a boolean; use 1 or 0.")


def parse_positive(name: str, value: str) -> float | int:
    """Parse a positive number (``"300"`` → 300, ``"2.5"`` → 2.5).

    Raises:
        EnvError: not a positive number.
    """
    try:
        number = float(value.strip())
    except ValueError:
        number = 0.0
    if not number > 0 or number != number or number == float("inf"):
        raise EnvError(f"{name}={value!r} is not a positive number.")
    return int(number) if number == int(number) else number


def parse_verbosity(name: str, value: str) -> int:
    """Parse a verbosity level: a non-negative integer, or a boolean word (true = 1).

    Raises:
        EnvError: anything else.
    """
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        return int(parse_bool(name, text))
    except EnvError:
        raise EnvError(f"{name}={value!r} is not a verbosity level; use 0, 1 or 2.") from None


@dataclass(frozen=True)
class ChildConfig:
    """What a child process needs to activate the patch exactly as its aipc parent did.

    Attributes:
        backend: canonical backend name (``"qnn"``, ``"cpu"``).
        backend_options: JSON-serialisable options as the user gave them (the child's sessions
            validate them again, as the parent's did).
        verbose: aipc verbosity (0 = quiet).
        report_partition: print partition summaries at the child's exit.
    """

    backend: str
    backend_options: Mapping[str, Any] = field(default_factory=dict)
    verbose: int = 0
    report_partition: bool = False


def encode_child_config(config: ChildConfig) -> str:
    """The value of :data:`ACTIVE_VARIABLE` for ``config`` (compact JSON, version 1).

    Raises:
        TypeError: a backend option value is not JSON-serialisable.
    """
    return json.dumps({"v": 1, "backend": config.backend, "backend_options": dict(config.backend_options),
                       "verbose": int(config.verbose), "report_partition": bool(config.report_partition)},
                      sort_keys=True, separators=(",", ":"))


def decode_child_config(text: str) -> ChildConfig:
    """Inverse of :func:`encode_child_config`.

    Raises:
        EnvError: the value is not a version-1 configuration written by aipc.
    """
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("v") != 1 or not isinstance(data.get("backend"), str):
            raise ValueError("not an aipc version-1 configuration")
        options = data.get("backend_options") or {}
        if not isinstance(options, dict):
            raise ValueError("backend_options is not an object")
        return ChildConfig(data["backend"], options, int(data.get("verbose", 0)),
                           bool(data.get("report_partition", False)))
    except (ValueError, TypeError) as exc:
        raise EnvError(f"{ACTIVE_VARIABLE} has a value aipc cannot read ({exc}); it is set by aipc "
                       f"for its child processes and should not be set by hand.") from exc


def keep_ort_telemetry_off(environ) -> bool:
    """Set onnxruntime's ``ORT_DISABLE_TELEMETRY=1`` in ``environ`` (``os.environ``: this process
    and every process it starts), unless the user set :data:`ENV_ORT_TELEMETRY` to 1 (true, yes,
    on) or set ``ORT_DISABLE_TELEMETRY`` themselves. onnxruntime reads it when it is imported, so
    the ``aipc`` command calls this before it imports onnxruntime (measured on onnxruntime 1.32.0:
    it is the one switch that stops the collector lookups; ``onnxruntime.disable_telemetry_events()``
    after the import does not — see :mod:`onnxwrapper.kernel.session._ort_telemetry`). Returns True
    when it set the variable."""
    if environ.get(ENV_ORT_TELEMETRY, "").strip().lower() in _TRUE or ORT_TELEMETRY_OFF in environ:
        return False
    environ[ORT_TELEMETRY_OFF] = "1"
    return True
