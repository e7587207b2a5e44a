"""The client side of the compile server (:mod:`onnxwrapper.backends.qnn.workers._server`).

:class:`SharedWorker` has a private worker's :meth:`run`: it connects to the server of this
process's identity — starting it, detached, when none answers — sends the request and waits for the
reply while the request's budget is watched (:func:`~onnxwrapper.backends.qnn.compile.await_reply`).
It raises :class:`ServerBusy` when the server is compiling for another process and
:class:`ServerUnavailable` when no server can be reached or started; the pool then compiles on a
worker of its own (:class:`~onnxwrapper.backends.qnn.workers._workers.WorkerPool`).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from onnxwrapper.backends.qnn.compile import UNWRITABLE_MARKERS, await_reply
from onnxwrapper.backends.qnn.workers._server import address_for, identity, state_dir, write_private
from onnxwrapper.backends.qnn.workers._worker_main import decode_error
from onnxwrapper.errors import BackendCompileError
from onnxwrapper.kernel import shapes_note

__all__ = ["ServerBusy", "ServerUnavailable", "SharedWorker"]

_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
         "from onnxwrapper.backends.qnn.workers._server import serve; "
         "serve(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))")
_START_WAIT_S = 20.0
_QUIET = ("# LIBNATIVE:",) + tuple(UNWRITABLE_MARKERS)


class ServerUnavailable(Exception):
    """No compile server can be reached or started for this process."""


class ServerBusy(Exception):
    """The compile server is compiling for another process."""


class SharedWorker:
    """A process's handle on its compile server (see the module docstring). Thread-safe; one
    request at a time per handle (the pool gives it to one thread at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ident: str | None = None
        self._folder: str | None = None
        self.busy = False
        self.pid: int | None = None

    def _paths(self) -> tuple[str, str]:
        if self._ident is None:
            folder = state_dir()
            if folder is None:
                raise ServerUnavailable("no private folder for compile servers")
            self._folder, self._ident = folder, identity()
        return self._folder, self._ident

    def _read_state(self) -> dict | None:
        folder, ident = self._paths()
        try:
            with open(os.path.join(folder, f"{ident}.json"), encoding="utf-8") as f:
                state = json.load(f)
            with open(os.path.join(folder, f"{ident}.key"), "rb") as f:
                state["key"] = f.read()
            return state if isinstance(state.get("pid"), int) else None
        except (OSError, ValueError):
            return None

    def _connect(self, state: dict):
        from multiprocessing.connection import Client

        return Client(state["address"], family=state["family"], authkey=state["key"])

    def _start(self, warm_options) -> dict:
        """Start this identity's server (under a file lock, so concurrent processes start one) and
        return its state once it listens."""
        import filelock

        folder, ident = self._paths()
        with filelock.FileLock(os.path.join(folder, f"{ident}.lock"), timeout=_START_WAIT_S):
            state = self._read_state()
            if state is not None and _alive(state["pid"]):
                try:
                    self._connect(state).close()
                    return state
                except (OSError, EOFError, ValueError):
                    pass
            for suffix in (".json",):
                try:
                    os.unlink(os.path.join(folder, ident + suffix))
                except OSError:
                    pass
            write_private(os.path.join(folder, f"{ident}.key"), secrets.token_bytes(32))
            env = {k: v for k, v in os.environ.items() if k != "AIPC_ACTIVE"}  # the server runs unpatched
            args = [sys.executable, "-E", "-P", "-c", _BOOT, json.dumps([str(p) for p in sys.path]), folder, ident,
                    json.dumps(dict(warm_options) if warm_options else None)]
            with open(os.path.join(folder, f"{ident}.log"), "ab") as log:
                if sys.platform == "win32":
                    flags = (subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP
                             | subprocess.CREATE_NO_WINDOW)
                    subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
                                     cwd=folder, close_fds=True, creationflags=flags)
                else:
                    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                            env=env, cwd=folder, close_fds=True, start_new_session=True)
                    # reaped when it exits while this process still runs (else the init process reaps it)
                    threading.Thread(target=proc.wait, daemon=True, name="onnxwrapper-compile-server-reaper").start()
            deadline = time.monotonic() + _START_WAIT_S
            while time.monotonic() < deadline:
                state = self._read_state()
                if state is not None:
                    return state
                time.sleep(0.01)
        raise ServerUnavailable(f"the compile server did not start within {_START_WAIT_S:g} s (its log: "
                                f"{os.path.join(folder, ident + '.log')})")

    def prestart(self, warm_options=None) -> None:
        """Make sure this identity's server runs (started now when none answers); never raises."""
        try:
            with self._lock:
                state = self._read_state()
                if state is None or not _alive(state["pid"]):
                    self._start(warm_options)
        except Exception:  # noqa: BLE001 - a speed-up only: run() reports or falls back
            return

    def run(self, request) -> Any:
        """Serve ``request`` on the compile server (module docstring).

        Raises:
            ServerUnavailable / ServerBusy: compile elsewhere. BackendCompileError: the server died
            during the request. CompileBudgetError: the budget was exceeded (the server was ended).
            The request's own error (ORT's class and message, or an onnxwrapper error).
        """
        with self._lock:
            try:
                state = self._read_state()
                try:
                    if state is None or not _alive(state["pid"]):
                        raise ConnectionError("no server")
                    conn = self._connect(state)
                except (OSError, EOFError, ValueError):  # none, or a dead one: start it
                    state = self._start(None)
                    conn = self._connect(state)
            except ServerUnavailable:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure to reach it: compile elsewhere
                raise ServerUnavailable(f"{type(exc).__name__}: {exc}") from exc
            self.busy, self.pid = True, state["pid"]
            try:
                return self._exchange(conn, request, state["pid"])
            finally:
                self.busy = False
                conn.close()

    def _exchange(self, conn, request, pid: int) -> Any:
        try:
            conn.send(("run", _absolute(request), os.getcwd()))
            first = conn.recv()
        except (EOFError, OSError, ValueError) as exc:
            raise ServerUnavailable(f"{type(exc).__name__}: {exc}") from exc
        if first[0] == "busy":
            raise ServerBusy()
        stderr: list[str] = []
        try:
            reply = await_reply(None, request, lambda: _kill(pid), lambda: "\n".join(stderr), reader=conn.recv,
                                pid=pid)
        except (EOFError, OSError) as exc:
            raise _died(request, pid) from exc
        status, payload, text = reply
        _forward(text)
        if status == "ok":
            return payload
        raise decode_error(payload)


