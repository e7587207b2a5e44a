"""``aipc diff --jobs``: independent backend runs overlap, ``--jobs 1`` runs them one after another,
a replay starts as soon as the runs it needs have ended, and the results do not depend on it.

No timing assertions: overlap is shown by a rendezvous (each run's script waits until every run
has started — only possible when they run at once) and by start/end timestamps the scripts record.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from onnxwrapper.diff._runs._orchestrate import kill_child
from onnxwrapper.diff._runs._backend_run import BackendRun
from onnxwrapper.diff._runs._schedule import (RUN_BASE_BYTES, Task, default_jobs, estimate_run_memory, run_tasks)
from tests.test_diff_support import aipc_diff, child_env, conv_project, write_script  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow  # outside the fast subset: parallel `aipc diff` runs

TIMED_SCRIPT = """
    import json, os, time
    import numpy as np
    import onnxruntime as ort

    times = os.environ["DIFF_TIMES_DIR"]
    sess = ort.InferenceSession("conv.onnx")
    start = time.time()
    open(os.path.join(times, f"{os.getpid()}.start"), "w").close()
    met, wanted = False, int(os.environ.get("DIFF_RENDEZVOUS", "0"))
    deadline = time.monotonic() + 60
    while wanted and time.monotonic() < deadline:   # wait until every run has started
        if sum(name.endswith(".start") for name in os.listdir(times)) >= wanted:
            met = True
            break
        time.sleep(0.05)
    for i in range(3):
        x = np.linspace(-1, 1, 3 * 8 * 8, dtype=np.float32).reshape(1, 3, 8, 8) * (i + 1)
        print("sum", round(float(sess.run(None, {"X": x})[0].sum()), 3))
    with open(os.path.join(times, f"{os.getpid()}.json"), "w") as f:
        json.dump({"start": start, "end": time.time(), "met": met}, f)
"""


def _timed_diff(tmp_path, env, name: str, jobs: int, rendezvous: int = 0):
    project = tmp_path / name
    project.mkdir()
    conv_project(project)
    script = write_script(project, TIMED_SCRIPT, "timed.py")
    times = project / "times"
    times.mkdir()
    env = {**env, "DIFF_TIMES_DIR": str(times), "DIFF_RENDEZVOUS": str(rendezvous)}
    proc = aipc_diff(["--backends", "cpu,perturb", "--jobs", jobs, "--dir", project / "d", "--no-html", script],
                     project, env)
    records = [json.loads(p.read_text()) for p in sorted(times.glob("*.json"))]
    with open(project / "d" / "report.json", encoding="utf-8") as f:
        return proc, records, json.load(f)


def _comparable(report: dict) -> dict:
    """The report without what differs between two diffs of the same script: times and paths."""
    volatile = {"seconds", "created", "capture_dir", "stdout", "stderr", "directory", "script"}

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in volatile}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(report)


def test_runs_overlap_with_two_jobs_and_not_with_one_and_the_results_are_the_same(tmp_path, child_env):
    together, met, report2 = _timed_diff(tmp_path, child_env, "two", 2, rendezvous=2)
    assert together.returncode == 0, together.stdout + together.stderr
    assert len(met) == 2 and all(r["met"] for r in met)  # each run saw the other one running
    alone, records, report1 = _timed_diff(tmp_path, child_env, "one", 1)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    first, second = sorted(records, key=lambda r: r["start"])
    assert first["end"] <= second["start"]  # one after another
    assert _comparable(report1) == _comparable(report2)
    assert list(report1["runs"]) == list(report2["runs"]) == ["cpu", "perturb"]
    assert all(r["seconds"] > 0 for r in report2["runs"].values())  # each run keeps its own wall time
    assert "1 at a time" in alone.stderr and "2 at a time" in together.stderr


def test_jobs_must_be_positive(tmp_path, child_env):
    script = conv_project(tmp_path)
    proc = aipc_diff(["--jobs", "0", "--backends", "cpu,perturb", script], tmp_path, child_env)
    assert proc.returncode == 64 and "--jobs must be ≥ 1" in proc.stderr


# -- the scheduler ---------------------------------------------------------------------------------

def _task(label: str, body, memory: int = RUN_BASE_BYTES) -> Task:
    def start(on_start):
        body()
        return BackendRun(backend="cpu", label=label)
    return Task(label, start, memory)


class _Gauge:
    """How many task bodies run at once (the maximum seen)."""

    def __init__(self) -> None:
        self.lock, self.now, self.peak = threading.Lock(), 0, 0

    def body(self, hold: threading.Event | None = None):
        def run():
            with self.lock:
                self.now += 1
                self.peak = max(self.peak, self.now)
            if hold is not None:
                hold.wait(30)
            else:
                time.sleep(0.01)
            with self.lock:
                self.now -= 1
        return run


def test_scheduler_runs_at_most_jobs_at_once():
    for jobs, expected in ((1, 1), (2, 2), (8, 4)):
        gauge, release = _Gauge(), threading.Event()
        tasks = [_task(f"r{k}", gauge.body(release)) for k in range(4)]
        timer = threading.Timer(0.3, release.set)  # lets every admitted body start before any ends
        timer.start()
        results = run_tasks(tasks, jobs=jobs)
        timer.join()
        assert sorted(results) == ["r0", "r1", "r2", "r3"] and gauge.peak == expected


def test_scheduler_counts_memory():
    gauge, release = _Gauge(), threading.Event()
    tasks = [_task(f"r{k}", gauge.body(release), memory=600) for k in range(3)]
    timer = threading.Timer(0.3, release.set)
    timer.start()
    run_tasks(tasks, jobs=3, memory=1000)  # one of 600 fits in 1000, two do not
    timer.join()
    assert gauge.peak == 1


def test_a_follow_up_starts_as_soon_as_its_run_ends_while_another_still_runs():
    slow_may_end = threading.Event()
    order = []

    def slow():
        assert slow_may_end.wait(30), "the follow-up of the fast run did not start while the slow run ran"
        order.append("slow")

    def follow():
        order.append("fast+replay")
        slow_may_end.set()

    def on_done(label, run):
        return [_task("fast+replay", follow)] if label == "fast" else []

    results = run_tasks([_task("slow", slow), _task("fast", lambda: order.append("fast"))], jobs=2, on_done=on_done)
    assert order == ["fast", "fast+replay", "slow"] and set(results) == {"slow", "fast", "fast+replay"}


def test_scheduler_stops_running_children_when_interrupted():
    procs = []

    def start(on_start):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        procs.append(proc)
        on_start(proc)
        proc.wait()
        return BackendRun(backend="cpu", label="sleeper")

    def on_done(label, run):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_tasks([Task("sleeper", start), _task("quick", lambda: time.sleep(0.2))], jobs=2, on_done=on_done)
    assert procs and procs[0].poll() is not None  # the sleeping child was stopped, not waited for
    kill_child(procs[0])  # harmless on an ended child


def test_default_jobs_from_processors_and_memory():
    one = estimate_run_memory(10 * 2 ** 20)
    assert one == RUN_BASE_BYTES + 8 * 10 * 2 ** 20 and estimate_run_memory(None) > estimate_run_memory(0)
    assert default_jobs([one] * 3, cpus=2, memory=64 * 2 ** 30) == 2
    assert default_jobs([one] * 3, cpus=16, memory=64 * 2 ** 30) == 3
    assert default_jobs([one] * 3, cpus=16, memory=2 * one) == 2
    assert default_jobs([one] * 3, cpus=16, memory=one // 2) == 1
    assert default_jobs([], cpus=4, memory=None) == 1
