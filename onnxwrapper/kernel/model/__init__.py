"""The model a session was asked for: :class:`ModelSource` (path or bytes, read lazily, hashed)
and the digest hints that spare a new process the hash, metadata look-alikes of ORT's
``NodeArg`` / ``ModelMetadata``, static shape specialization, and control flow (the ``If`` nodes a
specialization decides, folded).
"""

from __future__ import annotations

from onnxwrapper.kernel.model._control_flow import control_scalars, has_control_flow
from onnxwrapper.kernel.model._digest_hints import record_digest, recorded_digest
from onnxwrapper.kernel.model._if_folding import bind_inputs, fold_ifs
from onnxwrapper.kernel.model._metadata import ModelMetadataInfo, NodeArgInfo, modelmeta_from_onnx, node_args_from_onnx
from onnxwrapper.kernel.model._model_source import ModelSource
from onnxwrapper.kernel.model._shapes import dynamic_inputs, input_dims, is_static, shapes_note, specialize

__all__ = [
    "ModelMetadataInfo",
    "ModelSource",
    "NodeArgInfo",
    "bind_inputs",
    "control_scalars",
    "dynamic_inputs",
    "fold_ifs",
    "has_control_flow",
    "input_dims",
    "is_static",
    "modelmeta_from_onnx",
    "node_args_from_onnx",
    "record_digest",
    "recorded_digest",
    "shapes_note",
    "specialize",
]
