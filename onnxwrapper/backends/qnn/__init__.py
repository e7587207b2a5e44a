"""Backend ``qnn`` (alias ``qairt``): ONNX models on the Qualcomm Hexagon NPU through ONNX Runtime's QNN EP.

What runs where: onnxruntime-qnn's plugin execution provider compiles the ONNX graph (or the parts
it supports) into a QNN context binary for the HTP; unsupported nodes stay on ORT's CPU EP and are
reported (:meth:`partition`, a :class:`~onnxwrapper.kernel.session._partition.PartialOffloadWarning`), or refused
with ``strict=True``. On Windows on Snapdragon the HTP is the real NPU; on x86-64 Linux it is
Qualcomm's HTP *simulator* (real QNN graphs, device numerics, not device speed).

Session life cycle (:meth:`QnnBackend.open`):

1. options → :class:`~onnxwrapper.backends.qnn.settings._settings.QnnSettings` (default target on a host
   without NPU: Snapdragon X Elite, ``soc_model=60``, so numerics emulate the device's FP16; always an
   explicit ``soc_model``, 30 for fp32, so nothing depends on the process's earlier QNN sessions);
2. compiles run in worker processes (:mod:`onnxwrapper.backends.qnn.workers._workers`): a compiler crash
   is a :class:`~onnxwrapper.errors.BackendCompileError`, this process only loads compiled models;
3. static models: a verified precompiled ``<stem>_ctx.onnx`` next to the model (its provenance
   record names this model, see :mod:`onnxwrapper.backends.qnn.artifacts._artifacts`) wins, else the compile
   cache (:mod:`onnxwrapper.kernel.cache._cache`) returns the EPContext model, compiling it once on a miss;
   models with dynamic dims or control inputs: a verified ``<stem>_ctx*.onnx`` for the feed's
   signature, else compiled per signature at ``run`` (:mod:`onnxwrapper.backends.qnn.session._session`),
   control flow folded first (:mod:`onnxwrapper.backends.qnn.model._specialize`); a raw QNN context binary
   given as the model path (``*.bin``) is wrapped and run (:mod:`onnxwrapper.backends.qnn.binary._binary`).
   Compiles apply operator patches to nodes QNN leaves on CPU unless ``patches=False``
   (:mod:`onnxwrapper.backends.qnn.pipeline._patching`).

:func:`compile_model` is the same compile as a public function (used by ``aipc compile``), with
an optional DLC export (``dlc_dir``); :func:`precompile` fills the compile cache for many
signatures at once (``jobs`` workers; :func:`default_jobs` suggests how many; used by ``aipc
compile --from-capture``); :class:`WorkerPool` / :func:`compile_many` / :class:`CompileRequest`
are the worker layer under both.
"""

from __future__ import annotations

import importlib
from typing import Any as _Any

from onnxwrapper.backends.qnn._backend import QnnBackend

# Everything but the backend class is imported on first use (PEP 562): opening a session whose
# compiled model is in the cache needs none of it, and importing it all (onnx, the operator patches,
# the repair recipes, the compile-worker layer) costs a new process 60-140 ms (measured, x86-64).
_LAZY = {
    "ResolvedArtifact": "artifacts",
    "register_artifact_resolver": "artifacts",
    "BinaryInfo": "binary",
    "GraphInfo": "binary",
    "TensorInfo": "binary",
    "read_binary_info": "binary",
    "CompileResult": "_export",
    "compile_model": "_export",
    "QNN_OP_TYPES": "_op_support",
    "qnn_rejection_reason": "_op_support",
    "PrecompileResult": "_precompile",
    "default_jobs": "_precompile",
    "precompile": "_precompile",
    "CompileRequest": "workers",
    "WorkerPool": "workers",
    "compile_many": "workers",
    "DeviceSoc": "platform",
    "HtpDevice": "platform",
    "SocTarget": "platform",
    "TARGETS": "platform",
    "choose_htp_device": "platform",
    "qnn_platform_facts": "platform",
}

__all__ = [
    "BinaryInfo",
    "CompileRequest",
    "CompileResult",
    "DeviceSoc",
    "GraphInfo",
    "HtpDevice",
    "PrecompileResult",
    "QNN_OP_TYPES",
    "QnnBackend",
    "ResolvedArtifact",
    "SocTarget",
    "TARGETS",
    "TensorInfo",
    "WorkerPool",
    "choose_htp_device",
    "compile_many",
    "compile_model",
    "default_jobs",
    "precompile",
    "qnn_platform_facts",
    "qnn_rejection_reason",
    "read_binary_info",
    "register_artifact_resolver",
]


def __getattr__(name: str) -> _Any:
    """The public names above other than :class:`QnnBackend`, imported from their module on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
