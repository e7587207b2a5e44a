"""Concurrent backend runs of ``aipc diff``: how many at a time, and which may start.

Every backend run is a child process (:func:`~onnxwrapper.diff._runs._orchestrate.run_child`) that this
process only waits for, so independent runs can overlap when the host has the cores and the
memory: the ``cpu`` reference and a ``qnn`` run start together; a run that needs another's result
(a replay of a live run needs that run's capture and the reference's) is created by the caller when
those end and starts at once. Each run keeps its own wall time (``BackendRun.seconds``).

How many at a time (``aipc diff --jobs N``; default :func:`default_jobs`): at most the processors
this process may run on, and at most as many as fit in the memory available now, each run
counted at :func:`estimate_run_memory` — its share grows with the size of the models it loads.
Measured peaks (resident set size of the child, OCR example, three models of 31.7 MB together,
x86-64 Linux): 247 MiB on ``cpu``, 450 MiB on ``qnn`` (HTP simulator, compiles included); an
interpreter with onnxruntime and onnxwrapper loaded is about 120 MiB.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Iterable

from onnxwrapper.diff._runs._backend_run import BackendRun
from onnxwrapper.diff._runs._orchestrate import kill_child
from onnxwrapper.kernel import available_memory, cpu_count

__all__ = ["RUN_BASE_BYTES", "UNKNOWN_MODEL_BYTES", "Task", "default_jobs",
           "estimate_run_memory", "run_tasks"]

#: memory of a run besides its models: interpreter, onnxruntime, numpy, onnxwrapper, capture buffers
RUN_BASE_BYTES = 256 * 2 ** 20
#: bytes of memory per byte of model a run loads (weights, ORT's copies, the QNN compile); the
#: measured peaks of the module docstring are at most 250 MiB + 6.4 x the model bytes
MODEL_FACTOR = 8
#: model bytes assumed for a live run before any run of the diff has told which models it loads
UNKNOWN_MODEL_BYTES = 96 * 2 ** 20


def estimate_run_memory(model_bytes: int | None) -> int:
    """Bytes of memory one backend run is counted at: :data:`RUN_BASE_BYTES` + 8 x the bytes of
    the models it loads (``None``: not known yet, :data:`UNKNOWN_MODEL_BYTES` assumed)."""
    size = UNKNOWN_MODEL_BYTES if model_bytes is None else max(0, int(model_bytes))
    return RUN_BASE_BYTES + MODEL_FACTOR * size


def default_jobs(estimates: Iterable[int], *, cpus: int | None = None, memory: int | None = None) -> int:
    """How many of the runs counted at ``estimates`` (bytes each) may run at once here: at most
    :func:`cpu_count`, at most as many of the largest as fit in :func:`available_memory`, at most
    as many as there are runs, at least 1."""
    sizes = sorted(estimates, reverse=True)
    cpus = cpu_count() if cpus is None else cpus
    memory = available_memory() if memory is None else memory
    jobs = min(cpus, len(sizes)) if sizes else 1
    if memory is not None and sizes:
        jobs = min(jobs, max(1, memory // max(1, sizes[0])))
    return max(1, int(jobs))


@dataclass
class Task:
    """One backend run to start.

    Attributes:
        label: the run label (unique in the diff).
        start: ``start(on_start) -> BackendRun`` runs it to its end in a worker thread; it passes
            ``on_start`` the child's ``subprocess.Popen`` (so that an interrupt can stop it).
        memory: the bytes it is counted at (:func:`estimate_run_memory`).
        alone: it starts only when no other run is going, and none starts while it runs (a run
            repeated because it raced with another run of the same script).
    """

    label: str
    start: Callable[[Callable], BackendRun]
    memory: int = RUN_BASE_BYTES
    alone: bool = False


def run_tasks(tasks: Iterable[Task], *, jobs: int, memory: int | None = None,
              on_done: Callable[[str, BackendRun], Iterable[Task]] | None = None,
              progress: Callable[[str, int, int], None] | None = None) -> dict[str, BackendRun]:
    """Run ``tasks`` with at most ``jobs`` at a time and, when ``memory`` is given, no more than
    fit in it together (one always runs); return ``{label: BackendRun}`` in completion order.

    ``on_done(label, run)`` is called in this thread as each run ends and returns the runs that
    may start now (e.g. a replay of that run). Tasks start in the order given; a task ``alone``
    waits until nothing runs, and nothing starts while it runs. ``progress(stage,
    done, total)`` is told which runs are going. A ``KeyboardInterrupt`` (or any exception) stops
    every running child's process group before it propagates.

    Raises:
        ValueError: a label is given twice.
    """
    queue = list(tasks)
    seen = {t.label for t in queue}
    if len(seen) != len(queue):
        raise ValueError("run labels must be unique")
    results: dict[str, BackendRun] = {}
    running: dict[Future, Task] = {}
    children: dict[str, object] = {}
    lock = threading.Lock()
    stopping = threading.Event()
    jobs = max(1, int(jobs))

    def hook(label: str) -> Callable:
        def on_start(proc) -> None:
            with lock:
                children[label] = proc
            if stopping.is_set():  # started while the others were being stopped
                kill_child(proc)
        return on_start

    def fits(task: Task) -> bool:
        if not running:
            return True
        if task.alone or len(running) >= jobs or any(t.alone for t in running.values()):
            return False
        return memory is None or sum(t.memory for t in running.values()) + task.memory <= memory

    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="aipc-diff-run") as pool:
        try:
            while queue or running:
                while queue and fits(queue[0]):
                    task = queue.pop(0)
                    running[pool.submit(task.start, hook(task.label))] = task
                if progress:
                    progress("run " + ", ".join(t.label for t in running.values()), len(results),
                             len(results) + len(running) + len(queue))
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in sorted(done, key=lambda f: running[f].label):
                    task = running.pop(future)
                    with lock:
                        children.pop(task.label, None)
                    results[task.label] = future.result()
                    for follow in (on_done(task.label, results[task.label]) if on_done else ()) or ():
                        if follow.label in seen:
                            raise ValueError(f"run label '{follow.label}' is given twice")
                        seen.add(follow.label)
                        queue.append(follow)
        except BaseException:
            stopping.set()
            with lock:
                procs = list(children.values())
            for proc in procs:
                kill_child(proc)
            raise
    return results
