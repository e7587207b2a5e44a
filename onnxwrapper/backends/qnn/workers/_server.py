"""The compile server: one warm compile worker per user, interpreter and installation, shared by processes.

A process's first QNN compile used to pay for starting its compile worker — a new interpreter,
onnxruntime and onnxruntime-qnn imported, the plugin EP registered, the QNN backend initialised:
0.5–1.5 s before compiling (measured on the x86-64 host; raw ORT + QNN EP compiles light
squeezenet in-process in 0.3–0.8 s). The compile server is that worker kept alive between
processes: the first process that needs a compile starts it (detached, in its own session), later
processes — the next run of the script, ``aipc diff``'s children, a benchmark's fresh processes —
connect to it and send the compile. It exits after :data:`DEFAULT_IDLE_S` seconds without a request
(``ONNXWRAPPER_COMPILE_SERVER_IDLE``), and ``ONNXWRAPPER_COMPILE_SERVER=0`` turns it off (each
process then starts its own worker, as before).

What it shares and what it does not:

* **Identity**: a server serves only processes of the same user with the same interpreter, the same
  ``sys.path``, the same onnxwrapper installation (its files' sizes and times), the same onnxruntime
  and onnxruntime-qnn versions and the same environment variables that configure them (``ORT_*``,
  ``QNN*``, ``ADSP_*``, library paths): :func:`identity`. Anything else gets a server of its own.
* **Where**: a private folder (``platformdirs.user_runtime_dir("onnxwrapper")``, created ``0700``;
  one owned by another user or open to others is not used): per identity a 32-byte key file
  (``0600``), the server's address (a Unix socket there; a named pipe on Windows), its pid and log.
  Connections are ``multiprocessing.connection``'s, authenticated with the key (HMAC challenge):
  only a process that can read the user's key file can send a request.
* **One compile at a time**: a process that finds the server busy with another process's compile
  compiles on a worker of its own instead (it does not wait for someone else's compile).
* **A request runs as in a private worker**: in the requesting process's working directory, with the
  compile's stderr (ORT's log lines) sent back and written to the requester's stderr; its budget is
  watched by the requester, which ends the server when the budget is exceeded (the next request
  starts a new one); a server that dies mid-compile is a
  :class:`~onnxwrapper.errors.BackendCompileError` for the requester, as a worker crash is.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import sys
import tempfile
import threading
import time
from typing import Any

__all__ = ["DEFAULT_IDLE_S", "ENV_DISABLE", "ENV_IDLE", "identity", "serve", "server_enabled", "state_dir"]

#: seconds a server waits for a request before it exits
DEFAULT_IDLE_S = 600.0
ENV_DISABLE = "ONNXWRAPPER_COMPILE_SERVER"
ENV_IDLE = "ONNXWRAPPER_COMPILE_SERVER_IDLE"
ENV_DIR = "ONNXWRAPPER_COMPILE_SERVER_DIR"
_ENV_PREFIXES = ("ORT_", "ONNXRUNTIME", "QNN", "ADSP_", "LD_LIBRARY_PATH", "DYLD_", "ONNXWRAPPER_QNN")


def server_enabled() -> bool:
    """False when ``ONNXWRAPPER_COMPILE_SERVER`` is ``0``/``false``/``no``/``off``."""
    return os.environ.get(ENV_DISABLE, "1").strip().lower() not in ("0", "false", "no", "off")


def idle_seconds() -> float:
    """``ONNXWRAPPER_COMPILE_SERVER_IDLE`` (seconds > 0), else :data:`DEFAULT_IDLE_S`."""
    try:
        value = float(os.environ.get(ENV_IDLE, DEFAULT_IDLE_S))
    except ValueError:
        return DEFAULT_IDLE_S
    return value if value > 0 else DEFAULT_IDLE_S


def state_dir() -> str | None:
    """The user's private folder of compile servers (created ``0700``), or ``None`` when it cannot be
    made private (owned by someone else, open to others, not creatable): no server then."""
    folder = os.environ.get(ENV_DIR)
    if not folder:
        import warnings

        import platformdirs

        with warnings.catch_warnings():  # "XDG_RUNTIME_DIR is not set": platformdirs falls back, as wanted
            warnings.simplefilter("ignore")
            folder = platformdirs.user_runtime_dir("onnxwrapper", appauthor=False)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.stat(folder, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return None
    if hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & 0o077):
        return None
    return folder


def _installation() -> list:
    """Sizes and modification times of onnxwrapper's own files: a server runs the code it started with."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                info = os.stat(os.path.join(folder, name))
                found.append([os.path.relpath(os.path.join(folder, name), root), info.st_size, info.st_mtime_ns])
    return [root, found]


