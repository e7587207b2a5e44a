"""Joining a scaled region with an unscaled operand: the ``join`` option of the ``rescale`` rewrite.

A residual network adds each block's output to a running sum (T5's encoder: ``h + FFN(RMSNorm(h))``;
a U-Net's ``x + Conv(SiLU(InstanceNorm(…)))``). When the block's output is scaled by ``2^e`` and the
running sum is not, the ``Add`` has an unscaled, non-constant operand: without ``join`` it is a
barrier and reads the restored original values — which, for an FP16 overflow, overflow again.
With ``join`` the *other* operand is scaled too, so the sum itself carries ``2^e`` and travels on to
the normalization that cancels it (``RMSNorm``, ``LayerNorm``, ``InstanceNorm``, ``GroupNorm``):

* when that operand comes from a ``MatMul``/``Gemm``/``Conv``/``ConvTranspose`` with a constant weight
  (and constant bias), that the region has not touched and whose output nothing else reads, the scale
  is **folded into its weight and bias** (its output is computed scaled: it may itself be beyond
  FP16's range unscaled — a U-Net's second convolution);
* otherwise a ``Mul`` by ``2^e`` scales a copy of it for this node alone.

Exactness: the same as ``rescale`` — a power-of-two scale commutes with rounding; values that the
scale pushes below FP16's normal range (6.1e-5) lose relative precision (``aipc fix`` keeps every
scaled peak within range and reports it).
"""

from __future__ import annotations

import onnx

from onnxwrapper.patches._rescale_rules import LINEAR_WEIGHT_OPS, NodeFacts, Step

__all__ = ["JOIN_OPS", "join_operands"]

#: ops whose data operands must share one scale (``Where``: its inputs 1 and 2)
JOIN_OPS = {"Add", "Sub", "Max", "Min", "Sum", "Mean", "Concat", "Where"}


def _foldable(producer: onnx.NodeProto, consts: set) -> list | None:
    """Input indices (weight, bias) of a constant-weight linear ``producer`` to scale, else ``None``."""
    if producer.op_type not in LINEAR_WEIGHT_OPS or len(producer.input) < 2:
        return None
    if producer.input[1] in consts:
        weight = 1
    elif producer.op_type in ("MatMul", "Gemm") and producer.input[0] in consts:
        weight = 0
    else:
        return None
    if len(producer.input) > 2 and producer.input[2]:
        return [weight, 2] if producer.input[2] in consts else None
    return [weight]


def join_operands(node: onnx.NodeProto, facts: NodeFacts, *, consts: set, producers: dict, readers: dict,
                  steps: dict, outputs: set) -> tuple[dict, dict]:
    """How to scale ``node``'s unscaled, non-constant data operands to the region's exponent.

    Args:
        node: an op of :data:`JOIN_OPS` whose data operands carry exactly one non-zero exponent.
        facts: its :class:`NodeFacts`. consts: names of the graph's constants.
        producers: ``{tensor: (index, NodeProto)}``. readers: ``{tensor: number of reading nodes}``.
        steps: the region's steps so far (``{node index: Step}``; a producer already in it is not
            folded). outputs: graph output names (a graph output is never folded).

    Returns:
        ``({input index: e}, {producer index: Step})``: operands scaled by a ``Mul`` for this node, and
        producers whose weight and bias take ``2^e`` (their output then carries ``e``). Both empty
        when the node cannot be joined (no single scale, or a non-float operand).
    """
    data = (1, 2) if node.op_type == "Where" else range(len(node.input))
    scales = {facts.exps[i] for i in data if i < len(facts.exps) and facts.exps[i]}
    if len(scales) != 1 or (node.op_type == "Where" and facts.exps[0]):
        return {}, {}
    e = scales.pop()
    muls, folds = {}, {}
    for i in data:
        name = node.input[i] if i < len(node.input) else ""
        if not name or facts.exps[i] or name in consts:
            continue
        index, producer = producers.get(name, (None, None))
        fold = _foldable(producer, consts) if producer is not None else None
        if (fold is not None and index not in steps and readers.get(name, 0) == 1 and name not in outputs
                and list(producer.output).index(name) == 0):
            folds[index] = Step([e], {k: e for k in fold}, folded=False)
        else:
            muls[i] = e
    return muls, folds
