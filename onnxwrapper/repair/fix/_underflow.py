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
"""

from __future__ import annotations

import copy

import onnx

from onnxwrapper.repair.fix._ranges import reference_ranges
from onnxwrapper.repair.fix._rescale import TARGET, start_tensors
from onnxwrapper.patches import GraphView, PatchError, get_patch, name_unnamed_nodes
from onnxwrapper.repair.recipe import Rewrite

__all__ = ["UNDERFLOW", "ENOUGH", "MAX_REGIONS", "exact_underflow_rewrites"]

#: FP16's smallest normal number: a tensor whose peak is below it is subnormal (fewer than 11 bits)
UNDERFLOW = 2.0 ** -14
#: a quiet peak this large keeps FP16's 11 significant bits with a margin of 16 (no larger scale needed)
ENOUGH = 2.0 ** -10
MAX_REGIONS = 4


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


def exact_underflow_rewrites(model: onnx.ModelProto, feeds_list, rewrites=()) -> tuple[list, list]:
    """Upward ``rescale`` rewrites for the FP16 underflows of ``model`` (after ``rewrites``).

    Args:
        model: the model (not modified). feeds_list: recorded inputs. rewrites: rewrites applied first
            (the exact overflow rewrites and kernel rewrites of the candidate).

    Returns:
        ``(rewrites, notes)``: the new rewrites in order, and notes for the report.
    """
    model = copy.deepcopy(model)
    name_unnamed_nodes(model)
    for r in rewrites:
        get_patch(r.rewrite).configure(**r.params).apply(model, next(n for n in model.graph.node if n.name == r.node))
    found, notes, skipped = [], [], set()
    for _region in range(MAX_REGIONS):
        floors: dict = {}
        peaks, order = reference_ranges(model, feeds_list, floors)
        todo = [t for t in order if 0.0 < floors.get(t, 0.0) < UNDERFLOW and peaks.get(t, 0.0) > 0 and t not in skipped]
        if not todo:
            break
        tensor = todo[0]
        rewrite = _upscale_for(model, tensor, peaks, floors)
        skipped.add(tensor)
        if rewrite is None:
            continue
        get_patch("rescale").configure(**rewrite.params).apply(model, next(
            n for n in model.graph.node if n.name == rewrite.node))
        notes.append(f"'{tensor}' peaks at only {floors[tensor]:.3g} in the quietest call (FP16 keeps few bits below "
                     f"{UNDERFLOW:.3g}): {rewrite.describe()}")
        found.append(rewrite)
    return found, notes
