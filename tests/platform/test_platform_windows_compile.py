"""Compile workers on Windows (issue 34), through doubles of what Windows reports.

* A worker that dies of an access violation exits with the NTSTATUS code 0xC0000005: the error
  names it (``ACCESS_VIOLATION (0xC0000005)``), not ``exit status 3221225477``.
* The compile memory budget is enforced where there is no ``/proc`` (Windows) with psutil, a
  dependency there; the default budget is half the machine's memory from psutil (Windows has no
  ``os.sysconf``); without psutil a WARNING says once that the budget is not enforced.
"""

from __future__ import annotations

import builtins
import collections
import logging
import os
import sys
import types

import pytest

from onnxwrapper.backends.qnn.compile import _budget
from onnxwrapper.backends.qnn.workers._workers import CompileRequest, CompileWorker


class _DeadWorker:
    """A ``subprocess.Popen`` of a worker that has exited with ``code``."""

    def __init__(self, code: int) -> None:
        self.code, self.pid = code, 4242

    def wait(self, timeout=None) -> int:
        return self.code

    def poll(self) -> int:
        return self.code


def test_a_worker_killed_by_an_access_violation_is_named(monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    worker = CompileWorker()
    worker._proc = _DeadWorker(0xC0000005)  # what Windows gives the parent as the exit code
    worker._tail = collections.deque(["QnnHtp: fatal"], maxlen=5)
    error = worker._died(CompileRequest(b"", "out", {}, label="net.onnx", shapes={"x": (1, 3)}))
    assert "ACCESS_VIOLATION (0xC0000005)" in str(error) and "3221225477" not in str(error)
    assert error.exit_code == 0xC0000005


def _no_proc(monkeypatch) -> None:
    """No ``/proc`` (Windows, macOS): opening anything under it fails."""
    real_open = builtins.open

    def fake_open(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", fake_open)


def _psutil(rss_mb: float, total_mb: float) -> types.ModuleType:
    module = types.ModuleType("psutil")
    info = types.SimpleNamespace(rss=int(rss_mb * 1024 * 1024))
    module.Process = lambda pid: types.SimpleNamespace(memory_info=lambda: info)  # type: ignore[attr-defined]
    module.virtual_memory = lambda: types.SimpleNamespace(total=int(total_mb * 1024 * 1024))  # type: ignore[attr-defined]
    return module


def test_the_memory_budget_is_enforced_without_proc_through_psutil(monkeypatch):
    _no_proc(monkeypatch)
    monkeypatch.setitem(sys.modules, "psutil", _psutil(rss_mb=900, total_mb=32768))
    watch = _budget.CompileWatch(os.getpid(), "net.onnx", "", seconds=None, memory_mb=512)
    assert watch.check() == "memory" and watch.peak_mb == pytest.approx(900)
    monkeypatch.delattr(os, "sysconf", raising=False)  # Windows
    assert _budget.default_compile_memory_mb() == 16384


def test_without_proc_or_psutil_the_unenforced_budget_is_said_once(monkeypatch, caplog):
    _no_proc(monkeypatch)
    monkeypatch.setitem(sys.modules, "psutil", None)  # not installed
    monkeypatch.setattr(_budget, "_unenforced_said", False)
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.qnn"):
        for _ in range(3):
            assert _budget.CompileWatch(os.getpid(), "net.onnx", "", None, 512).check() is None
    said = [r.getMessage() for r in caplog.records if "not enforced" in r.getMessage()]
    assert len(said) == 1 and "pip install psutil" in said[0]
