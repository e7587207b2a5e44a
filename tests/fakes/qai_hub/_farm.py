"""TEST DOUBLE control surface: the simulated AI Hub service ("farm") behind the double's client.

Tests configure and inspect it; production code never sees it. It holds:

* :attr:`clock` - a :class:`~._clock.ManualClock`; job states are a function of simulated time;
* :attr:`tokens` - API tokens the service accepts (HTTP 401 -> ``UserError`` otherwise);
* :attr:`devices` - the device catalog ``get_devices`` filters (names as AI Hub spells them;
  the catalog is illustrative, not the real fleet);
* stores of models, datasets and jobs, and :attr:`uploads` - every model/dataset that "left the
  machine" (kind, name, size, sha256), for "nothing is uploaded unless ..." tests;
* fault injection: :meth:`go_offline` (no network: connection refused or name lookup failed),
  :meth:`reject_next_submits` (HTTP status on job creation: 429 -> rate limit,
  other 4xx -> ``UserError``, 5xx -> ``InternalError``), :meth:`fail_next_polls` (job-status
  requests fail with ``InternalError``), :meth:`fail_next_job` (the job ends
  ``FAILED`` with a message), :meth:`hang_next_job` (the job never finishes until the server limit
  :attr:`server_job_limit` fails it), :attr:`max_dataset_bytes` (HTTP 413 on upload);
  :meth:`apply_plan` applies a JSON list of them (from ``$QAI_HUB_DOUBLE_PLAN`` at every reset);
* :attr:`events` — every upload and job as a dict, also appended as JSON lines to the file named by
  ``$QAI_HUB_DOUBLE_LOG`` (so a test can count what child processes sent).

State progressions (client.py ``CompileJob``/``InferenceJob`` ``in_progress_states``):
compile ``CREATED -> OPTIMIZING_MODEL -> SUCCESS|FAILED``; inference ``CREATED ->
PROVISIONING_DEVICE -> RUNNING_INFERENCE`` (``MEASURING_PERFORMANCE`` when profiling) ``->
SUCCESS|FAILED``. Durations per state: :attr:`durations` (simulated seconds).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections import deque
from dataclasses import dataclass, field

from ._clock import ManualClock
from ._http import http_error
from ._types import Device, JobStatus

__all__ = ["Farm", "JobRecord", "StoredModel", "DEFAULT_DEVICES"]

_S = JobStatus.State

#: illustrative catalog; names and attribute spellings follow client.py ``Device`` docs
DEFAULT_DEVICES = (
    Device("Samsung Galaxy S25", "15", ["chipset:qualcomm-snapdragon-8-elite", "os:android", "format:phone",
                                         "vendor:samsung", "framework:qnn", "framework:onnx", "framework:tflite"]),
    Device("Samsung Galaxy S24", "14", ["chipset:qualcomm-snapdragon-8gen3", "os:android", "format:phone",
                                         "vendor:samsung", "framework:qnn", "framework:onnx", "framework:tflite"]),
    Device("Snapdragon 8 Elite QRD", "15", ["chipset:qualcomm-snapdragon-8-elite", "os:android", "format:phone",
                                             "framework:qnn", "framework:onnx", "framework:tflite"]),
    Device("Snapdragon X Elite CRD", "11", ["chipset:qualcomm-snapdragon-x-elite", "os:windows", "format:compute",
                                             "framework:qnn", "framework:onnx"]),
)


@dataclass
class StoredModel:
    """One model on the service: ``kind`` is the SourceModelType name, ``payload`` the ONNX
    ``ModelProto`` (sources) or the double's target bytes, ``producer`` a job id or None."""

    model_id: str
    name: str
    kind: str
    payload: object
    created: float
    producer: str | None = None


@dataclass
class JobRecord:
    """One job: kind ``compile``/``inference``, its state schedule, its outcome."""

    job_id: str
    kind: str
    name: str
    created: float
    schedule: list
    options: str
    device: Device
    model_id: str
    plan: str | None = None
    failure: str | None = None
    result: dict = field(default_factory=dict)


