"""The host: usable processors and available memory, the architecture of the process and of its
operating system, and child process trees (stopped whole; how a process died, by name).
"""

from __future__ import annotations

from onnxwrapper.kernel.host._host import available_memory, cpu_count
from onnxwrapper.kernel.host._host_arch import HostArchitecture, host_architecture, normalize_arch
from onnxwrapper.kernel.host._process_tree import crash_name, kill_process_tree, new_session_kwargs

__all__ = [
    "HostArchitecture",
    "available_memory",
    "cpu_count",
    "crash_name",
    "host_architecture",
    "kill_process_tree",
    "new_session_kwargs",
    "normalize_arch",
]
