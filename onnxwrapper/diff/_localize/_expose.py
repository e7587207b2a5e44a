"""Exposing intermediate tensors of a model as extra graph outputs, in memory, and running it.

The rewritten model is serialized to bytes and handed to ``InferenceSession`` — nothing is written
next to the user's model. :func:`run_exposed` is the child-process side of a localization round
(``python -m aipc_loader._diff_child --expose REQUEST.json``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from onnxwrapper import InferenceSession

__all__ = ["Candidate", "candidate_tensors", "expose_tensors", "run_exposed", "load_model"]

_FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16 (onnx.TensorProto enum)


@dataclass(frozen=True)
class Candidate:
    """One exposable tensor: ``tensor`` produced by node number ``index`` (graph order)."""

    index: int
    tensor: str
    node: str
    op_type: str
    est_bytes: int | None = None


def load_model(source):
    """An ``onnx.ModelProto`` from a path (external data loaded) or serialized bytes."""
    if isinstance(source, bytes):
        return onnx.load_model_from_string(source)
    return onnx.load(source, load_external_data=True)


def candidate_tensors(model, input_shapes: dict | None = None) -> list[Candidate]:
    """Floating-point node outputs of the top-level graph, in graph (= topological) order.

    Args:
        model: ``onnx.ModelProto``.
        input_shapes: ``{input name: shape tuple}`` used to make shape inference concrete for
            byte estimates; optional.

    Returns:
        Candidates; tensors whose type cannot be inferred are included (``est_bytes=None``).
    """
    types: dict[str, tuple[int, list]] = {}
    try:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        for inp in probe.graph.input:
            shape = (input_shapes or {}).get(inp.name)
            if shape is not None and inp.type.HasField("tensor_type"):
                dims = inp.type.tensor_type.shape.dim
                if len(dims) == len(shape):
                    for d, v in zip(dims, shape):
                        d.ClearField("dim_param")
                        d.dim_value = int(v)
        inferred = onnx.shape_inference.infer_shapes(probe)
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            tt = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            types[vi.name] = (tt.elem_type, dims)
    except Exception:  # inference is an optimisation of the budget only
        types = {}
    result = []
    for i, node in enumerate(model.graph.node):
        for out in node.output:
            if not out:
                continue
            elem, dims = types.get(out, (0, None))
            if elem and elem not in _FLOAT_TYPES:
                continue
            est = None
            if dims is not None and all(d is not None for d in dims):
                itemsize = 2 if elem in (10, 16) else 8 if elem == 11 else 4
                est = int(np.prod(dims, dtype=np.int64)) * itemsize if dims else itemsize
            result.append(Candidate(i, out, node.name or f"{node.op_type}_{i}", node.op_type, est))
    return result


def expose_tensors(source, names: list[str]) -> bytes:
    """The model with ``names`` appended as graph outputs, serialized in memory.

    Args:
        source: model path (external data is loaded) or serialized bytes.
        names: tensor names to expose; existing graph outputs are not duplicated.

    Raises:
        ValueError: the rewritten model would exceed protobuf's 2 GiB limit.
    """
    model = load_model(source)
    present = {o.name for o in model.graph.output}
    for name in names:
        if name not in present:
            model.graph.output.append(helper.make_empty_tensor_value_info(name))
            present.add(name)
    try:
        return model.SerializeToString()
    except ValueError as exc:
        raise ValueError(f"the model with exposed tensors cannot be serialized in memory ({exc}); "
                         f"models over 2 GiB cannot be localized this way.") from exc


def run_exposed(request: dict, backend: str, options: dict) -> None:
    """Child side of a round: run the rewritten model once and save the exposed tensors.

    ``request``: ``{"model": path, "expose": [names], "inputs": npz path, "output": npz path}``;
    the output .npz holds ``t<k>`` for ``expose[k]`` (tensors the backend could not return are absent).
    """
    data = expose_tensors(request["model"], request["expose"])
    sess = InferenceSession(data, backend=backend, backend_options=options)
    with np.load(request["inputs"], allow_pickle=False) as npz:
        feeds = {name: npz[f"i{k}"] for k, name in enumerate(request["input_names"])}
    outs = sess.run(list(request["expose"]), feeds)
    arrays = {f"t{k}": np.asarray(v) for k, v in enumerate(outs) if isinstance(v, np.ndarray)}
    tmp = request["output"] + ".tmp"
    with open(tmp, "wb") as f:
        np.savez(f, allow_pickle=False, **arrays)
    os.replace(tmp, request["output"])
