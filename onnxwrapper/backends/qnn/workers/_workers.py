"""Compile worker processes: QNN compiles run outside the user's process.

Why (measured on onnxruntime-qnn 2.7.0, x86-64 simulator): the QNN HTP compiler can abort the
process (``std::bad_alloc`` on a huge shape after ~46 s), ORT's graph optimizer can crash on
control-flow models (SIGSEGV), and the simulator's ``soc_model`` is process-global. A worker
process turns each of these into a typed error, and its QNN configuration is exactly the one a
request asks for; the user's process only *loads* compiled EPContext models, whose numerics are
fixed at compile time (measured: a ctx compiled FP16 loads FP16 and an fp32 one fp32 in any process).

* :class:`~onnxwrapper.backends.qnn.workers._request.CompileRequest` — one compile (or DLC dump, or job), as plain data.
* :class:`CompileWorker` — one persistent worker process (started on its first request; a request
  over a pipe costs nothing measurable, the start ≈ 0.2–0.3 s once), serving one request at a time.
* :class:`WorkerPool` — up to ``size`` workers; :meth:`WorkerPool.run` blocks for a free one, so N
  threads compile in parallel on an N-worker pool. :func:`default_pool` is the process's pool
  (size 1 unless resized), used by every session; :func:`compile_many` compiles a list of requests
  on ``jobs`` workers at once (results in request order; failures returned, not raised).

A request may carry a budget (``budget_seconds``, ``budget_mb``; see
:mod:`onnxwrapper.backends.qnn.compile._budget`): while it runs, the pool watches the worker's wall time and
resident memory and logs progress past a few seconds; past the budget the worker is killed and the
request raises :class:`~onnxwrapper.errors.CompileBudgetError` (the next request starts a new worker).

A worker that dies during a request (signal or exit) becomes
:class:`~onnxwrapper.errors.BackendCompileError` naming the model, the shapes, the signal and the
worker's last stderr lines; the next request starts a new worker. ORT's own errors keep ORT's class
and message (re-created in this process). A worker that cannot start at all (e.g. an interpreter
that cannot import onnxwrapper) is reported once (WARNING, logger ``onnxwrapper.qnn``) and the
compile runs in this process instead. Workers exit when this process closes their stdin (at exit)
or dies. Worker stderr (ORT's log lines) is forwarded to this process's stderr, minus the
simulator's ``# LIBNATIVE:`` line and ORT's E-level line for an EPContext model it cannot write
(the backend then compiles just in time; the text is in the exception when it is re-raised).
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import json
import logging
import os
import pickle
import subprocess
import sys
import threading
from typing import Any, Mapping, Sequence

from onnxwrapper.backends.qnn.compile import UNWRITABLE_MARKERS, await_reply
from onnxwrapper.backends.qnn.workers._request import CompileRequest
from onnxwrapper.backends.qnn.workers._server import server_enabled
from onnxwrapper.backends.qnn.workers._shared import ServerBusy, ServerUnavailable, SharedWorker
from onnxwrapper.backends.qnn.workers._worker_main import decode_error, execute
from onnxwrapper.errors import BackendCompileError
from onnxwrapper.kernel import crash_name, shapes_note

__all__ = ["CompileRequest", "CompileWorker", "WorkerPool", "default_pool", "compile_many"]

_log = logging.getLogger("onnxwrapper.qnn")
_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
         "from onnxwrapper.backends.qnn.workers._worker_main import serve; serve(json.loads(sys.argv[2]))")
_TAIL_LINES = 40
_LIBNATIVE_MARK = b"# LIBNATIVE:"
_QUIET = (_LIBNATIVE_MARK,) + tuple(m.encode() for m in UNWRITABLE_MARKERS)
_COLOR_RESET = b"\x1b[m"
#: a worker in a process group of its own: a terminal's Ctrl-C reaches this process only, which
#: kills its busy workers (no second traceback from a worker), while an idle one ends on stdin EOF
_OWN_GROUP: dict = ({"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if sys.platform == "win32"
                    else {"start_new_session": True})


class _WorkerStartError(Exception):
    """The worker process could not start (it never said ready)."""


class CompileWorker:
    """One persistent compile worker process, started on the first :meth:`run`.

    Attributes:
        pid: the worker's process id, or ``None`` while none runs.
        busy: True while a request is being served.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._drain: threading.Thread | None = None
        self._tail: collections.deque = collections.deque(maxlen=_TAIL_LINES)
        self._lock = threading.Lock()
        self.busy = False

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _start(self, warm_options: Mapping[str, str] | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k != "AIPC_ACTIVE"}  # the worker runs unpatched
        self._tail.clear()
        try:
            proc = subprocess.Popen([sys.executable, "-E", "-P", "-c", _BOOT, json.dumps([str(p) for p in sys.path]),
                                     json.dumps(dict(warm_options) if warm_options else None)],
                                    stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, close_fds=True,
                                    **_OWN_GROUP)
        except OSError as exc:
            raise _WorkerStartError(f"{type(exc).__name__}: {exc}") from exc
        self._drain = threading.Thread(target=self._forward, args=(proc.stderr,), daemon=True,
                                       name="onnxwrapper-qnn-worker-stderr")
        self._drain.start()
        try:
            hello = pickle.load(proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            proc.wait()
            self._drain.join(2)
            raise _WorkerStartError(f"exit {proc.returncode}: {self._tail_text()[-300:]}") from exc
        if not (isinstance(hello, tuple) and hello and hello[0] == "ready"):
            proc.kill()
            raise _WorkerStartError(f"unexpected greeting {hello!r}")
        self._proc = proc

    def prestart(self, warm_options: Mapping[str, str] | None = None) -> None:
        """Start the worker process now if none runs (its ≈ 0.4 s boot and, with ``warm_options``
        (QNN EP options), its warm-up — imports, EP registration, a tiny QNN session — then overlap
        the caller's work; a later :meth:`run` waits for it). A failure is left for :meth:`run` to report."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                try:
                    self._start(warm_options)
                except _WorkerStartError:
                    pass

    def _forward(self, stream) -> None:
        """Copy the worker's stderr to ours (minus ``# LIBNATIVE:``), keeping the last lines."""
        for line in iter(stream.readline, b""):
            if any(mark in line for mark in _QUIET) or line.strip() == _COLOR_RESET:
                continue
            self._tail.append(line.decode(errors="replace").rstrip())
            try:
                os.write(2, line)
            except OSError:
                pass

    def _tail_text(self) -> str:
        return "\n".join(line for line in self._tail if line.strip())

    def run(self, request: CompileRequest) -> Any:
        """Serve ``request`` in the worker (started if needed) and return its result.

        Raises:
            BackendCompileError: the worker died during the request. The request's own error
                (ORT's class and message, or an onnxwrapper error) when the compile failed.
            _WorkerStartError: no worker process could be started.
        """
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            proc = self._proc
            self.busy = True
            try:
                pickle.dump(("run", request), proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                proc.stdin.flush()
                status, payload = await_reply(proc, request, lambda: self.stop(kill=True), self._tail_text)
            except (EOFError, OSError, pickle.UnpicklingError, ValueError) as exc:
                raise self._died(request) from exc
            except BaseException:  # KeyboardInterrupt while waiting: the worker's state is unknown
                self.stop(kill=True)
                raise
            finally:
                self.busy = False
        if status == "ok":
            return payload
        raise decode_error(payload)

    def _died(self, request: CompileRequest) -> BackendCompileError:
        proc = self._proc
        self._proc = None
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if self._drain is not None:
            self._drain.join(5)
        name = crash_name(code)  # a POSIX signal, or a Windows NTSTATUS such as ACCESS_VIOLATION (0xC0000005)
        tail = self._tail_text()
        shapes = dict(request.shapes) if request.shapes else None
        where = f"{request.label}" + (f" [{shapes_note(shapes)}]" if shapes else "")
        how = name or f"exit status {code}"
        hint = " (out of memory: std::bad_alloc)" if "bad_alloc" in tail else ""
        last = f" Its last output: {tail.splitlines()[-1][:300]!r}." if tail else ""
        return BackendCompileError(
            f"Compiling {where} for the QNN HTP killed the compiler process ({how}{hint}).{last} Your process is "
            f"unaffected and nothing was cached. The input may be too large for the HTP, or the QNN compiler cannot "
            f"handle this graph: try smaller input shapes, another precision/target, or backend='cpu'.",
            backend="qnn", model=request.label, shapes=shapes, signal=name, exit_code=code, stderr=tail)

    def stop(self, *, kill: bool = False, timeout: float = 2.0) -> None:
        """End the worker: close its stdin (it exits when idle) or kill it; waits up to ``timeout`` s."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if kill:
                proc.kill()
            else:
                proc.stdin.close()
            proc.wait(timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass


class WorkerPool:
    """Up to ``size`` compile workers; :meth:`run` uses a free one (blocking while all are busy).

    Args:
        size: number of workers, ≥ 1. Workers start on demand and are reused.
        shared: send compiles to the user's compile server first
            (:mod:`onnxwrapper.backends.qnn.workers._server`), falling back to the pool's own workers
            when it is busy with another process or cannot be reached.
    """

    def __init__(self, size: int = 1, *, shared: bool = False) -> None:
        self._lock = threading.Condition()
        self._idle: list[CompileWorker] = []
        self._all: list[CompileWorker] = []
        self.size = max(1, int(size))
        self._in_process = False
        self._shared = SharedWorker() if shared else None
        self._closed = False  # after close(): requests fail at once (an interrupted command's queue drains)

    def start(self, warm_options: Mapping[str, str] | None = None) -> None:
        """Start every worker the pool may have, now, in background threads (they are otherwise
        started by the first requests): their boot overlaps what the caller does meanwhile.
        ``warm_options``: QNN EP options each worker warms up with (:meth:`CompileWorker.prestart`).
        A pool that shares the compile server starts (or finds) the server instead."""
        if self._shared is not None:
            threading.Thread(target=self._shared.prestart, args=(warm_options,), daemon=True,
                             name="onnxwrapper-qnn-server-start").start()
            return
        with self._lock:
            fresh = [CompileWorker() for _ in range(self.size - len(self._all))]
            self._all.extend(fresh)
            self._idle.extend(fresh)
            self._lock.notify_all()
        for worker in fresh:
            threading.Thread(target=worker.prestart, args=(warm_options,), daemon=True,
                             name="onnxwrapper-qnn-worker-start").start()

    def resize(self, size: int) -> None:
        """Allow ``size`` workers from now on (idle workers beyond it are stopped)."""
        with self._lock:
            self.size = max(1, int(size))
            while len(self._all) > self.size and self._idle:
                worker = self._idle.pop()
                self._all.remove(worker)
                worker.stop()
            self._lock.notify_all()

    @property
    def workers(self) -> list[CompileWorker]:
        """The workers made so far (running or not)."""
        with self._lock:
            return list(self._all)

    def _take(self) -> CompileWorker:
        with self._lock:
            while True:
                if self._closed:
                    raise BackendCompileError("The compile pool is closed (the command was interrupted or has "
                                              "ended): nothing more is compiled.", backend="qnn")
                if self._idle:
                    return self._idle.pop()
                if len(self._all) < self.size:
                    worker = CompileWorker()
                    self._all.append(worker)
                    return worker
                self._lock.wait()

    def _give(self, worker: CompileWorker) -> None:
        with self._lock:
            if len(self._all) > self.size:
                self._all.remove(worker)
                worker.stop()
            else:
                self._idle.append(worker)
            self._lock.notify()

    def run(self, request: CompileRequest) -> Any:
        """Serve ``request`` on a free worker (see :meth:`CompileWorker.run`); in this process when no
        worker can be started (one WARNING per pool)."""
        if self._shared is not None and not self._in_process:
            try:
                return self._shared.run(request)
            except (ServerBusy, ServerUnavailable) as exc:  # compile on a worker of this pool
                _log.debug("onnxwrapper qnn: compile server not used (%s: %s)", type(exc).__name__, exc)
        if not self._in_process:
            worker = self._take()
            try:
                return worker.run(request)
            except _WorkerStartError as exc:
                if not self._in_process:
                    _log.warning("onnxwrapper qnn: no compile worker process could be started (%s); compiling in "
                                 "this process instead (a compiler crash would then end it)", exc)
                self._in_process = True
            finally:
                self._give(worker)
        return execute(request)

    def close(self) -> None:
        """Stop every worker (idle ones exit at once; busy ones are killed); later requests fail at once."""
        with self._lock:
            workers, self._all, self._idle = list(self._all), [], []
            self._closed = True
            self._lock.notify_all()
        for worker in workers:
            worker.stop(kill=worker.busy)


_default: WorkerPool | None = None
_default_lock = threading.Lock()
_hooks_registered = False


def default_pool() -> WorkerPool:
    """The compile pool of this process (one worker unless resized; new after a ``fork``), sending
    compiles to the user's compile server first unless ``ONNXWRAPPER_COMPILE_SERVER=0``."""
    global _default, _hooks_registered
    with _default_lock:
        if _default is None:
            if not _hooks_registered:  # once per process, on first use: no side effect at import
                _hooks_registered = True
                if hasattr(os, "register_at_fork"):
                    os.register_at_fork(after_in_child=_forget_after_fork)
                atexit.register(_close_default)
            _default = WorkerPool(1, shared=server_enabled())
        return _default


def _forget_after_fork() -> None:
    global _default, _default_lock
    _default, _default_lock = None, threading.Lock()  # the child must not talk to the parent's workers


def _close_default() -> None:
    if _default is not None:
        _default.close()


def compile_many(requests: Sequence[CompileRequest], jobs: int = 1) -> list[Any]:
    """Serve ``requests`` on ``jobs`` workers at once (a pool of its own, stopped afterwards).

    Args:
        requests: the compiles, each with its own empty ``out_dir``.
        jobs: number of worker processes (≥ 1); each holds ORT + the QNN backend (≈ 180 MiB measured).

    Returns:
        One entry per request, in order: the result (``generate_epcontext``'s meta dict) or the
        exception the request raised (:class:`~onnxwrapper.errors.BackendCompileError` for a crash).
    """
    pool = WorkerPool(jobs)

    def one(request):
        try:
            return pool.run(request)
        except Exception as exc:  # noqa: BLE001 - returned to the caller, per request
            return exc

    executor = concurrent.futures.ThreadPoolExecutor(max_workers=pool.size, thread_name_prefix="onnxwrapper-qnn-compile")
    try:
        return list(executor.map(one, requests))
    finally:  # Ctrl-C: queued requests dropped, busy workers killed, nothing waited for
        executor.shutdown(wait=False, cancel_futures=True)
        pool.close()
