"""Stopping a child process with everything it started, and naming how a process died, on POSIX and Windows.

* **Process trees.** A child started with ``start_new_session=True`` (POSIX) leads its own process
  group, so ``os.killpg`` stops it and every process it started. Windows has no process groups to
  kill: ``Popen.kill`` (``TerminateProcess``) ends the child only and its children keep running.
  There ``taskkill /PID <pid> /T /F`` is used ("/T: ends the specified process and any child
  processes started by it", "/F: forcefully"; Microsoft's ``taskkill`` reference), then
  ``Popen.kill`` in case ``taskkill`` is unavailable.
* **Crash names.** A process killed by a signal has a negative return code on POSIX; on Windows a
  crashed process exits with an NTSTATUS code (``ntstatus.h``), which Python reports as a large
  positive number (``3221225477`` for ``0xC0000005``). :func:`crash_name` turns both into a name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

__all__ = ["NTSTATUS_NAMES", "crash_name", "kill_process_tree", "new_session_kwargs"]

#: NTSTATUS codes (``ntstatus.h``) a crashed Windows process exits with, by name
NTSTATUS_NAMES = {
    0xC0000005: "ACCESS_VIOLATION", 0xC0000006: "IN_PAGE_ERROR", 0xC000001D: "ILLEGAL_INSTRUCTION",
    0xC0000025: "NONCONTINUABLE_EXCEPTION", 0xC000008C: "ARRAY_BOUNDS_EXCEEDED", 0xC000008E: "FLOAT_DIVIDE_BY_ZERO",
    0xC0000094: "INTEGER_DIVIDE_BY_ZERO", 0xC0000095: "INTEGER_OVERFLOW", 0xC0000096: "PRIVILEGED_INSTRUCTION",
    0xC00000FD: "STACK_OVERFLOW", 0xC0000135: "DLL_NOT_FOUND", 0xC0000139: "ENTRYPOINT_NOT_FOUND",
    0xC000013A: "CONTROL_C_EXIT", 0xC0000142: "DLL_INIT_FAILED", 0xC0000374: "HEAP_CORRUPTION",
    0xC0000409: "STACK_BUFFER_OVERRUN", 0xC0000417: "INVALID_CRUNTIME_PARAMETER",
    0xC000041D: "FATAL_USER_CALLBACK_EXCEPTION", 0xC0000420: "ASSERTION_FAILURE", 0x80000003: "BREAKPOINT",
    0xE06D7363: "CPP_EXCEPTION",
}


def new_session_kwargs() -> dict:
    """``subprocess.Popen`` keyword arguments that make a child killable with everything it starts:
    its own session on POSIX, its own process group on Windows (so a console Ctrl+C reaches it
    only through its parent)."""
    if sys.platform == "win32":
        return {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200)}
    return {"start_new_session": True}


def kill_process_tree(proc: subprocess.Popen) -> None:
    """Stop ``proc`` and every process it started (module docstring); harmless when it has ended."""
    if sys.platform == "win32":
        try:
            subprocess.run(["taskkill", "/PID", str(proc.pid), "/T", "/F"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False, timeout=30)
        except (OSError, subprocess.SubprocessError):
            pass
        try:
            proc.kill()
        except OSError:
            pass
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except OSError:
            pass


def crash_name(returncode: int | None) -> str | None:
    """The signal (POSIX: negative return code) or NTSTATUS crash (Windows) a return code means:
    ``"SIGSEGV"``, ``"ACCESS_VIOLATION (0xC0000005)"``, ``"NTSTATUS 0xC0001234"``; ``None`` for a
    normal exit."""
    if returncode is None:
        return None
    if returncode < 0 and sys.platform != "win32":
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    code = returncode & 0xFFFFFFFF
    if sys.platform == "win32" and (code >= 0xC0000000 or code in NTSTATUS_NAMES):
        name = NTSTATUS_NAMES.get(code)
        return f"{name} (0x{code:08X})" if name else f"NTSTATUS 0x{code:08X}"
    return None
