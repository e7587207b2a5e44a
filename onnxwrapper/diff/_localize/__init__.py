"""Localizing: which node of a failing model breaks, and why.

The fourth stage of :mod:`onnxwrapper.diff` (capture → runs → judge → localize → report):
:func:`localize_failures` re-runs each failing model with intermediate tensors exposed as graph
outputs (:func:`candidate_tensors`, :func:`expose_tensors`; in the child process:
:func:`run_exposed`), judges them against the reference and names the cause — the node that
breaks, an FP16 overflow, underflow or saturation, or error that accumulates — as a
:class:`~onnxwrapper.diff.Localization` of the result. Builds on the capture, runs and judge stages.
"""

from __future__ import annotations

from onnxwrapper.diff._localize._expose import candidate_tensors, expose_tensors, run_exposed
from onnxwrapper.diff._localize._runs import localize_failures
from onnxwrapper.diff._localize._underflow import FP16_MIN_NORMAL, sensitive_consumers

__all__ = ["FP16_MIN_NORMAL", "candidate_tensors", "expose_tensors", "localize_failures", "run_exposed",
           "sensitive_consumers"]
