"""Running: one child process per backend run, scheduled, and what each run reports.

The second stage of :mod:`onnxwrapper.diff` (capture → runs → judge → localize → report), built on
:mod:`onnxwrapper.diff._capture` only. :func:`run_child` starts one run (``python -m
aipc_loader._diff_child``: the loader owns the child's entry point, the diff names it) and returns
its :class:`BackendRun`; :class:`RunPlan` runs a whole diff (live, replay, automatic replays) as
many at a time as :func:`default_jobs` allows; :func:`run_model` runs one model with generated or
loaded inputs (:func:`generate_inputs`, :func:`load_inputs`). The child side of the protocol —
:func:`write_status`, :func:`replay_batch`, :func:`serve_model_request` — lives here too, so both
ends of ``status.json`` and of a request file are read in one place.
"""

from __future__ import annotations

from onnxwrapper.diff._runs._backend_run import BackendRun
from onnxwrapper.diff._runs._batched import batch_runner, device_notes, replay_batch, write_device_profiles
from onnxwrapper.diff._runs._child_env import child_cwd, child_environment, module_command
from onnxwrapper.diff._runs._labels import check_backend_options, parse_backends
from onnxwrapper.diff._runs._model_child import serve_model_request
from onnxwrapper.diff._runs._model_inputs import ModelInputs, generate_inputs, load_data_loader, load_inputs, model_facts
from onnxwrapper.diff._runs._model_run import ModelRuns, Timing, run_model, timing_lines
from onnxwrapper.diff._runs._orchestrate import Target, crash_name, kill_child, log_tail, run_child
from onnxwrapper.diff._runs._plan import RunPlan
from onnxwrapper.diff._runs._schedule import default_jobs, estimate_run_memory
from onnxwrapper.diff._runs._status import read_status, write_status

__all__ = [
    "BackendRun", "ModelInputs", "ModelRuns", "RunPlan", "Target", "Timing", "batch_runner", "check_backend_options",
    "child_cwd",
    "child_environment", "crash_name", "default_jobs", "device_notes", "estimate_run_memory", "generate_inputs",
    "kill_child", "load_data_loader", "load_inputs", "log_tail", "model_facts", "module_command", "parse_backends",
    "read_status", "replay_batch", "run_child", "run_model", "serve_model_request", "timing_lines",
    "write_device_profiles", "write_status",
]
