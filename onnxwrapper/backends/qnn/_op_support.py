"""Which ONNX operators the QNN execution provider takes, as a static table (no session needed).

Source: the op types with a QNN EP op builder (onnxruntime
``core/providers/qnn/builder/op_builder_factory.cc``) plus the rejections measured with
onnxruntime-qnn 2.7.0 (``Mod`` with ``fmod=1``, 3-D pooling, Einsum equations the EP does not map
to MatMul). It can be wrong where the EP checks attributes, types or shapes: a real QNN session
(``InferenceSession.get_partition()``) is authoritative. Used by ``aipc inspect`` when the QNN
backend cannot run here, and by ``aipc compile`` to name CPU nodes.
"""

from __future__ import annotations

import onnx
from onnx import helper

from onnxwrapper.backends.qnn.platform import EP_NAME
from onnxwrapper.kernel import NodeAssignment, PartitionReport

__all__ = ["QNN_OP_TYPES", "predicted_no_node", "qnn_rejection_reason"]

_CPU_EP = "CPUExecutionProvider"

#: op types with a QNN EP op builder (ORT's op_builder_factory.cc, stored version of ORT main).
QNN_OP_TYPES = frozenset("""
Abs Add And ArgMax ArgMin Asin Atan AveragePool BatchNormalization Cast Ceil Clip Concat Conv ConvTranspose Cos
CumSum DepthToSpace DequantizeLinear Div Einsum Elu Equal Exp Expand Flatten Floor Gather GatherElements GatherND
Gelu Gemm GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual GridSample HardSigmoid HardSwish
InstanceNormalization LRN LSTM LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax LpNormalization
MatMul Max MaxPool Mean Min Mod Mul Neg Not Or PRelu Pad Pow QuantizeLinear RMSNormalization RandomUniformLike
Reciprocal ReduceL2 ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum Relu Reshape Resize Round STFT
ScatterElements ScatterND Sigmoid Sign Sin Slice Softmax SpaceToDepth Split Sqrt Squeeze Sub Sum Tanh
ThresholdedRelu Tile TopK Transpose Unsqueeze Upsample Where
""".split())


def _einsum_native(equation: str) -> bool:
    """The four equation shapes the QNN EP maps to MatMul (its einsum_op_builder.cc)."""
    eq = equation.replace(" ", "")
    if "->" not in eq or eq.count(",") != 1:
        return False
    lhs, out = eq.split("->")
    a, b = lhs.split(",")
    if min(len(a), len(b), len(out)) < 2 or not (a + b + out).isalpha() or not (a + b + out).islower():
        return False
    if len(a) == len(b) == len(out) and a[:-2] == b[:-2] == out[:-2]:
        m, k, k2, n = a[-2], a[-1], b[-2], b[-1]
        if out[-2] == m and ((k2 == k and out[-1] == n) or (n == k and out[-1] == k2)):
            return True  # MatMul / MatMul with transposed second input
    if len(a) == len(b) == len(out) == 4 and a[0] == b[0] == out[0]:
        if a[3] == out[3] and a[1] == b[3] and b[1] == out[1]:
            return True  # transpose-all
    return (len(a), len(b), len(out)) == (4, 3, 4) and a[2] == out[2] and a[3] == b[2] and b[1] == out[3] \
        and a[0] == out[0] and a[1] == out[1] == b[0]


def qnn_rejection_reason(node: onnx.NodeProto, model: onnx.ModelProto, dynamic: bool) -> str | None:
    """Static reason why the QNN EP would not take ``node`` (``None``: predicted on QNN).

    Args:
        node: a node of ``model``. model: the ``onnx.ModelProto`` it belongs to.
        dynamic: True when the model has dynamic input dims (the QNN EP then takes no node).

    Returns:
        The reason as the QNN EP words it where it logs one (``REASON :`` lines), else ours.
    """
    if dynamic:
        return "dynamic input shapes: the QNN EP takes no node of such a graph (fix shapes with --shape/--dim)"
    if node.domain not in ("", "ai.onnx"):
        return f"custom domain '{node.domain}' has no QNN EP implementation"
    if node.op_type not in QNN_OP_TYPES:
        return f"Operators of type `{node.op_type}` are not supported by QNN EP."
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Mod" and int(attrs.get("fmod", 0)) == 1:
        return "QNN Mod Op only support fmod == 0 for now."
    if node.op_type in ("MaxPool", "AveragePool") and len(attrs.get("kernel_shape", [])) == 3:
        return "the QNN EP supports 1-D and 2-D pooling only (3-D kernel)"
    if node.op_type == "Einsum":
        eq = attrs.get("equation", b"")
        eq = eq.decode() if isinstance(eq, bytes) else str(eq)
        if len(node.input) != 2 or not _einsum_native(eq):
            return f"Einsum unsupported equation: {eq}"
    return None


def predicted_no_node(model, note: str = "") -> PartitionReport | None:
    """The partition (every node on ORT's CPU EP, source ``"predicted"``) of a model whose every
    node's op type has no QNN EP builder (or is in a custom domain), else ``None``. Sound: the QNN
    EP cannot take a node without a builder, and the operator patches rewrite only op types it has
    one for (``Mod``, ``Einsum``, ``MaxPool``)."""
    nodes = [n for n in model.graph.node if not (n.op_type == "Constant" and not n.input)]
    if not nodes or any(n.domain in ("", "ai.onnx") and n.op_type in QNN_OP_TYPES for n in nodes):
        return None
    assigned = tuple(NodeAssignment(n.name, n.op_type, n.domain, _CPU_EP, 0,
                                    f"custom domain '{n.domain}' has no QNN EP implementation"
                                    if n.domain not in ("", "ai.onnx") else
                                    f"Operators of type `{n.op_type}` are not supported by QNN EP.")
                     for n in nodes)
    return PartitionReport(EP_NAME, assigned, (_CPU_EP,), "predicted", note)
