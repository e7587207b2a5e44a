"""Static shape specialization of models with dynamic or partially fixed input dims, in memory.

Compilers such as the QNN EP refuse dynamic shapes (``EP_FAIL: Dynamic shape is not supported
yet, for input: …``; with a symbolic batch the QNN EP silently takes no node at all — measured on
onnxruntime-qnn 2.7.0). A backend therefore compiles one static copy of the model per feed
shape. This module makes that copy:

* :func:`input_dims` / :func:`dynamic_inputs` read the declared input dims (``int`` fixed,
  ``str`` named ``dim_param``, ``None`` unknown) of the graph inputs that are not initializers.
* :func:`specialize` returns a new ``onnx.ModelProto`` whose inputs have the given static shapes:
  the input dims are set directly (named *and* unnamed ones); every other shape — outputs,
  intermediates, subgraphs — is inferred from them, never copied from a ``dim_param`` of the
  same name (names are hints: exported models reuse them for tensors of another size).
  ``SessionOptions.add_free_dimension_override_by_name`` is not used because it cannot fix
  unnamed dims, fixes names graph-wide, and applies to the whole session rather than to the
  model that is compiled.

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


def specialize(model, shapes: Mapping[str, Sequence[int]]):
    """A copy of ``model`` with the given static input shapes; every other shape is inferred.

    Only the call's own input shapes are bound. A ``dim_param`` is a hint, not a promise: exporters
    reuse names freely (a waifu2x upscaler names its output ``height``/``width`` like its input
    although the output is larger), so a name's size is never copied onto an output or an
    intermediate tensor. Their symbolic dims are cleared and their shapes inferred from the bound
    inputs with onnx's shape inference (``onnx.shape_inference.infer_shapes``, data propagation on);
    what it cannot say stays unknown, for ORT's own inference when the session is created. A
    declared output shape that contradicts the inferred one loses: the inferred one is written.
    Fixed (integer) dims the model declares are kept where inference does not say otherwise.

    A ``dim_param`` that gets *different* sizes from the feed — exporters such as paddle2onnx write
    ``"?"`` for every unknown dim, e.g. ``[None, 3, "?", "?"]`` fed with 48×192 — is therefore no
    problem: each input gets its own sizes.

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
    from onnxruntime.tools.onnx_model_utils import remove_invalid_dim_values

    prefix = "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "
    declared = input_dims(model)
    wanted: dict[str, list[int]] = {}
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
    inputs = {value.name for value in copy.graph.input}
    _forget_symbolic_dims(copy.graph, keep=inputs)
    _write_inferred_outputs(copy)
    return copy


def _forget_symbolic_dims(graph, keep: set[str]) -> None:
    """Turn every named dim of the graph's outputs and value_info (subgraphs included, their inputs
    too) into an unknown dim: shape inference, not a name, decides them."""
    for g in _walk_graphs(graph):
        values = list(g.output) + list(g.value_info) + ([] if g is graph else list(g.input))
        for value in values:
            if value.name in keep or not value.type.HasField("tensor_type"):
                continue
            for dim in value.type.tensor_type.shape.dim:
                if dim.HasField("dim_param"):
                    dim.Clear()


def _write_inferred_outputs(model) -> None:
    """Give the graph outputs the shapes onnx's shape inference finds for the bound inputs (known
    dims only; a declared fixed dim that inference contradicts is replaced). Best effort: a model
    onnx cannot infer keeps its outputs as they are (ORT infers them when the session is created)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is a refinement; ORT infers again at session creation
        return
    found = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for value in model.graph.output:
        got = found.get(value.name)
        if got is None or not got.type.HasField("tensor_type") or not got.type.tensor_type.HasField("shape"):
            continue
        dims = got.type.tensor_type.shape.dim
        shape = value.type.tensor_type.shape
        if len(shape.dim) and len(shape.dim) != len(dims):
            continue
        if not len(shape.dim):
            shape.dim.extend(onnx.TensorShapeProto.Dimension() for _ in dims)
        for mine, theirs in zip(shape.dim, dims):
            if theirs.HasField("dim_value") and theirs.dim_value > 0:
                mine.Clear()
                mine.dim_value = theirs.dim_value


def shapes_note(shapes: Mapping[str, Sequence[int]]) -> str:
    """Compact text of a specialization, e.g. ``"X=2x3x64x48, mask=2x64"`` (for logs and reports)."""
    return ", ".join(f"{name}={'x'.join(str(int(d)) for d in shape) or 'scalar'}"
                     for name, shape in sorted(shapes.items()))
