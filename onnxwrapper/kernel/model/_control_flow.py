"""Control-flow specialization: which ``If`` conditions a static specialization decides, and which
inputs steer them.

Compilers that need static graphs (the QNN EP) never take an ``If``/``Loop``/``Scan`` node nor any
node of its bodies (measured on onnxruntime-qnn 2.7.0: ORT partitions around them, the bodies run on
the CPU EP). Exporters, though, write ``If`` nodes whose condition only depends on *shapes*
(torch: ``x.squeeze(-1)`` → ``If(Shape(x)[-1] == 1, Squeeze, Identity)``, LSTMCell's
``is_batched`` → ``If(Size(Shape(x)) != 2, …)``) or on a rank-0 integer input (silero-vad's
``If(sr == 16000, …)``). Once the input shapes are fixed, ORT's own ConstantFolding folds the
shape conditions but type-checks the *dead* branch of an input-controlled ``If`` at the fed shape,
where it can be invalid (``LSTM … First input tensor must have rank 3``); with ``sr`` bound as well
it can crash (SIGSEGV in ConstantFolding, onnxruntime 1.32). So the fold is done here, with onnx
and one ORT CPU evaluation, before the compiler sees the model.

This module is the *analysis* half:

* :func:`value_taint` — which values of a graph depend on the *values* (not only the shapes) of
  given sources; ``Shape``/``Size`` cut the dependence unless their input's shape itself depends on
  values (``NonZero``, ``Reshape`` by a computed shape, …: :data:`SHAPE_INPUTS`).
* :func:`control_scalars` — rank-0 int/bool graph inputs whose value reaches an ``If`` condition at
  any depth; a specialization binds their values (they become part of its key).

:mod:`onnxwrapper.kernel.model._if_folding` inlines the ``If`` nodes this analysis proves foldable.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["CONTROL_FLOW_OPS", "SHAPE_INPUTS", "SHAPE_PRESERVING_OPS", "subgraphs", "outer_refs", "value_taint",
           "control_scalars", "has_control_flow"]

#: ONNX ops with graph attributes (bodies); compilers such as the QNN EP leave them on CPU
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
#: ops whose output shape depends on the *values* of these input positions (ONNX operator specs)
SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Squeeze": (1,),
    "Unsqueeze": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2), "TopK": (1,), "Resize": (1, 2, 3),
    "Upsample": (1,), "Split": (1,), "OneHot": (1,), "CenterCropPad": (1,), "Col2Im": (1, 2), "DFT": (1,),
    "STFT": (1, 3), "MaxUnpool": (2,), "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,),
}
#: ops whose output shape depends on input shapes and attributes only (ONNX operator specs)
SHAPE_PRESERVING_OPS = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh", "AveragePool",
    "BatchNormalization", "BitShift", "Cast", "CastLike", "Ceil", "Celu", "Clip", "Concat", "Conv", "ConvInteger",
    "ConvTranspose", "Cos", "Cosh", "CumSum", "DepthToSpace", "DequantizeLinear", "Div", "Dropout", "Einsum", "Elu",
    "Equal", "Erf", "Exp", "Flatten", "Floor", "GRU", "Gather", "GatherElements", "GatherND", "Gelu", "Gemm",
    "GlobalAveragePool", "GlobalMaxPool", "Greater", "GreaterOrEqual", "GroupNormalization", "HardSigmoid",
    "HardSwish", "Hardmax", "Identity", "InstanceNormalization", "IsInf", "IsNaN", "LRN", "LSTM",
    "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "MatMul", "MatMulInteger", "Max",
    "MaxPool", "Mean", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "PRelu", "Pow", "QLinearConv",
    "QLinearMatMul", "QuantizeLinear", "RNN", "Reciprocal", "Relu", "Round", "ScatterElements", "ScatterND",
    "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softmax", "Softplus", "Softsign", "SpaceToDepth", "Sqrt",
    "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Transpose", "Trilu", "Where", "Xor",
})
_SHAPE_READERS = frozenset({"Shape", "Size"})


def subgraphs(node) -> list:
    """The graph attributes of ``node`` (``If`` branches, ``Loop``/``Scan`` bodies), in attribute order."""
    found = []
    for attr in node.attribute:
        if attr.HasField("g"):
            found.append(attr.g)
        found.extend(attr.graphs)
    return found


def outer_refs(graph) -> set[str]:
    """Names ``graph`` (a subgraph) reads from its enclosing scopes, nested subgraphs included."""
    local = {v.name for v in graph.input} | {i.name for i in graph.initializer}
    local |= {i.values.name for i in graph.sparse_initializer}
    for node in graph.node:
        local.update(o for o in node.output if o)
    found: set[str] = set()
    for node in graph.node:
        found.update(i for i in node.input if i and i not in local)
        for sub in subgraphs(node):
            found.update(name for name in outer_refs(sub) if name not in local)
    return found


def _node_reads(node) -> set[str]:
    reads = {i for i in node.input if i}
    for sub in subgraphs(node):
        reads |= outer_refs(sub)
    return reads


def value_taint(graph, sources: Iterable[str], shape_sources: Iterable[str] = ()) -> tuple[set[str], set[str]]:
    """The values of ``graph`` whose *values*, and those whose *shapes*, depend on the values of ``sources``.

    Rules (conservative: "may depend" counts as "depends"), nodes taken in graph order (ONNX graphs
    are topologically sorted):

    * ``Shape``/``Size``: the output's value depends on values only if the input's shape does;
    * any other node: outputs are value-tainted if an input (or a value its bodies read from outer
      scopes) is value- or shape-tainted;
    * outputs are shape-tainted if an input is shape-tainted, or if a value-tainted input can set the
      output shape: the :data:`SHAPE_INPUTS` positions of the op, none for
      :data:`SHAPE_PRESERVING_OPS`, every input for all other ops (``NonZero``, ``Loop``, custom ops …).

    Args:
        graph: ``onnx.GraphProto``. sources: names whose values vary (e.g. graph inputs).
        shape_sources: names whose shapes vary too (e.g. inputs with dynamic dims).

    Returns:
        ``(value-tainted names, shape-tainted names)``; the sources are included.
    """
    tainted, shaped = set(sources), set(shape_sources)
    tainted |= shaped
    for node in graph.node:
        reads = _node_reads(node)
        outputs = [o for o in node.output if o]
        if node.op_type in _SHAPE_READERS and node.domain in ("", "ai.onnx"):
            if reads & shaped:
                tainted.update(outputs)
            continue
        if not reads & tainted:
            continue
        tainted.update(outputs)
        if reads & shaped:
            shaped.update(outputs)
        elif node.domain in ("", "ai.onnx") and node.op_type in SHAPE_PRESERVING_OPS:
            continue
        elif node.domain in ("", "ai.onnx") and node.op_type in SHAPE_INPUTS:
            positions = SHAPE_INPUTS[node.op_type]
            if any(k < len(node.input) and node.input[k] in tainted for k in positions):
                shaped.update(outputs)
        else:
            shaped.update(outputs)
    return tainted, shaped


def _reaches_if(graph, tainted_outer: set[str]) -> bool:
    """True when a value in ``tainted_outer`` reaches an ``If`` condition of ``graph`` or of a subgraph."""
    visible = tainted_outer & (outer_refs(graph) | {v.name for v in graph.input})
    tainted, _shaped = value_taint(graph, visible)
    for node in graph.node:
        if node.op_type == "If" and node.input and node.input[0] in tainted:
            return True
        if node.op_type in CONTROL_FLOW_OPS and _node_reads(node) & tainted:
            inner = set(tainted)
            for sub in subgraphs(node):
                if node.op_type != "If":  # Loop/Scan body inputs carry the node's (tainted) inputs
                    inner |= {v.name for v in sub.input}
                if _reaches_if(sub, inner):
                    return True
    return False


_SCALAR_TYPES = (6, 7, 9, 12, 13)  # int32, int64, bool, uint32, uint64 (onnx.TensorProto)


def control_scalars(model) -> list[str]:
    """Rank-0 integer/bool graph inputs whose value reaches an ``If`` condition (at any depth).

    These steer control flow (silero-vad's ``sr``: ``If(sr == 16000, …)``). A static specialization
    binds their values, so the ``If`` can be folded. ``Loop`` trip counts and other scalars are not
    included (their value does not select a branch).

    Args:
        model: ``onnx.ModelProto``.

    Returns:
        Input names in graph order (initializer-backed inputs excluded).
    """
    graph = model.graph
    if not has_control_flow(model):
        return []
    inits = {i.name for i in graph.initializer}
    found = []
    for value in graph.input:
        tensor = value.type.tensor_type
        if (value.name in inits or not value.type.HasField("tensor_type") or not tensor.HasField("shape")
                or len(tensor.shape.dim) != 0 or tensor.elem_type not in _SCALAR_TYPES):
            continue
        if _reaches_if(graph, {value.name}):
            found.append(value.name)
    return found


def has_control_flow(model) -> bool:
    """True when the main graph has an ``If``, ``Loop`` or ``Scan`` node."""
    return any(node.op_type in CONTROL_FLOW_OPS and node.domain in ("", "ai.onnx") for node in model.graph.node)
