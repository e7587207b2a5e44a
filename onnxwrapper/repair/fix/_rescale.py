"""Choosing the exact rewrites that bring a model's FP16 overflows back into range (``aipc fix``).

Loop: measure the reference's value ranges (:mod:`onnxwrapper.repair.fix._ranges`); take the first
tensor beyond FP16's range; if a naive softmax's ``Exp`` produces it, the ``softmax_stable``
rewrite; else the ``rescale`` rewrite whose region covers it with every scaled tensor's peak at
most :data:`TARGET` — trying start tensors from the overflowing one upwards (breadth first, at most
:data:`MAX_DEPTH` producers up; a start must be in range itself unless the scale is folded into its
producer's weight), and for each the smallest power of two that fits. For each start and power,
in this order: the plain region (constant-weight ``MatMul``/``Gemm``/``Conv`` nodes fold the scale
back; an output of theirs that is too large *unscaled* stays as it was, for a later rewrite);
the same with those nodes keeping the scale (``pass_through``); then both with ``join`` (a residual
``Add`` meeting the region scales its other operand too, so the scale reaches the normalization that
cancels it — T5's RMSNorm after its feed-forward block, a U-Net's InstanceNorm after a skip
connection). A restored tensor may stay beyond the range when only saturating ops read it
(``Sigmoid``, ``Tanh``, ``Erf``…: their FP16 result at ±65504 and beyond is the same as the
reference's — a U-Net's SiLU ``x·Sigmoid(x)``). Apply it, measure again, until nothing is out of
range or no exact rewrite fits. Rewrites are bit-exact, so measuring the rewritten model on the CPU
shows exactly what is left.
"""

from __future__ import annotations

import copy

import onnx

from onnxwrapper.repair.fix._ranges import out_of_range, reference_ranges
from onnxwrapper.patches import GraphView, PatchError, get_patch, name_unnamed_nodes
from onnxwrapper.repair.recipe import Rewrite

__all__ = ["TARGET", "FLOOR", "JOIN_FLOOR", "MAX_DEPTH", "SATURATING", "exact_overflow_rewrites", "start_tensors"]

#: largest scaled peak accepted: 2^14, a factor 4 below FP16's largest value, for inputs larger than the recorded ones
TARGET = 2.0 ** 14
#: a tensor whose peak is above this is not scaled below it (FP16 normal numbers start at 2^-14)
FLOOR = 2.0 ** -6
#: how many producers up from the overflowing tensor a scale may start
MAX_DEPTH = 8
#: smallest peak a tensor scaled only to join a region may have (FP16's smallest normal number)
JOIN_FLOOR = 2.0 ** -14
#: ops whose FP16 result does not change once the input is beyond ±2^14 (they saturate to ±1 or 0/1)
SATURATING = {"Sigmoid", "Tanh", "Erf", "HardSigmoid", "Softsign", "Sign"}
_MAX_STEPS = 48


def _producers(model: onnx.ModelProto) -> dict:
    return {o: n for n in model.graph.node for o in n.output if o}


def start_tensors(model: onnx.ModelProto, tensor: str) -> list:
    """Tensors from ``tensor`` upwards (breadth first, :data:`MAX_DEPTH` levels) with a producer."""
    producer = _producers(model)
    consts = {i.name for i in model.graph.initializer}
    seen, level, order = {tensor}, [tensor], []
    for _depth in range(MAX_DEPTH + 1):
        nxt = []
        for t in level:
            node = producer.get(t)
            if node is None or node.op_type == "Constant":
                continue
            order.append(t)
            for i in node.input:
                if i and i not in seen and i not in consts:
                    seen.add(i)
                    nxt.append(i)
        level = nxt
    return order


def _saturating(plan, op_types: dict) -> set:
    """The restored tensors of ``plan`` that only saturating ops read (:data:`SATURATING`)."""
    return {t for t in plan.restored if all(op_types.get(use) in SATURATING for use, name in plan.barriers if name == t)}


def _fits(plan, ranges: dict, op_types: dict) -> bool:
    joined = plan.joined or {}
    for t, e in plan.exponents.items():
        peak = ranges.get(t, 0.0)
        scaled = peak * 2.0 ** e
        floor = JOIN_FLOOR if t in joined else FLOOR
        if scaled > TARGET or (peak >= floor and scaled < floor):
            return False
    for t, (e, how) in joined.items():
        peak = ranges.get(t, 0.0)
        if how == "mul" and (peak > TARGET or peak * 2.0 ** e > TARGET or JOIN_FLOOR > peak * 2.0 ** e > 0):
            return False
    saturating = _saturating(plan, op_types)
    return all(ranges.get(t, 0.0) <= TARGET or t in saturating for t in plan.restored)


