"""The smallest CPU region that keeps FP16 rounding from drifting a model's outputs (``aipc fix``).

When error *accumulates* — a recurrent state (``LSTM``, ``GRU``, ``RNN``, ``Scan``, ``Loop``) carried
over hundreds of steps, or values whose FP16 rounding loses what matters — no rewrite of one node
removes it, and a device has no FP32 mode. What a device can run is the part that needs FP32 on
its CPU. Which part is measured on the CPU with the FP16 emulation
(:mod:`onnxwrapper.repair.fix._emulate`, ``If`` nodes the feeds decide inlined), so no candidate is
compiled to find it. Regions are named by top-level nodes (an ``If`` stands for its branch) and
never hold a control node (shapes, conditions: the split copies those):

0. A model without recurrent nodes whose whole FP16 emulation reaches every bar gets no region: what
   fails is not the rounding of its tensors (a wrong kernel: the backend's localization finds it).
1. ``base`` — the recurrent nodes, and nodes whose subgraphs hold one (the emulation cannot see a
   state's FP16 drift, so they are on the CPU whenever the model has any) — alone: if the emulation
   of the rest in FP16 reaches every bar with :data:`MARGIN_DB` to spare, that is the region.
2. Where rounding starts: each float tensor the outputs depend on is rounded *alone* (every other
   tensor FP32) — in groups first, halved while a group costs an output its bar plus the margin
   (group testing, at most :data:`MAX_RUNS` emulated runs in all). Such a tensor is
   *precision-sensitive*; its producer and its readers go to the CPU, so it never crosses to the
   NPU (faster-whisper's VAD: the STFT's squared magnitudes, ≈ 1e-8 in quiet windows, subnormal in
   FP16 — each rounded alone costs ``hn`` 22.6–30.7 dB; ``Pow``, ``Pow``, ``Add``, ``Sqrt`` and the
   LSTM on the CPU: emulated 51.3 dB, measured 51.6 dB on the HTP simulator).
3. The fewest tensors to keep FP32 for the emulation to pass (delta debugging from all of them).
4. The shortest tail of the nodes the outputs depend on that the emulation says passes (bisected);
   5. all of them.

Each region comes with its emulated worst SNR per output; the fix verifies them on the backend in
this order (skipping those the emulation puts below a bar) and keeps the first that passes. The
emulation is a screen (it rounds tensors, not arithmetic inside an operator): a region it predicts
passing can still fail on the backend (silero-vad's op15: emulated 34.7 dB, measured 5.6 dB), and
the next is tried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import onnx

from onnxwrapper.repair.fix._emulate import Emulator, control_nodes

__all__ = ["MARGIN_DB", "MAX_RUNS", "RECURRENT", "Region", "is_recurrent", "precision_regions", "reads",
           "upstream_nodes"]

#: ops that carry a state from step to step (their FP16 rounding accumulates)
RECURRENT = {"LSTM", "GRU", "RNN", "Scan", "Loop"}
#: emulated runs spent looking for precision-sensitive tensors (each is one CPU run of the model)
MAX_RUNS = 96
#: feeds (the worst calls first) each emulated run replays
MAX_FEEDS = 4
#: how far above its bar an output's emulated SNR must be for the search to call a region enough:
#: one significant bit (the emulation rounds tensors, not the arithmetic inside an operator)
MARGIN_DB = 6.02


@dataclass
class Region:
    """A CPU region to verify: ``nodes`` (names, graph order), ``how`` it was found (one line),
    ``emulated`` (``{output: worst emulated SNR, dB}``) and ``sensitive`` (the precision-sensitive
    tensors it keeps in FP32, with their emulated SNR when rounded alone)."""

    nodes: tuple
    how: str
    emulated: dict = field(default_factory=dict)
    sensitive: dict = field(default_factory=dict)

    @property
    def worst(self) -> float:
        """The lowest emulated SNR of an output (``inf`` when none was measured)."""
        return min(self.emulated.values(), default=math.inf)


def reads(node) -> list:
    """The tensors ``node`` reads: its inputs, and the outer-scope names its subgraphs (``If``,
    ``Loop``, ``Scan`` bodies) read — what they use without producing it."""
    names = [t for t in node.input if t]
    for attr in node.attribute:
        for graph in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            made = {i.name for i in graph.input} | {i.name for i in graph.initializer}
            made |= {o for n in graph.node for o in n.output}
            names += [t for n in graph.node for t in reads(n) if t not in made]
    return list(dict.fromkeys(names))


def is_recurrent(node) -> bool:
    """A recurrent node (:data:`RECURRENT`), or a node whose subgraphs hold one (an ``If`` branch
    with an ``LSTM``: the QNN backend inlines the taken branch, so the state is carried in FP16)."""
    if node.op_type in RECURRENT:
        return True
    return any(is_recurrent(n) for attr in node.attribute
               for graph in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs))
               for n in graph.node)


def upstream_nodes(model: onnx.ModelProto, outputs) -> list:
    """The nodes (graph order, no ``Constant``) the tensors ``outputs`` depend on (through the
    subgraphs of ``If``/``Loop``/``Scan`` nodes too)."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    seen, todo = set(), list(outputs)
    while todo:
        node = producer.get(todo.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        todo += reads(node)
    return [n for n in model.graph.node if n.name in seen and n.op_type != "Constant"]


class _Screen:
    """The emulated runs of one model (:class:`~onnxwrapper.repair.fix._emulate.Emulator`) with a
    budget and the bars."""

    def __init__(self, model, feeds, bars: dict) -> None:
        self.emulator, self.bars = Emulator(model, feeds[:MAX_FEEDS]), bars
        self.floats = self.emulator.floats
        self.control = control_nodes(self.emulator.folded)

    @property
    def runs(self) -> int:
        return self.emulator.runs

    def snr(self, cpu_nodes) -> dict:
        return self.emulator.snr(cpu_nodes)

    def alone(self, tensors) -> dict:
        """Worst SNR per output with only ``tensors`` (of the emulated, ``If``-folded model) rounded."""
        return self.emulator.alone(tensors)

    def passes(self, snr: dict, margin: float = MARGIN_DB) -> bool:
        return all(snr.get(o, math.inf) >= bar + margin for o, bar in self.bars.items())


def _sensitive(screen: _Screen, tensors: list) -> dict:
    """``{tensor: worst SNR when rounded alone}`` of the tensors whose rounding alone fails the bar
    (group testing: a group that passes holds none; a failing group is halved)."""
    found: dict = {}
    todo = [tensors] if tensors else []
    while todo and screen.runs < MAX_RUNS:
        group = todo.pop(0)
        snr = screen.alone(group)
        if screen.passes(snr):
            continue
        if len(group) == 1:
            found[group[0]] = min(snr.values(), default=-math.inf)
            continue
        half = len(group) // 2
        todo += [group[:half], group[half:]]
    return found


def _fewest_kept(screen: _Screen, model, base: set, tensors: list) -> list | None:
    """The fewest ``tensors`` to keep FP32 (their producers and readers on the CPU) for the emulation
    to pass: delta debugging (Zeller's *ddmin*) from all of them, removing chunks while it still
    passes, within :data:`MAX_RUNS`; ``None`` when not even all of them pass."""
    kept = list(tensors)
    if not kept or not screen.passes(screen.snr(_with_tensors(screen, base, kept))):
        return None
    parts = 2
    while len(kept) >= 2 and screen.runs < MAX_RUNS:
        size = math.ceil(len(kept) / parts)
        chunks = [kept[i:i + size] for i in range(0, len(kept), size)]
        for chunk in chunks:
            rest = [t for t in kept if t not in set(chunk)]
            if screen.runs < MAX_RUNS and screen.passes(screen.snr(_with_tensors(screen, base, rest))):
                kept, parts = rest, max(parts - 1, 2)
                break
        else:
            if parts >= len(kept):
                break
            parts = min(len(kept), parts * 2)
    return kept


def _with_tensors(screen: _Screen, nodes: set, tensors) -> set:
    """``nodes`` plus the top-level nodes that produce or read each of ``tensors`` (of the emulated
    model; an inlined branch's node stands for its ``If``), no ``Constant`` node and no node that
    computes no float (shapes and control values are copied into each part, not placed)."""
    wanted, folded = set(tensors), screen.emulator.folded
    return nodes | {screen.emulator.top(n.name) for n in folded.graph.node if n.op_type != "Constant"
                    and n.name not in screen.control and (set(n.output) & wanted or set(reads(n)) & wanted)}


def _ordered(model: onnx.ModelProto, names: set) -> tuple:
    return tuple(n.name for n in model.graph.node if n.name in names)


def precision_regions(model: onnx.ModelProto, feeds_list, bars: dict, *, recurrent: bool = True) -> tuple[list, list]:
    """Candidate CPU regions for FP16 drift, smallest first, each emulated (module docstring).

    Args:
        model: the model the regions are named in (a recipe's rewrites applied, unnamed nodes named).
        feeds_list: recorded inputs (the worst calls first; :data:`MAX_FEEDS` are used).
        bars: ``{graph output: SNR bar (dB)}`` the outputs must reach (the diff's tolerances).
        recurrent: put the recurrent nodes in every region (their state's drift is not emulated).

    Returns:
        ``(regions, notes)``: :class:`Region` objects (distinct, smallest first; the last is every
        node the outputs depend on), and what the emulation found, for the report.

    Raises:
        Whatever onnxruntime raises for the model on its CPU EP.
    """
    screen = _Screen(model, feeds_list, bars)
    base = {n.name for n in model.graph.node if is_recurrent(n)} if recurrent else set()
    control = control_nodes(model)
    cone = [n for n in upstream_nodes(model, bars) if n.name not in control]
    folded_cone = upstream_nodes(screen.emulator.folded, bars)
    regions: list = []
    notes: list = []

    def add(nodes: set, how: str, sensitive=None) -> Region:
        region = Region(_ordered(model, nodes), how, screen.snr(nodes), dict(sensitive or {}))
        if region.nodes and all(r.nodes != region.nodes for r in regions):
            regions.append(region)
        return region

    if not base:
        whole = screen.snr(set())
        if screen.passes(whole):
            notes.append(f"the FP16 emulation of the whole model on the CPU reaches every bar (worst "
                         f"{min(whole.values(), default=math.inf):.1f} dB): what fails is not the rounding of its "
                         f"tensors (a wrong kernel, or arithmetic inside an operator) — no CPU region from it")
            return regions, notes
    first = add(base, f"the recurrent node(s) {', '.join(_ordered(model, base))}") if base else None
    if first is not None and screen.passes(first.emulated):
        notes.append(f"emulated FP16 with {', '.join(first.nodes)} on the CPU: worst {first.worst:.1f} dB — "
                     f"enough by the emulation")
        return regions, notes
    tensors = [t for n in folded_cone for t in n.output if t in screen.floats and screen.emulator.top(n.name) not in base]
    sensitive = _sensitive(screen, tensors)
    if sensitive:
        shown = ", ".join(f"'{t}' ({v:.1f} dB)" for t, v in list(sensitive.items())[:6])
        notes.append(f"where FP16 rounding starts (emulated on the CPU, each tensor rounded alone): {shown} — each "
                     f"alone brings an output below its bar")
        region = add(_with_tensors(screen, base, sensitive), "the precision-sensitive tensors' producers and readers"
                     + (" and the recurrent node(s)" if base else ""), sensitive)
        if screen.passes(region.emulated):
            return regions, notes
    kept = _fewest_kept(screen, model, base, tensors)
    if kept is not None:
        add(_with_tensors(screen, base, kept), f"the producers and readers of the {len(kept)} tensor(s) that must stay "
            f"FP32 (fewest found)" + (" and the recurrent node(s)" if base else ""), dict.fromkeys(kept, None))
    order = [n.name for n in cone]
    lo, hi = 1, len(order)
    while lo < hi and screen.runs < MAX_RUNS:  # the shortest passing suffix of the cone
        mid = (lo + hi) // 2
        if screen.passes(screen.snr(base | set(order[-mid:]))):
            hi = mid
        else:
            lo = mid + 1
    if hi < len(order):
        add(base | set(order[-hi:]), f"the last {hi} node(s) the failing outputs depend on"
            + (" and the recurrent node(s)" if base else ""))
    add(base | set(order), f"every node the failing outputs depend on ({len(order)})")
    notes.append(f"emulated FP16 runs on the CPU: {screen.runs}")
    return regions, notes
