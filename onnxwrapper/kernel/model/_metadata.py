"""Metadata records for backends that do not run through ONNX Runtime.

``onnxruntime.NodeArg`` and ``onnxruntime.ModelMetadata`` cannot be constructed from Python, so
foreign backends (qai_appbuilder, SNPE) report these look-alikes: same attribute names, same
``str()`` form, same value conventions (``shape`` entries are ``int`` for fixed dims, ``str`` for
symbolic dims, ``None`` for unknown; ``type`` strings like ``"tensor(float)"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["NodeArgInfo", "ModelMetadataInfo", "node_args_from_onnx", "modelmeta_from_onnx"]


@dataclass(frozen=True)
class NodeArgInfo:
    """Input or output description with ``onnxruntime.NodeArg``'s attributes.

    Attributes:
        name: the ONNX tensor name.
        type: ORT type string, e.g. ``"tensor(float)"``, ``"tensor(uint8)"``.
        shape: list of dims (``int`` | ``str`` | ``None``), ``[]`` for scalars.
    """

    name: str
    type: str
    shape: list = field(default_factory=list)

    def __str__(self) -> str:
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"

    __repr__ = __str__


@dataclass(frozen=True)
class ModelMetadataInfo:
    """Model metadata with ``onnxruntime.ModelMetadata``'s attributes (empty strings by default)."""

    producer_name: str = ""
    graph_name: str = ""
    domain: str = ""
    description: str = ""
    graph_description: str = ""
    version: int = 0
    custom_metadata_map: dict = field(default_factory=dict)


def _ort_type(type_proto) -> str:
    from onnx import helper

    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        name = helper.tensor_dtype_to_np_dtype(type_proto.tensor_type.elem_type)
        return f"tensor({_ORT_NAMES.get(name.name, name.name)})"
    if which == "sequence_type":
        return f"seq({_ort_type(type_proto.sequence_type.elem_type)})"
    if which == "optional_type":
        return f"optional({_ort_type(type_proto.optional_type.elem_type)})"
    return "unknown"


_ORT_NAMES = {"float32": "float", "float64": "double", "object": "string", "bool": "bool",
              "float16": "float16"}


def _shape(type_proto) -> list:
    """Declared dims as ORT reports them: ``int`` fixed, ``str`` symbolic, ``None`` unknown — a negative
    ``dim_value`` included (exporters write ``-1`` for a free dim; ORT reports it as ``None``, measured
    with onnxruntime 1.32 on RapidOCR's classifier, input ``x`` ``[-1, 3, '?', '?']``)."""
    if type_proto.WhichOneof("value") != "tensor_type" or not type_proto.tensor_type.HasField("shape"):
        return []
    dims = []
    for d in type_proto.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))  # a negative dim_value (paddle2onnx writes -1) is unknown: ORT says None
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dims


def node_args_from_onnx(model) -> tuple[list[NodeArgInfo], list[NodeArgInfo]]:
    """Inputs (initializers excluded) and outputs of an ``onnx.ModelProto`` as :class:`NodeArgInfo`.

    Shapes are the declared ones (ORT additionally infers missing output shapes; a foreign
    backend reports what the model declares).
    """
    inits = {i.name for i in model.graph.initializer}
    ins = [NodeArgInfo(v.name, _ort_type(v.type), _shape(v.type)) for v in model.graph.input
           if v.name not in inits]
    outs = [NodeArgInfo(v.name, _ort_type(v.type), _shape(v.type)) for v in model.graph.output]
    return ins, outs


def modelmeta_from_onnx(model) -> ModelMetadataInfo:
    """The :class:`ModelMetadataInfo` ORT would report for an ``onnx.ModelProto``."""
    return ModelMetadataInfo(
        producer_name=model.producer_name, graph_name=model.graph.name, domain=model.domain,
        description=model.doc_string, graph_description=model.graph.doc_string,
        version=int(model.model_version),
        custom_metadata_map={p.key: p.value for p in model.metadata_props})
