"""The proof behind rung 2 of the recovery ladder (a batch-N call run as several calls of a smaller
compiled batch): which models keep their samples apart.

A batch split is exact only when no op mixes samples along the batch dimension. :func:`batch_plan`
proves that from a static graph: it follows the batch axis of every tensor from the inputs whose
first dim is the batch size N (N > 1) through each node, by rules per op type, and returns the
reason at the first node it cannot prove per-sample. Among what it refuses:

* ``BatchNormalization`` in training form (``training_mode=1``, or its running statistics asked
  for), any reduction, ``Softmax``/``TopK``/``CumSum``/``ArgMax`` over the batch axis, a
  ``LayerNormalization`` that normalizes over it;
* a ``MatMul``/``Gemm`` contracting over the batch axis, or whose both operands carry it in
  different roles (attention across the batch: ``Q·Kᵀ`` with samples as rows of both);
* a ``Reshape``/``Flatten`` that merges the batch into another dim, or a constant shape, size,
  repeat count or pad that spells the batch size itself (it would be wrong for a smaller batch);
* ``Concat``/``Slice``/``Gather``/``Split`` along the batch axis, a tensor without the batch axis
  that still varies along it (an operand of size N there), a value computed from the batch size
  (``Shape``) that reaches the data instead of a shape input;
* any op it has no rule for (control flow, custom domains, scatter, RNNs …) that reads a batched value.

A proven graph is rebatched and run in chunks by :mod:`onnxwrapper.backends.qnn.recovery._batch_split`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["BatchPlan", "batch_plan"]

_UNARY = set("""Relu Sigmoid Tanh Erf Exp Log Abs Neg Sqrt Reciprocal Floor Ceil Round Sign Sin Cos Tan Asin Acos Atan
Sinh Cosh Asinh Acosh Atanh Cast LeakyRelu Elu Selu Celu HardSigmoid HardSwish Softplus Softsign Not IsNaN IsInf
Identity Dropout Gelu Mish ThresholdedRelu Shrink Clip CastLike QuantizeLinear DequantizeLinear""".split())
_BINARY = set("""Add Sub Mul Div Pow Max Min Sum Mean Where Equal Greater Less GreaterOrEqual LessOrEqual And Or Xor
PRelu Mod BitShift""".split())
_PER_SAMPLE = set("""Conv ConvTranspose MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool GlobalLpPool
InstanceNormalization LRN DepthToSpace SpaceToDepth GroupNormalization""".split())
_REDUCE = set("""ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp
ReduceSumSquare""".split())
#: ops a value computed from the batch size (Shape) may pass through; and where it may end (op, input index)
_SHAPE_MATH = set("Gather Slice Concat Unsqueeze Squeeze Cast Add Sub Mul Div Identity ReduceProd Max Min".split())
_SHAPE_SINKS = {("Reshape", 1), ("Expand", 1), ("ConstantOfShape", 0), ("Resize", 3), ("Upsample", 1)}


class BatchPlan:
    """A proof that a model keeps its samples apart: ``inputs`` (name → batch axis, always 0) and
    ``outputs`` (name → batch axis) for a batch of ``batch``."""

    def __init__(self, batch: int, inputs: Mapping[str, int], outputs: Mapping[str, int]) -> None:
        self.batch, self.inputs, self.outputs = batch, dict(inputs), dict(outputs)

    def to_dict(self) -> dict:
        """JSON-ready ``{"batch", "inputs", "outputs"}``."""
        return {"batch": self.batch, "inputs": self.inputs, "outputs": self.outputs}


class _Refused(Exception):
    """A node the batch split cannot prove per-sample (the message says which and why)."""


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


class _Tracker:
    def __init__(self, model: onnx.ModelProto, batch: int) -> None:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        g = inferred.graph
        self.dims: dict[str, list] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            t = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and t.HasField("shape"):
                self.dims[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        self.consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        for n in g.node:
            if n.op_type == "Constant" and not n.input and _attr(n, "value") is not None:
                self.consts[n.output[0]] = numpy_helper.to_array(_attr(n, "value"))
        for name, value in self.consts.items():
            self.dims.setdefault(name, list(np.shape(value)))
        self.batch = batch
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
        self.axis: dict[str, int] = {}
        self.shape_valued: set[str] = set()

    def rank(self, name: str) -> int | None:
        dims = self.dims.get(name)
        return None if dims is None else len(dims)

    def dim(self, name: str, axis: int):
        dims = self.dims.get(name)
        return None if dims is None or not -len(dims) <= axis < len(dims) else dims[axis]

    def const(self, name: str):
        return self.consts.get(name) if name else None


def _refuse(node, why: str) -> None:
    raise _Refused(f"{node.op_type} node '{node.name or node.output[0]}' {why}")


def _broadcast(t: _Tracker, node, names: Sequence[str]) -> None:
    """Elementwise with numpy broadcasting: batched operands must agree on the output's batch axis;
    an operand without it must have size 1 (or no dim) there."""
    out = node.output[0]
    rank = t.rank(out)
    if rank is None:
        _refuse(node, "has an output of unknown rank")
    axes = {t.axis[name] + rank - t.rank(name) for name in names if name in t.axis}
    if len(axes) != 1:
        _refuse(node, "combines operands whose batch axes differ")
    b = axes.pop()
    for name in names:
        if not name or name in t.axis:
            continue
        r = t.rank(name)
        if r is None:
            _refuse(node, f"broadcasts '{name}' of unknown rank")
        k = b - (rank - r)
        if k >= 0 and t.dim(name, k) != 1:
            _refuse(node, f"broadcasts '{name}', which has no batch axis but size {t.dim(name, k)} along it")
    t.axis.update((o, b) for o in node.output if o)


def _same_axis(t: _Tracker, node, b: int, data: str) -> None:
    """Per-sample op on ``data`` batched at axis 0; other inputs must not carry the batch."""
    if b != 0:
        _refuse(node, "needs the batch on axis 0")
    if any(name in t.axis for name in node.input[1:]):
        _refuse(node, "reads a second batched input")
    t.axis.update((o, 0) for o in node.output if o)


def _reduced_axes(t: _Tracker, node) -> list[int] | None:
    axes = _attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        value = t.const(node.input[1])
        if value is None:
            _refuse(node, "takes its axes from a computed value")
        axes = [int(a) for a in np.asarray(value).reshape(-1)]
    return None if axes is None or len(axes) == 0 else list(axes)


def _step(t: _Tracker, node) -> None:
    op = node.op_type
    batched = [name for name in node.input if name in t.axis]
    shaped = [i for i, name in enumerate(node.input) if name in t.shape_valued]
    if op in ("Shape", "Size"):
        t.shape_valued.update(o for o in node.output if o)
        return
    if shaped:
        if op in _SHAPE_MATH and not batched:
            t.shape_valued.update(o for o in node.output if o)
            return
        if not all((op, i) in _SHAPE_SINKS for i in shaped):
            _refuse(node, "uses a value computed from the batch size as data")
    if not batched:
        return  # constant-like: the same for every sample
    if node.domain not in ("", "ai.onnx"):
        _refuse(node, f"is in domain '{node.domain}', which the batch split has no rule for")
    b = t.axis[batched[0]]
    rank = t.rank(batched[0])
    if op in _UNARY:
        if op in ("QuantizeLinear", "DequantizeLinear") and len(node.input) > 1 and t.rank(node.input[1]) == 1 \
                and (_attr(node, "axis", 1) % rank) == b:
            _refuse(node, "quantizes per channel along the batch axis")
        _broadcast(t, node, [node.input[0]] + [n for n in node.input[1:] if n in t.axis])
        for extra in node.input[1:]:
            if extra in t.axis:
                _refuse(node, f"reads a batched parameter '{extra}'")
        return
    if op in _BINARY:
        return _broadcast(t, node, list(node.input))
    if op in _PER_SAMPLE:
        return _same_axis(t, node, b if node.input[0] in t.axis else -1, node.input[0])
    if op == "BatchNormalization":
        if _attr(node, "training_mode", 0) or len([o for o in node.output if o]) > 1:
            _refuse(node, "is in training form (statistics over the batch)")
        return _same_axis(t, node, b if node.input[0] in t.axis else -1, node.input[0])
    if op in ("Resize", "Upsample"):
        scales = t.const(node.input[2]) if op == "Resize" and len(node.input) > 2 else None
        sizes = t.const(node.input[3]) if len(node.input) > 3 else None
        if scales is not None and np.asarray(scales).size and float(np.asarray(scales).reshape(-1)[0]) != 1.0:
            _refuse(node, "scales the batch axis")
        if sizes is not None and np.asarray(sizes).size:
            _refuse(node, "spells the batch size in its constant sizes")
        return _same_axis(t, node, b if node.input[0] in t.axis else -1, node.input[0])
    if op in ("LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"):
        if b >= _attr(node, "axis", -1) % rank:
            _refuse(node, "normalizes over the batch axis")
        if any(name in t.axis for name in node.input[1:]):
            _refuse(node, "reads a batched scale or bias")
        t.axis[node.output[0]] = b
        return
    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        axis = _attr(node, "axis", -1 if t.opset >= 13 else 1) % rank
        if axis == b or (t.opset < 13 and b >= axis):
            _refuse(node, "normalizes over the batch axis")
        t.axis[node.output[0]] = b
        return
    if op in _REDUCE or op in ("ArgMax", "ArgMin"):
        axes = [_attr(node, "axis", 0)] if op in ("ArgMax", "ArgMin") else _reduced_axes(t, node)
        if axes is None:
            _refuse(node, "reduces over every axis, the batch included")
        axes = sorted(a % rank for a in axes)
        if b in axes:
            _refuse(node, "reduces over the batch axis")
        t.axis[node.output[0]] = b if _attr(node, "keepdims", 1) else b - sum(a < b for a in axes)
        return
    if op in ("TopK", "CumSum"):
        axis = _attr(node, "axis", -1) if op == "TopK" else t.const(node.input[1])
        if axis is None or int(np.asarray(axis).reshape(-1)[0]) % rank == b:
            _refuse(node, "works along the batch axis")
        t.axis.update((o, b) for o in node.output if o)
        return
    if op in ("MatMul", "Gemm"):
        return _matmul(t, node)
    if op == "Transpose":
        perm = list(_attr(node, "perm", list(range(rank))[::-1]))
        t.axis[node.output[0]] = perm.index(b)
        return
    if op in ("Reshape", "Flatten"):
        return _reshape(t, node, b)
    if op in ("Squeeze", "Unsqueeze"):
        return _squeeze(t, node, b)
    if op in ("Concat", "Split", "Slice", "Tile", "Pad", "Expand"):
        return _along(t, node, b, rank)
    if op == "Gather":
        return _gather(t, node)
    _refuse(node, "has no batch-split rule")


def _matmul(t: _Tracker, node) -> None:
    a, bname = node.input[0], node.input[1]
    out = node.output[0]
    ra, rb, ro = t.rank(a), t.rank(bname), t.rank(out)
    if None in (ra, rb, ro):
        _refuse(node, "has an operand of unknown rank")
    if node.op_type == "Gemm":
        if len(node.input) > 2 and node.input[2] in t.axis:
            _refuse(node, "reads a batched bias")
        rows_a = 1 if _attr(node, "transA", 0) else 0
        cols_b = 0 if _attr(node, "transB", 0) else 1
        if a in t.axis and bname not in t.axis and t.axis[a] == rows_a:
            t.axis[out] = 0
            return
        if bname in t.axis and a not in t.axis and t.axis[bname] == cols_b:
            t.axis[out] = 1
            return
        _refuse(node, "contracts over the batch axis or mixes samples of both operands")
    if a in t.axis and bname not in t.axis:
        ax = t.axis[a]
        if ax == ra - 1:
            _refuse(node, "contracts over the batch axis")
        if ax < ra - 2 and t.dim(bname, ax - ra) not in (None, 1) and rb >= ra - ax:
            _refuse(node, "broadcasts an operand that varies along the batch axis")
        t.axis[out] = ax + ro - ra
        return
    if bname in t.axis and a not in t.axis:
        ax = t.axis[bname]
        if ax == rb - 2 or rb == 1:
            _refuse(node, "contracts over the batch axis")
        if ax < rb - 2 and ra >= rb - ax and t.dim(a, ax - rb) not in (None, 1):
            _refuse(node, "broadcasts an operand that varies along the batch axis")
        t.axis[out] = ax + ro - rb
        return
    ax_a, ax_b = t.axis[a], t.axis[bname]
    if ax_a < ra - 2 and ax_b < rb - 2 and ax_a - ra == ax_b - rb:
        t.axis[out] = ax_a + ro - ra
        return
    _refuse(node, "multiplies samples with each other (attention across the batch)")


def _reshape(t: _Tracker, node, b: int) -> None:
    src, out = node.input[0], node.output[0]
    din, dout = t.dims.get(src), t.dims.get(out)
    if not din or not dout or None in din or None in dout:
        _refuse(node, "has shapes that are not static")
    before = int(np.prod(din[:b], dtype=np.int64))
    after = int(np.prod(din[b + 1:], dtype=np.int64))
    for q in range(len(dout)):
        if dout[q] == din[b] and int(np.prod(dout[:q], dtype=np.int64)) == before and \
                int(np.prod(dout[q + 1:], dtype=np.int64)) == after:
            if node.op_type == "Reshape":
                target = t.const(node.input[1])
                value = None if target is None else int(np.asarray(target).reshape(-1)[q])
                if value is not None and value != -1 and not (value == 0 and q == b):
                    _refuse(node, f"spells the batch size {t.batch} in its constant target shape")
                if target is None and node.input[1] not in t.shape_valued:
                    _refuse(node, "takes its target shape from a computed value")
            t.axis[out] = q
            return
    _refuse(node, "merges the batch into another dim")


def _squeeze(t: _Tracker, node, b: int) -> None:
    out = node.output[0]
    rank_in, rank_out = t.rank(node.input[0]), t.rank(out)
    axes = _reduced_axes(t, node)
    if node.op_type == "Squeeze":
        if axes is None:
            axes = [i for i, d in enumerate(t.dims.get(node.input[0]) or []) if d == 1]
        axes = [a % rank_in for a in axes]
        if b in axes:
            _refuse(node, "removes the batch axis")
        t.axis[out] = b - sum(a < b for a in axes)
        return
    if axes is None:
        _refuse(node, "has no axes")
    axes = sorted(a % rank_out for a in axes)
    pos = [i for i in range(rank_out) if i not in axes]
    t.axis[out] = pos[b]


def _along(t: _Tracker, node, b: int, rank: int) -> None:
    op = node.op_type
    if op == "Concat":
        if _attr(node, "axis") % rank == b:
            _refuse(node, "concatenates along the batch axis")
        for name in node.input:
            if name not in t.axis or t.axis[name] != b:
                _refuse(node, f"joins '{name}', which does not carry the batch on the same axis")
    elif op == "Split":
        if _attr(node, "axis", 0) % rank == b:
            _refuse(node, "splits along the batch axis")
    elif op == "Slice":
        starts = t.const(node.input[1])
        axes = (t.const(node.input[3]) if len(node.input) > 3 and node.input[3]
                else None if starts is None else np.arange(np.asarray(starts).size))
        if axes is None or b in [int(a) % rank for a in np.asarray(axes).reshape(-1)]:
            _refuse(node, "slices along the batch axis (or its axes are computed)")
    elif op in ("Tile", "Pad"):
        value = t.const(node.input[1]) if len(node.input) > 1 else None
        if value is None:
            _refuse(node, "takes its repeats or pads from a computed value")
        value = np.asarray(value).reshape(-1)
        if (op == "Tile" and value[b] != 1) or (op == "Pad" and (value[b] != 0 or value[b + rank] != 0)):
            _refuse(node, "repeats or pads the batch axis")
    elif op == "Expand":
        shape = t.const(node.input[1])
        out_rank = t.rank(node.output[0])
        q = b + out_rank - rank
        if shape is None and node.input[1] not in t.shape_valued:
            _refuse(node, "takes its shape from a computed value")
        if shape is not None and len(np.asarray(shape).reshape(-1)) >= out_rank - q and \
                int(np.asarray(shape).reshape(-1)[q - (out_rank - len(np.asarray(shape).reshape(-1)))]) != 1:
            _refuse(node, f"spells the batch size {t.batch} in its constant shape")
        t.axis[node.output[0]] = q
        return
    t.axis.update((o, b) for o in node.output if o)


def _gather(t: _Tracker, node) -> None:
    data, idx, out = node.input[0], node.input[1], node.output[0]
    axis = _attr(node, "axis", 0) % t.rank(data)
    if data in t.axis and idx in t.axis:
        _refuse(node, "indexes batched data with batched indices")
    if data in t.axis:
        b = t.axis[data]
        if b == axis:
            _refuse(node, "selects along the batch axis")
        t.axis[out] = b if b < axis else b + t.rank(idx) - 1
        return
    t.axis[out] = axis + t.axis[idx]


def batch_plan(model: onnx.ModelProto, batch: int) -> BatchPlan | str:
    """The :class:`BatchPlan` of ``model`` (static shapes) for a batch of ``batch`` (> 1), or the
    reason it cannot be split exactly (see the module docstring)."""
    if batch < 2:
        return "the batch is 1"
    t = _Tracker(model, batch)
    inits = {i.name for i in model.graph.initializer}
    inputs = {}
    for vi in model.graph.input:
        dims = t.dims.get(vi.name)
        if vi.name not in inits and dims and dims[0] == batch:
            inputs[vi.name] = 0
    if not inputs:
        return f"no input has the batch size {batch} as its first dim"
    t.axis.update(inputs)
    try:
        for node in model.graph.node:
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                _refuse(node, "has subgraphs (control flow)")
            _step(t, node)
    except _Refused as exc:
        return str(exc)
    outputs = {}
    for o in model.graph.output:
        if o.name not in t.axis or t.dim(o.name, t.axis[o.name]) not in (batch, None):
            return f"output '{o.name}' does not carry the batch"
        outputs[o.name] = t.axis[o.name]
    return BatchPlan(batch, inputs, outputs)
