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
* **repair** — :func:`onnxwrapper.repair.fix.fix` turns a failing diff into a verified repair recipe
  (``aipc fix``, docs/repair.md); ``fix``, ``FixResult`` and ``REMEDIES`` moved there and are still
  reachable here, with a :class:`DeprecationWarning`, for one release.
* **building blocks** (for ``aipc`` and :mod:`onnxwrapper.toolkit`) — :func:`candidate_tensors` /
  :func:`expose_tensors` make a model's intermediate tensors graph outputs (in memory);
  :func:`parse_size`, :func:`default_jobs` / :func:`estimate_run_memory` (how many runs at once),
  :func:`report_paths` and :func:`sha256_file` (the model identity a capture records).

The implementation is one subpackage per stage of the pipeline, each importing only the stages
before it: ``_capture`` (the files: captures, tensor files, the diff folder's manifest) → ``_runs``
(one child process per backend run) → ``_report`` (rendering; the result's own methods call it) →
``_judge`` (metrics, tolerances, verdicts, :class:`DiffResult`) → ``_localize``; ``_api`` chains
them (:func:`run`, :func:`check`), with ``_model_compare`` and ``_assert`` beside it
(docs/architecture.md). Their modules are private: this package is the public surface.

Importing this package imports numpy and onnxwrapper only (no matplotlib, no backend SDK).
"""

from __future__ import annotations

import typing as _typing
import warnings as _warnings

from onnxwrapper.diff._api import check, compare, default_directory, report_paths, run
from onnxwrapper.diff._assert import assert_backends_agree, assert_close
from onnxwrapper.diff._capture import (DEFAULT_MAX_BYTES, FORMAT, FORMAT_VERSION, Call, Capture, CaptureFormatError,
                                       CaptureHandle, CaptureLimitWarning, CaptureWriter, ModelInfo, SessionInfo, TensorSet,
                                       TensorSpec, parse_size, read_capture, read_tensors, save_tensors, sha256_file,
                                       start_capture)
from onnxwrapper.diff._judge import (EXIT_BACKEND_FAILED, EXIT_MISMATCH, EXIT_NOTHING_TO_REPAIR, EXIT_OK, EXIT_USAGE, PRESETS,
                                     STATES, AppComparison, CallComparison, DiffAssertionError, DiffResult, Localization,
                                     OutputSummary, Tolerance, Tolerances, compare_arrays, compare_captures, error_budget,
                                     metrics, parse_tol_override, precision_for, snr_bar_db)
from onnxwrapper.diff._localize import candidate_tensors, expose_tensors, localize_failures
from onnxwrapper.diff._model_compare import compare_model_runs
from onnxwrapper.diff._report import console_safe
from onnxwrapper.diff._runs import (BackendRun, ModelInputs, ModelRuns, Timing, default_jobs, estimate_run_memory,
                                    generate_inputs, load_data_loader, load_inputs, parse_backends, run_model)

if _typing.TYPE_CHECKING:  # the moved names' types, for type checkers; at run time __getattr__ below serves them
    from onnxwrapper.repair.fix import REMEDIES, FixResult, fix  # noqa: F401

__all__ = [  # sorted (tests/test_architecture.py); a literal list, so type checkers see the exports
    "AppComparison", "BackendRun", "Call", "CallComparison", "Capture", "CaptureFormatError", "CaptureHandle",
    "CaptureLimitWarning", "CaptureWriter", "DEFAULT_MAX_BYTES", "DiffAssertionError", "DiffResult",
    "EXIT_BACKEND_FAILED", "EXIT_MISMATCH", "EXIT_NOTHING_TO_REPAIR", "EXIT_OK", "EXIT_USAGE", "FORMAT", "FORMAT_VERSION",
    "Localization", "ModelInfo", "ModelInputs", "ModelRuns", "OutputSummary", "PRESETS", "STATES",
    "SessionInfo", "TensorSet", "TensorSpec", "Timing", "Tolerance", "Tolerances", "assert_backends_agree",
    "assert_close", "candidate_tensors", "check", "compare", "compare_arrays", "compare_captures",
    "compare_model_runs", "console_safe", "default_directory", "default_jobs", "error_budget",
    "estimate_run_memory", "expose_tensors", "generate_inputs", "load_data_loader", "load_inputs",
    "localize_failures", "metrics",
    "parse_backends", "parse_size", "parse_tol_override", "precision_for", "read_capture", "read_tensors",
    "report_paths", "run", "run_model", "save_tensors", "sha256_file", "snr_bar_db", "start_capture",
]

#: names that moved to :mod:`onnxwrapper.repair.fix` (the fix builds on this package, so it cannot
#: be imported from here at import time); deprecated aliases for one release
_MOVED_TO_FIX = ("FixResult", "REMEDIES", "fix")


def __getattr__(name: str) -> object:
    """PEP 562: ``onnxwrapper.diff.fix``, ``FixResult`` and ``REMEDIES``, which moved to
    :mod:`onnxwrapper.repair.fix`, with a :class:`DeprecationWarning` naming the new home.

    Raises:
        AttributeError: any other name (as for any module).
    """
    if name in _MOVED_TO_FIX:
        import onnxwrapper.repair.fix as moved  # on use only: onnxwrapper.repair.fix imports the diff's stages

        _warnings.warn(f"onnxwrapper.diff.{name} moved to onnxwrapper.repair.fix.{name}; import it from there "
                      f"(this alias will be removed in the next release)", DeprecationWarning, stacklevel=2)
        return getattr(moved, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
