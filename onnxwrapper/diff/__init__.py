"""``onnxwrapper.diff``: run the same script on several backends and judge their numerics.

The Python side of ``aipc diff`` (docs/diff.md). Running is separate from judging:

* **capture** — :func:`start_capture` / :class:`CaptureWriter` record every run call of every
  ``onnxwrapper.InferenceSession`` of a process into an open format; :func:`read_capture` reads it;
* **run** — :func:`run` runs a script (or module) once per backend, each in its own process, in
  live or replay mode, then compares at two levels — every output tensor, and the script's own
  result (stdout, exit status, named files) — and with ``localize=True`` names the node that
  breaks, the overflowing node, or says that the error accumulates;
* **judge** — :func:`check` re-judges a saved diff directory, :func:`compare` any captures, with
  :class:`Tolerance` / :class:`Tolerances` (Polygraphy semantics, precision-aware :data:`PRESETS`)
  and metric functors (:mod:`onnxwrapper.diff.metrics`);
* **model runs** — :func:`run_model` runs one model with generated (:func:`generate_inputs`) or
  loaded (:func:`load_inputs`, :func:`load_data_loader`) inputs on several backends, and
  :func:`compare_model_runs` judges them — and golden outputs saved elsewhere — with the same
  verdicts; :func:`save_tensors` / :func:`read_tensors` are the portable tensor file
  (``aipc run MODEL.onnx``, ``aipc diff --model``);
* **assert** — :func:`assert_backends_agree`, :func:`assert_close` and
  :meth:`DiffResult.assert_passed` raise :class:`DiffAssertionError` with the console table;
* **repair** — :func:`fix` turns a failing diff into a verified repair recipe (:class:`FixResult`;
  ``aipc fix``, docs/repair.md).
* **building blocks** (for ``aipc`` and :mod:`onnxwrapper.toolkit`) — :func:`candidate_tensors` /
  :func:`expose_tensors` make a model's intermediate tensors graph outputs (in memory);
  :func:`parse_size`, :func:`default_jobs` / :func:`estimate_run_memory` (how many runs at once),
  :func:`report_paths`, :data:`REMEDIES` (the remedy kinds :func:`fix` tries) and
  :func:`sha256_file` (the model identity a capture records).

Importing this package imports numpy and onnxwrapper only (no matplotlib, no backend SDK).
"""

from __future__ import annotations

from onnxwrapper.diff._judge import _metrics as metrics
from onnxwrapper.diff._api import check, compare, default_directory, parse_backends, report_paths, run
from onnxwrapper.diff._assert import assert_backends_agree, assert_close
from onnxwrapper.diff._localize._runs import localize_failures
from onnxwrapper.diff._model_compare import compare_model_runs
from onnxwrapper.diff._runs._model_inputs import ModelInputs, generate_inputs, load_data_loader, load_inputs
from onnxwrapper.diff._runs._model_run import ModelRuns, Timing, run_model
from onnxwrapper.diff._capture._values import sha256_file
from onnxwrapper.diff._runs._schedule import default_jobs, estimate_run_memory
from onnxwrapper.diff._capture._tensor_files import TensorSet, read_tensors, save_tensors
from onnxwrapper.diff._capture._writer import (
    DEFAULT_MAX_BYTES,
    FORMAT,
    FORMAT_VERSION,
    CaptureHandle,
    CaptureLimitWarning,
    CaptureWriter,
    start_capture,
)
from onnxwrapper.diff._capture._reader import (
    Call,
    Capture,
    CaptureFormatError,
    ModelInfo,
    SessionInfo,
    TensorSpec,
    read_capture,
)
from onnxwrapper.diff._judge._compare import compare_arrays, compare_captures
from onnxwrapper.diff._report._console_text import console_safe
from onnxwrapper.diff._localize._expose import candidate_tensors, expose_tensors
from onnxwrapper.diff._capture._files import parse_size
from onnxwrapper.repair.fix._api import fix
from onnxwrapper.repair.fix._candidates import REMEDIES
from onnxwrapper.repair.fix._result import FixResult
from onnxwrapper.diff._judge._result import (
    EXIT_BACKEND_FAILED,
    EXIT_MISMATCH,
    EXIT_NOTHING_TO_REPAIR,
    EXIT_OK,
    EXIT_USAGE,
    STATES,
    AppComparison,
    BackendRun,
    CallComparison,
    DiffAssertionError,
    DiffResult,
    Localization,
    OutputSummary,
)
from onnxwrapper.diff._judge._tolerance import (
    PRESETS,
    Tolerance,
    Tolerances,
    error_budget,
    parse_tol_override,
    precision_for,
    snr_bar_db,
)

__all__ = [  # sorted (tests/test_architecture.py); a literal list, so type checkers see the exports
    "AppComparison", "BackendRun", "Call", "CallComparison", "Capture", "CaptureFormatError", "CaptureHandle",
    "CaptureLimitWarning", "CaptureWriter", "DEFAULT_MAX_BYTES", "DiffAssertionError", "DiffResult",
    "EXIT_BACKEND_FAILED", "EXIT_MISMATCH", "EXIT_NOTHING_TO_REPAIR", "EXIT_OK", "EXIT_USAGE", "FORMAT", "FORMAT_VERSION", "FixResult",
    "Localization", "ModelInfo", "ModelInputs", "ModelRuns", "OutputSummary", "PRESETS", "REMEDIES", "STATES",
    "SessionInfo", "TensorSet", "TensorSpec", "Timing", "Tolerance", "Tolerances", "assert_backends_agree",
    "assert_close", "candidate_tensors", "check", "compare", "compare_arrays", "compare_captures",
    "compare_model_runs", "console_safe", "default_directory", "default_jobs", "error_budget",
    "estimate_run_memory", "expose_tensors", "fix", "generate_inputs", "load_data_loader", "load_inputs",
    "localize_failures", "metrics",
    "parse_backends", "parse_size", "parse_tol_override", "precision_for", "read_capture", "read_tensors",
    "report_paths", "run", "run_model", "save_tensors", "sha256_file", "snr_bar_db", "start_capture",
]