def _plans(view: GraphView, node, start: str, k: int, join: bool, out_of: dict, ranges: dict):
    """The variants of one start and power (module docstring): ``(params, plan)``, plain region first."""
    base = {"log2": -k}
    if list(node.output).index(start):
        base["output"] = list(node.output).index(start)
    if join:
        base["join"] = True
    through: set = set()
    for _round in range(8):
        params = dict(base, pass_through=sorted(through)) if through else dict(base)
        try:
            plan = get_patch("rescale").configure(**params).plan(view, node)
        except PatchError:
            return
        yield params, plan
        hot = {n for n in plan.folds if ranges.get(out_of.get(n, ""), 0.0) > TARGET}
        if not hot - through:
            return
        through |= hot


def _rescale_for(model: onnx.ModelProto, tensor: str, ranges: dict) -> tuple[Rewrite | None, set]:
    """The ``rescale`` rewrite covering ``tensor`` (module docstring) and the tensors it leaves beyond
    the range for saturating ops only; ``(None, set())`` when none fits."""
    view = GraphView(model)
    producer = _producers(model)
    out_of = {n.name: n.output[0] for n in model.graph.node if n.output}
    op_types = {n.name: n.op_type for n in model.graph.node}
    for join in (False, True):
        for start in start_tensors(model, tensor):
            node = producer[start]
            for k in range(1, 25):
                reached = computed_hot = False
                for params, plan in _plans(view, node, start, k, join, out_of, ranges):
                    if tensor not in plan.exponents:
                        continue
                    reached = True
                    if not plan.folded_start and ranges.get(start, 0.0) > TARGET:
                        computed_hot = True  # the start node computes the overflow itself: start higher up
                        break
                    if join and not plan.joined:
                        continue  # the same region as without join: already tried
                    if _fits(plan, ranges, op_types):
                        return Rewrite("rescale", node.name, params), _saturating(plan, op_types)
                if not reached or computed_hot:
                    break  # this start cannot reach the overflowing tensor, or cannot be scaled in range
    return None, set()


def exact_overflow_rewrites(model: onnx.ModelProto, feeds_list, first: str | None = None, *,
                            clamp: bool = False) -> tuple[list, list, dict]:
    """Exact rewrites for the FP16 overflows of ``model`` on ``feeds_list`` (module docstring).

    Args:
        model: the model (not modified; unnamed nodes are named in a copy as a recipe expects).
        feeds_list: recorded inputs (``[{name: array}, …]``).
        first: a tensor to bring into range before the others (localization's overflow culprit).
            An overflow no exact rewrite fits is noted and skipped — it may be harmless (a
            ``Tanh`` of a saturated value is still ±1); the backend run decides.
        clamp: where no exact rewrite fits, clamp the tensor to ±64504 (``clamp_fp16``: HF
            transformers' T5 FP16 fix; not exact) and go on — a later tensor may then fit a rescale.

    Returns:
        ``(rewrites, notes, left)``: the :class:`~onnxwrapper.repair.Rewrite` list in order, notes
        for the report, and ``{tensor: peak}`` of what is still out of range (empty when all fits).
    """
    model = copy.deepcopy(model)
    name_unnamed_nodes(model)
    rewrites, notes, skipped = [], [], set()
    left: dict = {}
    for _step in range(_MAX_STEPS):
        ranges, order = reference_ranges(model, feeds_list)
        over = out_of_range(ranges, order)
        left = {t: ranges[t] for t in over}
        todo = [t for t in ([first] if first in over else []) + over if t not in skipped]
        if not todo:
            break
        tensor = todo[0]
        node = _producers(model)[tensor]
        harmless: set = set()
        if node.op_type == "Exp" and get_patch("softmax_stable").matches(node, model):
            rewrite = Rewrite("softmax_stable", node.name)
        else:
            rewrite, harmless = _rescale_for(model, tensor, ranges)
        if rewrite is None and clamp:
            index = list(node.output).index(tensor)
            rewrite = Rewrite("clamp_fp16", node.name, {"output": index} if index else {})
            skipped.add(tensor)  # clamped: its original values stay beyond the range (the Clip's input)
        if rewrite is None:
            notes.append(f"no exact rewrite brings '{tensor}' ({node.op_type} '{node.name}', peak "
                         f"{ranges[tensor]:.4g}) within FP16's range")
            skipped.add(tensor)
            continue
        get_patch(rewrite.rewrite).configure(**rewrite.params).apply(model, next(
            n for n in model.graph.node if n.name == rewrite.node))
        if rewrite.rewrite == "clamp_fp16":  # its input keeps the original values: not for another rewrite
            skipped |= {n.input[0] for n in model.graph.node if n.op_type == "Clip" and n.output[0] == tensor}
        notes.append(f"'{tensor}' peaks at {ranges[tensor]:.4g} on the reference: {rewrite.describe()}")
        if harmless:
            notes.append(f"left beyond FP16's range for saturating ops only (their result is the same): "
                         f"{', '.join(sorted(harmless))}")
            skipped |= harmless
        rewrites.append(rewrite)
    return rewrites, notes, left
