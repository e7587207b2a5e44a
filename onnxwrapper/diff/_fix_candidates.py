"""The repair candidates of one failing model, cheapest and most exact first (``aipc fix``).

From the localization (cause and culprit node) and the reference's value ranges:

1. ``exact`` — bit-exact rewrites that bring every fixable FP16 overflow into range
   (:mod:`onnxwrapper.diff._fix_rescale`: power-of-two ``rescale``, ``softmax_stable``); for FP16
   runs, whenever the reference has a tensor beyond ±65504.
2. ``kernel`` — registered rewrites that compute the culprit node with other operators (``pow_square``,
   ``dilated_conv``, ``conv_taps``, ``softmax_stable`` and the operator-support patches ``mod``,
   ``einsum``, ``maxpool3d``): first at the culprit alone, then at every node the rewrite applies to.
3. ``cpu`` — the culprit node alone on the CPU; for an overflow, the out-of-range region (the
   nodes producing the tensors beyond FP16's range and the nodes reading them, so that every tensor
   crossing to the NPU is in range).
4. ``precision`` — the backend's higher precision (``fp32``) where the target has one.

Every candidate after the first includes the exact rewrites found in step 1: they are bit-exact, so
they never make a correct result worse, and a model may need both (an overflow and a wrong kernel).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import onnx

from onnxwrapper.diff._fix_ranges import out_of_range, reference_ranges
from onnxwrapper.diff._fix_rescale import exact_overflow_rewrites
from onnxwrapper.patches import GraphView, get_patch, list_patches, name_unnamed_nodes
from onnxwrapper.repair import Rewrite

__all__ = ["REMEDIES", "Candidate", "candidates_for", "node_groups"]

#: remedy kinds in the order they are tried
REMEDIES = ("exact", "kernel", "cpu", "precision")
_NODE_CAUSES = ("node", "saturation", "amplification", "overflow")


@dataclass
class Candidate:
    """One repair to verify: its kind, a title, and the recipe content (rewrites, CPU groups, precision)."""

    kind: str
    title: str
    rewrites: tuple = ()
    cpu_subgraphs: tuple = ()
    precision: str | None = None
    exactness: str = ""
    notes: list = field(default_factory=list)


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
            if patch.name == "rescale" or not patch.targets(node) or not patch.matches(node, view):
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


def candidates_for(model: onnx.ModelProto, loc: dict | None, feeds_list, precision: str, *,
                   remedies=REMEDIES, higher_precision: str | None = None) -> tuple[list, list]:
    """The candidates of one failing model (module docstring) and notes for the report.

    Args:
        model: the model as the user has it (not modified). loc: its localization (the report's
            JSON object) or ``None``. feeds_list: recorded inputs of its calls (value ranges).
        precision: the precision it was judged at (``"fp16"`` enables the overflow search).
        remedies: the kinds to generate. higher_precision: the backend's higher precision (e.g.
            ``"fp32"``) or ``None`` when the target has none.
    """
    named = copy.deepcopy(model)
    name_unnamed_nodes(named)
    notes, result = [], []
    base: tuple = ()
    ranges, order = reference_ranges(named, feeds_list)
    over = out_of_range(ranges, order) if precision == "fp16" else []
    if over and "exact" in remedies:
        first = (loc or {}).get("culprit", {}) or {}
        rewrites, why, _left = exact_overflow_rewrites(named, feeds_list, first.get("tensor"))
        notes += why
        if rewrites:
            base = tuple(rewrites)
            result.append(Candidate("exact", f"{len(rewrites)} exact rewrite(s) bringing FP16 overflows into range",
                                    base, exactness=_exactness(base)))
    elif precision == "fp16" and "exact" in remedies:
        notes.append("the reference stays within FP16's range everywhere: no overflow to rewrite")
    culprits = _culprits(named, loc)
    if "kernel" in remedies:
        result += _kernel_candidates(named, culprits, base)
    if "cpu" in remedies:
        cause = (loc or {}).get("cause")
        if culprits and cause in ("node", "saturation", "amplification"):
            result.append(Candidate("cpu", f"'{culprits[0]}' on the CPU", base, ((culprits[0],),),
                                    exactness=_exactness(base)))
        if over:
            producer = {o: n.name for n in named.graph.node for o in n.output if o}
            region = {producer[t] for t in over if t in producer}
            region |= {n.name for n in named.graph.node if set(n.input) & set(over)}
            groups = node_groups(named, region)
            result.append(Candidate("cpu", f"the FP16 out-of-range region on the CPU ({len(region)} node(s))",
                                    (), groups))
    if "precision" in remedies and higher_precision and precision == "fp16":
        result.append(Candidate("precision", f"precision {higher_precision} for the whole model", (), (),
                                higher_precision, exactness="the backend's own higher-precision arithmetic"))
    if not culprits and loc and loc.get("cause") in _NODE_CAUSES:
        notes.append("the localized node was not found in the model")
    return result, notes
