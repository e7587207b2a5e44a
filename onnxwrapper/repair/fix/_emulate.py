"""FP16 emulated on the CPU: how a candidate's NPU part rounds, predicted without compiling it.

An FP16 NPU (the QNN HTP) stores every tensor it reads and writes in IEEE 754 binary16 (11
significant bits; QNN HTP backend docs: float32 graphs run "using float16 math"). The emulation
runs the model on onnxruntime's CPU execution provider in FP32 with every floating-point tensor
that a node *outside* ``cpu_nodes`` reads — graph inputs, weights, intermediate tensors — rounded
to FP16 first (``Cast`` to ``float16`` and back: round to nearest even, beyond ±65504 to ±Inf), and
every graph output such a node writes rounded too. Nodes in ``cpu_nodes`` read and write FP32, as
they do when a recipe runs them on the CPU.

What it does not emulate, by construction: rounding *inside* one operator (the HTP's accumulation
order, FP16 partial sums), a recurrent node's state carried from step to step in FP16 (``LSTM``,
``GRU``, ``RNN``, ``Scan``, ``Loop``: their FP16 drift is worse than the rounding of their inputs
and outputs), and wrong kernels. So the emulation is a *screen*, never a verdict: ``aipc fix`` uses
it to order candidates and to pick the few worth a QNN compile, and verifies those on the backend.
Measured (onnxruntime 1.32.0, QNN HTP simulator, soc_model 60): the LSTM stand-in with its LSTM on
the CPU — emulated 32.4 dB, measured 43 dB on the HTP (the emulation rounds the inputs of every
NPU node; the HTP keeps some of them wider).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnxruntime import GraphOptimizationLevel, SessionOptions
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

from onnxwrapper.diff._judge import ArrayPair, compute_metrics
from onnxwrapper.kernel import bind_inputs, control_scalars, fold_ifs

__all__ = ["Emulator", "control_nodes", "float_tensors", "fp16_emulation", "emulated_runs", "emulated_snr", "flattened"]

_FLOATS = {TensorProto.FLOAT}


def float_tensors(model: onnx.ModelProto) -> set:
    """Names of the model's float32 tensors (graph inputs, initializers, node outputs typed by
    shape inference); tensors whose type is unknown are left out (they are not rounded)."""
    found = {i.name for i in model.graph.initializer if i.data_type in _FLOATS}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is best effort: untyped tensors stay FP32
        inferred = model
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type in _FLOATS:
            found.add(vi.name)
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.t.data_type in _FLOATS:
                    found.add(node.output[0])
    return found


def control_nodes(model: onnx.ModelProto) -> set:
    """Names of the nodes every output of which has a known type other than float (shapes, indices,
    conditions): the split copies them into each part and a specialization may fold them away, so a
    recipe never places them. Nodes of unknown output type are not among them."""
    types = {i.name: i.data_type for i in model.graph.initializer}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - nothing known: no node is a control node
        return set()
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    return {n.name for n in model.graph.node if n.output and all(
        o and o in types and types[o] not in _FLOATS | {TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
        for o in n.output)}


def fp16_emulation(model: onnx.ModelProto, cpu_nodes=(), floats: set | None = None) -> onnx.ModelProto:
    """A copy of ``model`` in which every float tensor an NPU node (a node not named in ``cpu_nodes``)
    reads or writes is FP16-rounded: NPU nodes read rounded inputs, CPU nodes read rounded values
    where an NPU node wrote them (they cross from the NPU in FP16), and graph outputs written by NPU
    nodes are rounded (module docstring).

    Args:
        model: the model (named nodes: recipe names, :func:`onnxwrapper.patches.name_unnamed_nodes`).
        cpu_nodes: names of the nodes that keep FP32. floats: :func:`float_tensors` (computed when
            ``None``).
    """
    floats = float_tensors(model) if floats is None else floats
    cpu = set(cpu_nodes)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = list(out.graph.node)
    del out.graph.node[:]
    rounded: dict = {}

    def rounding(tensor: str, suffix: str = "") -> list:
        name = f"{tensor}/fp16emu{suffix}"
        return [helper.make_node("Cast", [tensor], [name + "/h"], name=name + "/to16", to=TensorProto.FLOAT16),
                helper.make_node("Cast", [name + "/h"], [name], name=name + "/to32", to=TensorProto.FLOAT)]

    writers = {o: n for n in nodes for o in n.output if o}
    for node in nodes:
        for k, tensor in enumerate(node.input):
            writer = writers.get(tensor)
            # an NPU node reads FP16; a CPU node reads what an NPU node wrote in FP16, FP32 otherwise
            if tensor and tensor in floats and (node.name not in cpu or (writer is not None and writer.name not in cpu)):
                if tensor not in rounded:
                    pair = rounding(tensor)
                    out.graph.node.extend(pair)
                    rounded[tensor] = pair[-1].output[0]
                node.input[k] = rounded[tensor]
        out.graph.node.append(node)
    for output in out.graph.output:
        node = writers.get(output.name)
        if node is None or node.name in cpu or output.name not in floats:
            continue
        raw = output.name + "/fp16emu/raw"
        for n in out.graph.node:  # the producer writes the raw value; readers keep reading it
            n.output[:] = [raw if o == output.name else o for o in n.output]
            n.input[:] = [raw if i == output.name else i for i in n.input]
        pair = rounding(raw, "/out")
        pair[-1].output[0] = output.name
        out.graph.node.extend(pair)
    return out


def _session(model: onnx.ModelProto, names) -> tuple[InferenceSession, list]:
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    for name in names or ():
        if name not in present:
            exposed.graph.output.append(helper.make_empty_tensor_value_info(name))
    options = SessionOptions()
    # basic optimizations fold constants (the rounded weights) but never fuse a Cast pair away
    options.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.log_severity_level = 3  # errors only: an emulated copy may leave an initializer unread
    sess = InferenceSession(exposed.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess, [o.name for o in sess.get_outputs()]


def emulated_runs(model: onnx.ModelProto, feeds_list, cpu_nodes=(), names=None, floats=None) -> list:
    """``[{tensor: array}]`` per call of ``feeds_list``: the graph outputs (and ``names``, exposed)
    of the FP16-emulated model whose ``cpu_nodes`` keep FP32; ``cpu_nodes=None`` runs the model
    as it is in FP32 (the reference).

    Raises:
        Whatever onnxruntime raises for the model on its CPU EP.
    """
    emulated = model if cpu_nodes is None else fp16_emulation(model, cpu_nodes, floats)
    sess, outs = _session(emulated, names)
    return [dict(zip(outs, sess.run(outs, feeds))) for feeds in feeds_list]


def emulated_snr(model: onnx.ModelProto, feeds_list, reference: list, cpu_nodes=(), floats=None) -> dict:
    """``{graph output: worst SNR (dB) over the calls}`` of the FP16 emulation with ``cpu_nodes`` in
    FP32 against ``reference`` (``emulated_runs(model, feeds_list, None)``); ``-inf`` where the
    emulation is not finite where the reference is (an FP16 overflow)."""
    got = emulated_runs(model, feeds_list, cpu_nodes, floats=floats)
    worst: dict = {}
    for ref, out in zip(reference, got):
        for name in (o.name for o in model.graph.output):
            r, y = ref.get(name), out.get(name)
            if r is None or y is None or np.asarray(r).dtype.kind != "f":
                continue
            metrics = compute_metrics(ArrayPair(np.asarray(y), np.asarray(r), False))
            snr = metrics.get("snr_db", math.inf)
            if metrics.get("nonfinite_mismatch") or snr is None or (isinstance(snr, float) and math.isnan(snr)):
                snr = -math.inf
            worst[name] = min(worst.get(name, math.inf), snr)
    return worst


def _tag(graph, prefix: str, seen: set) -> None:
    """Prefix the names of every node of ``graph`` (and of its subgraphs) with ``prefix//``, unnamed
    and repeated names made unique (ORT refuses two nodes of one name once a branch is inlined)."""
    for k, node in enumerate(graph.node):
        name = f"{prefix}//{node.name or f'{node.op_type}_{k}'}"
        while name in seen:
            name += "'"
        seen.add(name)
        node.name = name
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _tag(sub, prefix, seen)


def flattened(model: onnx.ModelProto, feeds_list) -> tuple[onnx.ModelProto, dict, list]:
    """``(model, owner, feeds)``: ``model`` with the ``If`` nodes its control inputs decide inlined, as
    the QNN backend compiles it (:func:`onnxwrapper.kernel.fold_ifs` after binding the control scalars,
    e.g. silero-vad's ``sr``, to their recorded value), so the branches' arithmetic is emulated too;
    ``owner`` maps each inlined node to the top-level node it came from (a recipe names only those);
    ``feeds`` without the bound inputs. The model as it is (``owner`` empty) when it has no ``If`` or
    the calls disagree on a control value."""
    if not any(n.op_type == "If" for n in model.graph.node) or not feeds_list:
        return model, {}, list(feeds_list)
    controls = [c for c in control_scalars(model) if all(c in f for f in feeds_list)]
    values = {c: np.asarray(feeds_list[0][c]) for c in controls}
    if any(not np.array_equal(np.asarray(f[c]), values[c]) for f in feeds_list for c in controls):
        return model, {}, list(feeds_list)
    tagged = onnx.ModelProto()
    tagged.CopyFrom(model)
    seen = {n.name for n in tagged.graph.node}
    for node in tagged.graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _tag(sub, node.name, seen)
    feeds = [{k: v for k, v in f.items() if k not in values} for f in feeds_list]
    try:
        folded, count = fold_ifs(bind_inputs(tagged, values), feeds[0])
    except Exception:  # noqa: BLE001 - folding is an improvement of the emulation, not a need
        return model, {}, list(feeds_list)
    if not count:
        return model, {}, list(feeds_list)
    owner = {n.name: n.name.split("//")[0] for n in folded.graph.node if "//" in n.name}
    return folded, owner, feeds


class Emulator:
    """The FP16 emulation of one model against its FP32 reference on recorded feeds, ``If`` nodes its
    control inputs decide inlined (:func:`flattened`). CPU sets are named in the *original* model's
    top-level nodes (an ``If`` stands for its inlined branch); :attr:`folded` is the model emulated
    and :meth:`top` maps its node names back.

    Raises:
        Whatever onnxruntime raises for the model on its CPU EP (in the constructor).
    """

    def __init__(self, model: onnx.ModelProto, feeds_list) -> None:
        self.raw_feeds = list(feeds_list)
        self.folded, self.owner, self.feeds = flattened(model, self.raw_feeds)
        self.floats = float_tensors(self.folded)
        self.reference = emulated_runs(self.folded, self.feeds, None)
        self.outputs = [o.name for o in model.graph.output]
        self.runs = 0

    def top(self, name: str) -> str:
        """The original model's top-level node a node of :attr:`folded` belongs to."""
        return self.owner.get(name, name)

    def expand(self, cpu_nodes) -> list:
        """Names in :attr:`folded` of the nodes that ``cpu_nodes`` (top-level names) put on the CPU."""
        cpu = set(cpu_nodes)
        return [n.name for n in self.folded.graph.node if n.name in cpu or self.top(n.name) in cpu]

    def snr(self, cpu_nodes, model: onnx.ModelProto | None = None) -> dict:
        """``{output: worst SNR}`` with ``cpu_nodes`` (top-level names) in FP32, the rest in FP16;
        ``model``: a rewritten copy of the original to emulate instead (a candidate's rewrites)."""
        self.runs += 1
        if model is None:
            return emulated_snr(self.folded, self.feeds, self.reference, self.expand(cpu_nodes), self.floats)
        folded, owner, feeds = flattened(model, self.raw_feeds)
        cpu = set(cpu_nodes)
        names = [n.name for n in folded.graph.node if n.name in cpu or owner.get(n.name) in cpu]
        return emulated_snr(folded, feeds, self.reference, names)

    def alone(self, tensors) -> dict:
        """``{output: worst SNR}`` with only ``tensors`` (of :attr:`folded`) FP16-rounded."""
        self.runs += 1
        wanted = set(tensors)
        readers = {n.name for n in self.folded.graph.node if set(n.input) & wanted}
        cpu = [n.name for n in self.folded.graph.node if n.name not in readers]
        emulated = fp16_emulation(self.folded, cpu_nodes=cpu, floats=wanted) if readers else self.folded
        return emulated_snr(emulated, self.feeds, self.reference, None, self.floats)