def _absolute(request):
    """``request`` with its file paths absolute (the server runs in another working directory first)."""
    from dataclasses import replace

    model = os.path.abspath(request.model) if isinstance(request.model, str) else request.model
    external = os.path.abspath(request.external_data_dir) if request.external_data_dir else request.external_data_dir
    return replace(request, model=model, out_dir=os.path.abspath(request.out_dir), external_data_dir=external)


def _alive(pid: int) -> bool:
    if sys.platform == "win32":
        return True  # the connection attempt tells
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL if hasattr(signal, "SIGKILL") else signal.SIGTERM)
    except OSError:
        pass


def _forward(text: str) -> None:
    """Write the compile's stderr lines to ours (minus the simulator's ``# LIBNATIVE:`` line)."""
    lines = [line for line in text.splitlines(keepends=True)
             if not any(mark in line for mark in _QUIET) and line.strip() != "\x1b[m"]
    if lines:
        try:
            os.write(2, "".join(lines).encode(errors="replace"))
        except OSError:
            pass


def _died(request, pid: int) -> BackendCompileError:
    shapes = dict(request.shapes) if request.shapes else None
    where = f"{request.label}" + (f" [{shapes_note(shapes)}]" if shapes else "")
    return BackendCompileError(
        f"Compiling {where} for the QNN HTP ended the compile server (process {pid}) before it answered. Your "
        f"process is unaffected and nothing was cached. The input may be too large for the HTP, or the QNN compiler "
        f"cannot handle this graph: try smaller input shapes, another precision/target, or backend='cpu'.",
        backend="qnn", model=request.label, shapes=shapes, signal=None, exit_code=None, stderr="")
