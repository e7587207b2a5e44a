"""Emulating another host for the platform tests: the OS, the process's and the OS's architecture, and
the QNN EP's device list — through the public functions production code reads (``sys.platform``,
``platform.machine``/``system``, ``sysconfig.get_platform``, kernel32's ``IsWow64Process2`` via
``ctypes.windll``, ``onnxruntime.get_ep_devices``), never through a switch in production code.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import sysconfig

import onnxruntime

from tests.fakes import ep_devices

#: IMAGE_FILE_MACHINE_* (winnt.h)
ARM64, AMD64 = 0xAA64, 0x8664


class _Kernel32:
    """kernel32 with ``GetCurrentProcess`` and ``IsWow64Process2`` (documented contract: writes the
    process and native ``IMAGE_FILE_MACHINE_*`` through its pointer arguments, returns nonzero)."""

    def __init__(self, native: int) -> None:
        self.native = native

    def GetCurrentProcess(self) -> int:  # noqa: N802 - the Win32 name
        return -1

    def IsWow64Process2(self, handle, process_machine, native_machine) -> int:  # noqa: N802
        process_machine._obj.value = 0  # IMAGE_FILE_MACHINE_UNKNOWN: not a WOW64 process
        native_machine._obj.value = self.native
        return 1


def emulate_windows(monkeypatch, interpreter: str, native: int = ARM64) -> None:
    """Windows with a ``win-arm64`` or ``win-amd64`` interpreter on a ``native`` machine. As Python ≥ 3.12
    does on an ARM64 CPU, ``platform.machine()`` says ``ARM64`` whatever the interpreter (WMI)."""
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(sysconfig, "get_platform", lambda: interpreter)
    monkeypatch.setattr(platform, "system", lambda: "Windows")
    monkeypatch.setattr(platform, "machine", lambda: "ARM64" if native == ARM64 else "AMD64")
    monkeypatch.setattr(ctypes, "windll", type("WinDLL", (), {"kernel32": _Kernel32(native)})(), raising=False)


def emulate_linux(monkeypatch, machine: str) -> None:
    """Linux on ``machine`` (``aarch64``, ``x86_64``)."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    monkeypatch.setattr(platform, "machine", lambda: machine)


def dev_entries(monkeypatch, names) -> None:
    """``os.listdir("/dev")`` lists ``names`` (a board's device nodes); other folders are listed as they are."""
    real = os.listdir

    def listdir(path="."):
        return list(names) if os.fspath(path) == "/dev" else real(path)
    monkeypatch.setattr(os, "listdir", listdir)


def qnn_lists(monkeypatch, discovered, windows_soc_id: int = 0, *, dev=None, registered_before: bool = False) -> list:
    """Make ``onnxruntime.get_ep_devices()`` list what the QNN EP lists for ``discovered`` hardware, as
    onnxruntime-qnn 2.7.0 builds it when it is registered (``register_execution_provider_library``):
    its ARM64 builds (an ARM64 interpreter, as emulated) hide the CPU device unless
    ``ORT_QNN_ENABLE_CPU_BACKEND`` is set *then*, and its Linux aarch64 build adds an NPU for a
    ``/dev/fastrpc-cdsp*`` entry (``dev``: the names in ``/dev``, installed with :func:`dev_entries`).
    ``onnxruntime_qnn.get_library_path()`` names the installed EP library (by ``sys.platform``), and
    the QNN backend's process state is reset. ``registered_before``: the EP was registered before
    onnxwrapper saw it (with the environment of now); a second registration raises as ORT does.
    Returns the QNN EP's devices as listed now (empty until registered)."""
    import onnxruntime_qnn

    from onnxwrapper.backends.qnn.platform import _runtime

    folder = os.path.dirname(os.path.abspath(onnxruntime_qnn.__file__))
    library = next(os.path.join(folder, n) for n in sorted(os.listdir(folder))  # the installed wheel's EP library
                   if "onnxruntime_providers_qnn" in n)
    monkeypatch.setattr(onnxruntime_qnn, "get_library_path", lambda: library)
    if dev is not None:
        dev_entries(monkeypatch, dev)
    state: dict = {"listed": None}

    def factory() -> list:
        windows = sys.platform == "win32"
        arm64 = sysconfig.get_platform() == "win-arm64" if windows else platform.machine() in ("aarch64", "arm64")
        linux_dev = tuple(dev or ()) if platform.system() == "Linux" else ()
        return ep_devices.qnn_factory(discovered, windows_soc_id, arm64=arm64, linux_dev=linux_dev,
                                      environ=dict(os.environ))

    def register(name, path):
        if state["listed"] is not None:
            raise RuntimeError(f"Fail: EP library is already registered under {name}")
        state["listed"] = factory()

    if registered_before:
        state["listed"] = factory()
    monkeypatch.setattr(onnxruntime, "register_execution_provider_library", register)
    monkeypatch.setattr(onnxruntime, "get_ep_devices", lambda: ep_devices.all_ep_devices(state["listed"] or []))
    monkeypatch.setattr(_runtime, "_registered", False)
    unset(monkeypatch, "ADSP_LIBRARY_PATH")
    if "ORT_QNN_ENABLE_CPU_BACKEND" not in os.environ:  # a value the test set stays; one production sets is undone
        unset(monkeypatch, "ORT_QNN_ENABLE_CPU_BACKEND")
    return list(state["listed"] or [])


def unset(monkeypatch, name: str) -> None:
    """Unset the environment variable ``name`` for the test, and undo whatever production sets it to."""
    monkeypatch.setenv(name, "")
    monkeypatch.delenv(name)
