"""The repair candidates of one failing model, cheapest and most exact first (``aipc fix``).

From the localization (cause and culprit node) and the reference's value ranges:

1. ``exact`` — bit-exact rewrites that bring every fixable FP16 overflow into range
   (:mod:`onnxwrapper.repair.fix._rescale`: power-of-two ``rescale``, ``softmax_stable``); for FP16
   runs, whenever the reference has a tensor beyond ±65504.
2. ``kernel`` — registered rewrites that compute the culprit node with other operators (``pow_square``,
   ``dilated_conv``, ``conv_taps``, ``softmax_stable`` and the operator-support patches ``mod``,
   ``einsum``, ``maxpool3d``): first at the culprit alone, then at every node the rewrite applies to.
3. ``known`` — the model's own known FP16 fix for an overflow no exact rewrite absorbs: the tensor
   clamped to ±64504 (``clamp_fp16``, as HF transformers' T5 does in FP16), then the exact rewrites of
   what is left (not exact: the values it changes are stated).
4. ``cpu`` — the culprit node alone on the CPU; for an overflow, the out-of-range region (the
   nodes producing the tensors beyond FP16's range and the nodes reading them, so that every tensor
   crossing to the NPU is in range); for a model with recurrent nodes (``LSTM``, ``GRU``, ``RNN``,
   ``Scan``, ``Loop``) whose error accumulates — or an accumulation without overflow — the CPU
   regions of :mod:`onnxwrapper.repair.fix._regions`, smallest first (the recurrent nodes, then
   where the FP16 emulation shows rounding starts), each with its emulated SNR and the kernel
   rewrites found for the culprit. All of these run on a device (its CPU).
5. ``precision`` — the backend's higher precision (``fp32``): a mode of the x86-64 simulator that
   no device has, offered only when asked for by name (``simulator_modes``).

Every candidate after the first includes the exact rewrites found in step 1: they are bit-exact, so
they never make a correct result worse, and a model may need both (an overflow and a wrong kernel).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field

import onnx

from onnxwrapper.diff._judge import snr_bar_db
from onnxwrapper.repair.fix._ranges import out_of_range, reference_ranges
from onnxwrapper.repair.fix._regions import is_recurrent, precision_regions
from onnxwrapper.repair.fix._rescale import exact_overflow_rewrites
from onnxwrapper.repair.fix._underflow import exact_underflow_rewrites, underflow_region
from onnxwrapper.patches import GraphView, get_patch, list_patches, name_unnamed_nodes
from onnxwrapper.repair.recipe import ModelRecipe, Rewrite, apply_recipe

__all__ = ["REMEDIES", "Candidate", "candidates_for", "node_groups"]

#: remedy kinds in the order they are tried
REMEDIES = ("exact", "kernel", "known", "cpu", "precision")
#: rewrites that are not kernel-avoiding (they are chosen from value ranges, not from a culprit)
_NOT_KERNEL = {"rescale", "clamp_fp16"}
_NODE_CAUSES = ("node", "saturation", "amplification", "overflow")


@dataclass
class Candidate:
    """One repair to verify: its kind, a title, the recipe content (rewrites, CPU groups, precision), and
    for a CPU region found by the FP16 emulation its emulated worst SNR per output (``emulated``)."""

    kind: str
    title: str
    rewrites: tuple = ()
    cpu_subgraphs: tuple = ()
    precision: str | None = None
    exactness: str = ""
    notes: list = field(default_factory=list)
    emulated: dict | None = None


def node_groups(model: onnx.ModelProto, names) -> tuple:
    """``names`` grouped into connected subgraphs (nodes linked by a tensor), in graph order."""
    names = [n.name for n in model.graph.node if n.name in set(names)]
    outputs = {n.name: set(n.output) for n in model.graph.node if n.name in names}
    inputs = {n.name: set(n.input) for n in model.graph.node if n.name in names}
    parent = {n: n for n in names}

    def find(n):
        while parent[n] != n:
            n = parent[n]
        return n
    for a in names:
        for b in names:
            if a != b and outputs[a] & inputs[b]:
                parent[find(b)] = find(a)
    groups: dict = {}
    for n in names:
        groups.setdefault(find(n), []).append(n)
    return tuple(tuple(g) for g in groups.values())


#: what a precision candidate's exactness line says: a higher precision is offered only where the target
#: has one, i.e. the HTP simulator (a Snapdragon device runs float32 graphs in FP16, QNN HTP backend docs)
_PRECISION_EXACTNESS = ("the backend's own higher-precision arithmetic; a mode of the HTP simulator only — a Snapdragon "
                        "device has no FP32 math, refuses this recipe, and keeps the model unrepaired there")


def _exactness(rewrites) -> str:
    seen = dict.fromkeys(r.rewrite for r in rewrites)
    return "; ".join(f"{name}: {get_patch(name).exactness}" for name in seen)


def _culprits(model: onnx.ModelProto, loc: dict | None) -> list:
    """Node names localization points at: the culprit (for a node-level cause), then the first node
    below the bar — found by their output tensor (robust to how unnamed nodes were named)."""
    if not loc:
        return []
    producer = {o: n.name for n in model.graph.node for o in n.output if o}
    found = []
    entries = [loc.get("culprit")] if loc.get("cause") in _NODE_CAUSES else []
    entries.append(loc.get("first"))
    for entry in entries:
        if entry and producer.get(entry.get("tensor")) and producer[entry["tensor"]] not in found:
            found.append(producer[entry["tensor"]])
    return found


def _kernel_candidates(model: onnx.ModelProto, culprits: list, base: tuple) -> list:
    view = GraphView(model)
    nodes = {n.name: n for n in model.graph.node}
    result, seen = [], set()
    for name in culprits:
        node = nodes[name]
        for patch in list_patches():
            if patch.name in _NOT_KERNEL or not patch.targets(node) or not patch.matches(node, view):
                continue
            if (patch.name, name) not in seen:
                seen.add((patch.name, name))
                rw = (Rewrite(patch.name, name),)
                result.append(Candidate("kernel", f"{patch.name} at '{name}'", base + rw,
                                        exactness=_exactness(rw)))
            every = tuple(Rewrite(patch.name, n.name) for n in model.graph.node
                          if patch.targets(n) and patch.matches(n, view))
            if len(every) > 1 and (patch.name, "*") not in seen:
                seen.add((patch.name, "*"))
                result.append(Candidate("kernel", f"{patch.name} at all {len(every)} nodes it applies to",
                                        base + every, exactness=_exactness(every)))
    return result


def _clamp_candidate(model: onnx.ModelProto, feeds_list, first, ranges: dict) -> Candidate | None:
    """The ``known`` candidate: clamps where no exact rewrite fits, then the exact rewrites."""
    rewrites, _why, _left = exact_overflow_rewrites(model, feeds_list, first, clamp=True)
    producer = {n.name: n for n in model.graph.node}
    clamped = [r for r in rewrites if r.rewrite == "clamp_fp16"]
    if not clamped:
        return None
    changed = []
    for r in clamped:
        node = producer.get(r.node)
        tensor = node.output[r.params.get("output", 0)] if node is not None else r.node
        changed.append(f"'{tensor}' (reference peak {ranges.get(tensor, float('nan')):.4g})")
    cand = Candidate("known", f"T5's FP16 fix: {len(clamped)} tensor(s) clamped to ±64504, "
                     f"{len(rewrites) - len(clamped)} exact rewrite(s)", tuple(rewrites),
                     exactness=_exactness(rewrites))
    cand.notes.append("clamp_fp16 changes the reference's values beyond ±64504 of " + ", ".join(changed))
    return cand


def _underflow_candidates(model: onnx.ModelProto, feeds_list, base: tuple, kernel: list, notes: list,
                          focus: str | None = None) -> list:
    """The exact rewrites (or the widest kernel rewrite) followed by upward rescales of the FP16
    underflows left (:mod:`onnxwrapper.repair.fix._underflow`; ``focus``: the localized one), when there are any."""
    widest = [c for c in kernel if " at all " in c.title] or kernel[:1]
    first = widest[0] if widest else None
    rewrites = first.rewrites if first is not None else base
    try:
        under, why = exact_underflow_rewrites(model, feeds_list, rewrites, focus)
    except Exception as exc:  # noqa: BLE001 - a model the CPU EP cannot run with every tensor exposed
        notes.append(f"FP16 underflow not measured: {type(exc).__name__}: {str(exc)[:200]}")
        return []
    notes += why
    if not under:
        return []
    title = (f"{first.title} and {len(under)} exact upscale(s) of FP16 underflow" if first is not None
             else f"{len(rewrites)} exact rewrite(s) and {len(under)} exact upscale(s) of FP16 underflow")
    total = tuple(rewrites) + tuple(under)
    return [Candidate(first.kind if first is not None else "exact", title, total, exactness=_exactness(total))]


def _region_candidates(model: onnx.ModelProto, loc: dict | None, feeds_list, base: tuple, kernel: list, bars: dict,
                       over: list, notes: list) -> list:
    """The CPU regions for FP16 drift (:mod:`onnxwrapper.repair.fix._regions`), each with the kernel
    rewrites that apply at every node the culprit's rewrite applies to, and its emulated SNR: a model
    with recurrent nodes whose error accumulates (or grows at a node), or any model without an
    overflow (the regions are empty when the FP16 emulation of the kernel-fixed model reaches every
    bar: then the failure is not rounding — silero-vad's op15, localized at a wrong ``Pow``, also
    loses its quiet windows' squared STFT magnitudes to FP16 underflow)."""
    recurrent = [n.name for n in model.graph.node if is_recurrent(n)]
    cause = (loc or {}).get("cause")
    if recurrent and loc and cause not in ("accumulation",) + _NODE_CAUSES:
        return []
    if not recurrent and over:
        return []  # an overflow: the exact rewrites and the out-of-range region come first
    fixes = [c for c in kernel if " at all " in c.title] or kernel[:1]
    unique: dict = {}
    for r in (r for c in fixes for r in c.rewrites):
        unique.setdefault(r.describe(), r)
    rewrites = tuple(unique.values()) or base
    what = f" with {', '.join(sorted({r.rewrite for r in rewrites}))}" if rewrites else ""
    bars = bars or {o.name: snr_bar_db("fp16") for o in model.graph.output}
    try:
        rewritten = apply_recipe(model, ModelRecipe("0" * 64, rewrites=rewrites)).proto
        regions, why = precision_regions(rewritten, feeds_list, bars, recurrent=bool(recurrent))
    except Exception as exc:  # noqa: BLE001 - a model the CPU EP cannot emulate: the recurrent nodes alone
        notes.append(f"FP16 emulation on the CPU failed ({type(exc).__name__}: {str(exc)[:200]}): the recurrent "
                     f"node(s) alone on the CPU")
        return [Candidate("cpu", f"the recurrent node(s) {', '.join(recurrent)} on the CPU (FP32 state){what}",
                          rewrites, (tuple(recurrent),), exactness=_exactness(rewrites))] if recurrent else []
    notes += why
    result = []
    for region in regions:
        title = f"{region.how} on the CPU ({len(region.nodes)} node(s)){what}"
        if tuple(region.nodes) == tuple(recurrent):
            title = f"the recurrent node(s) {', '.join(recurrent)} on the CPU (FP32 state){what}"
        result.append(Candidate("cpu", title, rewrites, node_groups(rewritten, region.nodes),
                                exactness=_exactness(rewrites), emulated=dict(region.emulated)))
    return result


def candidates_for(model: onnx.ModelProto, loc: dict | None, feeds_list, precision: str, *,
                   remedies=REMEDIES, higher_precision: str | None = None, bars: dict | None = None) -> tuple[list, list]:
    """The candidates of one failing model (module docstring) and notes for the report.

    Args:
        model: the model as the user has it (not modified). loc: its localization (the report's
            JSON object) or ``None``. feeds_list: recorded inputs of its calls (value ranges).
        precision: the precision it was judged at (``"fp16"`` enables the overflow search).
        remedies: the kinds to generate. higher_precision: the backend's higher precision (e.g.
            ``"fp32"``, a simulator mode asked for by name) or ``None`` (a device-valid search).
        bars: ``{graph output: SNR bar (dB)}`` for the FP16 emulation of CPU regions (default: every
            float output at the FP16 bar).
    """
    named = copy.deepcopy(model)
    name_unnamed_nodes(named)
    notes, result = [], []
    base: tuple = ()
    ranges, order = reference_ranges(named, feeds_list)
    over = out_of_range(ranges, order) if precision == "fp16" else []
    known = None
    if over and ("exact" in remedies or "known" in remedies):
        first = ((loc or {}).get("culprit", {}) or {}).get("tensor")
        rewrites, why, left = exact_overflow_rewrites(named, feeds_list, first)
        notes += why
        if rewrites and "exact" in remedies:
            base = tuple(rewrites)
            result.append(Candidate("exact", f"{len(rewrites)} exact rewrite(s) bringing FP16 overflows into range",
                                    base, exactness=_exactness(base)))
        if left and "known" in remedies:
            known = _clamp_candidate(named, feeds_list, first, ranges)
    elif precision == "fp16" and "exact" in remedies:
        notes.append("the reference stays within FP16's range everywhere: no overflow to rewrite")
    culprits = _culprits(named, loc)
    kernel = _kernel_candidates(named, culprits, base) if "kernel" in remedies or "cpu" in remedies else []
    if "kernel" in remedies:
        result += kernel
    focus = ((loc or {}).get("culprit") or {}).get("tensor") if (loc or {}).get("cause") == "underflow" else None
    if precision == "fp16" and ("exact" in remedies or "kernel" in remedies):
        result += _underflow_candidates(named, feeds_list, base, kernel if "kernel" in remedies else [], notes, focus)
    if known is not None:
        result.append(known)
    if "cpu" in remedies:
        result += _region_candidates(named, loc, feeds_list, base, kernel, bars or {}, over, notes)
        cause = (loc or {}).get("cause")
        if culprits and cause in ("node", "saturation", "amplification"):
            result.append(Candidate("cpu", f"'{culprits[0]}' on the CPU", base, ((culprits[0],),),
                                    exactness=_exactness(base)))
        region = underflow_region(named, feeds_list, focus) if focus else ()
        if region:
            result.append(Candidate("cpu", f"the FP16 underflow region on the CPU ({len(region)} node(s))", base,
                                    node_groups(named, region), exactness=_exactness(base)))
        if over:
            producer = {o: n.name for n in named.graph.node for o in n.output if o}
            region = {producer[t] for t in over if t in producer}
            region |= {n.name for n in named.graph.node if set(n.input) & set(over)}
            groups = node_groups(named, region)
            result.append(Candidate("cpu", f"the FP16 out-of-range region on the CPU ({len(region)} node(s))",
                                    (), groups))
    if "precision" in remedies and higher_precision and precision == "fp16":
        result.append(Candidate("precision", f"precision {higher_precision} for the whole model", (), (),
                                higher_precision, exactness=_PRECISION_EXACTNESS))
    if not culprits and loc and loc.get("cause") in _NODE_CAUSES:
        notes.append("the localized node was not found in the model")
    return _distinct(result, notes), notes


def _distinct(candidates: list, notes: list) -> list:
    """``candidates`` without the ones that make the same change as an earlier one (two remedies can
    arrive at one recipe, e.g. a culprit that is the recurrent node: each costs a compile and replays),
    with a note per candidate dropped."""
    kept, seen = [], {}
    for cand in candidates:
        key = json.dumps([[r.to_dict() for r in cand.rewrites], [list(g) for g in cand.cpu_subgraphs],
                          cand.precision], sort_keys=True)
        if key in seen:
            notes.append(f"'{cand.title}' makes the same change as '{seen[key]}': judged once")
            continue
        seen[key] = cand.title
        kept.append(cand)
    return kept
