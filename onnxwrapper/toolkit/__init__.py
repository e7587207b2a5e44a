"""The library behind ``aipc inspect``, ``aipc compile`` and ``aipc capture``: model inspection,
static shapes, partition prediction, QDQ quantization and the three-way accuracy check.

* :func:`inspect_model` / :class:`Inspection` — I/O with dynamic dims, opsets, op histogram,
  predicted partition (a real QNN session in a child process, or static rules), patches;
  :func:`inspect_binary` / :func:`format_binary` — what a raw QNN context binary holds;
* :func:`make_static`, :func:`parse_shape_arg`, :func:`parse_dim_arg` — fixing dynamic dims;
* :func:`predict_partition_rules`, :func:`probe_partition`, :func:`rule_reason` — partition
  prediction (:class:`PartitionPrediction` of :class:`NodePrediction`);
* :func:`quantize_qdq` (W8A8, W8A16; :data:`PRECISIONS`) with its opset upgrades
  (:class:`OpsetUpgrade`, :class:`OpsetConversionError`) and fragile-tensor policy
  (:class:`FragilePlan`), calibration data (:class:`CalibrationSet`, :func:`calibration_from_capture`,
  :class:`FeedsDataReader`) and :func:`three_way_check` (:class:`AccuracyReport`, with NaN/Inf per
  run in :class:`RunNonFinite`);
* :func:`run_doctor` / :class:`DoctorReport` / :class:`CanaryResult` — ``aipc doctor``: platform
  facts and canary models compiled and run on the HTP against the CPU.

Importing it imports onnx and onnxruntime; no backend SDK.
"""

from __future__ import annotations

from onnxwrapper.toolkit._inspect import (CPU_EP, OPTIMIZED, QNN_EP, Inspection, NodePrediction, PartitionPrediction,
                                          TensorSummary, format_binary, inspect_binary, inspect_model, make_static,
                                          parse_dim_arg, parse_shape_arg, predict_partition_rules, probe_partition,
                                          rule_reason)
from onnxwrapper.toolkit._doctor import CanaryResult, DoctorReport, run_doctor
from onnxwrapper.toolkit._fragile import FragilePlan
from onnxwrapper.toolkit._opset import OpsetConversionError, OpsetUpgrade
from onnxwrapper.toolkit._quantize import (PRECISIONS, CalibrationError, CalibrationSet, FeedsDataReader, QuantizeResult,
                                           calibration_from_capture, quantize_qdq)
from onnxwrapper.toolkit._three_way import AccuracyReport, Agreement, OutputAccuracy, RunNonFinite, three_way_check

__all__ = [
    "AccuracyReport",
    "Agreement",
    "CPU_EP",
    "CalibrationError",
    "CalibrationSet",
    "CanaryResult",
    "DoctorReport",
    "FeedsDataReader",
    "FragilePlan",
    "Inspection",
    "NodePrediction",
    "OPTIMIZED",
    "OpsetConversionError",
    "OpsetUpgrade",
    "OutputAccuracy",
    "PRECISIONS",
    "PartitionPrediction",
    "QNN_EP",
    "QuantizeResult",
    "RunNonFinite",
    "TensorSummary",
    "calibration_from_capture",
    "format_binary",
    "inspect_binary",
    "inspect_model",
    "make_static",
    "parse_dim_arg",
    "parse_shape_arg",
    "predict_partition_rules",
    "probe_partition",
    "quantize_qdq",
    "rule_reason",
    "run_doctor",
    "three_way_check",
]