class Farm:
    """The simulated service; see the module docstring. ``reset()`` restores the defaults."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every model, dataset, job, injected fault and upload record; the clock restarts at 0
        (the same object, so clients holding it stay in step); then apply ``$QAI_HUB_DOUBLE_PLAN``."""
        if getattr(self, "clock", None) is None:
            self.clock = ManualClock()
        self.clock.now = 0.0
        self.clock.slept.clear()
        self.events: list = []
        self.tokens = {"test-double-token"}
        self.devices = list(DEFAULT_DEVICES)
        self.models: dict = {}
        self.datasets: dict = {}
        self.jobs: dict = {}
        self.uploads: list = []
        self.calls: list = []
        self.durations = {"CREATED": 5.0, "OPTIMIZING_MODEL": 60.0, "PROVISIONING_DEVICE": 30.0,
                          "RUNNING_INFERENCE": 20.0, "MEASURING_PERFORMANCE": 40.0}
        self.server_job_limit = 6 * 3600.0
        self.max_dataset_bytes: int | None = None
        self.cpu_op_types: set = set()
        self.layer_time_us = 10
        self.output_hook = None
        self._ids = itertools.count(1)
        self._rejections: deque = deque()
        self._plans: deque = deque()
        self._poll_failures: deque = deque()
        self.unreachable: str | None = None
        plan = os.environ.get("QAI_HUB_DOUBLE_PLAN", "").strip()
        if plan:
            self.apply_plan(json.loads(plan))

    def apply_plan(self, plan: list) -> None:
        """Apply fault injections given as data, e.g. ``[{"call": "fail_next_job", "message": "boom",
        "kind": "inference"}, {"call": "reject_next_submits", "count": 2, "status": 429},
        {"set": "max_dataset_bytes", "value": 1000}]``."""
        allowed = {"reject_next_submits", "fail_next_job", "hang_next_job", "fail_next_polls", "go_offline"}
        for item in plan:
            item = dict(item)
            if "set" in item:
                setattr(self, item["set"], item["value"])
                continue
            call = item.pop("call")
            if call not in allowed:
                raise ValueError(f"unknown fault injection {call!r}; known: {sorted(allowed)}")
            getattr(self, call)(**item)

    def log_event(self, **event) -> None:
        """Record ``event`` in :attr:`events` and append it to ``$QAI_HUB_DOUBLE_LOG`` when set."""
        event = {"pid": os.getpid(), **event}
        self.events.append(event)
        path = os.environ.get("QAI_HUB_DOUBLE_LOG")
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(event, default=str) + "\n")

    # -- fault injection ---------------------------------------------------------------------
    def reject_next_submits(self, count: int = 1, status: int = 429, message: str | None = None) -> None:
        """The next ``count`` job creations answer HTTP ``status`` (after the client's own
        transport retries, which the double charges to the clock)."""
        for _ in range(count):
            self._rejections.append((status, message))

    def fail_next_job(self, message: str = "Job failed (injected by the test double).", kind: str | None = None):
        """The next job (of ``kind`` ``compile``/``inference`` when given) ends ``FAILED`` with ``message``."""
        self._plans.append((kind, "fail", message))

    def hang_next_job(self, kind: str | None = None) -> None:
        """The next job (of ``kind`` when given) keeps running until :attr:`server_job_limit`."""
        self._plans.append((kind, "hang", None))

    def fail_next_polls(self, count: int = 1, status: int = 503) -> None:
        """The next ``count`` job-status requests fail with HTTP ``status`` (the real client's
        transport retries exhausted: ``InternalError``)."""
        self._poll_failures.extend([status] * count)

    def go_offline(self, cause: str = "refused") -> None:
        """Every request fails as the real client fails without a network: after its transport
        retries (charged to the clock), ``InternalError("… Could not connect to …")`` from a
        connection error whose chain holds the OS error — ``cause`` ``"refused"``
        (``ConnectionRefusedError``) or ``"dns"`` (``socket.gaierror``)."""
        if cause not in ("refused", "dns"):
            raise ValueError(f"cause must be 'refused' or 'dns', got {cause!r}")
        self.unreachable = cause

    # -- service internals used by the double's client --------------------------------------
    def take_poll_failure(self) -> None:
        if self._poll_failures:
            raise http_error(self._poll_failures.popleft(), None, "https://workbench.aihub.qualcomm.com")

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):07d}"

    def take_rejection(self):
        return self._rejections.popleft() if self._rejections else None

    def take_plan(self, kind: str):
        for i, (want, plan, message) in enumerate(self._plans):
            if want in (None, kind):
                del self._plans[i]
                return plan, message
        return None, None

    def record_upload(self, kind: str, name: str, data: bytes) -> None:
        upload = {"kind": kind, "name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                  "time": self.clock.now}
        self.uploads.append(upload)
        self.log_event(event="upload", **upload)

    def status(self, job: JobRecord) -> JobStatus:
        """The job's status at the current simulated time."""
        elapsed = self.clock.now - job.created
        if job.plan == "hang":
            if elapsed >= self.server_job_limit:
                return JobStatus(_S.FAILED, f"Job timed out after {int(self.server_job_limit)} seconds "
                                            f"(server limit, simulated by the test double).")
            t = 0.0
            for state, duration in job.schedule:
                t += duration
                if elapsed < t:
                    return JobStatus(_S[state])
            return JobStatus(_S[job.schedule[-1][0]])
        t = 0.0
        for state, duration in job.schedule:
            t += duration
            if elapsed < t:
                return JobStatus(_S[state])
        if job.failure is not None:
            return JobStatus(_S.FAILED, job.failure)
        return JobStatus(_S.SUCCESS)

    def schedule(self, kind: str, profiling: bool) -> list:
        names = (["CREATED", "OPTIMIZING_MODEL"] if kind == "compile" else
                 ["CREATED", "PROVISIONING_DEVICE", "MEASURING_PERFORMANCE" if profiling else "RUNNING_INFERENCE"])
        return [(n, self.durations[n]) for n in names]
