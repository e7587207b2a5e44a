"""Accuracy-repair rewrites (``pow_square``, ``dilated_conv``, ``conv_taps``, ``softmax_stable``,
``rescale``) against onnxruntime's CPU kernels on random data: each keeps the exactness it states.

``rescale`` and ``pow_square`` claim bit-exactness (power-of-two scaling commutes with IEEE
rounding; x·x is the correctly rounded square): asserted with ``array_equal``. The others claim
exactness in exact arithmetic with a floating-point bound: asserted against that bound.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from onnxwrapper.patches import PatchError, get_patch
from tests.models import IR_VERSION

U32 = 2.0 ** -24  # float32 unit roundoff


def model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    g = h.make_graph(nodes, "m", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=IR_VERSION)


def vi(name, shape, dtype=T.FLOAT):
    return h.make_tensor_value_info(name, dtype, shape)


def run(m: onnx.ModelProto, feeds: dict) -> list:
    sess = onnxruntime.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def rewritten(m: onnx.ModelProto, patch: str, node: str, **params) -> tuple[onnx.ModelProto, object]:
    out = onnx.ModelProto()
    out.CopyFrom(m)
    target = next(n for n in out.graph.node if n.name == node)
    record = get_patch(patch).configure(**params).apply(out, target)
    onnx.checker.check_model(out)
    return out, record


def bit_identical(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# -- pow_square --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_pow_square_is_bit_exact_including_signed_zero_inf_nan(dtype):
    et = h.np_dtype_to_tensor_dtype(np.dtype(dtype))
    m = model([h.make_node("Pow", ["x", "two"], ["y"], name="pow")], [vi("x", [4, 64], et)], [vi("y", [4, 64], et)],
              [nh.from_array(np.array(2, dtype), "two")])
    x = (np.random.default_rng(0).standard_normal((4, 64)) * 30).astype(dtype)
    x.flat[:8] = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 300], dtype)
    patched, record = rewritten(m, "pow_square", "pow")
    assert [op for _, op in record.added_nodes] == ["Mul"] and "Pow" not in {n.op_type for n in patched.graph.node}
    (ref,), (got,) = run(m, {"x": x}), run(patched, {"x": x})
    assert bit_identical(got, ref)
    assert np.signbit(got.flat[0]) == np.signbit(ref.flat[0]) == False  # noqa: E712 - (-0)^2 = +0


def test_pow_square_refuses_other_exponents_and_shape_changing_broadcasts():
    m = model([h.make_node("Pow", ["x", "p"], ["y"], name="pow")], [vi("x", [3])], [vi("y", [3])],
              [nh.from_array(np.array(3.0, np.float32), "p")])
    assert "not the single value 2" in get_patch("pow_square").reject_reason(m.graph.node[0], m)
    dyn = model([h.make_node("Pow", ["x", "p"], ["y"], name="pow")], [vi("x", [3]), vi("p", [])], [vi("y", [3])])
    assert "not a constant" in get_patch("pow_square").reject_reason(dyn.graph.node[0], dyn)
    scalar = model([h.make_node("Pow", ["x", "p"], ["y"], name="pow")], [vi("x", [])], [vi("y", [1])],
                   [nh.from_array(np.array([2.0], np.float32), "p")])
    assert "change the output shape" in get_patch("pow_square").reject_reason(scalar.graph.node[0], scalar)


# -- dilated_conv and conv_taps -----------------------------------------------------------------------------
CONVS = [  # kernel, dilation, pads, stride, group, bias, length
    (5, 3, (6, 6), 1, 1, True, 16), (5, 3, (2, 7), 2, 2, False, 19), (3, 2, (0, 0), 1, 4, True, 23),
    (4, 2, (3, 1), 3, 1, True, 21)]


def conv1d(k, d, pads, s, g, bias, seed=0):
    rng = np.random.default_rng(seed)
    inits = [nh.from_array(rng.standard_normal((8, 8 // g, k)).astype(np.float32), "W")]
    inputs = ["x", "W"]
    if bias:
        inits.append(nh.from_array(rng.standard_normal(8).astype(np.float32), "B"))
        inputs.append("B")
    node = h.make_node("Conv", inputs, ["y"], name="conv", kernel_shape=[k], dilations=[d], pads=list(pads),
                       strides=[s], group=g)
    return model([node], [vi("x", [2, 8, "L"])], [vi("y", [2, 8, "M"])], inits)


def _conv_bound(m, x, k, g):
    """γₙ·Σ|w·x| per output (n = taps × input channels per group): the reordering bound."""
    n = k * 8 // g
    gamma = n * U32 / (1 - n * U32)
    absm = onnx.ModelProto()
    absm.CopyFrom(m)
    for init in absm.graph.initializer:
        init.CopyFrom(nh.from_array(np.abs(nh.to_array(init)), init.name))
    return gamma * run(absm, {"x": np.abs(x)})[0] + 1e-30


@pytest.mark.parametrize("k,d,pads,s,g,bias,length", CONVS)
def test_dilated_conv_equals_the_dilated_convolution(k, d, pads, s, g, bias, length):
    m = conv1d(k, d, pads, s, g, bias)
    x = np.random.default_rng(1).standard_normal((2, 8, length)).astype(np.float32)
    patched, record = rewritten(m, "dilated_conv", "conv")
    conv = next(n for n in patched.graph.node if n.op_type == "Conv")
    attrs = {a.name: h.get_attribute_value(a) for a in conv.attribute}
    assert attrs["dilations"] == [1] and attrs["kernel_shape"] == [(k - 1) * d + 1]
    (ref,), (got,) = run(m, {"x": x}), run(patched, {"x": x})
    assert got.shape == ref.shape
    assert np.all(np.abs(got - ref) <= _conv_bound(m, x, k, g))


@pytest.mark.parametrize("k,d,pads,s,g,bias,length", CONVS)
def test_conv_taps_equals_the_convolution_within_the_reordering_bound(k, d, pads, s, g, bias, length):
    m = conv1d(k, d, pads, s, g, bias)
    x = np.random.default_rng(2).standard_normal((2, 8, length)).astype(np.float32)
    patched, record = rewritten(m, "conv_taps", "conv")
    ops = [n.op_type for n in patched.graph.node]
    assert ops.count("Conv") == k and ops.count("Slice") == k and ops[-1] == "Sum"
    (ref,), (got,) = run(m, {"x": x}), run(patched, {"x": x})
    assert got.shape == ref.shape
    assert np.all(np.abs(got - ref) <= _conv_bound(m, x, k, g))
    # the slice bounds are relative to the padded length: another length runs on the same rewrite
    x2 = np.random.default_rng(3).standard_normal((2, 8, length + 5)).astype(np.float32)
    assert np.all(np.abs(run(patched, {"x": x2})[0] - run(m, {"x": x2})[0]) <= _conv_bound(m, x2, k, g))


def test_conv_rewrites_refuse_what_they_do_not_handle():
    two_d = model([h.make_node("Conv", ["x", "W"], ["y"], name="conv", dilations=[2, 2])], [vi("x", [1, 2, 8, 8])],
                  [vi("y", [1, 2, 4, 4])], [nh.from_array(np.ones((2, 2, 3, 3), np.float32), "W")])
    assert "only 1-D" in get_patch("conv_taps").reject_reason(two_d.graph.node[0], two_d)
    assert get_patch("dilated_conv").matches(two_d.graph.node[0], two_d)
    plain = conv1d(3, 1, (1, 1), 1, 1, False)
    assert not get_patch("dilated_conv").targets(plain.graph.node[0])


# -- softmax_stable ---------------------------------------------------------------------------------------
def naive_softmax(reciprocal: bool = False, opset: int = 17):
    nodes = [h.make_node("Exp", ["x"], ["e"], name="exp"),
             h.make_node("ReduceSum", ["e", "axes"], ["s"], name="sum", keepdims=1)]
    if reciprocal:
        nodes += [h.make_node("Reciprocal", ["s"], ["r"], name="rec"), h.make_node("Mul", ["r", "e"], ["y"], name="mul")]
    else:
        nodes.append(h.make_node("Div", ["e", "s"], ["y"], name="div"))
    return model(nodes, [vi("x", [8, 64])], [vi("y", [8, 64])], [nh.from_array(np.array([-1], np.int64), "axes")],
                 opset)


@pytest.mark.parametrize("reciprocal,opset", [(False, 17), (True, 18)])
def test_softmax_stable_equals_the_softmax_within_its_bound(reciprocal, opset):
    m = naive_softmax(reciprocal, opset)
    x = (np.random.default_rng(4).standard_normal((8, 64)) * 3 + 8).astype(np.float32)
    patched, record = rewritten(m, "softmax_stable", "exp")
    assert [op for _, op in record.added_nodes] == ["ReduceMax", "Sub", "Exp"]
    (ref,), (got,) = run(m, {"x": x}), run(patched, {"x": x})
    spread = float(np.max(x.max(-1, keepdims=True) - x))
    bound = 2 * U32 * spread + 70 * U32  # 2u·max|x − m| + the sum's rounding (n = 64)
    assert np.max(np.abs(got - ref) / ref) <= bound
    # where exp(x) overflows float32 the naive form gives NaN, the rewrite the softmax
    big = x + 100
    assert np.isnan(run(m, {"x": big})[0]).any()
    np.testing.assert_allclose(run(patched, {"x": big})[0], ref, rtol=1e-5)


def test_softmax_stable_refuses_an_exp_used_elsewhere():
    m = naive_softmax()
    m.graph.output.append(vi("e", [8, 64]))
    assert "graph output" in get_patch("softmax_stable").reject_reason(m.graph.node[0], m)
    squared = naive_softmax()
    squared.graph.node[2].CopyFrom(h.make_node("Mul", ["e", "e"], ["y"], name="sq"))
    assert get_patch("softmax_stable").reject_reason(squared.graph.node[0], squared)


# -- rescale -----------------------------------------------------------------------------------------------
def decomposed_layernorm(square: str = "pow", size: int = 256):
    """x − mean, squared (Pow / Mul / ReduceSumSquare), ReduceSum, /N, +ε, Sqrt, Div, ·γ + β."""
    if square == "sumsquare":
        sq = [h.make_node("ReduceSumSquare", ["d"], ["ss"], name="sumsq", keepdims=1, axes=[-1])]
    else:
        sq = [h.make_node("Pow", ["d", "two"], ["d2"], name="square") if square == "pow"
              else h.make_node("Mul", ["d", "d"], ["d2"], name="square"),
              h.make_node("ReduceSum", ["d2", "axes"], ["ss"], name="sumsq", keepdims=1)]
    nodes = [h.make_node("ReduceMean", ["x"], ["mu"], name="mean", axes=[-1]),
             h.make_node("Sub", ["x", "mu"], ["d"], name="center"), *sq,
             h.make_node("Div", ["ss", "n"], ["var"], name="var"), h.make_node("Add", ["var", "eps"], ["ve"], name="eps"),
             h.make_node("Sqrt", ["ve"], ["std"], name="std"), h.make_node("Div", ["d", "std"], ["z"], name="normalize"),
             h.make_node("Mul", ["z", "gamma"], ["zg"], name="gamma"), h.make_node("Add", ["zg", "beta"], ["y"], name="beta")]
    rng = np.random.default_rng(5)
    inits = [nh.from_array(np.array([-1], np.int64), "axes"), nh.from_array(np.array(2, np.float32), "two"),
             nh.from_array(np.array(size, np.float32), "n"), nh.from_array(np.array(1e-5, np.float32), "eps"),
             nh.from_array(rng.standard_normal(size).astype(np.float32), "gamma"),
             nh.from_array(rng.standard_normal(size).astype(np.float32), "beta")]
    return model(nodes, [vi("x", [4, size])], [vi("y", [4, size])], inits)


@pytest.mark.parametrize("square", ["pow", "mul", "sumsquare"])
def test_rescale_of_a_decomposed_layernorm_is_bit_exact(square):
    m = decomposed_layernorm(square)
    x = (np.random.default_rng(6).standard_normal((4, 256)) * 400 + 100).astype(np.float32)
    patched, record = rewritten(m, "rescale", "center", log2=-5)
    plan = get_patch("rescale").configure(log2=-5).plan(m, m.graph.node[1])
    assert plan.exponents["d"] == -5 and plan.exponents["ss"] == -10 and plan.exponents["std"] == -5
    assert "z" not in plan.exponents and plan.restored == ()  # cancelled by the division
    assert bit_identical(run(patched, {"x": x})[0], run(m, {"x": x})[0])


def test_rescale_through_matmul_gemm_conv_with_biases_and_layernorm_is_bit_exact():
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((16, 32)) * 50).astype(np.float32)
    nodes = [h.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"), h.make_node("Add", ["a", "b1"], ["ab"], name="bias1"),
             h.make_node("Relu", ["ab"], ["r"], name="relu"),
             h.make_node("Gemm", ["r", "w2", "c2"], ["g"], name="gemm", transB=1, alpha=0.5),
             h.make_node("Reshape", ["g", "shape"], ["g3"], name="to3d"),
             h.make_node("Conv", ["g3", "wc", "bc"], ["c"], name="conv", pads=[1, 1]),
             h.make_node("Flatten", ["c"], ["f"], name="flat"),
             h.make_node("LayerNormalization", ["f", "lg", "lb"], ["ln"], name="ln", epsilon=1e-5),
             h.make_node("MatMul", ["ln", "w3"], ["y"], name="mm3")]
    inits = [nh.from_array(w1, "w1"), nh.from_array(rng.standard_normal(32).astype(np.float32), "b1"),
             nh.from_array(rng.standard_normal((32, 32)).astype(np.float32), "w2"),
             nh.from_array(rng.standard_normal(32).astype(np.float32), "c2"),
             nh.from_array(np.array([8, 4, 8], np.int64), "shape"),
             nh.from_array(rng.standard_normal((4, 4, 3)).astype(np.float32), "wc"),
             nh.from_array(rng.standard_normal(4).astype(np.float32), "bc"),
             nh.from_array(rng.standard_normal(32).astype(np.float32), "lg"),
             nh.from_array(rng.standard_normal(32).astype(np.float32), "lb"),
             nh.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w3")]
    m = model(nodes, [vi("x", [8, 16])], [vi("y", [8, 8])], inits)
    x = (rng.standard_normal((8, 16)) * 30).astype(np.float32)
    ref = run(m, {"x": x})[0]
    # folded into mm1's weight and bias1's constant, passed through Gemm (C scaled) and Conv (bias
    # scaled), cancelled by LayerNormalization (epsilon x 2^-8)
    patched, record = rewritten(m, "rescale", "mm1", log2=-4, pass_through=["gemm", "conv"])
    plan = get_patch("rescale").configure(log2=-4, pass_through=["gemm", "conv"]).plan(m, m.graph.node[0])
    assert plan.folded_start and {"a", "ab", "r", "g", "g3", "c", "f"} <= set(plan.exponents)
    assert "ln" not in plan.exponents and plan.folds == ()
    ln = next(n for n in patched.graph.node if n.op_type == "LayerNormalization")
    assert h.get_attribute_value(ln.attribute[0]) == pytest.approx(1e-5 * 2.0 ** -8, rel=1e-6)
    assert bit_identical(run(patched, {"x": x})[0], ref)
    assert "w1" not in {i.name for i in patched.graph.initializer}  # replaced by its scaled copy
    # without pass_through the scale is folded back into the Gemm's weight at once
    folded, _ = rewritten(m, "rescale", "mm1", log2=-4)
    assert get_patch("rescale").configure(log2=-4).plan(m, m.graph.node[0]).folds == ("gemm",)
    assert bit_identical(run(folded, {"x": x})[0], ref)


def test_rescale_restores_values_for_barriers_and_graph_outputs():
    nodes = [h.make_node("Mul", ["x", "k"], ["a"], name="big"), h.make_node("Exp", ["a"], ["e"], name="exp"),
             h.make_node("Relu", ["a"], ["r"], name="relu")]
    m = model(nodes, [vi("x", [4, 8])], [vi("e", [4, 8]), vi("r", [4, 8]), vi("a", [4, 8])],
              [nh.from_array(np.array(0.25, np.float32), "k")])
    x = np.random.default_rng(8).standard_normal((4, 8)).astype(np.float32)
    # relu's output is only a graph output: nothing can carry a scale from there
    assert "cannot travel" in get_patch("rescale").configure(log2=3).reject_reason(m.graph.node[2], m)
    patched, record = rewritten(m, "rescale", "big", log2=-3)
    plan = get_patch("rescale").configure(log2=-3).plan(m, m.graph.node[0])
    assert ("exp", "a") in plan.barriers and ("graph output", "a") in plan.barriers
    assert plan.exponents["r"] == -3 and "r" in plan.restored
    for got, ref in zip(run(patched, {"x": x}), run(m, {"x": x})):
        assert bit_identical(got, ref)


def test_rescale_of_a_float16_model_is_bit_exact():
    m = decomposed_layernorm("mul", 64)
    half = onnx.ModelProto()
    half.CopyFrom(m)
    for vi_ in list(half.graph.input) + list(half.graph.output):
        vi_.type.tensor_type.elem_type = T.FLOAT16
    for init in half.graph.initializer:
        arr = nh.to_array(init)
        if arr.dtype == np.float32:
            init.CopyFrom(nh.from_array(arr.astype(np.float16), init.name))
    x = (np.random.default_rng(9).standard_normal((4, 64)) * 8).astype(np.float16)
    patched, _ = rewritten(half, "rescale", "center", log2=-2)
    assert bit_identical(run(patched, {"x": x})[0], run(half, {"x": x})[0])


def test_rescale_refusals_and_parameters():
    m = decomposed_layernorm()
    with pytest.raises(PatchError, match="log2 must be a non-zero integer"):
        get_patch("rescale").configure(log2=0)
    with pytest.raises(PatchError, match="no parameter"):
        get_patch("rescale").configure(scale=2)
    with pytest.raises(PatchError, match="no parameter"):
        get_patch("pow_square").configure(log2=1)
    exp = model([h.make_node("Mul", ["x", "k"], ["a"], name="m"), h.make_node("Exp", ["a"], ["y"], name="exp")],
                [vi("x", [2])], [vi("y", [2])], [nh.from_array(np.array(2.0, np.float32), "k")])
    reason = get_patch("rescale").configure(log2=-2).reject_reason(exp.graph.node[0], exp)
    assert "cannot travel" in reason and "exp" in reason
    assert get_patch("rescale").configure(log2=-2).matches(m.graph.node[1], m)
