"""Tiny ONNX models built with onnx.helper, shared by the test modules.

Each builder returns serialized model bytes (IR version 9, opset 17 unless stated: onnx 1.23's
default IR version 14 is newer than onnxruntime 1.31 accepts). Shapes, dtypes and expected
results are in each docstring. Mirrors the models of ORT's own Python API tests (mul_1,
matmul_1, logicaland, identity_string, abs_free_dimensions, add_mul_add), regenerated from what
those tests assert.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

IR_VERSION = 9


def make_model(graph, opset: int = 17, **kwargs) -> bytes:
    """Serialize ``graph`` with IR version 9 and the given default-domain opset."""
    imports = [h.make_opsetid("", opset)] + list(kwargs.pop("extra_opsets", []))
    model = h.make_model(graph, opset_imports=imports, ir_version=IR_VERSION, **kwargs)
    return model.SerializeToString()


def mul_1() -> bytes:
    """``Y = X * W``; X float[3,2], W = [[1,2],[3,4],[5,6]] initializer; Y float[3,2]."""
    w = h.make_tensor("W", T.FLOAT, [3, 2], [1, 2, 3, 4, 5, 6])
    g = h.make_graph([h.make_node("Mul", ["X", "W"], ["Y"])], "mul_1",
                     [h.make_tensor_value_info("X", T.FLOAT, [3, 2])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [3, 2])], [w])
    return make_model(g)


def matmul_symbolic() -> bytes:
    """``Y = X @ W``; X float["None", 2] (dim_param literally "None"), W = [[1],[2]]; Y float["None", 1]."""
    w = h.make_tensor("W", T.FLOAT, [2, 1], [1, 2])
    g = h.make_graph([h.make_node("MatMul", ["X", "W"], ["Y"])], "matmul_2",
                     [h.make_tensor_value_info("X", T.FLOAT, ["None", 2])],
                     [h.make_tensor_value_info("Y", T.FLOAT, ["None", 1])], [w])
    return make_model(g)


def smallconv(batch="N", hw=(8, 8), seed: int = 0, opset: int = 17) -> bytes:
    """Conv(3→4, 3×3, pad 1) → Relu → Conv(4→2, 1×1); X float[batch,3,H,W] → Y float[batch,2,H,W].

    ``batch``/``hw`` entries may be ints or dim_param strings (dynamic dims); ``opset`` is the
    default-domain opset (the nodes are valid from opset 11).
    Metadata: producer "onnxwrapper-tests", custom ``{"license": "MIT", "author": "tests"}``.
    """
    rng = np.random.default_rng(seed)
    w1 = onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w1")
    b1 = onnx.numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "b1")
    w2 = onnx.numpy_helper.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32) * 0.3, "w2")
    nodes = [h.make_node("Conv", ["X", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             h.make_node("Conv", ["r1", "w2"], ["Y"], name="conv2")]
    g = h.make_graph(nodes, "smallconv", [h.make_tensor_value_info("X", T.FLOAT, [batch, 3, *hw])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [batch, 2, *hw])], [w1, b1, w2],
                     doc_string="graph doc")
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=IR_VERSION,
                     producer_name="onnxwrapper-tests", doc_string="small conv test model", model_version=7)
    m.domain = "ai.onnxwrapper.tests"
    h.set_model_props(m, {"license": "MIT", "author": "tests"})
    return m.SerializeToString()


def logicaland() -> bytes:
    """``output:0 = And(input:0, input1:0)``; graph inputs in order ``input1:0``, ``input:0``; bool[2,2]."""
    g = h.make_graph([h.make_node("And", ["input:0", "input1:0"], ["output:0"])], "logicaland",
                     [h.make_tensor_value_info("input1:0", T.BOOL, [2, 2]),
                      h.make_tensor_value_info("input:0", T.BOOL, [2, 2])],
                     [h.make_tensor_value_info("output:0", T.BOOL, [2, 2])])
    return make_model(g)


def identity(dtype=T.FLOAT, shape=(2, 2), name: str = "identity") -> bytes:
    """``Y = Identity(X)`` with the given ONNX element type and shape (dims may be strings)."""
    g = h.make_graph([h.make_node("Identity", ["X"], ["Y"])], name,
                     [h.make_tensor_value_info("X", dtype, list(shape))],
                     [h.make_tensor_value_info("Y", dtype, list(shape))])
    return make_model(g)


def add_mul_add() -> bytes:
    """``C = (A + B) * B + A``; A, B float[2,2]; nodes ``add_0``, ``mul_0``, ``add_1`` (graph ``Main_graph``)."""
    nodes = [h.make_node("Add", ["A", "B"], ["add_output"], name="add_0"),
             h.make_node("Mul", ["add_output", "B"], ["mul_output"], name="mul_0"),
             h.make_node("Add", ["mul_output", "A"], ["C"], name="add_1")]
    g = h.make_graph(nodes, "Main_graph",
                     [h.make_tensor_value_info("A", T.FLOAT, [2, 2]), h.make_tensor_value_info("B", T.FLOAT, [2, 2])],
                     [h.make_tensor_value_info("C", T.FLOAT, [2, 2])])
    return make_model(g)


def conv_det_relu() -> bytes:
    """Conv(1→1, 1×1) → reshape to [1,2,2] → Det → Relu: ``Det`` is not a QNN op (partition test).

    X float[1,1,2,2] → Y float[1].
    """
    w = onnx.numpy_helper.from_array(np.full((1, 1, 1, 1), 0.5, np.float32), "w")
    shape = onnx.numpy_helper.from_array(np.array([1, 2, 2], np.int64), "shape")
    nodes = [h.make_node("Conv", ["X", "w"], ["c"], name="conv"),
             h.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
             h.make_node("Det", ["r"], ["d"], name="det"),
             h.make_node("Relu", ["d"], ["Y"], name="relu")]
    g = h.make_graph(nodes, "partial", [h.make_tensor_value_info("X", T.FLOAT, [1, 1, 2, 2])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [1])], [w, shape])
    return make_model(g)


def layernorm_decomposed(variant: str = "div", opset: int = 11, tokens: int = 16, channels: int = 32,
                         seed: int = 0) -> bytes:
    """A LayerNorm over the last axis written out in primitive ops, then a MatMul; opset ≤ 17.

    X float[1, tokens, channels] → ``d = X − ReduceMean(X)``, ``s = Pow(d, 2)``, ``v = ReduceMean(s)``,
    ``q = Sqrt(v + 1e-5)`` → ``n = Div(d, q)`` (``variant="div"``: the pattern onnxruntime fuses into
    LayerNormalization at opset ≥ 17) or ``n = Mul(d, Reciprocal(q))`` (``variant="reciprocal"``:
    not fused) → ``n·γ + β`` → MatMul W[channels, 8] → Y float[1, tokens, 8]. Tensor names:
    ``square``, ``variance``, ``variance_eps``, ``std``, ``normalized`` (and ``reciprocal``).
    """
    if variant not in ("div", "reciprocal") or opset > 17:
        raise ValueError("variant is 'div' or 'reciprocal'; opset ≤ 17 (ReduceMean axes as attribute)")
    rng = np.random.default_rng(seed)
    inits = [h.make_tensor("two", T.FLOAT, [], [2.0]), h.make_tensor("eps", T.FLOAT, [], [1e-5]),
             onnx.numpy_helper.from_array((1 + 0.1 * rng.standard_normal(channels)).astype(np.float32), "gamma"),
             onnx.numpy_helper.from_array((0.1 * rng.standard_normal(channels)).astype(np.float32), "beta"),
             onnx.numpy_helper.from_array((rng.standard_normal((channels, 8)) / channels ** 0.5).astype(np.float32),
                                          "W")]
    nodes = [h.make_node("ReduceMean", ["X"], ["mean"], axes=[-1], name="mean"),
             h.make_node("Sub", ["X", "mean"], ["centered"], name="center"),
             h.make_node("Pow", ["centered", "two"], ["square"], name="square"),
             h.make_node("ReduceMean", ["square"], ["variance"], axes=[-1], name="variance"),
             h.make_node("Add", ["variance", "eps"], ["variance_eps"], name="add_eps"),
             h.make_node("Sqrt", ["variance_eps"], ["std"], name="std")]
    if variant == "div":
        nodes.append(h.make_node("Div", ["centered", "std"], ["normalized"], name="normalize"))
    else:
        nodes += [h.make_node("Reciprocal", ["std"], ["reciprocal"], name="reciprocal"),
                  h.make_node("Mul", ["centered", "reciprocal"], ["normalized"], name="normalize")]
    nodes += [h.make_node("Mul", ["normalized", "gamma"], ["scaled"], name="gamma"),
              h.make_node("Add", ["scaled", "beta"], ["ln"], name="beta"),
              h.make_node("MatMul", ["ln", "W"], ["Y"], name="project")]
    g = h.make_graph(nodes, f"layernorm_{variant}", [h.make_tensor_value_info("X", T.FLOAT, [1, tokens, channels])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [1, tokens, 8])], inits)
    return make_model(g, opset)


def softmax_decomposed() -> bytes:
    """``Y = Exp(X) / ReduceSum(Exp(X), axes=[-1])``; X, Y float[2, 6]; opset 11 (axes as attribute).
    Tensor names: ``exp``, ``denominator``."""
    nodes = [h.make_node("Exp", ["X"], ["exp"]), h.make_node("ReduceSum", ["exp"], ["denominator"], axes=[-1]),
             h.make_node("Div", ["exp", "denominator"], ["Y"])]
    g = h.make_graph(nodes, "softmax_decomposed", [h.make_tensor_value_info("X", T.FLOAT, [2, 6])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [2, 6])])
    return make_model(g, 11)


def abs_free_dimensions() -> bytes:
    """``y = Abs(x)``; x float[Dim1 (denotation DATA_BATCH), Dim2 (DATA_CHANNEL), 5], y float[Dim1, Dim2, 5]
    (ORT's ``abs_free_dimensions.onnx``, for free-dimension overrides)."""
    x = h.make_tensor_value_info("x", T.FLOAT, ["Dim1", "Dim2", 5])
    for dim, denotation in zip(x.type.tensor_type.shape.dim, ("DATA_BATCH", "DATA_CHANNEL")):
        dim.denotation = denotation
    g = h.make_graph([h.make_node("Abs", ["x"], ["y"])], "abs_free_dimensions", [x],
                     [h.make_tensor_value_info("y", T.FLOAT, ["Dim1", "Dim2", 5])])
    return make_model(g)


def lora_two_params() -> bytes:
    """ORT's LoRA test model ``two_params_lora_model.onnx``: ``output = input_x @ weight_x + (input_x @
    lora_param_a) @ lora_param_b``; input_x float[4,4]; weight_x = 1..16 as [4,4]; the overridable
    initializers (also graph inputs) lora_param_a float[4, "dim"] and lora_param_b float["dim", 4] are
    empty ([4,0], [0,4]). Base output for ones: ``[28, 32, 36, 40]`` per row (opset 21)."""
    w = h.make_tensor("weight_x", T.FLOAT, [4, 4], list(range(1, 17)))
    a = h.make_tensor("lora_param_a", T.FLOAT, [4, 0], [])
    b = h.make_tensor("lora_param_b", T.FLOAT, [0, 4], [])
    nodes = [h.make_node("MatMul", ["input_x", "weight_x"], ["mm_output_x"]),
             h.make_node("MatMul", ["input_x", "lora_param_a"], ["mm_output_a"]),
             h.make_node("MatMul", ["mm_output_a", "lora_param_b"], ["mm_output_b"]),
             h.make_node("Add", ["mm_output_x", "mm_output_b"], ["output"])]
    g = h.make_graph(nodes, "lora", [h.make_tensor_value_info("input_x", T.FLOAT, [4, 4]),
                                     h.make_tensor_value_info("lora_param_a", T.FLOAT, [4, "dim"]),
                                     h.make_tensor_value_info("lora_param_b", T.FLOAT, ["dim", 4])],
                     [h.make_tensor_value_info("output", T.FLOAT, [4, 4])], [w, a, b])
    return make_model(g, opset=21)


def write_lora_adapter(path) -> None:
    """ORT's ``two_params_lora_model.onnx_adapter``: lora_param_a = [[3],[4],[5],[6]], lora_param_b =
    [[7, 8, 9, 10]]; with it the output for ones is ``[154, 176, 198, 220]`` per row."""
    import onnxruntime

    params = {"lora_param_a": np.array([[3], [4], [5], [6]], np.float32),
              "lora_param_b": np.array([[7, 8, 9, 10]], np.float32)}
    adapter = onnxruntime.AdapterFormat()
    adapter.set_adapter_version(1)
    adapter.set_model_version(1)
    adapter.set_parameters({k: onnxruntime.OrtValue.ortvalue_from_numpy(v) for k, v in params.items()})
    adapter.export_adapter(str(path))


def write_pad_with_user_initializer(directory, relu_first: bool = False) -> str:
    """ORT's ``model_with_external_initializer_come_from_user.onnx`` in ``directory``: ``Y = Pad(X, pads)``
    (optionally after a ``Relu``), X float[1,2]; ``pads`` int64[4] is a graph input and an initializer
    whose external data file ``Pads_not_on_disk.bin`` does not exist: the user supplies it
    (``add_external_initializers`` or ``add_external_initializers_from_files_in_memory``).
    Returns the model path."""
    import os

    pads = onnx.TensorProto(name="Pads_not_on_disk", data_type=T.INT64, dims=[4],
                            data_location=onnx.TensorProto.EXTERNAL)
    for key, value in (("location", "Pads_not_on_disk.bin"), ("offset", "0"), ("length", "32")):
        pads.external_data.add(key=key, value=value)
    nodes = [h.make_node("Relu", ["X"], ["r"])] if relu_first else []
    nodes.append(h.make_node("Pad", ["r" if relu_first else "X", "Pads_not_on_disk"], ["Y"]))
    g = h.make_graph(nodes, "pad", [h.make_tensor_value_info("X", T.FLOAT, [1, 2]),
                                    h.make_tensor_value_info("Pads_not_on_disk", T.INT64, [4])],
                     [h.make_tensor_value_info("Y", T.FLOAT, None)], [pads])
    path = os.path.join(str(directory), "relu_pad.onnx" if relu_first else "pad.onnx")
    with open(path, "wb") as f:
        f.write(make_model(g))
    return path


def tree_ensemble_dynamic(cast_label: bool = False, scaled_probs: bool = False) -> bytes:
    """``TreeEnsembleClassifier`` (domain ai.onnx.ml, one tree, LOGISTIC): X float[None, 3] →
    label int64[None], probs float[None, 2]; no op of it has a QNN EP implementation. With
    ``cast_label`` the label goes through a ``Cast`` to double (as exporters end such models): an op
    the QNN EP has a builder for, which it refuses (measured), so the static op table cannot rule it out.
    With ``scaled_probs`` the probabilities go through a ``Mul`` by 0.5 (float32), which the QNN EP takes."""
    node = h.make_node(
        "TreeEnsembleClassifier", ["X"], ["label", "probs"], domain="ai.onnx.ml", classlabels_int64s=[0, 1],
        nodes_featureids=[0, 0, 0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_nodeids=[0, 1, 2],
        nodes_treeids=[0, 0, 0], nodes_values=[0.5, 0.0, 0.0], nodes_truenodeids=[1, 0, 0],
        nodes_falsenodeids=[2, 0, 0], class_ids=[1, 1], class_nodeids=[1, 2], class_treeids=[0, 0],
        class_weights=[-1.0, 1.0], post_transform="LOGISTIC")
    nodes = [node]
    if cast_label:
        node.output[0] = "label_raw"
        nodes.append(h.make_node("Cast", ["label_raw"], ["label"], to=T.DOUBLE, name="cast_label"))
    initializers = []
    if scaled_probs:
        node.output[1] = "probs_raw"
        initializers.append(h.make_tensor("half", T.FLOAT, [], [0.5]))
        nodes.append(h.make_node("Mul", ["probs_raw", "half"], ["probs"], name="scale_probs"))
    graph = h.make_graph(nodes, "tree", [h.make_tensor_value_info("X", T.FLOAT, [None, 3])],
                         [h.make_tensor_value_info("label", T.DOUBLE if cast_label else T.INT64, [None]),
                          h.make_tensor_value_info("probs", T.FLOAT, [None, 2])], initializers)
    return make_model(graph, extra_opsets=[h.make_opsetid("ai.onnx.ml", 3)])
