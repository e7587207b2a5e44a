"""Rewrite ``softmax_stable``: a naive softmax ``Exp(x) / ReduceSum(Exp(x))`` → ``Exp(x − max x) / …``.

Why: ``e^x`` exceeds FP16's largest value (65504) for ``x > 11.09``, so a graph that computes the
softmax from ``Exp(x)`` directly saturates on an FP16 device (measured on the QNN HTP simulator:
SNR 0 dB for ``x`` around 8 ± 3 over 64 classes), while ONNX ``Softmax`` and frameworks subtract
the row maximum first. The rewrite inserts that subtraction: ``m = ReduceMax(x, axes, keepdims=1)``
and ``Exp(x − m)``; every ``e^(x−m) ≤ 1`` and the sum lies in ``[1, n]``.

Matched graph (the ``Exp`` node is the one named): ``e = Exp(x)`` whose only consumers are one
``s = ReduceSum(e, axes, keepdims=1)`` and nodes ``Div(e, s)`` or ``Mul(e, Reciprocal(s))`` (either
operand order for ``Mul``), with ``s`` (and the ``Reciprocal``) used by nothing else — so that only
the ratio ``e / s`` is observable and scaling ``e`` and ``s`` by ``e^(−m)`` changes no output.

Exactness: **exact in exact arithmetic** (softmax is invariant to subtracting a per-row constant).
In floating point each exponent's argument is rounded once more: ``fl(x − m) = (x − m)(1 + δ)``,
``|δ| ≤ u``, so each term changes by a relative ``≤ u·|x − m|`` and each output by
``≤ 2u·max|x − m|`` to first order, besides the usual rounding of the sum (``n·u``). The naive form is
exact only where ``e^x`` does not overflow or underflow: where it does, the rewrite is the correct one.
Applied only when a repair recipe names it (not automatic).
"""

from __future__ import annotations

import numpy as np
import onnx

from onnxwrapper.patches._base import GraphView, NodeBuilder, Patch, PatchRecord, attr, constant_value, node_label

__all__ = ["NaiveSoftmaxToStable", "naive_softmax_axes"]


def _axes(node: onnx.NodeProto, view: GraphView):
    """``(axes list or None = all, error)`` of a ReduceSum node; axes from the attribute or input."""
    if len(node.input) > 1 and node.input[1]:
        value = constant_value(view, node.input[1])
        if value is None:
            return None, "the ReduceSum's axes are not a constant"
        axes = [int(a) for a in np.asarray(value).reshape(-1)]
        if not axes and int(attr(node, "noop_with_empty_axes", 0)):
            return None, "the ReduceSum reduces nothing (noop_with_empty_axes=1, no axes)"
        return (axes or None), None
    axes = attr(node, "axes", None)
    return ([int(a) for a in axes] if axes else None), None


def naive_softmax_axes(node: onnx.NodeProto, view: GraphView) -> tuple[list | None, str | None]:
    """For an ``Exp`` node: ``(reduction axes or None for all, None)`` when it is the exponential of
    a naive softmax (module docstring), else ``(None, reason)``."""
    if node.op_type != "Exp":
        return None, "not an Exp node"
    e = node.output[0]
    if view.is_graph_output(e):
        return None, "the Exp output is a graph output"
    users = view.consumers(e)
    sums = [n for n in users if n.op_type == "ReduceSum" and n.input[0] == e]
    if len(sums) != 1:
        return None, "the Exp output does not feed exactly one ReduceSum"
    reduce = sums[0]
    if int(attr(reduce, "keepdims", 1)) != 1:
        return None, "the ReduceSum drops the reduced axes (keepdims=0)"
    axes, error = _axes(reduce, view)
    if error:
        return None, error
    s = reduce.output[0]
    if view.is_graph_output(s):
        return None, "the sum is a graph output"
    divisors = {s}
    for user in view.consumers(s):
        if user.op_type == "Reciprocal":
            if view.is_graph_output(user.output[0]):
                return None, "the reciprocal of the sum is a graph output"
            divisors.add(user.output[0])
        elif not (user.op_type == "Div" and list(user.input) == [e, s]):
            return None, f"the sum feeds a {user.op_type} node other than Div(exp, sum) or Reciprocal"
    for user in users:
        if user is reduce:
            continue
        others = [i for i in user.input if i != e]
        ok = (user.op_type == "Div" and list(user.input) == [e, s]) or (
            user.op_type == "Mul" and len(user.input) == 2 and len(others) == 1 and others[0] in divisors - {s})
        if not ok:
            return None, f"the Exp output feeds a {user.op_type} node that is not its ratio to the sum"
    for d in divisors - {s}:
        for user in view.consumers(d):
            if not (user.op_type == "Mul" and set(user.input) == {e, d}):
                return None, "the reciprocal of the sum feeds a node other than Mul(exp, ·)"
    return axes, None


class NaiveSoftmaxToStable(Patch):
    """``Exp(x)`` of a naive softmax → ``Exp(x − ReduceMax(x))`` (no FP16 overflow)."""

    name = "softmax_stable"
    op_type = "Exp"
    description = "naive softmax Exp(x)/ReduceSum(Exp(x)) -> Exp(x - max x)/ReduceSum(...)"
    exactness = ("exact in exact arithmetic; in floating point each output changes by a relative "
                 "<= 2u*max|x - m| (u: unit roundoff) besides the rounding of the sum")
    automatic = False

    def _reject_reason(self, node: onnx.NodeProto, view: GraphView) -> str | None:
        return naive_softmax_axes(node, view)[1]

    def _apply(self, view: GraphView, node: onnx.NodeProto, index: int) -> PatchRecord:
        axes, _ = naive_softmax_axes(node, view)
        b = NodeBuilder(view, node_label(node))
        x = node.input[0]
        if axes is None:
            m = b.op("ReduceMax", [x], hint="row_max", keepdims=1)
        elif view.opset >= 18:
            m = b.op("ReduceMax", [x, b.const("axes", axes, np.int64)], hint="row_max", keepdims=1)
        else:
            m = b.op("ReduceMax", [x], hint="row_max", keepdims=1, axes=axes)
        shifted = b.op("Sub", [x, m], hint="shifted")
        b.op("Exp", [shifted], output=node.output[0], hint="exp")
        where = "all axes" if axes is None else f"axes {axes}"
        return b.record(self.name, node, index, f"Exp(x) -> Exp(x - ReduceMax(x, {where})) in a naive softmax")
