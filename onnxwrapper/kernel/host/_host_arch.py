"""Which architecture this Python process runs as, and which one its operating system runs on.

They differ under emulation, and a native SDK follows the *process*: an x64 Python on a Windows
ARM64 laptop installs onnxruntime-qnn's ``win_amd64`` wheel, whose HTP backend is the x86-64
simulator, so such a process never reaches the NPU even though the machine has one. The same holds
for x86-64 Python under Rosetta 2 on an Apple-silicon Mac.

Sources of each fact (read when asked, never cached, nothing done at import):

* **Process architecture.** On Windows, the interpreter's own build platform
  (``sysconfig.get_platform()``: ``win-amd64``, ``win-arm64``, ``win32``). ``platform.machine()``
  is no answer there: Python ≥ 3.12 reads it from WMI's ``Win32_Processor.Architecture`` (the
  CPU), so an x64 Python on an ARM64 CPU reports ``ARM64`` (CPython ``Lib/platform.py``,
  ``_get_machine_win32``). Elsewhere ``os.uname().machine`` as seen by the process (Rosetta 2
  reports ``x86_64`` to a translated process), narrowed to 32 bits for a 32-bit interpreter.
* **OS architecture.** Windows: ``IsWow64Process2``'s *native machine* (kernel32, Windows 10
  1709+: "the native architecture of the host system"), an ``IMAGE_FILE_MACHINE_*`` value;
  macOS: ``sysctl.proc_translated`` (1 under Rosetta 2, so the OS is arm64); Linux: the kernel's
  ``uname`` machine.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys
import sysconfig
from typing import NamedTuple

__all__ = ["HostArchitecture", "host_architecture", "normalize_arch"]

#: IMAGE_FILE_MACHINE_* (winnt.h) → normalized architecture
_IMAGE_FILE_MACHINE = {0x8664: "x86_64", 0xAA64: "arm64", 0x014C: "x86", 0x01C4: "arm"}
_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "x64": "x86_64", "em64t": "x86_64",
            "i386": "x86", "i486": "x86", "i586": "x86", "i686": "x86", "x86": "x86", "win32": "x86",
            "aarch64": "arm64", "arm64": "arm64", "armv8": "arm64", "aarch64_be": "arm64",
            "armv7l": "arm", "armv7": "arm", "armv8l": "arm", "armv6l": "arm", "arm": "arm", "arm32": "arm"}
_NARROWER = {"x86_64": "x86", "arm64": "arm"}


def normalize_arch(name: str) -> str:
    """``"AMD64"``, ``"x86_64"`` → ``"x86_64"``; ``"aarch64"``, ``"ARM64"`` → ``"arm64"``; ``"i686"`` →
    ``"x86"``; ``"armv7l"`` → ``"arm"``; anything else lower-cased as given (``""`` stays ``""``)."""
    key = (name or "").strip().lower().replace("-", "_")
    return _ALIASES.get(key, key)


class HostArchitecture(NamedTuple):
    """Process vs operating-system architecture (see the module docstring for the sources).

    Attributes:
        system: ``platform.system()`` (``"Windows"``, ``"Linux"``, ``"Darwin"``).
        process_arch: the interpreter's architecture (``"x86_64"``, ``"arm64"``, ``"x86"``, ``"arm"``).
        os_arch: the operating system's native architecture (same names), ``process_arch`` when the
            OS does not say.
        python: ``sys.version`` of the interpreter (one line).
    """

    system: str
    process_arch: str
    os_arch: str
    python: str

    @property
    def emulated(self) -> bool:
        """True when the process runs under emulation or a narrower ABI than the OS (x64 on ARM64)."""
        return self.process_arch != self.os_arch

    def note(self) -> str:
        """What the mismatch means for Snapdragon NPUs and the fix ("" when the process is native)."""
        if not self.emulated:
            return ""
        if self.system == "Windows" and self.os_arch == "arm64":
            return (f"this is {self.process_arch} Python emulated on ARM64 Windows: onnxruntime-qnn's "
                    f"{'win_amd64' if self.process_arch == 'x86_64' else self.process_arch} wheel holds only the "
                    f"HTP simulator, so the NPU is unreachable from this process. Install ARM64 Python (python.org, "
                    f"'Windows installer (ARM64)'), create a new virtual environment with it and reinstall "
                    f"onnxwrapper[qnn]")
        return (f"this is {self.process_arch} Python on an {self.os_arch} {self.system}: native SDKs load for "
                f"{self.process_arch}; use an {self.os_arch} Python to reach the device's accelerators")


def _process_arch() -> str:
    if sys.platform == "win32":
        build = sysconfig.get_platform().lower()  # win-amd64 / win-arm64 / win32 / win-arm32
        arch = normalize_arch(build.split("-", 1)[1] if "-" in build else build)
    else:
        arch = normalize_arch(platform.machine())
    if struct.calcsize("P") == 4:
        arch = _NARROWER.get(arch, arch)
    return arch


def _windows_os_arch() -> str | None:
    try:
        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        process_machine, native_machine = ctypes.c_ushort(0), ctypes.c_ushort(0)
        if not kernel32.IsWow64Process2(kernel32.GetCurrentProcess(), ctypes.byref(process_machine),
                                        ctypes.byref(native_machine)):
            return None
    except (AttributeError, OSError):  # Windows before 10 1709: no IsWow64Process2
        return None
    return _IMAGE_FILE_MACHINE.get(int(native_machine.value))


def _macos_os_arch() -> str | None:
    try:
        libc = ctypes.CDLL(None)
        value, size = ctypes.c_int(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_int))
        if libc.sysctlbyname(b"sysctl.proc_translated", ctypes.byref(value), ctypes.byref(size), None, 0) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return "arm64" if value.value == 1 else None


def host_architecture() -> HostArchitecture:
    """The :class:`HostArchitecture` of this process, read now (module docstring: sources)."""
    process = _process_arch()
    if sys.platform == "win32":
        native = _windows_os_arch()
        if native is None:  # PROCESSOR_ARCHITEW6432 is set for WOW64 (32-bit on 64-bit) processes only
            native = normalize_arch(os.environ.get("PROCESSOR_ARCHITEW6432", "")) or None
    elif sys.platform == "darwin":
        native = _macos_os_arch()
    else:
        native = normalize_arch(platform.machine())  # the kernel's machine (a 32-bit Python sees it too)
    os_arch = native or process
    return HostArchitecture(platform.system(), process, os_arch, " ".join(sys.version.split()))
