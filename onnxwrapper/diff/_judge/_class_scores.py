"""Which outputs hold class scores: the only outputs for which top-k agreement means something.

Top-k agreement compares the argmax (the top k indices) of each row along the last axis. On a
hidden state, an embedding, a recurrent state or a feature map that number is noise (a hidden
state ``[1, T, 384]`` gave "top-1 0.125"), so it is reported only for outputs recognised as class
scores, by two independent signs:

* **the graph** (:func:`class_score_outputs`): the output is produced — directly or through
  ``Identity``/``Cast`` — by a ``Softmax`` or ``LogSoftmax`` over its last axis, by a decomposed
  softmax ``Div(Exp(·), ·)`` (exporters write LayerNorm- and softmax-free graphs this way), or by
  a ``Gemm`` (the classic ``[N, C]`` classifier head);
* **the values** (:func:`looks_like_probabilities`): every row of the reference along the last
  axis is a probability distribution (entries ≥ 0 summing to 1), whatever computed it.

Both require the shape class scores can have (:func:`looks_like_class_scores`). A raw-logit
output produced by ``MatMul`` + ``Add`` is not recognised (a linear projection of a hidden state
looks the same); pass ``--min-top1`` to judge such an output anyway.
"""

from __future__ import annotations

import numpy as np

__all__ = ["looks_like_class_scores", "looks_like_probabilities", "class_score_outputs"]

#: rows of a probability distribution sum to 1 within this (float32 rounding of a softmax over
#: tens of thousands of classes stays far below it).
_PROB_SUM_TOL = 1e-3
_PASS_THROUGH = ("Identity", "Cast")


def looks_like_class_scores(shape, dtype) -> bool:
    """Shape and dtype that class scores can have: floating, rank 1–3, last axis ≥ 2 entries
    (``[C]``, ``[N, C]`` logits, ``[N, T, C]`` sequence scores). Necessary, not sufficient: a
    hidden state ``[N, T, 384]`` has that shape too (see the module docstring)."""
    shape = tuple(shape)
    return np.dtype(dtype).kind == "f" and 1 <= len(shape) <= 3 and shape[-1] >= 2


def looks_like_probabilities(r) -> bool:
    """True when every row of ``r`` along its last axis is a probability distribution: all entries
    finite and ≥ 0 and each row summing to 1 within 1e-3 (a softmax output, however the graph
    computes it)."""
    r = np.asarray(r)
    if not looks_like_class_scores(r.shape, r.dtype) or r.size == 0:
        return False
    v = r.astype(np.float64, copy=False).reshape(-1, r.shape[-1])
    if not np.isfinite(v).all() or v.min() < 0.0:
        return False
    return bool(np.all(np.abs(v.sum(axis=1) - 1.0) <= _PROB_SUM_TOL))


def _axis(node, default: int) -> int:
    for attr in node.attribute:
        if attr.name == "axis":
            return int(attr.i)
    return default


def class_score_outputs(model) -> set[str]:
    """Names of the graph outputs of ``model`` (an ``onnx.ModelProto``) that the graph marks as
    class scores (module docstring). Outputs of unknown rank count when the softmax axis is -1."""
    producer = {out: node for node in model.graph.node for out in node.output if out}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    found = set()
    for out in model.graph.output:
        dims = out.type.tensor_type.shape.dim if out.type.HasField("tensor_type") else []
        rank = len(dims) if out.type.HasField("tensor_type") and out.type.tensor_type.HasField("shape") else None
        node, hops = producer.get(out.name), 0
        while node is not None and node.op_type in _PASS_THROUGH and hops < 8:
            node, hops = producer.get(node.input[0]) if node.input else None, hops + 1
        if node is None:
            continue
        if node.op_type in ("Softmax", "LogSoftmax"):
            axis = _axis(node, -1 if opset >= 13 else 1)
            if axis == -1 or (rank is not None and axis == rank - 1):
                found.add(out.name)
        elif node.op_type == "Div" and node.input:
            numerator = producer.get(node.input[0])
            if numerator is not None and numerator.op_type == "Exp":
                found.add(out.name)
        elif node.op_type == "Gemm":
            found.add(out.name)
    return found
