"""Backend ``qnn`` (alias ``qairt``): ONNX models on the Qualcomm Hexagon NPU through ONNX Runtime's QNN EP.

What runs where: onnxruntime-qnn's plugin execution provider compiles the ONNX graph (or the parts
it supports) into a QNN context binary for the HTP; unsupported nodes stay on ORT's CPU EP and are
reported (:meth:`partition`, a :class:`~onnxwrapper.kernel._partition.PartialOffloadWarning`), or refused
with ``strict=True``. On Windows on Snapdragon the HTP is the real NPU; on x86-64 Linux it is
Qualcomm's HTP *simulator* (real QNN graphs, device numerics, not device speed).

Session life cycle (:meth:`QnnBackend.open`):

1. options → :class:`~onnxwrapper.backends.qnn._settings.QnnSettings` (default target on a host
   without NPU: Snapdragon X Elite, ``soc_model=60``, so numerics emulate the device's FP16);
2. the process-global QNN configuration is pinned (a conflicting one raises
   :class:`~onnxwrapper.errors.BackendConfigConflictError`);
3. static models: a precompiled artifact next to the model (``<stem>_ctx.onnx`` or a raw context
   binary, see :mod:`onnxwrapper.backends.qnn._artifacts`) wins, else the compile cache
   (:mod:`onnxwrapper.kernel._cache`) returns the EPContext model, compiling it once on a miss;
   dynamic models: a precompiled ``<stem>_ctx*.onnx`` for the feed's shapes, else compiled per
   feed shape at ``run`` (:mod:`onnxwrapper.backends.qnn._session`); a raw QNN context binary
   given as the model path (``*.bin``) is wrapped and run (:mod:`onnxwrapper.backends.qnn._binary`).
   Compiles apply operator patches to nodes QNN leaves on CPU unless ``patches=False``
   (:mod:`onnxwrapper.backends.qnn._patching`).

:func:`compile_model` is the same compile as a public function (used by ``aipc compile``), with
an optional DLC export (``dlc_dir``).
"""

from __future__ import annotations

from onnxwrapper.backends.qnn._artifacts import ResolvedArtifact, register_artifact_resolver
from onnxwrapper.backends.qnn._backend import QnnBackend
from onnxwrapper.backends.qnn._binary import BinaryInfo, GraphInfo, TensorInfo, read_binary_info
from onnxwrapper.backends.qnn._export import CompileResult, compile_model
from onnxwrapper.backends.qnn._op_support import QNN_OP_TYPES, qnn_rejection_reason

__all__ = [
    "BinaryInfo",
    "CompileResult",
    "GraphInfo",
    "QNN_OP_TYPES",
    "QnnBackend",
    "ResolvedArtifact",
    "TensorInfo",
    "compile_model",
    "qnn_rejection_reason",
    "read_binary_info",
    "register_artifact_resolver",
]
