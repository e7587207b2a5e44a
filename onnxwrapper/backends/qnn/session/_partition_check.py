"""The partition verdict of a QNN session: ``strict`` raises, otherwise a warning once per model.

Every way a qnn session gets its compiled model (compile, cache hit, precompiled artifact, shape
specialization, ``compile_model``) ends in :func:`check_partition` with the model's
:class:`~onnxwrapper.kernel.PartitionReport`, so all of them judge a partial offload alike.
"""

from __future__ import annotations

import logging
import threading
import warnings

from onnxwrapper.errors import PartitionError
from onnxwrapper.kernel import PartialOffloadWarning, PartitionReport, user_stacklevel

__all__ = ["check_partition", "warn_once"]

_log = logging.getLogger("onnxwrapper.qnn")
_warned: set[str] = set()
_warned_lock = threading.Lock()


def check_partition(report: PartitionReport, *, strict: bool, label: str, warn_key: str,
                    stacklevel: int | None = None) -> None:
    """Raise under ``strict`` if any node is off QNN; otherwise warn once per ``warn_key``.

    Not warned (logged at INFO only): a QDQ model whose only CPU nodes are the graph-IO
    QuantizeLinear/DequantizeLinear that the QNN EP leaves on CPU by its default
    ``offload_graph_io_quantization=1`` (set it to ``"0"`` through ``provider_options`` to run them on
    the NPU too).

    The warning is a :class:`~onnxwrapper.kernel.session._partition.PartialOffloadWarning` attributed
    ``stacklevel`` frames up (default: the user's call, :func:`onnxwrapper.kernel.user_stacklevel`); the same
    text is logged at INFO on
    logger ``onnxwrapper.qnn``.

    Raises:
        PartitionError: ``strict`` and at least one node runs on another EP (lists them).
    """
    off = report.offloaded_nodes
    if not off:
        return
    listed = ", ".join(f"{n.name or '<unnamed>'} ({n.op_type})" for n in off[:20]) + (" …" if len(off) > 20 else "")
    if strict:
        raise PartitionError(f"strict=True but {len(off)} node(s) of {label} would run outside the QNN EP: {listed}. "
                             f"Partition: {report.summary()}. Replace or remove these ops, or drop strict.",
                             backend="qnn", cpu_nodes=report.cpu_nodes)
    if all(n.op_type in _IO_QDQ_OPS for n in off):
        # QDQ models: the graph-input Quantize / graph-output Dequantize stay on CPU by the QNN EP's
        # default offload_graph_io_quantization=1 — expected, reported in the partition, no warning.
        _log.info("onnxwrapper qnn: %s runs on the QNN NPU except its graph-input/output (de)quantization "
                  "(%s), which the QNN EP leaves on CPU by its default offload_graph_io_quantization=1 "
                  "(expected for QDQ models): %s", label, listed, report.summary())
        return
    message = (f"Only part of {label} runs on the QNN NPU: {report.summary()}. CPU nodes: {listed}. "
               f"Use session.get_partition() for the per-node list, or backend_options={{'strict': True}} to fail.")
    warn_once(warn_key, message, stacklevel=None if stacklevel is None else stacklevel + 1)


def warn_once(warn_key: str, message: str, *, stacklevel: int | None = None) -> None:
    """Log ``message`` at INFO and warn it as a :class:`~onnxwrapper.kernel.PartialOffloadWarning` the
    first time ``warn_key`` (a model's identity) is seen in this process (thread-safe). ``stacklevel``
    counts from the caller of this function; default: the user's call
    (:func:`onnxwrapper.kernel.user_stacklevel`)."""
    _log.info("onnxwrapper qnn: %s", message)
    with _warned_lock:
        if warn_key in _warned:
            return
        _warned.add(warn_key)
    warnings.warn(message, PartialOffloadWarning, stacklevel=user_stacklevel() if stacklevel is None else stacklevel + 1)


_IO_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
