"""Splitting a model at the nodes a recipe puts on the CPU, and assembling the parts again.

:func:`split_stages` cuts the top-level graph into an alternating sequence of parts — NPU, CPU,
NPU, … — such that each part only reads graph inputs, constants and outputs of earlier parts. Each
node gets the smallest stage number at least as large as its producers' stages whose parity is its
kind (even: NPU, odd: CPU): a CPU node right after NPU producers opens the next stage, an NPU node
after it the one after. For one CPU node this gives at most three parts — everything that does not
depend on it (NPU), the node (CPU), everything that does (NPU) — and in general the fewest stages
that respect the data dependencies (a topological layering). ``Constant`` nodes belong to no part:
each part that reads one gets a copy — and so do the small shape and scalar computations on
constants, scalar or integer graph inputs and graph inputs' shapes (:data:`REPLICATED_OPS`: ``Shape`` → ``Gather`` → ``Cast``, ``Mul(sr, c)``):
a scalar or a bool crossing from one compiled QNN part to another fails at run time (measured on
silero-vad's op15 model, onnxruntime-qnn 2.7.0: ``QNN_GRAPH_ERROR_INVALID_TENSOR`` (6004) for a
rank-0 bool and a rank-0 float computed in the first part and read by the last).

:func:`part_model` makes one part a model of its own (typed inputs and outputs from shape
inference of the whole model); :func:`assemble` puts the parts back together in one graph — with
each NPU part replaced by the nodes of its compiled form (e.g. the ``EPContext`` nodes of a QNN
context model) — with the original graph inputs, outputs, metadata and value types, so one
onnxruntime session runs them all and hands tensors from part to part itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

__all__ = ["ModelPart", "REPLICATED_OPS", "assemble", "boundary_types", "part_model", "read_names", "replica_copies",
           "replicated_nodes", "split_stages", "tensor_types"]

#: ops copied into every part that reads them when they read only graph inputs and constants
REPLICATED_OPS = {"Constant", "Shape", "Size", "Gather", "Squeeze", "Unsqueeze", "Cast", "Reshape", "Concat", "Slice",
                  "Equal", "Not", "Greater", "Less", "Add", "Sub", "Mul", "Div", "ConstantOfShape", "Range", "Identity"}

#: op types never folded as constants (their value is drawn anew at every run)
_NONDETERMINISTIC = ("Random", "Multinomial", "Bernoulli")


@dataclass(frozen=True)
class ModelPart:
    """One part of a split model.

    Attributes:
        kind: ``"npu"`` or ``"cpu"``. stage: its position (0, 1, 2, … in run order).
        nodes: indices (in ``graph.node``) of its nodes, in graph order (``Constant`` nodes excluded).
        inputs: tensors it reads from graph inputs or earlier parts. outputs: tensors it produces
            for later parts or the graph's outputs.
        copies: indices of the replicated nodes (constants, shape and scalar computations on graph
            inputs) it gets its own copy of, in graph order.
    """

    kind: str
    stage: int
    nodes: tuple
    inputs: tuple
    outputs: tuple
    copies: tuple = ()


def read_names(node: onnx.NodeProto) -> list:
    """Tensor names ``node`` reads, its subgraphs' outer-scope references included (in order, with
    repeats; empty optional inputs left out)."""
    names = [n for n in node.input if n]
    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            inner = {o for n in g.node for o in n.output} | {i.name for i in g.input} | {i.name for i in g.initializer}
            for n in g.node:
                names += [x for x in read_names(n) if x not in inner]
    return names


def split_stages(model: onnx.ModelProto, cpu_nodes) -> list[ModelPart]:
    """Cut ``model``'s top-level graph into NPU/CPU parts (module docstring).

    Args:
        model: the model (not modified); nodes are identified by name.
        cpu_nodes: names of the nodes to run on the CPU.

    Returns:
        The non-empty parts in run order.

    Raises:
        ValueError: a name in ``cpu_nodes`` is not a node of the model.
    """
    graph = model.graph
    cpu = set(cpu_nodes)
    names = {n.name for n in graph.node}
    missing = sorted(cpu - names)
    if missing:
        raise ValueError(f"no node named {', '.join(missing)} in the model")
    constants = replicated_nodes(model, cpu)
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    stage: dict[int, int] = {}
    for i, node in enumerate(graph.node):
        if i in constants:
            continue
        kind = 1 if node.name in cpu else 0
        lo = max((stage[producer[t]] for t in read_names(node) if t in producer and producer[t] in stage), default=0)
        stage[i] = lo if lo % 2 == kind else lo + 1
    groups: dict[int, list] = {}
    for i, s in stage.items():
        groups.setdefault(s, []).append(i)
    order = sorted(groups)
    part_of = {i: k for k, s in enumerate(order) for i in groups[s]}
    const_out = {o for i in constants for o in graph.node[i].output}
    graph_outputs = {o.name for o in graph.output}
    readers: dict[str, set] = {}
    for i, node in enumerate(graph.node):
        if i in part_of:
            for t in read_names(node):
                readers.setdefault(t, set()).add(part_of[i])
    inits = {t.name for t in graph.initializer} - {i.name for i in graph.input}
    parts = []
    for k, s in enumerate(order):
        members = sorted(groups[s])
        copies = replica_copies(graph, constants, [t for i in members for t in read_names(graph.node[i])])
        produced = {o for i in members for o in graph.node[i].output if o}
        inputs = []
        for i in copies + members:
            for t in read_names(graph.node[i]):
                if t not in produced and t not in inits and t not in const_out and t not in inputs:
                    inputs.append(t)
        outputs = [o for i in members for o in graph.node[i].output
                   if o and (o in graph_outputs or readers.get(o, set()) - {k})]
        parts.append(ModelPart("cpu" if s % 2 else "npu", k, tuple(members), tuple(inputs), tuple(outputs),
                               tuple(copies)))
    return parts


def replica_copies(graph: onnx.GraphProto, replicated: set, reads: list) -> list:
    """Indices (in ``graph.node``, sorted) of the ``replicated`` nodes (:func:`replicated_nodes`) that the
    tensor names ``reads`` come from, directly or through each other: the copies a part reading
    ``reads`` needs. ``reads`` is consumed."""
    producer = {o: i for i in replicated for o in graph.node[i].output if o}
    chosen: set = set()
    while reads:
        i = producer.get(reads.pop())
        if i is not None and i not in chosen:
            chosen.add(i)
            reads += [t for t in graph.node[i].input if t]
    return sorted(chosen)


def replicated_nodes(model: onnx.ModelProto, keep=()) -> set:
    """Indices of the nodes every part gets its own copy of (module docstring): ``Constant`` nodes,
    :data:`REPLICATED_OPS` nodes reading only constants, scalar or integer graph inputs, the shape of a
    graph input and other such nodes (never a float data tensor), and any node reading only constants
    (onnxruntime folds it when it compiles the part: a ``Transpose`` of a constant; not a ``Random*``
    op); never a node producing a graph output, nor one with subgraphs, nor one named in ``keep``
    (a recipe's CPU node). Such a value must not cross from one compiled QNN part to another: a part
    made only of them is folded to an initializer, and the next part's ``EPContext`` node then reads
    an initializer where its QNN graph has an input (measured on silero-vad's op15 and sequence
    models, onnxruntime-qnn 2.7.0: "The count of graph inputs should be at least the count of
    tensor_wrapper")."""
    graph = model.graph
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
    inputs = {i.name for i in graph.input}
    # graph inputs every part may read without copying data: scalars and integer/bool tensors (sr, lengths)
    available = {i.name for i in graph.input if i.type.tensor_type.elem_type not in floats
                 or (i.type.tensor_type.HasField("shape") and not i.type.tensor_type.shape.dim)}
    available |= {t.name for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    # values known before any input arrives: what onnxruntime constant-folds when it compiles a part
    constant = {t.name for t in graph.initializer} - inputs
    result = set()
    for i, n in enumerate(graph.node):
        shape_of_input = n.op_type in ("Shape", "Size") and n.input and n.input[0] in inputs
        folded = bool([t for t in n.input if t]) and all(t in constant for t in n.input if t) \
            and not n.op_type.startswith(_NONDETERMINISTIC)
        if n.op_type == "Constant" and not n.input:
            result.add(i)
        elif (not (n.op_type in REPLICATED_OPS or folded) or n.name in keep or n.domain not in ("", "ai.onnx")
              or set(n.output) & outputs
              or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute)
              or not (folded or shape_of_input or all(t in available for t in n.input if t))):
            continue
        result.add(i)
        available.update(o for o in n.output if o)
        if n.op_type == "Constant" or folded:
            constant.update(o for o in n.output if o)
    return result


def tensor_types(model: onnx.ModelProto) -> dict:
    """``{tensor name: onnx.TypeProto}`` of graph inputs, outputs and every tensor shape inference
    types (non-strict: what it cannot infer is absent)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is best effort; declared types still count
        inferred = model
    g = inferred.graph
    table: dict = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            if vi.name not in table or (_static(vi.type) and not _static(table[vi.name])):
                table[vi.name] = vi.type
    return table


def _static(t: onnx.TypeProto) -> bool:
    shape = t.tensor_type.shape if t.tensor_type.HasField("shape") else None
    return shape is not None and all(d.HasField("dim_value") for d in shape.dim)


def boundary_types(model: onnx.ModelProto, parts, types: dict | None = None) -> dict:
    """``types`` (default :func:`tensor_types`) completed with a static type for every tensor that
    crosses a part boundary: where shape inference leaves a dim unknown (or keeps a graph output's
    declared symbolic dim), the model runs once on onnxruntime's CPU EP with zeros of its static
    input shapes, the boundary tensors exposed, and their shapes are taken from that run. A QNN part
    needs static shapes at its inputs and outputs (the QNN EP refuses dynamic ones, measured:
    "Dynamic shape is not supported yet, for output: …").

    Raises:
        ValueError: a model input is not static, or a boundary tensor stays untyped.
    """
    types = dict(types if types is not None else tensor_types(model))
    wanted = list(dict.fromkeys(t for p in parts for t in p.inputs + p.outputs))
    missing = [t for t in wanted if t not in types or not _static(types[t])]
    if not missing:
        return types

    feeds = {}
    for vi in model.graph.input:
        if vi.name in {i.name for i in model.graph.initializer}:
            continue
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not _static(vi.type):
            raise ValueError(f"input '{vi.name}' has no static shape: split a model after fixing its input shapes")
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        feeds[vi.name] = np.zeros([d.dim_value for d in t.shape.dim], dtype=dtype)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    present = {o.name for o in probe.graph.output}
    probe.graph.output.extend(helper.make_empty_tensor_value_info(t) for t in missing if t not in present)
    values = InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"]).run(missing, feeds)
    for name, value in zip(missing, values):
        arr = np.asarray(value)
        types[name] = helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape))
    return types


def _value_info(name: str, types: dict) -> onnx.ValueInfoProto:
    if name not in types:
        raise ValueError(f"the type of tensor '{name}' at a part boundary is unknown (shape inference could not "
                         f"type it); make the model's shapes static or add value_info for it")
    vi = onnx.ValueInfoProto()
    vi.name = name
    vi.type.CopyFrom(types[name])
    return vi


def _constant_nodes(model: onnx.ModelProto, part: ModelPart) -> list:
    """The replicated nodes ``part`` gets copies of (:attr:`ModelPart.copies`), in graph order."""
    return [model.graph.node[i] for i in part.copies]


def part_model(model: onnx.ModelProto, part: ModelPart, types: dict) -> onnx.ModelProto:
    """``part`` as a model of its own: its nodes (with copies of the constants they read), the
    initializers they use, typed inputs and outputs (``types`` from :func:`tensor_types`).

    Raises:
        ValueError: a boundary tensor's type is unknown.
    """
    graph = model.graph
    nodes = _constant_nodes(model, part) + [graph.node[i] for i in part.nodes]
    used = {t for n in nodes for t in read_names(n)}
    inits = [t for t in graph.initializer if t.name in used and t.name not in part.inputs]
    internal = {o for n in nodes for o in n.output} - set(part.outputs)
    value_info = [vi for vi in graph.value_info if vi.name in internal]
    g = helper.make_graph(nodes, f"{graph.name or 'model'}_part{part.stage}",
                          [_value_info(t, types) for t in part.inputs], [_value_info(t, types) for t in part.outputs],
                          inits, value_info=value_info)
    m = helper.make_model(g, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    m.functions.extend(model.functions)
    return m


def assemble(model: onnx.ModelProto, parts: list, built: dict, types: dict) -> onnx.ModelProto:
    """One model running ``parts`` in order: NPU part ``k`` is replaced by ``built[k]`` (a model
    whose inputs and outputs are the part's, e.g. its compiled EPContext model), CPU parts keep
    their original nodes. Graph inputs, outputs, metadata and functions are the original's (a graph
    output declared with a symbolic dim gets its static type from ``types``); every tensor crossing
    a part boundary gets its type as ``value_info``.

    Raises:
        ValueError: a boundary tensor's type is unknown; two built parts define the same initializer
            name differently.
    """
    graph = model.graph
    nodes: list = []
    inits: dict = {}
    opsets: dict = {o.domain: o.version for o in model.opset_import}
    ir_version = model.ir_version
    produced: set = set()
    inner_types: dict = {}

    def add(node_list) -> None:
        for n in node_list:
            if n.output and all(o in produced for o in n.output if o):
                continue  # a replicated node (a constant, a shape computation) copied into two parts
            nodes.append(n)
            produced.update(o for o in n.output if o)

    for part in parts:
        if part.kind == "npu":
            sub = built[part.stage]
            add(sub.graph.node)
            for t in sub.graph.initializer:
                if t.name in inits and inits[t.name].SerializeToString() != t.SerializeToString():
                    raise ValueError(f"two compiled parts define initializer '{t.name}' differently")
                inits[t.name] = t
            # tensors between the QNN EP's partitions and CPU nodes *inside* a compiled part: typed by the
            # part's own value_info (an EPContext node's outputs get no type by inference; measured:
            # "Op (EPContext) output arg (…) type inference failed" when a part kept CPU nodes)
            for vi in sub.graph.value_info:
                inner_types.setdefault(vi.name, vi)
            for o in sub.opset_import:
                opsets[o.domain] = max(opsets.get(o.domain, 0), o.version)
            ir_version = max(ir_version, sub.ir_version)
        else:
            own = _constant_nodes(model, part) + [graph.node[i] for i in part.nodes]
            add(own)
            used = {t for n in own for t in read_names(n)}
            for t in graph.initializer:
                if t.name in used:
                    inits[t.name] = t
    boundary = {t for p in parts for t in p.inputs + p.outputs} - {i.name for i in graph.input} - {
        o.name for o in graph.output}
    for t in graph.initializer:  # overridable initializers (also graph inputs) stay as they were
        if any(i.name == t.name for i in graph.input):
            inits[t.name] = t
    # graph outputs keep their declared types unless those are not static and a static one is known:
    # the QNN EP refuses an EPContext output declared with a symbolic dim (measured)
    outputs = [o if _static(o.type) or o.name not in types or not _static(types[o.name]) else _value_info(o.name, types)
               for o in graph.output]
    io = {i.name for i in graph.input} | {o.name for o in graph.output}
    value_info = [_value_info(t, types) for t in sorted(boundary)]
    value_info += [vi for name, vi in sorted(inner_types.items()) if name not in boundary and name not in io]
    g = helper.make_graph(nodes, graph.name, list(graph.input), outputs, list(inits.values()),
                          doc_string=graph.doc_string, value_info=value_info)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
                          ir_version=ir_version)
    m.functions.extend(model.functions)
    for attr in ("producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(m, attr, getattr(model, attr))
    m.metadata_props.extend(model.metadata_props)
    return m
