"""The patch registry: lookup, selection (``only_for``, ``names``, ``disabled``), in-memory only."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxwrapper.patches as patches
from onnxwrapper.patches import (PatchError, apply_patches, find_patches, get_patch, list_patches,
                                 name_unnamed_nodes)
from tests.models import IR_VERSION


def three_patch_model() -> onnx.ModelProto:
    """x[1,2,4,4,4] → MaxPool3d → Reshape[1,2,8] → Einsum('bij,bkj->bik', ·, w) → Mod(·, 0.75) → y."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(np.array([1, 2, 8], np.int64), "shape"),
             onnx.numpy_helper.from_array(rng.standard_normal((1, 3, 8)).astype(np.float32), "w"),
             onnx.numpy_helper.from_array(np.array(0.75, np.float32), "k")]
    nodes = [h.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2, 2], strides=[2, 2, 2], name="pool3d"),
             h.make_node("Reshape", ["p", "shape"], ["r"], name="reshape"),
             h.make_node("Einsum", ["r", "w"], ["e"], equation="bij,bkj->bik", name="einsum"),
             h.make_node("Mod", ["e", "k"], ["y"], fmod=1, name="mod")]
    g = h.make_graph(nodes, "three", [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 4, 4, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 2, 3])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=IR_VERSION)


def run_cpu(model, x):
    sess = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def test_registry_names_and_lookup():
    assert [p.name for p in list_patches(automatic=True)] == ["mod", "einsum", "maxpool3d"]
    assert [p.name for p in list_patches(automatic=False)] == ["pow_square", "dilated_conv", "conv_taps",
                                                               "softmax_stable", "rescale", "clamp_fp16"]
    assert [p.name for p in list_patches()] == ["mod", "einsum", "maxpool3d", "pow_square", "dilated_conv",
                                                "conv_taps", "softmax_stable", "rescale", "clamp_fp16"]
    assert all(p.exactness for p in list_patches())  # every rewrite states its exactness
    assert get_patch("EINSUM").op_type == "Einsum"
    with pytest.raises(PatchError, match="Registered patches: mod, einsum, maxpool3d, pow_square"):
        get_patch("gelu")


def test_public_surface():
    assert sorted(patches.__all__) == sorted(n for n in dir(patches) if not n.startswith("_")
                                             and n not in ("annotations",))


def test_all_patches_apply_and_preserve_outputs():
    model = three_patch_model()
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 4, 4)).astype(np.float32)
    patched, records = apply_patches(model)
    assert [r.patch for r in records] == ["maxpool3d", "einsum", "mod"]
    assert {n.op_type for n in patched.graph.node}.isdisjoint({"Einsum", "Mod"})
    np.testing.assert_allclose(run_cpu(patched, x), run_cpu(model, x), rtol=0, atol=1e-6)
    json.dumps([r.to_dict() for r in records])
    onnx.checker.check_model(patched)


def test_only_for_names_and_predicate_and_disabled():
    model = three_patch_model()
    _, records = apply_patches(model, only_for={"einsum"})
    assert [r.node_name for r in records] == ["einsum"]
    _, records = apply_patches(model, only_for=lambda n: n.op_type == "Mod")
    assert [r.patch for r in records] == ["mod"]
    _, records = apply_patches(model, disabled=["mod", "einsum"])
    assert [r.patch for r in records] == ["maxpool3d"]
    _, records = apply_patches(model, names=["einsum"])
    assert [r.patch for r in records] == ["einsum"]
    with pytest.raises(PatchError):
        apply_patches(model, disabled=["nope"])


def test_find_patches_lists_candidates():
    matches = find_patches(three_patch_model())
    assert [(m.node_name, m.patch, m.applicable) for m in matches] == [
        ("pool3d", "maxpool3d", True), ("einsum", "einsum", True), ("mod", "mod", True)]
    assert find_patches(three_patch_model(), only_for={"mod"})[0].to_dict()["patch"] == "mod"


def test_model_inputs_bytes_and_path_never_write(tmp_path):
    model = three_patch_model()
    path = tmp_path / "m.onnx"
    data = model.SerializeToString()
    path.write_bytes(data)
    before = sorted(os.listdir(tmp_path))
    for source in (model, data, str(path), path):
        patched, records = apply_patches(source)
        assert len(records) == 3
    assert sorted(os.listdir(tmp_path)) == before
    assert path.read_bytes() == data
    assert model.SerializeToString() == data  # the ModelProto given is not modified
    with pytest.raises(TypeError):
        apply_patches(123)


def test_name_unnamed_nodes():
    g = h.make_graph([h.make_node("Relu", ["x"], ["a"]), h.make_node("Relu", ["a"], ["b"], name="Relu_1"),
                      h.make_node("Relu", ["b"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=IR_VERSION)
    assert name_unnamed_nodes(model) == 2
    names = [n.name for n in model.graph.node]
    assert names[0] == "Relu_0" and names[1] == "Relu_1" and names[2] not in names[:2]
    assert name_unnamed_nodes(model) == 0


def test_unnamed_node_is_patched_with_derived_names():
    g = h.make_graph([h.make_node("Mod", ["a", "b"], ["y"])], "g",
                     [h.make_tensor_value_info("a", T.INT32, [3]), h.make_tensor_value_info("b", T.INT32, [3])],
                     [h.make_tensor_value_info("y", T.INT32, [3])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=IR_VERSION)
    patched, (record,) = apply_patches(model)
    assert record.node_name == ""
    assert all(n.name.startswith("Mod_y/") for n in patched.graph.node)


def test_patch_offloaded_maps_partition_names():
    from onnxwrapper.kernel.session._partition import NodeAssignment

    from onnxwrapper.patches import patch_offloaded

    model = three_patch_model()
    # ORT's names after the NHWC layout transform carry _token_ suffixes
    _, records = patch_offloaded(model, [("pool3d_token_3", "MaxPool"), ("mod", "Mod")])
    assert [r.node_name for r in records] == ["pool3d", "mod"]
    _, records = patch_offloaded(model, [NodeAssignment("einsum", "Einsum", "", "CPUExecutionProvider")])
    assert [r.node_name for r in records] == ["einsum"]
    _, records = patch_offloaded(model, [("det", "Det")])
    assert records == []


def test_patch_offloaded_unnamed_nodes_by_op_type():
    from onnxwrapper.patches import patch_offloaded

    g = h.make_graph([h.make_node("Mod", ["a", "b"], ["m"], fmod=1), h.make_node("Einsum", ["m", "b"], ["y"],
                                                                                   equation="ij,kj->ik")], "g",
                     [h.make_tensor_value_info("a", T.FLOAT, [3, 4]), h.make_tensor_value_info("b", T.FLOAT, [3, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [3, 3])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=IR_VERSION)
    _, records = patch_offloaded(model, [("", "Mod")])
    assert [r.op_type for r in records] == ["Mod"]
