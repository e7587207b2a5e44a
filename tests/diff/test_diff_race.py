"""Runs that cannot race: a live run that fails while another run of the same script is going is
run once more, alone, before the verdict says INCOMPLETE — and the report says so.

An app that sets itself up on first use (assembles its model into a cache directory through a
temporary file and a rename, as a TTS app does in ``~/.cache``) does it in both runs of a diff at
once on a fresh machine; one copy's rename then finds the other's temporary file gone.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from onnxwrapper.diff import BackendRun
from onnxwrapper.diff._runs import _plan
from onnxwrapper.diff._runs._orchestrate import Target
from onnxwrapper.diff._runs._plan import FIRST_ATTEMPTS, RunPlan
from tests.test_diff_support import aipc_diff, child_env, conv_project, write_script  # noqa: F401 (fixture)

SETS_ITSELF_UP = """
    import os, time
    import numpy as np
    import onnxruntime as ort

    def wait_for(folder, count):   # both copies at the same step: the race, every time
        deadline = time.monotonic() + 30
        while len(os.listdir(folder)) < count and time.monotonic() < deadline:
            time.sleep(0.02)

    cache = os.path.join(os.getcwd(), "cache")
    final = os.path.join(cache, "model.onnx")
    if not os.path.exists(final):  # first use: assemble the model into the cache
        for step in ("started", "written"):
            os.makedirs(os.path.join(cache, step), exist_ok=True)
        open(os.path.join(cache, "started", str(os.getpid())), "w").close()
        wait_for(os.path.join(cache, "started"), 2)
        with open(final + ".tmp", "wb") as f, open("conv.onnx", "rb") as src:
            f.write(src.read())
        open(os.path.join(cache, "written", str(os.getpid())), "w").close()
        wait_for(os.path.join(cache, "written"), 2)
        os.replace(final + ".tmp", final)  # the second copy: FileNotFoundError
    sess = ort.InferenceSession(final)
    x = np.linspace(-1, 1, 3 * 8 * 8, dtype=np.float32).reshape(1, 3, 8, 8)
    print("sum", round(float(sess.run(None, {"X": x})[0].sum()), 3))
"""


@pytest.mark.slow
def test_an_app_setting_itself_up_in_both_runs_at_once_is_run_again_alone(tmp_path, child_env):
    conv_project(tmp_path)
    script = write_script(tmp_path, SETS_ITSELF_UP, "app.py")
    proc = aipc_diff(["--backends", "cpu,perturb", "--jobs", "2", "--dir", tmp_path / "d", "--no-html", script],
                     tmp_path, child_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # main: INCOMPLETE, exit 2
    runs = json.loads((tmp_path / "d" / "report.json").read_text())["runs"]
    retried = {label: r["retried"] for label, r in runs.items() if r.get("retried")}
    assert len(retried) == 1, runs  # one copy lost the race; the other set the cache up
    (label, text), = retried.items()
    assert "FileNotFoundError" in text and "run again alone, it completed" in text and runs[label]["status"] == "ok"
    assert (tmp_path / "d" / FIRST_ATTEMPTS / label / "stderr.txt").read_text().count("FileNotFoundError")
    assert f"{label}: the first attempt failed while" in proc.stdout and "run again alone:" in proc.stdout


# -- the plan, with run_child replaced (no child processes) -------------------------------------------

class _FakeRuns:
    """run_child stand-in: each run takes 0.2 s; ``fail(label, attempt, overlapped)`` decides its status."""

    def __init__(self, fail) -> None:
        self.fail, self.lock, self.live, self.attempts, self.alone = fail, threading.Lock(), set(), {}, {}

    def __call__(self, backend, options, directory, *, target, **kwargs):
        label = os.path.basename(directory)
        with self.lock:
            self.live.add(label)
            attempt = self.attempts[label] = self.attempts.get(label, 0) + 1
            seen = len(self.live)
        os.makedirs(directory)  # the plan moves a failed attempt's directory aside before the next
        time.sleep(0.2)
        with self.lock:
            overlapped = max(seen, len(self.live)) > 1
            self.alone[(label, attempt)] = not overlapped
            self.live.discard(label)
        status = self.fail(label, attempt, overlapped)
        return BackendRun(backend=backend, capture_dir=directory, status=status, exception=status == "script_failed",
                          cause="FileNotFoundError: cache/model.onnx.tmp" if status != "ok" else "")


def _plan_run(tmp_path, monkeypatch, fail, jobs=2, **kwargs):
    fake = _FakeRuns(fail)
    monkeypatch.setattr(_plan, "run_child", fake)
    plan = RunPlan(str(tmp_path), {"cpu": "cpu", "qnn": "qnn"}, "cpu", {"cpu": {}, "qnn": {}}, Target(("app.py",)),
                   replay=False, auto_replay=False, timeout=None, max_bytes=None, max_calls_per_model=None, **kwargs)
    return plan.run(jobs), fake


def test_a_run_that_failed_beside_another_is_repeated_alone_and_says_so(tmp_path, monkeypatch):
    runs, fake = _plan_run(tmp_path, monkeypatch, lambda label, attempt, overlapped: (
        "script_failed" if label == "qnn" and attempt == 1 else "ok"))
    assert list(runs) == ["cpu", "qnn"] and runs["qnn"].ok and fake.attempts == {"cpu": 1, "qnn": 2}
    assert fake.alone[("qnn", 2)] and not fake.alone[("qnn", 1)]  # the first two went together
    assert runs["qnn"].retried.startswith("the first attempt failed while cpu ran the same script (FileNotFoundError")
    assert "it completed" in runs["qnn"].retried and not runs["cpu"].retried
    assert (tmp_path / FIRST_ATTEMPTS / "qnn").is_dir() and (tmp_path / "qnn").is_dir()


def test_a_failure_that_is_no_race_is_reported_after_one_repeat(tmp_path, monkeypatch):
    runs, fake = _plan_run(tmp_path, monkeypatch, lambda label, attempt, overlapped: (
        "script_failed" if label == "qnn" else "ok"))
    assert fake.attempts == {"cpu": 1, "qnn": 2} and runs["qnn"].status == "script_failed"
    assert "it failed again" in runs["qnn"].retried and "not a race" in runs["qnn"].retried


@pytest.mark.parametrize("jobs, status, files", [(1, "script_failed", ()), (2, "crashed", ()), (2, "timeout", ()),
                                                 (2, "script_failed", ("out.json",))])
def test_runs_that_did_not_overlap_and_crashes_and_timeouts_are_not_repeated(tmp_path, monkeypatch, jobs, status,
                                                                              files):
    runs, fake = _plan_run(tmp_path, monkeypatch, lambda label, attempt, overlapped: (
        status if label == "qnn" else "ok"), jobs=jobs, files=files)
    assert fake.attempts == {"cpu": 1, "qnn": 1} and not runs["qnn"].retried and runs["qnn"].status == status