def identity() -> str:
    """The identity a server must have to serve this process (module docstring), 16 hex digits."""
    from onnxwrapper.backends.qnn.platform import qnn_versions

    parts = {"uid": os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", ""),
             "python": sys.executable, "path": [str(p) for p in sys.path], "installation": _installation(),
             "versions": qnn_versions(), "env": sorted((k, v) for k, v in os.environ.items()
                                                       if k.upper().startswith(_ENV_PREFIXES))}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def address_for(folder: str, ident: str) -> tuple[str, str]:
    """``(family, address)`` of the server ``ident``: a Unix socket in ``folder``, a named pipe on Windows."""
    if sys.platform == "win32":
        return "AF_PIPE", rf"\\.\pipe\onnxwrapper-compile-{ident}-{os.getpid()}-{time.monotonic_ns()}"
    return "AF_UNIX", os.path.join(folder, f"{ident}.sock")


def write_private(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode ``0600``) through a temporary file and one rename."""
    handle, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data)
        if hasattr(os, "fchmod"):
            os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def serve(folder: str, ident: str, warm_options: Any = None) -> None:
    """The server's main loop (runs in the server process; see the module docstring)."""
    from multiprocessing.connection import Listener

    from onnxwrapper.backends.qnn.workers._worker_main import encode_error, execute, warm_up

    if hasattr(signal, "SIGINT"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(os.path.join(folder, f"{ident}.key"), "rb") as f:
        key = f.read()
    family, address = address_for(folder, ident)
    if family == "AF_UNIX" and os.path.exists(address):
        os.unlink(address)  # a stale socket of a server that ended without cleaning up
    listener = Listener(address, family=family, authkey=key)
    state = os.path.join(folder, f"{ident}.json")
    write_private(state, json.dumps({"pid": os.getpid(), "family": family, "address": address}).encode())
    warm_up(warm_options)
    busy = threading.Lock()
    last = [time.monotonic()]

    def watchdog() -> None:
        idle = idle_seconds()
        while True:
            time.sleep(min(5.0, idle / 4))
            try:
                with open(state, encoding="utf-8") as f:
                    mine = json.load(f).get("pid") == os.getpid()
            except (OSError, ValueError):
                mine = False
            if not mine or (not busy.locked() and time.monotonic() - last[0] > idle):
                if mine:
                    for suffix in (".json", ".sock"):
                        try:
                            os.unlink(os.path.join(folder, ident + suffix))
                        except OSError:
                            pass
                os._exit(0)

    def handle(conn) -> None:
        try:
            kind, request, cwd = conn.recv()
            if kind != "run" or not busy.acquire(blocking=False):
                conn.send(("busy",))
                return
            try:
                last[0] = time.monotonic()
                conn.send(("started", os.getpid()))
                reply = _run_captured(execute, encode_error, request, cwd)
            finally:
                last[0] = time.monotonic()
                busy.release()
            conn.send(reply)
        except (EOFError, OSError, ValueError, TypeError):
            pass
        finally:
            conn.close()

    threading.Thread(target=watchdog, daemon=True, name="onnxwrapper-compile-server-idle").start()
    while True:
        try:
            conn = listener.accept()
        except Exception:  # noqa: BLE001 - a client that failed authentication, or went away
            continue
        threading.Thread(target=handle, args=(conn,), daemon=True, name="onnxwrapper-compile-server").start()


def _run_captured(execute, encode_error, request, cwd: str) -> tuple:
    """``execute(request)`` in ``cwd`` with file descriptor 2 captured: ``("ok", result, stderr)`` or
    ``("error", encoded exception, stderr)``."""
    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        try:
            try:
                os.chdir(cwd)
            except OSError:
                pass
            try:
                reply = ("ok", execute(request))
            except BaseException as exc:  # noqa: BLE001 - every failure goes back, typed
                reply = ("error", encode_error(exc))
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read()[-65536:].decode(errors="replace")
    return reply + (text,)
