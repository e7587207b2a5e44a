"""FAKE for tests: control and call records of the fake ``qai_appbuilder`` package.

Tests read :data:`calls` (``(function, {argument: value})`` in call order) to assert *how* the
backend drove the library (keyword ``Config``, data types, perf profile once per session, no
per-run profile, graph index), read :data:`logs` (``(level, text)``: what the native layer's
``QNN_WARN``/``QNN_ERROR`` would print, e.g. a getter called after a failed load) and use
:func:`fail_next_inference` to make the "native" layer return ``[]`` like a failed QNN execution.
"""

from __future__ import annotations

calls: list[tuple[str, dict]] = []
logs: list[tuple[str, str]] = []
_fail_next = [0]


def record(function: str, **arguments) -> None:
    """Append one call record."""
    calls.append((function, arguments))


def log(level: str, text: str) -> None:
    """Append one native log line (``level`` ``"WARN"`` or ``"ERROR"``), as the real library logs it."""
    logs.append((level, text))


def logged(fragment: str) -> list[tuple[str, str]]:
    """The log lines containing ``fragment``."""
    return [entry for entry in logs if fragment in entry[1]]


def named(function: str) -> list[dict]:
    """The argument dicts of every recorded call of ``function``."""
    return [args for name, args in calls if name == function]


def fail_next_inference(count: int = 1) -> None:
    """Make the next ``count`` native inferences fail (return ``[]``)."""
    _fail_next[0] = count


def take_failure() -> bool:
    """Consume one injected failure; True if this inference must fail."""
    if _fail_next[0] > 0:
        _fail_next[0] -= 1
        return True
    return False


def reset() -> None:
    """Forget records, injected failures, configuration and every loaded model."""
    from . import appbuilder, qnncontext

    calls.clear()
    logs.clear()
    _fail_next[0] = 0
    appbuilder.reset()
    qnncontext.reset()
