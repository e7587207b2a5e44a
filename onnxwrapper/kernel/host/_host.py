"""What this host offers to new processes: usable processors and available memory.

Used to size pools of worker processes (``aipc diff --jobs``, ``aipc compile --from-capture
--jobs``). Both are read from the OS when asked (nothing is cached): the CPU affinity of this
process where the OS reports one (Linux ``sched_getaffinity``, Python 3.13's
``os.process_cpu_count``), and Linux's ``MemAvailable`` (``/proc/meminfo``), Windows'
``GlobalMemoryStatusEx`` or the free physical pages elsewhere.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["available_memory", "cpu_count"]


def cpu_count() -> int:
    """Processors this process may run on (its CPU affinity where the OS reports one), at least 1."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13
    if counter is not None:
        return max(1, counter() or 1)
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes of memory available to new processes now (Linux ``MemAvailable``, Windows
    ``GlobalMemoryStatusEx``, else free physical pages), or ``None`` when the OS does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if sys.platform == "win32":
        return _windows_available_memory()
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _windows_available_memory() -> int | None:
    class MemoryStatus(ctypes.Structure):
        _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                    ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                    ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                    ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                    ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]

    status = MemoryStatus()
    status.dwLength = ctypes.sizeof(MemoryStatus)
    if not ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
        return None
    return int(status.ullAvailPhys)
