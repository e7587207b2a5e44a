"""Checking a repair recipe against the model where it is applied, cheaply (docs/security.md).

A recipe file may come from elsewhere or be written by hand; its ``verified`` object is free text
that proves nothing (a forged one looks the same). What the backend can check before compiling:

1. **Constants stay in FP16's range** (always): a ``rescale`` folds ``2^k`` into a weight or
   inserts a ``Mul`` by ``2^k``; a rewritten or new float constant beyond ±65504 (or not finite)
   saturates on an FP16 NPU whatever the data (``rescale(log2=20)``: the constant 2^20 alone does).
   → :class:`~onnxwrapper.errors.RecipeError`.
2. **The scaled values stay in range** (when the recipe records them): ``aipc fix`` records in the
   recipe's ``checks.peaks`` the reference's largest magnitude of every tensor a ``rescale``
   scales (measured on the recorded calls). Each tensor's peak times its ``2^e`` must stay within
   ±65504. → :class:`~onnxwrapper.errors.RecipeError` naming the tensor.
3. **Otherwise the recipe is unverified**: a ``rescale`` whose scaled tensors have no recorded
   peak (a hand-written recipe, or a forged ``verified`` object) is applied with an
   :class:`UnverifiedRecipeWarning` and marked ``[UNVERIFIED]`` in the partition report — never
   silently. Exact and kernel rewrites (``softmax_stable``, ``pow_square``, ``conv_taps``,
   ``dilated_conv``), CPU subgraphs and a higher precision change no value range and need nothing.

Recorded peaks are data too: a recipe whose peaks are forged passes (2) — `aipc diff` with the
recipe applied is the proof of its numbers.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import onnx
from onnx import numpy_helper

from onnxwrapper.errors import RecipeError
from onnxwrapper.patches import GraphView, PatchError, get_patch, name_unnamed_nodes

__all__ = ["FP16_MAX", "UnverifiedRecipeWarning", "check_recipe", "scaled_tensors"]

#: the largest finite FP16 value
FP16_MAX = 65504.0


class UnverifiedRecipeWarning(UserWarning):
    """A repair recipe was applied whose value ranges nothing recorded (see the module docstring)."""


def _named(model: onnx.ModelProto) -> onnx.ModelProto:
    named = copy.deepcopy(model)
    name_unnamed_nodes(named)
    return named


def scaled_tensors(model: onnx.ModelProto, recipe) -> dict[str, int]:
    """``{tensor: exponent}`` of every tensor of ``model`` a ``rescale`` of ``recipe`` scales, each
    rescale planned on the model as it is (what ``aipc fix`` records peaks for). Rescales that do
    not plan on it are left out."""
    named = _named(model)
    view, nodes = GraphView(named), {n.name: n for n in named.graph.node}
    found: dict[str, int] = {}
    for rewrite in recipe.rewrites:
        if rewrite.rewrite != "rescale" or rewrite.node not in nodes:
            continue
        try:
            plan = get_patch("rescale").configure(**rewrite.params).plan(view, nodes[rewrite.node])
        except PatchError:
            continue
        for tensor, e in plan.exponents.items():
            found[tensor] = found.get(tensor, 0) + int(e)
    return found


def _float_constants(model: onnx.ModelProto):
    for init in model.graph.initializer:
        yield init.name, init
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    yield node.output[0], a.t


def _peak(tensor) -> float | None:
    arr = numpy_helper.to_array(tensor)
    if arr.dtype.kind != "f" or not arr.size:
        return None
    return float(np.max(np.abs(arr.astype(np.float64))))


def _saturating(original: onnx.ModelProto, repaired: onnx.ModelProto) -> list[str]:
    """Float constants the recipe rewrote or added (scaled copies are named ``<name>/x2^<e>``) that
    leave FP16's range although their original did not."""
    before = {name: t for name, t in _float_constants(original)}
    found = []
    for name, tensor in _float_constants(repaired):
        if name in before and before[name].SerializeToString() == tensor.SerializeToString():
            continue  # unchanged by the recipe
        peak = _peak(tensor)
        if peak is None or (math.isfinite(peak) and peak <= FP16_MAX):
            continue
        origin = before.get(name.split("/x2^")[0])
        was = _peak(origin) if origin is not None else None
        if was is None or (math.isfinite(was) and was <= FP16_MAX and peak > was):
            found.append(f"'{name}' (|value| up to {peak:.4g})")
    return found


def check_recipe(original: onnx.ModelProto, repaired: onnx.ModelProto, recipe) -> list[str]:
    """Check ``recipe`` (applied: ``repaired``) against ``original`` (module docstring).

    Returns:
        Why the recipe is unverified (empty: checked, or nothing to check).

    Raises:
        RecipeError: a rewritten constant or a recorded peak times its scale leaves FP16's range.
    """
    rescales = [r for r in recipe.rewrites if r.rewrite == "rescale"]
    if not rescales:
        return []
    bad = _saturating(original, repaired)
    if bad:
        raise RecipeError(f"The repair recipe's {', '.join(r.describe() for r in rescales)} saturates FP16: rewritten "
                          f"constant(s) {', '.join(bad[:4])} beyond ±{FP16_MAX:g}. It would give FP16 overflow garbage "
                          f"(131008 on the HTP); make the recipe again with `aipc fix`.")
    peaks = dict((recipe.checks or {}).get("peaks") or {})
    exponents = scaled_tensors(original, recipe)
    over = [(t, peaks[t] * 2.0 ** e) for t, e in exponents.items() if t in peaks and peaks[t] * 2.0 ** e > FP16_MAX]
    if over:
        tensor, value = max(over, key=lambda item: item[1])
        raise RecipeError(f"The repair recipe's rescale drives '{tensor}' to {value:.4g} (its recorded peak "
                          f"{peaks[tensor]:.4g} × 2^{exponents[tensor]}), beyond FP16's ±{FP16_MAX:g}: it would "
                          f"saturate on the NPU. Make the recipe again with `aipc fix`.")
    missing = sorted(t for t in exponents if t not in peaks)
    if not exponents or missing:
        claim = " (its 'verified' record proves nothing by itself)" if recipe.verified else ""
        what = f"no recorded peak for {len(missing)} scaled tensor(s), e.g. '{missing[0]}'" if missing else \
            "its rescale could not be planned on this model"
        return [f"{what}{claim}"]
    return []
