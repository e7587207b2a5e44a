"""How a power-of-two scale travels through one ONNX node (the rules of the ``rescale`` rewrite).

A tensor carries an integer exponent ``e``: in the rewritten graph it holds ``2^e`` times the
original values. For a node some of whose inputs carry ``e ≠ 0`` a rule says whether the node can
compute on the scaled values — and with which exponent per output — or is a *barrier* that must
read the original values. Every rule is exact: multiplying by a power of two only changes
exponents, so ``fl(2^a·x ∘ 2^b·y) = 2^c·fl(x ∘ y)`` for ``+ − × ÷ √`` and every sum, product or
maximum built from them, barring overflow and underflow (IEEE 754 §4.3: results are the exact
value rounded, and rounding commutes with scaling by 2^k).

The rules (``e`` = exponent of the scaled data input; constants are initializers or ``Constant``
outputs, scaled by a copy when a rule says so):

============================================  ====================================================
op                                            output exponent and edits
============================================  ====================================================
Identity, Relu, LeakyRelu, PRelu (constant    ``e`` (positively homogeneous of degree 1; layout and
slope), Neg, Abs, Max/Average/GlobalMax/      selection ops move values; ReduceMean divides by a
GlobalAverage pooling, Reshape, Flatten,      count; Resize interpolates with weights summing to 1)
Transpose, Squeeze, Unsqueeze, Slice, Gather*,
Expand, Tile, Depth/SpaceToDepth, Split,
Dropout, ReduceMax/Min/Sum/Mean/L1/L2, Resize,
Cast (to a float type), Pad (constant pad
value scaled)
ReduceSumSquare                               ``2e``
Add, Sub, Max, Min, Sum, Mean, Concat, Where  the common ``e`` of the scaled data inputs; constant
                                              inputs scaled by ``2^e``; an unscaled non-constant
                                              input makes the node a barrier
Clip                                          ``e``; constant ``min``/``max`` scaled by ``2^e``
Equal, Greater(OrEqual), Less(OrEqual)        ``0`` (a comparison of equally scaled values)
Sign, Shape, Size, ArgMax, ArgMin             ``0`` (scale-invariant)
Mul / Div                                     ``e_a + e_b`` / ``e_a − e_b``
Pow(x, p) (constant p)                        ``p·e`` when it is an integer
Sqrt / Reciprocal                             ``e/2`` when ``e`` is even / ``−e``
MatMul, Gemm, Conv, ConvTranspose             passes ``e`` on (bias or ``C`` scaled by ``2^e``) when
(constant weight)                             the node is listed in ``pass_through``; otherwise the
                                              scale is *folded back*: the weight is multiplied by
                                              ``2^−e`` and the output is unscaled (exponent 0)
MatMul, Gemm of two scaled inputs             ``e_a + e_b`` (Gemm's ``C`` scaled to match)
LayerNormalization, InstanceNormalization,    ``0``: ``LN(2^e·x, 2^(2e)·ε) = LN(x, ε)``; ``epsilon``
GroupNormalization                            is multiplied by ``2^(2e)`` (optional Mean / InvStdDev
                                              outputs: ``e`` / ``−e``)
anything else (Exp, Log, Sigmoid, Tanh,       barrier: it reads the original values (a ``Mul`` by
Softmax, Erf, BatchNormalization, nodes with  ``2^−e`` restores them)
subgraphs, …)
============================================  ====================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import onnx

__all__ = ["Step", "NodeFacts", "rule_for", "LINEAR_WEIGHT_OPS"]

_UNARY = {"Identity", "Relu", "LeakyRelu", "Neg", "Abs", "MaxPool", "AveragePool", "GlobalAveragePool",
          "GlobalMaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Slice", "Gather",
          "GatherElements", "GatherND", "Expand", "Tile", "DepthToSpace", "SpaceToDepth", "Split", "Dropout",
          "ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2", "Resize", "Upsample"}
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
_SAME_SCALE = {"Add", "Sub", "Max", "Min", "Sum", "Mean", "Concat"}
_COMPARE = {"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"}
_INVARIANT = {"Sign", "Shape", "Size", "ArgMax", "ArgMin"}
_NORMS = {"LayerNormalization", "InstanceNormalization", "GroupNormalization"}
#: ops whose constant weight can absorb a scale (folding); value: index of the data input(s)
LINEAR_WEIGHT_OPS = {"MatMul", "Gemm", "Conv", "ConvTranspose"}


@dataclass
class Step:
    """What a node does with scaled inputs.

    Attributes:
        outputs: exponent of each output (0: the output holds the original values).
        scale_inputs: ``{input index: k}``: replace that constant input by a copy times ``2^k``.
        scale_attrs: ``{float attribute: k}``: multiply the attribute by ``2^k``.
        folded: the scale was folded back into this node's weight (for reports).
        join_inputs: ``{input index: k}``: the node reads a copy of that (unscaled) input times ``2^k``
            (the ``join`` option, :mod:`onnxwrapper.patches._rescale_join`).
    """

    outputs: list
    scale_inputs: dict = field(default_factory=dict)
    scale_attrs: dict = field(default_factory=dict)
    folded: bool = False
    join_inputs: dict = field(default_factory=dict)


@dataclass
class NodeFacts:
    """What a rule may ask about a node's inputs and outputs.

    Attributes:
        exps: exponent of each input (0 for unscaled ones). consts: whether each input is a
            constant. floats: whether each output is a floating-point tensor. pass_through: the
            node is listed in the rewrite's ``pass_through`` (keep the scale through a weight).
        power: for ``Pow``: the constant exponent when it is one value, else ``None``.
    """

    exps: list
    consts: list
    floats: list
    pass_through: bool = False
    power: float | None = None


def _scaled(facts: NodeFacts, indices) -> list:
    return [i for i in indices if i < len(facts.exps) and facts.exps[i]]


def _unary(node, facts: NodeFacts) -> Step | None:
    if _scaled(facts, range(1, len(facts.exps))):
        return None  # a parameter input (shape, scales, roi, pad value) is scaled: not a data input
    e = facts.exps[0]
    edits = {}
    if node.op_type == "Pad" and len(facts.exps) > 2 and node.input[2]:
        if not facts.consts[2]:
            return None
        edits[2] = e
    return Step([e if f else 0 for f in facts.floats], edits)


def _same_scale(node, facts: NodeFacts, data) -> Step | None:
    scaled = {facts.exps[i] for i in data if facts.exps[i]}
    if len(scaled) != 1:
        return None
    e = scaled.pop()
    edits = {}
    for i in data:
        if not facts.exps[i]:
            if not facts.consts[i]:
                return None  # an unscaled, non-constant operand: the node must see original values
            edits[i] = e
    out = 0 if node.op_type in _COMPARE else e
    return Step([out if f else 0 for f in facts.floats], edits)


def _clip(node, facts: NodeFacts) -> Step | None:
    if _scaled(facts, range(1, len(facts.exps))):
        return None
    e = facts.exps[0]
    edits = {}
    for i in (1, 2):
        if i < len(node.input) and node.input[i]:
            if not facts.consts[i]:
                return None
            edits[i] = e
    attrs = {a.name: e for a in node.attribute if a.name in ("min", "max")}
    return Step([e], edits, attrs)


def _mul_div(node, facts: NodeFacts) -> Step | None:
    ea, eb = facts.exps[0], facts.exps[1]
    return Step([ea + eb if node.op_type == "Mul" else ea - eb])


def _pow(node, facts: NodeFacts) -> Step | None:
    if facts.exps[1] or facts.power is None:
        return None
    value = facts.exps[0] * facts.power
    return Step([int(value)]) if float(value).is_integer() else None


def _sqrt(node, facts: NodeFacts) -> Step | None:
    e = facts.exps[0]
    return Step([e // 2]) if e % 2 == 0 else None


def _linear(node, facts: NodeFacts) -> Step | None:
    """MatMul / Gemm / Conv / ConvTranspose (module docstring)."""
    op = node.op_type
    bias = 2 if len(node.input) > 2 and node.input[2] else None
    ea, eb = facts.exps[0], facts.exps[1]
    if op in ("Conv", "ConvTranspose") and (eb or not facts.consts[1]):
        return None  # a scaled or non-constant convolution weight: not handled

    def passing(out: int) -> Step | None:
        if bias is None or facts.exps[bias] == out:
            return Step([out])
        if facts.exps[bias] or not facts.consts[bias]:
            return None  # a bias at another scale that is not a constant
        return Step([out], {bias: out})

    if bias is not None and facts.exps[bias] and not (ea or eb):
        return None  # only the bias is scaled
    weight = 1 if ea else 0
    if (ea and eb) or not facts.consts[weight] or facts.pass_through or (bias is not None and facts.exps[bias]):
        return passing(ea + eb)  # a product of scaled operands, or a scale kept through the weight
    return Step([0], {weight: -(ea or eb)}, folded=True)


def _norm(node, facts: NodeFacts) -> Step | None:
    if _scaled(facts, range(1, len(facts.exps))):
        return None
    e = facts.exps[0]
    outs = [0, e, -e][:len(node.output)]
    return Step(outs, {}, {"epsilon": 2 * e})


def _invariant(node, facts: NodeFacts) -> Step | None:
    return Step([0] * len(node.output))


def rule_for(node: onnx.NodeProto) -> Callable[[onnx.NodeProto, NodeFacts], Step | None] | None:
    """The rule of ``node``'s op type (module docstring), or ``None`` for a barrier."""
    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return None
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    if op in _UNARY or op == "Pad":
        return _unary
    if op == "PRelu":
        return lambda n, f: None if f.exps[1] or not f.consts[1] else Step([f.exps[0]])
    if op == "Cast":
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        return _unary if to in _FLOAT_TYPES else None
    if op == "ReduceSumSquare":
        return lambda n, f: None if _scaled(f, range(1, len(f.exps))) else Step([2 * f.exps[0]])
    if op in _SAME_SCALE or op in _COMPARE:
        return lambda n, f: _same_scale(n, f, range(len(f.exps)))
    if op == "Where":
        return lambda n, f: None if f.exps[0] else _same_scale(n, f, (1, 2))
    if op == "Clip":
        return _clip
    if op in ("Mul", "Div"):
        return _mul_div
    if op == "Pow":
        return _pow
    if op == "Sqrt":
        return _sqrt
    if op == "Reciprocal":
        return lambda n, f: Step([-f.exps[0]])
    if op in LINEAR_WEIGHT_OPS:
        return _linear
    if op in _NORMS:
        return _norm
    if op in _INVARIANT:
        return _invariant
    return None
