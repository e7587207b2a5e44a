"""Patch ``maxpool3d``: 3-D MaxPool → 2-D MaxPool composition is bit-identical to ORT's 3-D MaxPool."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxwrapper.patches import apply_patches, find_patches, get_patch
from tests.models import IR_VERSION


def pool_model(shape, outputs=("y",), **attrs) -> onnx.ModelProto:
    node = h.make_node("MaxPool", ["x"], list(outputs), name="pool", **attrs)
    outs = [h.make_tensor_value_info(o, T.FLOAT if i == 0 else T.INT64, None) for i, o in enumerate(outputs) if o]
    g = h.make_graph([node], "pool", [h.make_tensor_value_info("x", T.FLOAT, list(shape))], outs)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=IR_VERSION)


def minus_inf(y: np.ndarray) -> np.ndarray:
    """ORT's MaxPool kernels answer an all--inf window with -inf or with -FLT_MAX depending on the
    kernel path (measured, onnxruntime 1.31); both mean "nothing but -inf" here."""
    return np.where(y == np.finfo(y.dtype).min, -np.inf, y)


def run_cpu(model, feeds):
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


CASES = [
    dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
    dict(kernel_shape=[1, 3, 3], strides=[1, 1, 1]),                      # LPRNet, H/W step only
    dict(kernel_shape=[1, 3, 3], strides=[2, 1, 2]),                      # LPRNet, channel subsampling
    dict(kernel_shape=[3, 1, 1], strides=[1, 1, 1]),                      # D step only
    dict(kernel_shape=[3, 3, 3], strides=[1, 2, 2], pads=[1, 1, 1, 1, 1, 1]),
    dict(kernel_shape=[3, 2, 2], strides=[2, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 3, 2], strides=[2, 2, 2], pads=[0, 1, 0, 1, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 2, 2], dilations=[2, 1, 2]),
    dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[2, 3, 3], strides=[1, 2, 2], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[2, 2, 3], strides=[1, 2, 1], auto_pad="VALID"),
    dict(kernel_shape=[1, 1, 1]),                                          # degenerate: Reshape only
]


@pytest.mark.parametrize("attrs", CASES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()))
def test_matches_ort_bit_for_bit(attrs):
    model = pool_model(["N", 3, 7, 8, 9], **attrs)
    patched, records = apply_patches(model)
    assert len(records) == 1 and records[0].patch == "maxpool3d"
    pools = [n for n in patched.graph.node if n.op_type == "MaxPool"]
    assert all(len(next(a.ints for a in n.attribute if a.name == "kernel_shape")) == 2 for n in pools)
    rng = np.random.default_rng(0)
    for batch in (1, 2):
        x = rng.standard_normal((batch, 3, 7, 8, 9)).astype(np.float32)
        x[0, 0, 0, ::3, ::2] = -np.inf  # scattered -inf and repeated values are edge cases of max
        x[0, 1, 1] = 0.5
        got, ref = run_cpu(patched, {"x": x}), run_cpu(model, {"x": x})
        assert got.shape == ref.shape
        np.testing.assert_array_equal(minus_inf(got), minus_inf(ref))


def test_lprnet_case_has_no_depth_pool():
    model = pool_model([1, 1, 64, 20, 90], kernel_shape=[1, 3, 3], strides=[1, 1, 1])
    _, (record,) = apply_patches(model)
    assert [op for _, op in record.added_nodes] == ["Reshape", "MaxPool", "Reshape"]


def test_unused_indices_output_is_fine_used_one_is_refused():
    unused = pool_model([1, 2, 4, 4, 4], outputs=("y", ""), kernel_shape=[2, 2, 2])
    assert get_patch("maxpool3d").matches(unused.graph.node[0], unused)
    used = pool_model([1, 2, 4, 4, 4], outputs=("y", "idx"), kernel_shape=[2, 2, 2])
    assert "Indices" in get_patch("maxpool3d").reject_reason(used.graph.node[0], used)


def test_dynamic_spatial_dims_are_refused_with_the_fix():
    model = pool_model([1, 2, "D", 4, 4], kernel_shape=[2, 2, 2])
    reason = get_patch("maxpool3d").reject_reason(model.graph.node[0], model)
    assert "static" in reason and "--shape" in reason


def test_2d_maxpool_is_not_listed():
    model = pool_model([1, 2, 4, 4], kernel_shape=[2, 2])
    assert find_patches(model) == []
    assert apply_patches(model)[1] == []


@pytest.mark.parametrize("kernel", [[1, 3, 3], [2, 2, 2]])
def test_all_minus_inf_window(kernel):
    model = pool_model([1, 1, 4, 4, 4], kernel_shape=kernel)
    patched, _ = apply_patches(model)
    x = np.full((1, 1, 4, 4, 4), -np.inf, np.float32)
    got, ref = run_cpu(patched, {"x": x}), run_cpu(model, {"x": x})
    assert np.all(minus_inf(got) == -np.inf) and np.all(minus_inf(ref) == -np.inf)
