"""Which backend runs one ``aipc diff`` makes, and when each may start.

* **live** mode: every backend runs the script; the runs are independent and start together
  (as many at a time as :func:`~onnxwrapper.diff._runs._schedule.run_tasks` allows). With automatic
  replay, a live run whose calls were fed other inputs than the reference's gets a partial replay
  run (``<label>+replay``: those calls re-run on the reference's inputs), which starts as soon as
  both that run and the reference have ended.
* **replay** mode: the script runs on the reference; every other backend replays its capture and
  starts as soon as the reference has ended.

Live runs share the script's working directory. When the app level compares files the script
writes there (``--compare-output FILE``), two live runs would write the same file at once, so
they then go one after another (replays, which do not run the script, still overlap).

Live runs share the user's home too, and an app that sets itself up on first use — downloads its
model, or assembles it into ``~/.cache`` through a temporary file and a rename — does so in both
runs at once on a fresh machine, where one copy can trip over the other's files (measured: a TTS
app's ``FileNotFoundError`` on its own ``.tmp`` file, verdict INCOMPLETE; the same diff gives its
verdict on a warm cache). So a live run that did not complete — the script raised, or the child
ended without a status — while another live run of the script was going is run once more,
**alone** (nothing else runs meanwhile), before its failure counts; the first attempt is kept in
``_first-attempts/<label>`` and the run's ``retried`` sentence (in the report: a note and the runs
list) says what happened both times. A crash (a signal) or a timeout is not repeated: neither is
what a race between two copies of a script looks like, and repeating them doubles a long wait.
Runs that do not race keep starting together (no state is kept between diffs).

The runs are returned in one order whatever order they ended in (reference, the others as listed,
then the partial replays), so the report does not depend on ``--jobs``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Callable, Mapping

from onnxwrapper.diff._capture import Capture, CaptureFormatError, diverging_inputs, read_capture
from onnxwrapper.diff._runs._backend_run import BackendRun
from onnxwrapper.diff._runs._orchestrate import Target, run_child
from onnxwrapper.diff._runs._schedule import Task, default_jobs, estimate_run_memory, run_tasks
from onnxwrapper.kernel import available_memory

__all__ = ["FIRST_ATTEMPTS", "RunPlan"]

#: where the first attempt of a run repeated alone is kept, inside the diff directory (not a run
#: label: labels start with a letter or a digit)
FIRST_ATTEMPTS = "_first-attempts"
_ALONE = " (alone)"  # the task label of a repeated run (a space: never part of a run label)


class RunPlan:
    """The runs of one diff (module docstring).

    Args:
        directory: the diff directory (one capture directory per run label inside).
        labels: ``{label: backend}``; reference: the reference label.
        options: ``{label: backend options}``. target: what the script is (live runs).
        replay: replay mode. auto_replay: live mode's partial replays.
        timeout, max_bytes, max_calls_per_model: limits of each run (see ``run_child``).
        files: files the script writes that each live run copies (app level).
        echo: ``echo(label, stdout text)`` after each run, or ``None`` (called one at a time).
        record: ``record(label, run)`` called in the calling thread as each run ends (the manifest).
    """

    def __init__(self, directory: str, labels: Mapping[str, str], reference: str, options: Mapping[str, dict],
                 target: Target, *, replay: bool, auto_replay: bool, timeout: float | None, max_bytes: int | None,
                 max_calls_per_model: int | None, files=(), echo: Callable | None = None,
                 record: Callable[[str, BackendRun], None] | None = None) -> None:
        self.directory, self.labels, self.reference, self.options = directory, dict(labels), reference, options
        self.target, self.replay, self.auto_replay = target, replay, auto_replay
        self.limits = {"timeout": timeout, "max_bytes": max_bytes}
        self.max_calls_per_model, self.files = max_calls_per_model, list(files)
        self.record = record
        self.order = [reference] + [lb for lb in labels if lb != reference]
        self.runs: dict[str, BackendRun] = {}
        self._echo, self._echo_lock = echo, threading.Lock()
        self._ref_capture: Capture | None = None
        #: how many runs went at once (set by :meth:`run`)
        self.jobs: int | None = None
        self._spans: dict[str, list] = {}  # live run label → [start, end] (perf_counter; end None while it runs)
        self._raced: dict[str, tuple[BackendRun, list]] = {}  # label → (first attempt, the runs it overlapped)

    # -- the runs ----------------------------------------------------------------------------------
    def initial(self) -> list[Task]:
        """The runs that may start at once: the reference (replay mode, or live runs that write
        compared files: one at a time), else every live run."""
        if self.replay or self.files:
            return [self._live(self.reference)]
        return [self._live(lb) for lb in self.order]

    def default_jobs(self) -> int:
        """How many of this diff's runs this host can run at once (``default_jobs``; a live run's
        models are not known before it ran: each is counted at ``estimate_run_memory(None)``)."""
        return default_jobs([estimate_run_memory(None)] * len(self.order))

    def run(self, jobs: int | None = None, progress: Callable | None = None) -> dict[str, BackendRun]:
        """Run everything, ``jobs`` at a time (``None``: :meth:`default_jobs`, within the memory
        available now); returns ``{label: BackendRun}`` in the plan's order."""
        memory = None
        if jobs is None:
            jobs, memory = self.default_jobs(), available_memory()
        self.jobs = jobs
        run_tasks(self.initial(), jobs=jobs, memory=memory, on_done=self._done, progress=progress)
        replays = [f"{lb}+replay" for lb in self.order]
        return {lb: self.runs[lb] for lb in self.order + replays if lb in self.runs}

    def _say(self, label: str):
        if self._echo is None:
            return None

        def say(text: str) -> None:
            with self._echo_lock:
                self._echo(label, text)
        return say

    def _live(self, label: str, alone: bool = False) -> Task:
        def start(on_start) -> BackendRun:
            span = self._spans[label] = [time.perf_counter(), None]
            try:
                return run_child(self.labels[label], self.options[label], os.path.join(self.directory, label),
                                 target=self.target, max_calls_per_model=self.max_calls_per_model,
                                 env=self.target.env, echo=self._say(label), files=self.files, on_start=on_start,
                                 **self.limits)
            finally:
                span[1] = time.perf_counter()
        return Task(label + _ALONE if alone else label, start, estimate_run_memory(None), alone)

    def _replay(self, label: str, name: str, only: str | None) -> Task:
        source = self.runs[self.reference].capture_dir
        ref_cap = self._reference_capture()  # its models are what a replay loads
        model_bytes = sum(m.size_bytes for m in ref_cap.models.values()) if ref_cap is not None else None

        def start(on_start) -> BackendRun:
            run = run_child(self.labels[label], self.options[label], os.path.join(self.directory, name),
                            replay=source, only=only, env=self.target.env, on_start=on_start,
                            max_calls_per_model=None if only else self.max_calls_per_model,
                            echo=None if only else self._say(label), **self.limits)
            run.replay_of = label if only else None
            return run
        return Task(name, start, estimate_run_memory(model_bytes))

    def _not_run(self, label: str, why: str) -> Task:
        run = BackendRun(backend=self.labels[label], options=self.options[label], label=label, status="error",
                         returncode=None, message=why)
        return Task(label, lambda _on_start: run, 0)

    # -- what may start when a run ends ------------------------------------------------------------
    def _racing(self, label: str, run: BackendRun) -> list[str]:
        """The live runs of the script that were going while live run ``label`` ran and failed
        (module docstring); ``[]`` when it is not to be repeated."""
        span = self._spans.get(label)
        if self.replay or run.complete or run.status not in ("script_failed", "error") or span is None:
            return []
        return [lb for lb, (s, e) in self._spans.items() if lb != label and s < span[1] and (e is None or e > span[0])]

    def _repeat_alone(self, label: str, run: BackendRun, others: list) -> list[Task]:
        """Keep the failed attempt aside and run ``label`` again, alone; ``[]`` when its directory
        cannot be moved (the failure then stands)."""
        aside = os.path.join(self.directory, FIRST_ATTEMPTS, label)
        try:
            os.makedirs(os.path.dirname(aside), exist_ok=True)
            os.replace(os.path.join(self.directory, label), aside)
        except OSError:
            return []
        self._raced[label] = (run, others)
        return [self._live(label, alone=True)]

    def _retried(self, label: str, run: BackendRun) -> str:
        first, others = self._raced[label]
        why = first.cause or (first.message.splitlines() or [first.status])[0]
        head = (f"the first attempt failed while {', '.join(others)} ran the same script ({why}; kept in "
                f"{FIRST_ATTEMPTS}/{label}); run again alone, ")
        if run.complete:
            return head + ("it completed: two copies of the script at once raced with each other, as a script that "
                           "sets itself up on first use (a download, a cache it fills) does")
        return head + f"it failed again ({run.cause or run.status}): not a race between the runs"

    def _done(self, name: str, run: BackendRun) -> list[Task]:
        label = name.removesuffix(_ALONE)
        run.label = label
        if label in self._raced:
            run.retried = self._retried(label, run)
        elif others := self._racing(label, run):
            repeat = self._repeat_alone(label, run, others)
            if repeat:
                return repeat
        self.runs[label] = run
        if self.record is not None:
            self.record(label, run)
        if self.replay:
            if label != self.reference:
                return []
            others = [lb for lb in self.order if lb != self.reference]
            if run.calls == 0:
                return [self._not_run(lb, "not run: the reference recorded no call to replay") for lb in others]
            return [self._replay(lb, lb, None) for lb in others]
        after = []
        if self.files and not run.replay_of:  # live runs one at a time: the next one now
            following = self.order[self.order.index(label) + 1:]
            after = [self._live(following[0])] if following else []
        if not self.auto_replay or run.replay_of:
            return after
        if label == self.reference:
            candidates = [lb for lb in self.order if lb != self.reference and lb in self.runs]
        else:
            candidates = [label] if self.reference in self.runs else []
        return after + [t for t in (self._partial_replay(lb) for lb in candidates) if t is not None]

    def _reference_capture(self) -> Capture | None:
        if self._ref_capture is None:
            ref = self.runs.get(self.reference)
            if ref is not None and ref.ok:
                try:
                    self._ref_capture = read_capture(ref.capture_dir)
                except CaptureFormatError:
                    return None
        return self._ref_capture

    def _partial_replay(self, label: str) -> Task | None:
        """The replay of the calls of live run ``label`` that were fed other inputs than the
        reference's, on the reference's inputs; ``None`` when there are none (or a run failed)."""
        run, ref_cap = self.runs.get(label), self._reference_capture()
        if run is None or not run.ok or ref_cap is None:
            return None
        try:
            keys = diverging_inputs(ref_cap, read_capture(run.capture_dir))
        except CaptureFormatError:
            return None
        if not keys:
            return None
        name = f"{label}+replay"
        keys_file = os.path.join(self.directory, f"{name}.keys.json")
        with open(keys_file, "w", encoding="utf-8") as f:
            json.dump([list(k) for k in keys], f)
        return self._replay(label, name, keys_file)
