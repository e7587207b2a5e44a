"""Naming the cause of a failing model from per-node measurements (the analysis half of ``--localize``).

Every exposed node output is compared with the reference node's output by a scale-relative
criterion — its SNR against the SNR bar of the run's precision (the output default,
:func:`onnxwrapper.diff._judge._tolerance.snr_bar_db`), never an output's absolute tolerance applied to
intermediates of another scale. From those measurements one of these causes is named:

``overflow``
    (FP16) a node whose reference output exceeds ±65504, the IEEE 754 binary16 range, and whose
    output or a consumer's output falls below the bar — anywhere upstream of a failing output
    (magika: a ReduceSum of squares reaching 2.08e5, after an earlier LayerNorm dipped below the
    bar and recovered). Named: the first node of that out-of-range region (walking up through
    inputs beyond the range too). A node beyond the range whose result stays accurate (the QNN
    HTP simulator computes values up to 131008) is only listed.
``underflow``
    (FP16) the first node below the bar (or the first that saturates) is a logarithm, a division, a
    reciprocal, a square root or a normalization, and its wrong values sit where an input's
    reference values are below FP16's smallest normal number (6.1e-5) and the backend lost them
    (:mod:`onnxwrapper.diff._localize._underflow`); or a tensor whose values are all below that
    range falls below the bar itself. Named: the tensor holding those values.
``saturation``
    (FP16) a node whose backend output holds the FP16 limit (±65504, or 131008 on the QNN HTP
    simulator, which also encodes NaN/±Inf that way) where the reference is finite and within
    range, and no node below the bar precedes it. The saturated positions are followed upstream
    through same-shaped inputs that are already wrong there, to the node where the wrong values
    start (faster-whisper's VAD: ``Pow(x, 2)`` returns −4 for ``x = −0``, and the ``Sqrt`` of the
    sum saturates); that node is run in isolation.
``node``
    one node breaks: the first node below the bar, run in isolation (:func:`isolated_model`) on
    both sides with the values the backend fed it, is itself below the bar — only the node's own
    error is left when both sides get the same inputs. Without an
    isolation run: its SNR drops by ≥ 10 dB from the SNR of its inputs, which were within the bar.
``amplification``
    the first node below the bar drops ≥ 10 dB from its inputs, but is accurate in isolation: it
    amplifies the error it receives (a softmax or an exp of large inputs does that legitimately).
``accumulation``
    the error grows smoothly: the first node below the bar loses < 10 dB relative to its inputs and
    is accurate in isolation; no single node is the cause.

A node's input SNR is the lowest SNR among its floating inputs (graph inputs and initializers
are exact: +inf).
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, helper

from onnxwrapper.diff._judge import FP16_MAX
from onnxwrapper.diff._localize._underflow import underflow_message

__all__ = ["SHARP_DROP_DB", "NodeVerdict", "Graph", "pick_suspect", "classify", "isolated_model", "input_snr"]

#: a node "breaks" when its SNR is this much below its inputs' (its error power grew 10×).
SHARP_DROP_DB = 10.0
_FLOAT_DTYPES = {np.dtype(np.float16): 10, np.dtype(np.float32): 1, np.dtype(np.float64): 11}


class NodeVerdict(dict):
    """One measured tensor: ``{node, op_type, tensor, index, passed, metrics, failed,
    reference_max_abs, saturated}`` (a dict, serialized as is into the report)."""


def input_snr(node, verdicts: dict, exact: set) -> float | None:
    """Lowest SNR (dB) among ``node``'s inputs with a verdict; ``inf`` when all its floating inputs
    are exact (graph inputs, initializers); ``None`` when an input was not measured."""
    values = []
    for name in node.input:
        if not name or name in exact:
            continue
        v = verdicts.get(name)
        if v is None:
            return None
        values.append(v["metrics"].get("snr_db", math.inf))
    return min(values) if values else math.inf


class Graph:
    """What the analysis needs to know about the model: ``order`` (candidate tensors in graph
    order), ``nodes`` (tensor → producing NodeProto), ``consumers`` (tensor → produced tensors of
    its consumers), ``exact`` (graph inputs and initializers) and ``upstream`` (tensors the failing
    outputs depend on)."""

    def __init__(self, model, order: list, failing_outputs=()) -> None:
        self.order = list(order)
        self.nodes = {o: n for n in model.graph.node for o in n.output if o}
        self.exact = {i.name for i in model.graph.initializer} | {i.name for i in model.graph.input}
        self.consumers: dict[str, list] = {}
        for n in model.graph.node:
            for t in n.input:
                self.consumers.setdefault(t, []).extend(o for o in n.output if o)
        targets = list(failing_outputs) or [o.name for o in model.graph.output]
        self.upstream, frontier = set(), list(targets)
        while frontier:
            t = frontier.pop()
            if t in self.upstream:
                continue
            self.upstream.add(t)
            node = self.nodes.get(t)
            if node is not None:
                frontier.extend(i for i in node.input if i)


def _degraded(t: str, verdicts: dict, graph: Graph) -> bool:
    return not verdicts[t]["passed"] or any(
        c in verdicts and not verdicts[c]["passed"] for c in graph.consumers.get(t, ()))


def _origin(t: str, verdicts: dict, graph: Graph) -> str:
    """The first tensor of the out-of-range region ``t`` belongs to (walking up through inputs
    whose reference values are beyond FP16's range too)."""
    seen = set()
    while t not in seen:
        seen.add(t)
        node = graph.nodes.get(t)
        up = [i for i in (node.input if node is not None else ())
              if i in verdicts and verdicts[i]["reference_max_abs"] > FP16_MAX]
        if not up:
            return t
        t = min(up, key=lambda i: verdicts[i]["index"])
    return t


def pick_suspect(verdicts: dict, graph: Graph, precision: str) -> tuple[str, str | None]:
    """``(kind, tensor)``: ``("overflow", t)``, ``("saturation", t)``, ``("first", t)`` (the first
    tensor below the bar) or ``("none", None)`` — which node the cause is looked for at (module
    docstring); the caller runs ``saturation`` and ``first`` suspects in isolation."""
    measured = [t for t in graph.order if t in verdicts]
    first = next((t for t in measured if not verdicts[t]["passed"]), None)
    if precision == "fp16":
        for t in measured:
            if t in graph.upstream and verdicts[t]["reference_max_abs"] > FP16_MAX and _degraded(t, verdicts, graph):
                return "overflow", _origin(t, verdicts, graph)
        first_idx = verdicts[first]["index"] if first else math.inf
        for t in measured:
            if t in graph.upstream and verdicts[t].get("saturated") and verdicts[t]["index"] <= first_idx:
                return "saturation", t
    return ("first", first) if first else ("none", None)


def classify(verdicts: dict, graph: Graph, bar: float, precision: str, isolated_snr: float | None,
             isolated_wrong: int = 0, trace=(), underflow: dict | None = None) -> tuple[str, dict | None, str]:
    """``(cause, culprit verdict or None, sentence)`` from the measurements (module docstring).

    Args:
        verdicts: ``{tensor: NodeVerdict}``. graph: :class:`Graph`. bar: SNR bar (dB).
        precision: preset name. isolated_snr / isolated_wrong: SNR and wrong elements (saturated,
            or beyond FP16's budget relative to the element) of the node run alone on the inputs the
            backend fed it (the suspect of :func:`pick_suspect`, or for a saturation the start of
            ``trace``), or ``None`` / 0.
        trace: for a saturation, the saturated positions followed upstream through same-shaped
            inputs already wrong there: ``[{node, op_type, tensor, backend, reference, …}]``, the
            last entry being where the wrong values start.
        underflow: the FP16 underflow that explains the failure
            (:func:`~onnxwrapper.diff._localize._underflow.find_underflow`), or ``None``; an overflow
            upstream is named before it.
    """
    kind, t = pick_suspect(verdicts, graph, precision)
    if underflow is not None and kind != "overflow":
        return "underflow", verdicts[underflow["tensor"]], underflow_message(underflow, verdicts, bar)
    if kind == "none":
        return "none", None, ("no exposed intermediate tensor falls below the bar: the divergence appears only "
                              "when the graph runs unmodified (exposing outputs changed how the backend "
                              "compiled it).")
    v = verdicts[t]
    if kind == "overflow":
        return "overflow", v, (f"FP16 overflow at '{v['node']}' ({v['op_type']}): its reference output reaches "
                               f"|x| = {v['reference_max_abs']:.4g}, beyond FP16's ±{FP16_MAX:g}, and the result "
                               f"downstream falls below {bar:.1f} dB. Rescale the model (compute that reduction "
                               f"on scaled inputs or in FP32) or run it at precision=fp32.")
    snr_out = v["metrics"].get("snr_db", -math.inf)
    snr_in = input_snr(graph.nodes[t], verdicts, graph.exact)
    where = (f"'{v['node']}' ({v['op_type']}): SNR {_db(snr_in)} at its inputs → {_db(snr_out)} at its "
             f"output '{t}' (bar {bar:.1f} dB)")
    iso = (f"; run alone on the inputs the backend fed it (on both sides) it gives {_db(isolated_snr)}"
           if isolated_snr is not None else "")
    if kind == "saturation":
        head = (f"FP16 saturation at '{v['node']}' ({v['op_type']}): {int(v['saturated'])} backend value(s) at the FP16 "
                f"limit (131008 on the HTP simulator also stands for NaN/±Inf) where the reference is at most "
                f"{v['reference_max_abs']:.4g}")
        origin = trace[-1] if trace else None
        culprit = verdicts.get(origin["tensor"], v) if origin else v
        if origin and origin["tensor"] != t:
            head += (f". The wrong values start upstream at '{origin['node']}' ({origin['op_type']}): at the first "
                     f"such position it returns {origin['backend']:.5g} where the reference is {origin['reference']:.5g}")
        elif origin:
            head += f" (first position: {origin['backend']:.5g} vs {origin['reference']:.5g})"
        if origin and "input_backend" in origin:
            head += (f", while its input there agrees ({origin['input_backend']:.5g} vs "
                     f"{origin['input_reference']:.5g})")
        if isolated_snr is not None:
            head += (f"; run alone on the inputs the backend fed it (on both sides) it gives {isolated_wrong} wrong "
                     f"value(s) (SNR {_db(isolated_snr)})"
                     + (" — the node itself computes them wrong" if isolated_wrong or isolated_snr < bar else
                        " — right by itself, so the exposed graph behaves differently (fusion)"))
        return "saturation", culprit, head + "."
    drop = (snr_in - snr_out) if snr_in is not None else None
    sharp = drop is not None and drop >= SHARP_DROP_DB
    if isolated_snr is not None:
        if isolated_snr < bar:
            return "node", v, f"one node breaks: {where}{iso}."
        if sharp:
            return "amplification", v, (f"'{v['node']}' amplifies the error it receives: {where}{iso}, so it is "
                                        f"accurate by itself; the upstream error is the cause.")
        return "accumulation", v, _accumulation(verdicts, graph, where + iso)
    if sharp and snr_in is not None and snr_in >= bar:
        return "node", v, f"one node breaks: {where} (not confirmed in isolation)."
    return "accumulation", v, _accumulation(verdicts, graph, where)


def _db(value) -> str:
    if value is None:
        return "? dB"
    return f"{value:.1f} dB" if math.isfinite(value) else ("inf dB" if value > 0 else "-inf dB")


def _accumulation(verdicts: dict, graph: Graph, where: str) -> str:
    measured = [t for t in graph.order if t in verdicts]
    drops = []
    for t in measured:
        s_in = input_snr(graph.nodes[t], verdicts, graph.exact)
        s_out = verdicts[t]["metrics"].get("snr_db", math.inf)
        if s_in is not None and math.isfinite(s_in) and math.isfinite(s_out):
            drops.append((s_in - s_out, t))
    worst = max(drops) if drops else None
    finite = [s for s in (verdicts[t]["metrics"].get("snr_db", math.inf) for t in measured) if math.isfinite(s)]
    span = f" from {max(finite):.1f} dB to {min(finite):.1f} dB over {len(measured)} measured tensors" if finite else ""
    largest = f", by at most {worst[0]:.1f} dB at one node ('{verdicts[worst[1]]['node']}')" if worst else ""
    return (f"the error accumulates smoothly through the graph — SNR falls{span}{largest}; no single node is "
            f"the cause. First below the bar: {where}.")


def isolated_model(model, node, arrays: dict) -> bytes | None:
    """A model holding only ``node``, its initializers kept, its other inputs as graph inputs
    typed and shaped by ``arrays`` (the reference's values); ``None`` when the node cannot be
    isolated (subgraph attributes, an input without a value)."""
    if any(a.type in (5, 10) or a.g.ByteSize() or len(a.graphs) for a in node.attribute):  # GRAPH, GRAPHS
        return None
    inits = {i.name: i for i in model.graph.initializer}
    graph_inputs, kept = [], []
    for name in dict.fromkeys(node.input):  # once each: Mul(x, x) reads x twice
        if not name:
            continue
        if name in inits:
            kept.append(inits[name])
            continue
        arr = arrays.get(name)
        if arr is None:
            return None
        elem = _FLOAT_DTYPES.get(arr.dtype) or helper.np_dtype_to_tensor_dtype(arr.dtype)
        if elem == TensorProto.UNDEFINED:
            return None
        graph_inputs.append(helper.make_tensor_value_info(name, elem, list(arr.shape)))
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    g = helper.make_graph([node], "isolated", graph_inputs, outputs, kept)
    m = helper.make_model(g, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    m.functions.extend(model.functions)
    return m.SerializeToString()
