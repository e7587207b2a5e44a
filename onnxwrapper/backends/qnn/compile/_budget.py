"""The compile budget: how long and how much memory one QNN compile may take, and its progress lines.

Why (measured on onnxruntime-qnn 2.7.0, x86-64 HTP simulator): the QNN compiler spends time and
memory in proportion to the tensors it finalizes before it fails (``QNN_COMMON_ERROR_MEM_ALLOC``
after 6 s for a 2²³-float row, after 44 s and 1.2 GiB for 2×2²⁶; a real 1-D U-Net at
``[3, 16, 7500]`` failed after about 200 s and at batch 1 had not finished after 20 minutes). A
compile runs in a worker process (:mod:`onnxwrapper.backends.qnn.workers._workers`), so one past its budget
is stopped by ending that process: the user's process is unaffected, nothing is cached, and the
recovery ladder (:mod:`onnxwrapper.backends.qnn.recovery._recovery`) takes over.

* Wall time: backend option ``compile_timeout`` (seconds, default :data:`DEFAULT_COMPILE_TIMEOUT_S`
  = 300 — about 9× the simulator's resnet50 compile; ``aipc --compile-timeout``).
* Memory: backend option ``compile_memory_mb`` (MiB of the compiler process's resident memory,
  default half the machine's physical memory, :func:`default_compile_memory_mb`; ``aipc
  --compile-memory-mb``). Read from ``/proc/<pid>/statm`` on Linux, else with psutil (a dependency
  on Windows; optional on macOS); where neither works the memory budget is not enforced (the wall
  time still is) and the first compile with a budget says so once (WARNING).
* Total per model: backend option ``compile_budget`` (seconds, default :data:`DEFAULT_TOTAL_BUDGET_S`
  = 600; ``aipc --compile-budget``) bounds every compile of one model's recovery ladder together —
  the compile as given and every rung after it (:func:`total_budget`). Each compile then gets at
  most what is left; when nothing is left, :func:`compile_seconds` raises the total
  :class:`~onnxwrapper.errors.CompileBudgetError` (``budget == "total"``), which the ladder does not
  work around: outside ``strict`` the model runs on ORT's CPU for the rest of the run
  (:mod:`onnxwrapper.backends.qnn.session._no_node`), under ``strict`` it is raised.
* Progress: a compile still running after :data:`PROGRESS_AFTER_S` seconds logs one WARNING line
  on logger ``onnxwrapper.qnn`` (so it reaches stderr without any logging set-up, and ``aipc``
  shows it), then one every :data:`PROGRESS_EVERY_S` seconds: the model, the shapes, the recovery
  rung, the seconds elapsed and the compiler's memory.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import pickle
import queue
import threading
import time
from typing import Any, Callable

from onnxwrapper.backends.qnn.compile._compile_errors import budget_error
from onnxwrapper.kernel import shapes_note

__all__ = ["DEFAULT_COMPILE_TIMEOUT_S", "DEFAULT_TOTAL_BUDGET_S", "PROGRESS_AFTER_S", "PROGRESS_EVERY_S",
           "CompileWatch", "await_reply", "compile_seconds", "convert_seconds", "default_compile_memory_mb",
           "process_rss_mb", "total_budget"]

_log = logging.getLogger("onnxwrapper.qnn")

#: default of the ``compile_timeout`` backend option (seconds)
DEFAULT_COMPILE_TIMEOUT_S = 300.0
#: default of the ``compile_budget`` backend option: all compiles of one model's recovery ladder (seconds)
DEFAULT_TOTAL_BUDGET_S = 600.0
#: a compile running longer than this logs its first progress line (seconds)
PROGRESS_AFTER_S = 10.0
#: then one line every this many seconds
PROGRESS_EVERY_S = 30.0
_MIB = 1024 * 1024


def convert_seconds(value: Any) -> float:
    """Option converter: a positive number of seconds (int or float; bools refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError("expected a positive number of seconds")
    return float(value)


_TOTAL: contextvars.ContextVar = contextvars.ContextVar("onnxwrapper_qnn_total_budget", default=None)


@contextlib.contextmanager
def total_budget(seconds: float | None, label: str, shapes=None):
    """Bound the compiles made inside the ``with`` block (one model's recovery ladder) to ``seconds``
    in all (``None``: unbounded). Nested blocks keep the outermost deadline."""
    if seconds is None or _TOTAL.get() is not None:
        yield
        return
    token = _TOTAL.set((time.monotonic() + float(seconds), float(seconds), label, dict(shapes) if shapes else None))
    try:
        yield
    finally:
        _TOTAL.reset(token)


def compile_seconds(per_compile: float | None) -> float | None:
    """The wall-time budget of the next compile: ``per_compile`` (``compile_timeout``), at most what
    the model's total budget has left (:func:`total_budget`).

    Raises:
        CompileBudgetError: ``budget == "total"``: nothing of the total budget is left.
    """
    active = _TOTAL.get()
    if active is None:
        return per_compile
    deadline, total, label, shapes = active
    left = deadline - time.monotonic()
    if left <= 0:
        raise budget_error(label, shapes, seconds=total - left, peak_mb=None, which="total", limit=total)
    return left if per_compile is None else min(per_compile, left)


def default_compile_memory_mb() -> int:
    """Half the machine's physical memory in MiB (``os.sysconf``, else psutil — Windows has no
    ``sysconf``; 8192 where neither can read it)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        try:
            import psutil  # a dependency on Windows
            total = psutil.virtual_memory().total
        except Exception:  # noqa: BLE001 - ImportError, or psutil cannot read it
            return 8192
    return max(512, int(total // _MIB // 2))


_unenforced_said = False


def _say_unenforced(memory_mb: float) -> None:
    """One WARNING per process: the memory budget cannot be enforced on this host."""
    global _unenforced_said
    if not _unenforced_said:
        _unenforced_said = True
        _log.warning("onnxwrapper qnn: the compile memory budget (compile_memory_mb=%g) is not enforced on this host: "
                     "the compiler's memory cannot be read (no /proc, and psutil is not installed: pip install "
                     "psutil); the time budget still is", memory_mb)


def process_rss_mb(pid: int) -> float | None:
    """Resident memory of process ``pid`` in MiB, or ``None`` where it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / _MIB
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil  # optional: only where /proc is missing (Windows, macOS)
    except ImportError:
        return None
    try:
        return psutil.Process(pid).memory_info().rss / _MIB
    except Exception:  # noqa: BLE001 - psutil.Error subclasses; the process may be gone
        return None


class CompileWatch:
    """Watches one compile in a worker process: :meth:`check` is called every fraction of a second
    while it runs; it logs progress and returns ``"time"`` / ``"memory"`` once a budget is exceeded.

    Args:
        pid: the worker process. label: the model and shapes, for the progress line.
        rung: the recovery rung (``""`` for the first compile). seconds / memory_mb: the budget
            (``None``: unbounded).
    """

    def __init__(self, pid: int | None, label: str, rung: str, seconds: float | None, memory_mb: float | None) -> None:
        self.pid, self.label, self.rung = pid, label, rung
        self.seconds, self.memory_mb = seconds, memory_mb
        self.start = time.monotonic()
        self.peak_mb: float | None = None
        self._next_progress = PROGRESS_AFTER_S

    @property
    def elapsed(self) -> float:
        """Seconds since the compile was sent."""
        return time.monotonic() - self.start

    def check(self) -> str | None:
        """``"time"`` or ``"memory"`` when that budget is exceeded, else ``None`` (logs progress)."""
        elapsed = self.elapsed
        if self.pid is not None:
            rss = process_rss_mb(self.pid)
            if rss is not None:
                self.peak_mb = max(self.peak_mb or 0.0, rss)
            elif self.memory_mb is not None:
                _say_unenforced(self.memory_mb)
        if elapsed >= self._next_progress:
            self._next_progress += PROGRESS_EVERY_S
            memory = f", compiler {self.peak_mb:.0f} MiB" if self.peak_mb else ""
            limit = f" (budget {self.seconds:g} s)" if self.seconds else ""
            _log.warning("onnxwrapper qnn: still compiling %s for the QNN HTP%s: %.0f s%s%s", self.label,
                         f" ({self.rung})" if self.rung else "", elapsed, limit, memory)
        if self.seconds is not None and elapsed > self.seconds:
            return "time"
        if self.memory_mb is not None and self.peak_mb is not None and self.peak_mb > self.memory_mb:
            return "memory"
        return None


def await_reply(proc, request, kill: Callable[[], None], tail: Callable[[], str], *,
                reader: Callable[[], Any] | None = None, pid: int | None = None) -> Any:
    """The pickled reply of worker process ``proc`` to ``request`` (a ``CompileRequest``), read in a
    helper thread while a :class:`CompileWatch` checks the request's budget and logs progress.
    ``reader`` / ``pid``: read the reply with ``reader()`` from the process ``pid`` instead (the
    compile server's connection; ``proc`` is then ``None``).

    Raises:
        CompileBudgetError: the budget was exceeded; ``kill()`` has ended the worker.
        What reading the reply raised (``EOFError`` when the worker died, …).
    """
    replies: queue.Queue = queue.Queue()

    def read() -> None:
        try:
            replies.put(("reply", reader() if reader is not None else pickle.load(proc.stdout)))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            replies.put(("error", exc))

    threading.Thread(target=read, daemon=True, name="onnxwrapper-qnn-worker-reply").start()
    shapes = dict(request.shapes) if request.shapes else None
    label = request.label + (f" [{shapes_note(shapes)}]" if shapes else "")
    watch = CompileWatch(pid if proc is None else proc.pid, label, request.rung, request.budget_seconds,
                         request.budget_mb)
    while True:  # checked at once too: a budget the worker's own start-up memory exceeds stops every compile
        exceeded = watch.check()
        if exceeded is not None:
            kill()
            limit = request.budget_seconds if exceeded == "time" else request.budget_mb
            raise budget_error(request.label, shapes, seconds=watch.elapsed, peak_mb=watch.peak_mb, which=exceeded,
                               limit=float(limit), stderr=tail()) from None
        try:
            kind, value = replies.get(timeout=0.2)
        except queue.Empty:
            continue
        if kind == "error":
            raise value
        return value
