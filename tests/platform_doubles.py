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
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    monkeypatch.setattr(platform, "machine", lambda: machine)


def qnn_lists(monkeypatch, discovered, windows_soc_id: int = 0) -> list:
    """Make ``onnxruntime.get_ep_devices()`` return what the QNN EP lists for ``discovered`` hardware
    (already registered) and ``onnxruntime_qnn.get_library_path()`` the installed EP library (it names
    the file by ``sys.platform``), and reset the QNN backend's process state; returns the QNN EP's devices."""
    import onnxruntime_qnn

    from onnxwrapper.backends.qnn.platform import _runtime

    folder = os.path.dirname(os.path.abspath(onnxruntime_qnn.__file__))
    library = next(os.path.join(folder, n) for n in sorted(os.listdir(folder))  # the installed wheel's EP library
                   if "onnxruntime_providers_qnn" in n)
    monkeypatch.setattr(onnxruntime_qnn, "get_library_path", lambda: library)
    listed = ep_devices.qnn_factory(discovered, windows_soc_id)
    monkeypatch.setattr(onnxruntime, "get_ep_devices", lambda: ep_devices.all_ep_devices(listed))
    monkeypatch.setattr(_runtime, "_registered", False)
    monkeypatch.delenv("ADSP_LIBRARY_PATH", raising=False)
    return listed
