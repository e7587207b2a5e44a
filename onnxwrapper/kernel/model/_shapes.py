"""Static shape specialization of models with dynamic or partially fixed input dims, in memory.

Compilers such as the QNN EP refuse dynamic shapes (``EP_FAIL: Dynamic shape is not supported
yet, for input: …``; with a symbolic batch the QNN EP silently takes no node at all — measured on
onnxruntime-qnn 2.7.0). A backend therefore compiles one static copy of the model per feed
shape. This module makes that copy:

* :func:`input_dims` / :func:`dynamic_inputs` read the declared input dims (``int`` fixed,
  ``str`` named ``dim_param``, ``None`` unknown) of the graph inputs that are not initializers.
* :func:`specialize` returns a new ``onnx.ModelProto`` whose inputs have the given static shapes:
  the input dims are set directly (named *and* unnamed ones), and each named dim with one
  consistent size is fixed graph-wide with ``onnxruntime.tools.onnx_model_utils.make_dim_param_fixed``
  (every value_info/output using that ``dim_param``, subgraphs included).
  ``SessionOptions.add_free_dimension_override_by_name`` is not used because it cannot fix
  unnamed dims, cannot give one ``dim_param`` two sizes, and applies to the whole session rather
  than to the model that is compiled.

The user's model file is never modified and nothing is written to disk here; external-data
references are kept as they are (load the copy with the model's folder as external-data folder,
e.g. ORT session config ``session.model_external_initializers_file_folder_path``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

__all__ = ["input_dims", "dynamic_inputs", "is_static", "specialize", "shapes_note"]


def input_dims(model) -> dict[str, list]:
    """Declared dims of each real graph input (initializers excluded), in graph order.

    Args:
        model: ``onnx.ModelProto``.

    Returns:
        ``{input name: [dim, …]}`` with ``int`` for fixed dims, ``str`` for named symbolic dims
        and ``None`` for unknown dims; ``[]`` for scalars and non-tensor inputs; inputs without
        any shape information map to ``None``.
    """
    inits = {i.name for i in model.graph.initializer}
    result: dict[str, list] = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        tensor = value.type.tensor_type if value.type.HasField("tensor_type") else None
        if tensor is None:
            result[value.name] = []
            continue
        if not tensor.HasField("shape"):
            result[value.name] = None
            continue
        dims = []
        for d in tensor.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append(None)
        result[value.name] = dims
    return result


def dynamic_inputs(model) -> dict[str, list]:
    """The subset of :func:`input_dims` whose shape is not fully static (or unknown)."""
    return {name: dims for name, dims in input_dims(model).items()
            if dims is None or any(not isinstance(d, int) for d in dims)}


def is_static(model) -> bool:
    """True when every real graph input has a fully fixed shape."""
    return not dynamic_inputs(model)


def _walk_graphs(graph):
    """``graph`` and every subgraph of its nodes' attributes (If/Loop/Scan bodies), recursively."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _walk_graphs(attr.g)
            for sub in attr.graphs:
                yield from _walk_graphs(sub)


def _forget_dim_params(graph, names: set[str]) -> None:
    """Turn every dim whose ``dim_param`` is in ``names`` into an unknown dim (ORT re-infers it)."""
    for g in _walk_graphs(graph):
        for value in list(g.input) + list(g.output) + list(g.value_info):
            if not value.type.HasField("tensor_type"):
                continue
            for dim in value.type.tensor_type.shape.dim:
                if dim.HasField("dim_param") and dim.dim_param in names:
                    dim.Clear()


def specialize(model, shapes: Mapping[str, Sequence[int]]):
    """A copy of ``model`` with the given static input shapes.

    Named dims (``dim_param``) that get one size from every feed are fixed graph-wide
    (``onnxruntime.tools.onnx_model_utils.make_dim_param_fixed``: value_info, outputs, subgraphs),
    so ORT and the QNN EP see a fully static graph. A ``dim_param`` that gets *different* sizes —
    exporters such as paddle2onnx write ``"?"`` for every unknown dim, e.g. ``[None, 3, "?", "?"]``
    fed with 48×192 — is treated as independent unknown dims, as ORT itself does: the inputs get
    their sizes and the other occurrences become unknown dims that ORT's shape inference fills in.

    Args:
        model: ``onnx.ModelProto`` (not modified).
        shapes: ``{input name: shape}`` with positive ``int`` dims, e.g. ``{"X": (2, 3, 64, 48)}``;
            typically the shapes of one validated feed. Inputs that are already static may be
            omitted or given with their own shape.

    Returns:
        A new ``onnx.ModelProto``.

    Raises:
        onnxruntime ``InvalidArgument``: an unknown input name, a non-positive dim, a rank
            mismatch, or a dim that contradicts a fixed dim (the checks ORT's run does first).
    """
    import onnx
    from onnxruntime.capi import onnxruntime_pybind11_state as C
    from onnxruntime.tools.onnx_model_utils import make_dim_param_fixed, remove_invalid_dim_values

    prefix = "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "
    declared = input_dims(model)
    wanted: dict[str, list[int]] = {}
    sizes: dict[str, set[int]] = {}
    for name, shape in shapes.items():
        dims = [int(d) for d in shape]
        if name not in declared:
            raise C.InvalidArgument(f"{prefix}Invalid input name: {name}")
        if any(d <= 0 for d in dims):
            raise C.InvalidArgument(f"{prefix}Cannot compile a static specialization of input '{name}' with shape "
                                    f"{dims}: every dim must be positive.")
        decl = declared[name]
        if decl is not None and len(decl) != len(dims):
            raise C.InvalidArgument(f"{prefix}Cannot specialize input '{name}': Rank mismatch. Existing:{len(decl)} "
                                    f"Replacement:{len(dims)}")
        for index, (d, size) in enumerate(zip(decl or [], dims)):
            if isinstance(d, int) and d != size:
                raise C.InvalidArgument(f"{prefix}Cannot specialize input '{name}': Can't replace existing fixed "
                                        f"size of {d} with {size} for dimension {index + 1}")
            if isinstance(d, str):
                sizes.setdefault(d, set()).add(size)
        wanted[name] = dims

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    remove_invalid_dim_values(copy.graph)
    for value in copy.graph.input:
        if value.name in wanted:
            shape = value.type.tensor_type.shape
            del shape.dim[:]
            for size in wanted[value.name]:
                shape.dim.add().dim_value = size
    for param, values in sorted(sizes.items()):
        if len(values) == 1:
            make_dim_param_fixed(copy.graph, param, next(iter(values)))
    _forget_dim_params(copy.graph, {param for param, values in sizes.items() if len(values) > 1})
    return copy


def shapes_note(shapes: Mapping[str, Sequence[int]]) -> str:
    """Compact text of a specialization, e.g. ``"X=2x3x64x48, mask=2x64"`` (for logs and reports)."""
    return ", ".join(f"{name}={'x'.join(str(int(d)) for d in shape) or 'scalar'}"
                     for name, shape in sorted(shapes.items()))
