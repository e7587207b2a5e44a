"""Exact rewrites for FP16 *underflow*: tensors that, in the quietest recorded call, stay below FP16's
smallest normal number (2^-14 ≈ 6.1e-5) and so keep only a few significant bits.

Measured on silero-vad's op15 model (QNN HTP simulator, FP16): after ``pow_square`` repairs the
``Pow(x, 2)`` kernel, the STFT's squared magnitudes of a silent window peak at 6.5e-8 — subnormal,
one or two significant bits (the HTP reads them back as multiples of 6e-8) — so the magnitude enters
the encoder at 3 dB SNR in 116 of 233 windows. Scaling the STFT's output up by a power of two
before the squares (folded into its ``Conv`` weight, cancelled by the encoder's first ``Conv``) is
exact and keeps them normal: the same ``rescale`` rewrite as for overflow, with a positive exponent.

Search (one region at a time, up to :data:`MAX_REGIONS`): the first tensor in graph order whose
quietest call's peak is below :data:`UNDERFLOW`; start tensors from it upwards (as for overflow: a
start must not underflow itself unless the scale is folded into its producer's weight); the largest
power of two, up to 2^24, for which every scaled tensor's loudest peak stays at most
:data:`~onnxwrapper.repair.fix._rescale.TARGET`, and no restored tensor underflows — stopping once the quiet
peak is normal with margin (:data:`ENOUGH`).

The tensor ``aipc diff --localize`` names as an FP16 underflow (``focus``) comes first. Its values
need not all be small: a constant-Q power spectrum peaks at 1.2 while its quiet bins reach 3e-13,
and the ``Log`` it feeds is what breaks. It is judged value by value (how many of its non-zero
values stay below :data:`UNDERFLOW` after the scale), the scale must reach the operation that
needs the small values (a ``Log`` reads only unscaled values: ``Log(2^k·x)`` is not a power of two
times ``Log(x)``, so the scale would be undone in front of it, where the values underflow again),
and when no upscale helps the notes say why. :func:`underflow_region` is the other remedy: the
nodes that compute the small values and the operation that needs them, for the CPU.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import onnx

from onnxwrapper.diff._localize import sensitive_consumers
from onnxwrapper.repair.fix._ranges import reference_ranges
from onnxwrapper.repair.fix._rescale import TARGET, start_tensors
from onnxwrapper.patches import GraphView, PatchError, get_patch, name_unnamed_nodes
from onnxwrapper.repair.recipe import Rewrite

__all__ = ["UNDERFLOW", "ENOUGH", "MAX_REGIONS", "SIGNIFICANT", "ValueSpread", "exact_underflow_rewrites",
           "underflow_region"]

#: FP16's smallest normal number: a tensor whose peak is below it is subnormal (fewer than 11 bits)
UNDERFLOW = 2.0 ** -14
#: a quiet peak this large keeps FP16's 11 significant bits with a margin of 16 (no larger scale needed)
ENOUGH = 2.0 ** -10
MAX_REGIONS = 4
#: a tensor "holds values below the range" when at least this share of its non-zero values does
#: (a tensor of ordinary activations crossing zero has about 0.005 % there: |x| < 6.1e-5 of N(0, 1))
SIGNIFICANT = 0.01
_EXP_LOW, _EXP_HIGH = -160, 130  # binary exponents counted (float32's subnormals start at 2^-149)


class ValueSpread:
    """How the non-zero values of each tensor are spread over binary exponents, over all calls
    (``observe`` of :func:`~onnxwrapper.repair.fix._ranges.reference_ranges`): how many stay below
    :data:`UNDERFLOW` once scaled by ``2^e`` (:meth:`below`), exact zeros apart (FP16 holds zero)."""

    def __init__(self) -> None:
        self.hist: dict = {}
        self.zeros: dict = {}
        self.smallest: dict = {}

    def observe(self, name: str, arr: np.ndarray) -> None:
        """Count the finite non-zero values of ``arr`` (one call's value of tensor ``name``)."""
        mag = np.abs(arr[np.isfinite(arr)].astype(np.float64, copy=False))
        nonzero = mag[mag > 0]
        self.zeros[name] = self.zeros.get(name, 0) + int(mag.size - nonzero.size)
        if not nonzero.size:
            return
        _m, exps = np.frexp(nonzero)  # value = m·2^E, 0.5 ≤ m < 1
        counts = np.bincount(np.clip(exps, _EXP_LOW, _EXP_HIGH) - _EXP_LOW, minlength=_EXP_HIGH - _EXP_LOW + 1)
        self.hist[name] = self.hist.get(name, 0) + counts
        self.smallest[name] = min(self.smallest.get(name, math.inf), float(nonzero.min()))

    def nonzero(self, name: str) -> int:
        """Non-zero values of ``name`` counted."""
        return int(np.sum(self.hist[name])) if name in self.hist else 0

    def below(self, name: str, e: int = 0) -> int:
        """Non-zero values of ``name`` below :data:`UNDERFLOW` once multiplied by ``2^e``."""
        if name not in self.hist:
            return 0
        last = -14 - e - _EXP_LOW  # m·2^(E+e) < 2^-14 ⟺ E + e ≤ -14
        return int(np.sum(self.hist[name][:max(0, last + 1)]))

    def significant(self, name: str) -> bool:
        """At least :data:`SIGNIFICANT` of the non-zero values are below :data:`UNDERFLOW`."""
        total = self.nonzero(name)
        return bool(total) and self.below(name) >= SIGNIFICANT * total


def _fits(plan, peaks: dict, floors: dict) -> bool:
    """Every scaled tensor stays within :data:`TARGET`; no restored tensor underflows (the scale would
    be undone where the values are still too small)."""
    if any(peaks.get(t, 0.0) * 2.0 ** e > TARGET for t, e in plan.exponents.items()):
        return False
    return all(peaks.get(t, 0.0) <= TARGET and not 0.0 < floors.get(t, 0.0) < UNDERFLOW for t in plan.restored)


def _upscale_for(model: onnx.ModelProto, tensor: str, peaks: dict, floors: dict) -> Rewrite | None:
    view = GraphView(model)
    producer = {o: n for n in model.graph.node for o in n.output if o}
    for start in start_tensors(model, tensor):
        node = producer[start]
        best = None
        for k in range(1, 25):
            params = {"log2": k}
            if list(node.output).index(start):
                params["output"] = list(node.output).index(start)
            try:
                plan = get_patch("rescale").configure(**params).plan(view, node)
            except PatchError:
                break
            if tensor not in plan.exponents or (not plan.folded_start and floors.get(start, 0.0) < UNDERFLOW):
                break  # cannot reach it, or the start underflows itself: start higher up
            if not _fits(plan, peaks, floors):
                break
            best = Rewrite("rescale", node.name, params)
            if floors.get(tensor, 0.0) * 2.0 ** plan.exponents[tensor] >= ENOUGH:
                break
        if best is not None:
            return best
    return None


def _rescale_plan(view, node, tensor: str, k: int):
    params = {"log2": k}
    if list(node.output).index(tensor):
        params["output"] = list(node.output).index(tensor)
    try:
        return params, get_patch("rescale").configure(**params).plan(view, node)
    except PatchError:
        return params, None


def _spread_text(tensor: str, spread: ValueSpread, peaks: dict) -> str:
    below, total = spread.below(tensor), spread.nonzero(tensor)
    low, high = spread.smallest.get(tensor, 0.0), peaks.get(tensor, 0.0)
    decades = f", {math.log10(high / low):.1f} decades where FP16's normal numbers span 9.0" if low > 0 < high else ""
    return (f"'{tensor}' holds {below} of {total} non-zero values below {UNDERFLOW:.2g} (from {low:.2g} to "
            f"{high:.3g}{decades}; {spread.zeros.get(tensor, 0)} exact zero(s) are fine)")


def _upscale_values(model: onnx.ModelProto, tensor: str, peaks: dict, spread: ValueSpread) -> tuple:
    """``(rewrite or None, note)``: the ``rescale`` leaving the fewest values of ``tensor`` below the
    range, reaching every operation that needs them (module docstring), or why there is none."""
    view = GraphView(model)
    producer = {o: n for n in model.graph.node for o in n.output if o}
    needs = sensitive_consumers(model, tensor)
    what = _spread_text(tensor, spread, peaks)
    barred = list(needs) if tensor in producer else []
    for k in (1, 2):  # a scale starting at the tensor itself (odd and even: a Sqrt passes only 2^2j)
        _params, probe = _rescale_plan(view, producer[tensor], tensor, k) if barred else ({}, None)
        if probe is not None:  # no plan: the rescale refuses when every consumer needs the original values
            barred = [n for n in barred if n.name in {use for use, _t in probe.barriers}]
    if barred:
        ops = ", ".join(f"{n.op_type} '{n.name}'" for n in barred)
        return None, (f"no exact upscale helps: {what}, and it feeds {ops}, which a power-of-two scale cannot pass "
                      f"through exactly — the scale would be undone in front of it, where the values underflow again")
    best, before, why = None, spread.below(tensor), "no start tensor from it upwards carries a scale to it"
    for start in start_tensors(model, tensor):
        node = producer[start]
        for k in range(1, 25):
            params, plan = _rescale_plan(view, node, start, k)
            if plan is None or tensor not in plan.exponents:
                break
            if not plan.folded_start and spread.significant(start):
                why = f"'{start}' underflows itself before a Mul could scale it (no weight to fold the scale into)"
                break
            if any(peaks.get(t, 0.0) * 2.0 ** e > TARGET for t, e in plan.exponents.items()):
                why = why if best is not None else f"a scale large enough would take a tensor beyond {TARGET:g}"
                break
            if any(n.name in {use for use, _t in plan.barriers} for n in needs):
                continue  # e.g. an odd exponent stops at a Sqrt: the next power of two may pass
            left = spread.below(tensor, plan.exponents[tensor])
            if left < before and (best is None or left < best[1]):
                best = (Rewrite("rescale", node.name, params), left)
    if best is None:
        return None, f"no exact upscale helps: {what}; {why}"
    return best[0], f"{what}: {best[0].describe()} leaves {best[1]} of them below"


def underflow_region(model: onnx.ModelProto, feeds_list, tensor: str) -> tuple:
    """The node names that compute ``tensor``'s values below FP16's normal range and the operations
    that need them: its producer and, upwards, every producer whose output holds such values too
    (:meth:`ValueSpread.significant`), plus ``tensor``'s sensitive consumers (a ``Log``, a division…);
    ``()`` when ``tensor`` is not produced by a node, or the values cannot be measured (onnxruntime's
    CPU EP refuses the model with every tensor exposed: the upscale search notes that already).
    For a recipe's CPU subgraphs: there, FP32 keeps the values.
    """
    spread = ValueSpread()
    try:
        reference_ranges(model, feeds_list, observe=spread.observe)
    except Exception:  # noqa: BLE001 - onnxruntime's errors for a model its CPU EP cannot run exposed
        return ()
    producer = {o: n for n in model.graph.node for o in n.output if o}
    region, frontier = [], [tensor]
    while frontier:
        node = producer.get(frontier.pop())
        if node is None or node.name in region:
            continue
        region.append(node.name)
        frontier.extend(i for i in node.input if i in producer and spread.significant(i))
    if not region:
        return ()
    return tuple(region) + tuple(n.name for n in sensitive_consumers(model, tensor) if n.name not in region)


def exact_underflow_rewrites(model: onnx.ModelProto, feeds_list, rewrites=(), focus: str | None = None
                             ) -> tuple[list, list]:
    """Upward ``rescale`` rewrites for the FP16 underflows of ``model`` (after ``rewrites``).

    Args:
        model: the model (not modified). feeds_list: recorded inputs. rewrites: rewrites applied first
            (the exact overflow rewrites and kernel rewrites of the candidate). focus: the tensor
            localization named as an FP16 underflow, tried first and judged value by value (module docstring).

    Returns:
        ``(rewrites, notes)``: the new rewrites in order, and notes for the report (for ``focus``,
        also why no upscale helps when none does).
    """
    model = copy.deepcopy(model)
    name_unnamed_nodes(model)
    for r in rewrites:
        get_patch(r.rewrite).configure(**r.params).apply(model, next(n for n in model.graph.node if n.name == r.node))
    found, notes, skipped = [], [], set()
    for _region in range(MAX_REGIONS):
        floors: dict = {}
        spread = ValueSpread()
        peaks, order = reference_ranges(model, feeds_list, floors, observe=spread.observe)
        if focus in order and focus not in skipped and spread.significant(focus):
            skipped.add(focus)
            rewrite, note = _upscale_values(model, focus, peaks, spread)
            notes.append(note)
        else:
            todo = [t for t in order if 0.0 < floors.get(t, 0.0) < UNDERFLOW and peaks.get(t, 0.0) > 0
                    and t not in skipped]
            if not todo:
                break
            tensor = todo[0]
            rewrite = _upscale_for(model, tensor, peaks, floors)
            skipped.add(tensor)
            if rewrite is not None:
                notes.append(f"'{tensor}' peaks at only {floors[tensor]:.3g} in the quietest call (FP16 keeps few bits "
                             f"below {UNDERFLOW:.3g}): {rewrite.describe()}")
        if rewrite is None:
            continue
        get_patch("rescale").configure(**rewrite.params).apply(model, next(
            n for n in model.graph.node if n.name == rewrite.node))
        found.append(rewrite)
    return found, notes
