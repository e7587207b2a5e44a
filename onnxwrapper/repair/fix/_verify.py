"""Verifying a repair candidate: replay the recorded calls on the backend and judge them like ``aipc diff``.

Each trial runs :mod:`onnxwrapper.repair.fix._child` in its own process (the QNN configuration is
process-global; a native crash must not stop ``aipc fix``) with the run's backend options plus
``repairs`` = the candidate's recipe, on the reference's recorded inputs of the model's calls. The
outputs are compared with the reference's by :func:`~onnxwrapper.diff.compare_captures` with the
diff's own tolerances — the same SNR bars and NaN/Inf rules as the diff that failed — so a
candidate passes exactly when ``aipc diff --replay`` of this model would pass with it. The trial
also records what the repair costs: the partition (nodes on the NPU) and the seconds per call.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from dataclasses import dataclass, field

from onnxwrapper.diff._capture import CaptureFormatError, read_capture
from onnxwrapper.diff._judge import compare_captures
from onnxwrapper.diff._runs import (child_cwd, child_environment, crash_name, kill_child, log_tail, module_command,
                                    read_status)
from onnxwrapper.kernel import new_session_kwargs
from onnxwrapper.repair.recipe import ModelRecipe, RecipeBook

__all__ = ["Trial", "baseline_from_diff", "run_trial"]


@dataclass
class Trial:
    """One verified candidate (or the unrepaired baseline).

    Attributes:
        kind: ``"baseline"``, ``"exact"``, ``"kernel"``, ``"cpu"`` or ``"precision"``.
        title: one line. recipe: the model's candidate recipe (``None`` for the baseline).
        exactness: what the rewrites promise (from the registry). status: ``"pass"``, ``"fail"``,
            ``"error"`` (the candidate did not run: ``message`` says why) or ``"skipped"`` (not
            verified: the FP16 emulation on the CPU predicts it fails; ``message`` says by how much).
        calls / failed_calls: replayed calls, and those with an output beyond tolerance.
        outputs / outputs_passed: the model's outputs, and those within tolerance in every call.
        worst: the worst output ``{output, snr_db, cosine, session, index, failed}``. bar_db: its bar.
        npu_nodes / total_nodes / cpu_nodes: nodes of the (repaired) model on the NPU, all of them,
            and the names of those off the NPU (the first session's partition).
        open_seconds: session creation (compile or cache load). call_seconds: mean seconds per call
            once compiled. first_call_seconds: mean of the first calls of each input shape (a
            dynamic-shape model compiles then).
        directory: the trial's files (recipe, request, capture, stdout/stderr).
        emulated: ``{output: worst SNR (dB)}`` the FP16 emulation predicted (CPU regions), or ``None``.
    """

    kind: str
    title: str
    recipe: ModelRecipe | None = None
    exactness: str = ""
    status: str = ""
    message: str = ""
    calls: int = 0
    failed_calls: int = 0
    outputs: int = 0
    outputs_passed: int = 0
    worst: dict | None = None
    bar_db: float | None = None
    npu_nodes: int | None = None
    total_nodes: int | None = None
    cpu_nodes: list = field(default_factory=list)
    open_seconds: float | None = None
    call_seconds: float | None = None
    first_call_seconds: float | None = None
    seconds: float = 0.0
    directory: str = ""
    emulated: dict | None = None

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def why(self) -> str:
        """Why the trial was rejected, in one line (``""`` for one that passed): the worst output
        against its bar and how many outputs and calls failed, the error, or the screen's figure."""
        if self.status in ("error", "skipped") or (self.status == "fail" and not self.worst):
            return self.message or self.status
        if self.status != "fail":
            return ""
        w = self.worst or {}
        snr, bar = w.get("snr_db"), w.get("bar_db", self.bar_db)
        level = (f"'{w.get('output')}' {snr:.1f} dB < bar {bar:.1f} dB" if isinstance(snr, (int, float))
                 and isinstance(bar, (int, float)) else f"'{w.get('output')}' beyond tolerance")
        extra = f"; {', '.join(w['failed'][:2])}" if w.get("failed") and not isinstance(snr, (int, float)) else ""
        counts = (f"; {self.outputs - self.outputs_passed} of {self.outputs} output(s), {self.failed_calls} of "
                  f"{self.calls} call(s) beyond tolerance" if self.outputs else "")
        return level + extra + counts + (f"; {self.message}" if self.message else "")

    def to_dict(self) -> dict:
        """JSON-ready (the recipe as its JSON object)."""
        d = {k: v for k, v in self.__dict__.items() if k != "recipe"}
        d["recipe"] = self.recipe.to_dict() if self.recipe is not None else None
        return d


def _worst(summaries) -> dict | None:
    def snr(s):
        value = s.worst.metrics.get("snr_db", math.inf) if s.worst is not None else math.inf
        return -math.inf if isinstance(value, float) and math.isnan(value) else value
    if not summaries:
        return None
    s = min(summaries, key=lambda x: (x.passed, snr(x)))
    w = s.worst
    return {"output": s.output, "snr_db": w.metrics.get("snr_db") if w else None,
            "cosine": w.metrics.get("cosine_similarity") if w else None, "session": w.session if w else None,
            "index": w.index if w else None, "failed": list(w.failed) if w else [],
            "bar_db": s.tolerance.min_snr_db}


def run_trial(trial: Trial, *, label: str, backend: str, options: dict, reference, model: str, calls: list,
              tolerances, nodes: int | None = None, timeout: float | None = None, env: dict | None = None) -> Trial:
    """Run ``trial`` (its ``directory`` must be set) and fill in its verdict and costs.

    Args:
        label: the backend run's label in the diff. backend / options: its backend and options.
        reference: the reference :class:`~onnxwrapper.diff.Capture`. model: the model key.
        calls: ``[(session, index)]`` to replay. tolerances: the diff's ``Tolerances``.
        nodes: the number of nodes of the model the backend gets (after the recipe's rewrites): the
            NPU coverage is counted against it (a partition report may also list nodes onnxruntime
            inserted, such as the QNN EP's layout ``Transpose`` nodes).
        timeout: seconds for the child. env: extra environment variables of the child.
    """
    os.makedirs(trial.directory, exist_ok=True)
    opts = dict(options)
    if trial.recipe is not None:
        recipe_path = os.path.join(trial.directory, "recipe.json")
        RecipeBook({trial.recipe.sha256: trial.recipe}).save(recipe_path)
        opts["repairs"] = recipe_path
    capture = os.path.join(trial.directory, "capture")
    request = {"backend": backend, "options": opts, "reference": reference.path, "model": model,
               "calls": [list(k) for k in calls], "capture": capture}
    request_path = os.path.join(trial.directory, "request.json")
    with open(request_path, "w", encoding="utf-8") as f:
        json.dump(request, f, indent=1)
    start = time.perf_counter()
    code, error = _run(request_path, trial.directory, timeout, env)
    trial.seconds = time.perf_counter() - start
    status = read_status(capture)
    if error or status is None or status.get("status") != "ok":
        trial.status = "error"
        tail = log_tail(os.path.join(trial.directory, "stderr.txt"), 3)
        trial.message = error or (status or {}).get("message") or f"exit status {code}: {tail}"
        return trial
    try:
        cap = read_capture(capture)
    except CaptureFormatError as exc:
        trial.status, trial.message = "error", f"unreadable capture: {exc}"
        return trial
    result = compare_captures(reference, {label: cap}, tolerances=tolerances, mode="replay", incomplete={label})
    summaries = [s for s in result.outputs if s.model == model]
    trial.calls = len(cap.calls)
    failed = {(c.session, c.index) for c in result.failures if c.model == model}
    trial.failed_calls = len(failed)
    trial.outputs, trial.outputs_passed = len(summaries), sum(1 for x in summaries if x.passed)
    trial.worst = _worst(summaries)
    trial.bar_db = trial.worst.get("bar_db") if trial.worst else None
    complete = trial.calls == len(calls)
    trial.status = "pass" if summaries and complete and all(s.passed for s in summaries) else "fail"
    if not complete:
        trial.message = f"only {trial.calls} of {len(calls)} call(s) ran"
    _costs(trial, capture, nodes)
    return trial


def baseline_from_diff(result, label: str, model: str, capture, calls: list) -> Trial | None:
    """The unrepaired baseline of ``model`` read from the diff itself instead of replayed: the diff's
    own judgement of that run (``result``, the outputs of ``label``) and its capture's call times
    (``capture``: the backend run's :class:`~onnxwrapper.diff.Capture`). ``None`` — replay it — when
    the run's calls of the model were fed other inputs than the reference's (a pipeline: the
    candidates replay the reference's inputs, so the baseline must too) or were not all compared.
    The partition is not recorded by a diff: the baseline's NPU nodes stay unknown."""
    differ = {tuple(k) for k in (result.inputs_differ.get(label) or [])}
    wanted = {tuple(c) for c in calls}
    if differ & wanted or capture is None:
        return None
    summaries = [s for s in result.outputs if s.backend == label and s.model == model]
    mine = [c for c in capture.calls if c.model == model and (c.session, c.index) in wanted]
    if not summaries or len(mine) != len(wanted) or all(s.passed for s in summaries):
        return None
    trial = Trial("baseline", "the model as it is (the diff's own run, not replayed)", status="fail",
                  message="as judged by the diff")
    trial.calls = len(mine)
    trial.failed_calls = len({(c.session, c.index) for c in result.failures if c.backend == label and c.model == model})
    trial.outputs, trial.outputs_passed = len(summaries), sum(1 for x in summaries if x.passed)
    trial.worst = _worst(summaries)
    trial.bar_db = trial.worst.get("bar_db") if trial.worst else None
    seen, first, rest = set(), [], []
    for c in mine:
        key = (c.session, c.input_signature)
        (rest if key in seen else first).append(c.seconds)
        seen.add(key)
    trial.first_call_seconds = sum(first) / len(first) if first else None
    trial.call_seconds = sum(rest) / len(rest) if rest else trial.first_call_seconds
    return trial


def _costs(trial: Trial, capture: str, nodes: int | None) -> None:
    try:
        with open(os.path.join(capture, "fix.json"), encoding="utf-8") as f:
            facts = json.load(f)
    except (OSError, ValueError):
        return
    seconds = facts.get("call_seconds") or []
    trial.call_seconds = sum(seconds) / len(seconds) if seconds else None
    first = facts.get("first_call_seconds") or []
    trial.first_call_seconds = sum(first) / len(first) if first else None
    opens = list((facts.get("open_seconds") or {}).values())
    trial.open_seconds = sum(opens) if opens else None
    reports = [r for r in (facts.get("partitions") or {}).values() if r]
    if reports:
        assigned = reports[0].get("nodes", [])
        target = reports[0].get("target_ep")
        trial.cpu_nodes = [n.get("name") for n in assigned if n.get("ep") != target]
        trial.total_nodes = nodes if nodes is not None else len(assigned)
        trial.npu_nodes = max(0, trial.total_nodes - len(trial.cpu_nodes))


def _run(request_path: str, directory: str, timeout: float | None, env: dict | None) -> tuple[int | None, str]:
    """Run the child; ``(return code, error text or "")``."""
    child_env = child_environment(env)
    cmd = module_command("onnxwrapper.repair.fix._child", os.path.abspath(request_path))  # python -P: safe path
    with open(os.path.join(directory, "stdout.txt"), "wb") as out, \
            open(os.path.join(directory, "stderr.txt"), "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=child_env,
                                cwd=child_cwd(directory), **new_session_kwargs())
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_child(proc)
            return None, f"timed out after {timeout:g} s"
        except KeyboardInterrupt:
            kill_child(proc)
            raise
    crash = crash_name(code)
    if crash is not None:
        return code, f"crashed with {crash}"
    return code, ""
