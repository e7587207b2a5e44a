"""Sessions whose native state cannot cross ``fork()``: a forked child that runs one fails fast.

QNN keeps process-wide native state (the HTP backend, its threads and locks). A ``fork()``ed child
inherits a copy of the parent's memory but none of its threads, so a QNN session used there waits
forever on a lock no thread will release — measured with onnxruntime + the QNN EP directly as with
onnxwrapper's ``qnn`` backend; the parent's ``waitpid`` then waits forever too. Python ≤ 3.13's
default ``multiprocessing`` start method on Linux is ``fork``, so a worker pool created after a
session is enough.

A backend session whose state is bound to its process says so (``BackendSession.process_bound``:
``qnn``, ``qai``). The façade registers every such session here (:func:`bind`); an
``os.register_at_fork(after_in_child=…)`` hook — registered once, on the first such session, never
at import — marks them in the child and unbinds their direct ``run`` (ORT's run, or the run plans'
dispatcher), so every run method
goes through :func:`check_open` and raises :class:`~onnxwrapper.errors.ForkedSessionError` at once
(metadata getters keep working), and a new session of the same backend in that child raises too
(:func:`check_new`: a second QNN context there hangs as well). The parent's sessions are untouched;
a child forked while no such session was open works normally. Such a child also ends through
``os._exit`` with its exit status (releasing the inherited state at exit hangs, even with plain
onnxruntime + QNN EP). The hook takes no lock (another thread of the parent may have held one at
the fork).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import weakref

from onnxwrapper.errors import ForkedSessionError, SessionClosedError

__all__ = ["bind", "check_open", "check_new"]

_BOUND: "weakref.WeakSet" = weakref.WeakSet()
#: in a forked child: the backends whose sessions were open in the parent at the fork
_INHERITED: set = set()
#: in a forked child: the inherited sessions (and their unbound run attributes), never released
_KEPT: list = []
_registered = False
_register_lock = threading.Lock()


def _after_fork_in_child() -> None:
    for session in list(_BOUND):
        _INHERITED.add(session.backend_name)
        session._ow_forked = True
        # kept alive for good: freeing inherited native state in the child hangs in its destructor
        # (measured: pthread_cond_destroy inside onnxruntime), and unbinding run may break the
        # reference cycle that kept a session no one uses any more
        _KEPT.append((session, session.__dict__.pop("run", None), session._ow_direct,
                      getattr(session, "_ow_dispatcher", None)))
        session._ow_direct = session._ow_dispatcher = session._ow_dispatch = None  # the full path: check_open
    _BOUND.clear()
    if _INHERITED:
        _exit_status.watch()


class _ExitStatus:
    """The exit status of a forked child holding inherited QNN state, which must end with
    ``os._exit``: releasing that state at interpreter exit hangs (measured: onnxruntime + the QNN EP
    alone, a child that never ran anything). ``sys.exit(n)`` and an uncaught exception (1) are
    recorded; at exit the standard streams are flushed and the process ends with that status
    (``atexit`` handlers registered before the fork do not run then; ``raise SystemExit(n)``
    written out, without ``sys.exit``, ends with 0)."""

    def __init__(self) -> None:
        self.code = 0

    def watch(self) -> None:
        real_exit, real_hook = sys.exit, sys.excepthook

        def exit_(status=None):
            self.code = status if isinstance(status, int) else (0 if status is None else 1)
            real_exit(status)

        def hook(kind, value, tb):
            self.code = 1
            real_hook(kind, value, tb)

        sys.exit, sys.excepthook = exit_, hook
        atexit.register(self.end)

    def end(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream: nothing to flush
                pass
        os._exit(self.code & 0xFF if self.code >= 0 else 1)


_exit_status = _ExitStatus()


def bind(session, backend_session) -> None:
    """Register ``session`` (an ``InferenceSession``) when its ``backend_session`` is process-bound."""
    global _registered
    session._ow_forked = False
    if not getattr(backend_session, "process_bound", False):
        return
    if not _registered and hasattr(os, "register_at_fork"):
        with _register_lock:
            if not _registered:
                os.register_at_fork(after_in_child=_after_fork_in_child)
                _registered = True
    _BOUND.add(session)


def check_new(backend_name: str) -> None:
    """Raise before a session of ``backend_name`` is opened in a forked child whose parent had one
    open at the fork: a second QNN context there hangs too (measured: the ``qnn`` backend; with the
    parent's sessions closed before the fork, a new one in the child works).

    Raises:
        ForkedSessionError: naming the backend and what to do.
    """
    if backend_name in _INHERITED:
        raise ForkedSessionError(
            f"InferenceSession(backend='{backend_name}') in a process forked while its parent had a '{backend_name}' "
            f"session open: the backend's native state cannot start again here (it would hang). Create sessions after "
            f"starting worker processes, close them before fork(), or use multiprocessing's 'spawn' or 'forkserver' "
            f"start method.", backend=backend_name)


def check_open(session, method: str) -> None:
    """Raise when ``session`` may not run: closed, or inherited through ``fork()``.

    Raises:
        SessionClosedError: after ``close()``.
        ForkedSessionError: the session was created in the parent of this forked process.
    """
    if session._ow_closed:
        raise SessionClosedError(
            f"InferenceSession.{method}() on backend '{session.backend_name}': the session was closed with close(); "
            f"create a new InferenceSession.", backend=session.backend_name)
    if getattr(session, "_ow_forked", False):
        raise ForkedSessionError(
            f"InferenceSession.{method}() on backend '{session.backend_name}': this session was created in another "
            f"process, before fork(); the backend's native state cannot be used after fork (it would hang). Create the "
            f"InferenceSession in this process, or start workers with multiprocessing's 'spawn' or 'forkserver' "
            f"method.", backend=session.backend_name)
