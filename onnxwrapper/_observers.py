"""Run observers: callables told about every run-method call of every ``InferenceSession``.

While no observer is registered, sessions bind ``run`` straight to ORT's run (no wrapper, zero
added cost per call) or to their plan dispatcher (:class:`onnxwrapper.kernel.RunPlans`, a dict
lookup per call); registering the first observer switches every live session to the observed
path, removing the last one switches them back.
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable

__all__ = ["FAST_PATH_SESSIONS", "RUN_OBSERVERS", "add_run_observer", "notify", "observers_lock"]

#: observers called after every run-method call of every session (see add_run_observer)
RUN_OBSERVERS: list[Callable] = []
observers_lock = threading.Lock()
#: live sessions whose ``run`` is an instance attribute (ORT's run or a plan dispatcher) without observers
FAST_PATH_SESSIONS: "weakref.WeakSet" = weakref.WeakSet()


def _set_fast_paths(enabled: bool) -> None:
    for session in list(FAST_PATH_SESSIONS):
        session._ow_set_fast_path(enabled)


def add_run_observer(observer: Callable) -> Callable[[], None]:
    """Call ``observer`` after every ``run``/``run_with_ort_values``/``run_with_iobinding``.

    The observer receives one keyword-only record: ``observer(session=…, method=…,
    output_names=…, input_feed=…, run_options=…, outputs=…, seconds=…)`` where ``seconds`` is
    the wall time of the call (float, s) and ``outputs`` what the call returned. It runs in the
    calling thread after the call; an exception it raises propagates to the caller. Used by
    ``aipc diff`` and ``aipc capture`` to record calls.

    Returns:
        A function that removes the observer again (idempotent).
    """
    with observers_lock:
        RUN_OBSERVERS.append(observer)
        _set_fast_paths(False)

    def undo() -> None:
        with observers_lock:
            if observer in RUN_OBSERVERS:
                RUN_OBSERVERS.remove(observer)
                if not RUN_OBSERVERS:
                    _set_fast_paths(True)

    return undo


def notify(session, method, output_names, input_feed, run_options, outputs, seconds) -> None:
    """Call every registered observer with one run record (see :func:`add_run_observer`)."""
    for observer in list(RUN_OBSERVERS):
        observer(session=session, method=method, output_names=output_names, input_feed=input_feed,
                 run_options=run_options, outputs=outputs, seconds=seconds)
