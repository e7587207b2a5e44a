"""Judging: the metrics, the tolerances and the verdicts of a diff, at the tensor and the app level.

The third stage of :mod:`onnxwrapper.diff` (capture → runs → judge → localize → report):
:func:`compare_captures` compares every output of every call of the runs' captures with the
reference's (metric functors of :mod:`onnxwrapper.diff.metrics`, thresholds of :class:`Tolerance`),
:func:`judge_runs` does it for a diff folder's runs, :func:`judge_app` compares what the script
itself printed and wrote. The result is plain data (:class:`DiffResult` and its parts) whose
methods render it through :mod:`onnxwrapper.diff._report`. Builds on the capture and the runs
stages.
"""

from __future__ import annotations

from onnxwrapper.diff._judge import _metrics as metrics
from onnxwrapper.diff._judge._app_level import NONE, STDOUT, judge_app, needs_rerun
from onnxwrapper.diff._judge._compare import compare_arrays, compare_captures
from onnxwrapper.diff._judge._judge_runs import judge_runs
from onnxwrapper.diff._judge._metrics import FP16_MAX, ArrayPair, compute_metrics
from onnxwrapper.diff._judge._result import (EXIT_BACKEND_FAILED, EXIT_MISMATCH, EXIT_NOTHING_TO_REPAIR, EXIT_OK, EXIT_USAGE,
                                             STATES, AppComparison, CallComparison, DiffAssertionError, DiffResult,
                                             Localization, OutputSummary)
from onnxwrapper.diff._judge._tolerance import (PRESETS, Tolerance, Tolerances, as_tolerances, error_budget, parse_tol_override,
                                                precision_for, snr_bar_db)

__all__ = [
    "AppComparison", "ArrayPair", "CallComparison", "DiffAssertionError", "DiffResult", "EXIT_BACKEND_FAILED",
    "EXIT_MISMATCH", "EXIT_NOTHING_TO_REPAIR", "EXIT_OK", "EXIT_USAGE", "FP16_MAX", "Localization", "NONE",
    "OutputSummary", "PRESETS", "STATES", "STDOUT", "Tolerance", "Tolerances", "as_tolerances", "compare_arrays",
    "compare_captures", "compute_metrics", "error_budget", "judge_app", "judge_runs", "metrics", "needs_rerun",
    "parse_tol_override", "precision_for", "snr_bar_db",
]
