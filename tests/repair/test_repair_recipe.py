"""Repair recipes: the file format, the hash check that keeps a recipe on its model, applying rewrites in
memory, and splitting a model at its CPU nodes (CPU only; the QNN side is in test_repair_qnn.py)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from onnxwrapper.errors import OnnxwrapperError, RecipeError, RecipeMismatchError
from onnxwrapper.repair import (FORMAT, VERSION, ModelRecipe, RecipeBook, Rewrite, apply_recipe, assemble, boundary_types,
                                load_recipes, model_sha256, part_model, split_stages, tensor_types)
from tests.models import IR_VERSION


def chain_model() -> onnx.ModelProto:
    """x → Mul(2) a → Pow(a, 2) p → Add(1) q → Relu y, plus a residual Add(q, a) z (two outputs)."""
    nodes = [h.make_node("Mul", ["x", "k"], ["a"], name="mul"), h.make_node("Pow", ["a", "two"], ["p"], name="pow"),
             h.make_node("Add", ["p", "one"], ["q"], name="add"), h.make_node("Relu", ["q"], ["y"], name="relu"),
             h.make_node("Add", ["q", "a"], ["z"], name="residual")]
    inits = [nh.from_array(np.array(2, np.float32), "k"), nh.from_array(np.array(2, np.float32), "two"),
             nh.from_array(np.array(1, np.float32), "one")]
    g = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", T.FLOAT, [2, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 8]), h.make_tensor_value_info("z", T.FLOAT, [2, 8])],
                     inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=IR_VERSION, producer_name="tests")


def run(m, feeds):
    data = m if isinstance(m, bytes) else m.SerializeToString()
    return onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_recipe_file_round_trip_and_digest(tmp_path):
    data = chain_model().SerializeToString()
    sha = model_sha256(data)
    assert sha == hashlib.sha256(data).hexdigest()
    recipe = ModelRecipe(sha, "chain.onnx", "chain-abc", (Rewrite("pow_square", "pow"),), (("add",),), None,
                         {"worst_snr_db": 60.0}, "kernel: pow_square")
    path = RecipeBook({sha: recipe}).save(tmp_path / "r.json")
    doc = json.loads(open(path).read())
    assert doc["format"] == FORMAT and doc["version"] == VERSION and doc["tool"]["onnxwrapper"]
    assert doc["models"][sha]["rewrites"] == [{"rewrite": "pow_square", "node": "pow", "params": {}}]
    book = load_recipes(path)
    back = book.for_model(sha)
    assert back.rewrites == recipe.rewrites and back.cpu_nodes == ("add",) and back.verified["worst_snr_db"] == 60
    assert back.digest() == recipe.digest()
    # the digest covers what changes the compiled model, not the notes
    assert ModelRecipe(sha, rewrites=recipe.rewrites, cpu_subgraphs=(("add",),)).digest() == recipe.digest()
    assert ModelRecipe(sha, rewrites=(Rewrite("rescale", "mul", {"log2": -2}),)).digest() != recipe.digest()
    assert ModelRecipe(sha, precision="fp32").digest() != ModelRecipe(sha).digest()


def test_a_recipe_is_refused_for_another_model_with_a_typed_error(tmp_path):
    sha = model_sha256(chain_model().SerializeToString())
    book = RecipeBook({sha: ModelRecipe(sha, "chain.onnx", rewrites=(Rewrite("pow_square", "pow"),))}, path="r.json")
    other = "0" * 64
    with pytest.raises(RecipeMismatchError) as err:
        book.for_model(other, "other.onnx")
    assert isinstance(err.value, (RecipeError, OnnxwrapperError, ValueError))
    assert err.value.model_sha256 == other and err.value.recipe_models == {sha: "chain.onnx"}
    assert "no recipe for model 'other.onnx'" in str(err.value) and "never applied to another model" in str(err.value)
    # not required (python -m aipc --repairs): other models run as they are ...
    assert book.for_model(other, "other.onnx", required=False) is None
    # ... but a model of the recipe's file name with another content is refused: it changed
    with pytest.raises(RecipeMismatchError, match="the model changed"):
        book.for_model(other, "chain.onnx", required=False)


@pytest.mark.parametrize("doc,message", [
    ({"format": "something-else", "version": 1, "models": {}}, "is not a repair recipe"),
    ({"format": FORMAT, "version": VERSION + 1, "models": {}}, "format version"),
    ({"format": FORMAT, "version": 1, "models": {"abc": {}}}, "not a sha256"),
    ({"format": FORMAT, "version": 1, "models": {"a" * 64: {"rewrites": [{"rewrite": "nope", "node": "n"}]}}},
     "No patch named 'nope'"),
    ({"format": FORMAT, "version": 1, "models": {"a" * 64: {"rewrites": [{"rewrite": "rescale", "node": "n",
                                                                            "params": {"log2": 0}}]}}},
     "log2 must be a non-zero integer"),
    ({"format": FORMAT, "version": 1, "models": {"a" * 64: {"cpu_subgraphs": ["n"]}}}, "cpu_subgraphs"),
    ({"format": FORMAT, "version": 1, "models": {"a" * 64: {"precision": "int4"}}}, "precision must be"),
])
def test_invalid_recipes_are_refused_with_the_reason(doc, message):
    with pytest.raises(RecipeError, match=message):
        load_recipes(doc)


def test_unreadable_recipe_files(tmp_path):
    with pytest.raises(RecipeError, match="does not exist"):
        load_recipes(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RecipeError, match="not a readable JSON file"):
        load_recipes(tmp_path / "bad.json")


def test_apply_recipe_rewrites_in_memory_and_checks_node_names():
    m = chain_model()
    before = m.SerializeToString()
    sha = model_sha256(before)
    repaired = apply_recipe(m, ModelRecipe(sha, rewrites=(Rewrite("pow_square", "pow"),), cpu_subgraphs=(("add",),)))
    assert m.SerializeToString() == before  # the caller's model is not modified
    assert "Pow" not in {n.op_type for n in repaired.proto.graph.node} and repaired.cpu_nodes == ("add",)
    assert [r.patch for r in repaired.records] == ["pow_square"]
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    for got, ref in zip(run(repaired.proto, {"x": x}), run(m, {"x": x})):
        assert got.tobytes() == ref.tobytes()
    with pytest.raises(RecipeError, match="has no node 'gone'"):
        apply_recipe(m, ModelRecipe(sha, rewrites=(Rewrite("pow_square", "gone"),)))
    with pytest.raises(RecipeError, match="does not apply"):
        apply_recipe(m, ModelRecipe(sha, rewrites=(Rewrite("pow_square", "mul"),)))
    with pytest.raises(RecipeError, match="does not have: nowhere"):
        apply_recipe(m, ModelRecipe(sha, cpu_subgraphs=(("nowhere",),)))


def test_unnamed_nodes_get_the_names_recipes_use():
    m = chain_model()
    m.graph.node[1].name = ""
    repaired = apply_recipe(m, ModelRecipe("a" * 64, rewrites=(Rewrite("pow_square", "Pow_1"),)))
    assert [r.node_name for r in repaired.records] == ["Pow_1"]


def test_split_stages_puts_dependent_nodes_after_the_cpu_part():
    m = chain_model()
    parts = split_stages(m, ["pow"])
    assert [(p.kind, p.nodes) for p in parts] == [("npu", (0,)), ("cpu", (1,)), ("npu", (2, 3, 4))]
    assert parts[0].outputs == ("a",) and parts[1].inputs == ("a",) and parts[1].outputs == ("p",)
    assert set(parts[2].inputs) == {"p", "a"} and set(parts[2].outputs) == {"y", "z"}
    # two CPU nodes in a row stay one CPU part; nodes that do not depend on them run before
    assert [(p.kind, p.nodes) for p in split_stages(m, ["pow", "add"])] == [("npu", (0,)), ("cpu", (1, 2)),
                                                                            ("npu", (3, 4))]
    # a CPU node at the start: no empty NPU part
    assert [p.kind for p in split_stages(m, ["mul"])] == ["cpu", "npu"]
    with pytest.raises(ValueError, match="no node named nope"):
        split_stages(m, ["nope"])


def test_assembled_parts_compute_the_original_model():
    m = chain_model()
    m.graph.node.insert(0, h.make_node("Constant", [], ["k2"], name="c", value=nh.from_array(np.array(3, np.float32))))
    m.graph.node.append(h.make_node("Mul", ["z", "k2"], ["w"], name="late"))
    m.graph.node[3].input[1] = "k2"  # add reads the constant too (copied into the parts that read it)
    m.graph.output.append(h.make_tensor_value_info("w", T.FLOAT, [2, 8]))
    onnx.checker.check_model(m)
    parts = split_stages(m, ["pow", "relu"])
    # relu reads only q: it runs after the second NPU part, in a CPU part of its own
    assert [(p.kind, p.nodes) for p in parts] == [("npu", (1,)), ("cpu", (2,)), ("npu", (3, 5, 6)), ("cpu", (4,))]
    assert parts[2].outputs == ("q", "z", "w")
    types = tensor_types(m)
    built = {p.stage: part_model(m, p, types) for p in parts if p.kind == "npu"}
    for sub in built.values():
        onnx.checker.check_model(sub)
    stitched = assemble(m, parts, built, types)
    onnx.checker.check_model(stitched)
    assert stitched.producer_name == "tests" and [o.name for o in stitched.graph.output] == ["y", "z", "w"]
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    for got, ref in zip(run(stitched, {"x": x}), run(m, {"x": x})):
        assert got.tobytes() == ref.tobytes()


def test_values_computed_from_constants_only_are_copied_into_the_parts_that_read_them():
    """A ``Transpose`` of a constant (not a shape op) is folded by onnxruntime when a part compiles:
    it is copied into the parts reading it, never a member (a folded part's output would reach the
    next QNN part as an initializer, which its ``EPContext`` node cannot take)."""
    from tests.recovery_models import padded_gelu_net

    m = onnx.load_from_string(padded_gelu_net())
    parts = split_stages(m, ["erf"])
    members = {m.graph.node[i].name for p in parts for i in p.nodes}
    assert not members & {"pads_by_axis", "pads_transpose", "pads_reshape", "pads_cast", "s", "one", "half"}
    assert [m.graph.node[i].name for i in parts[0].copies] == ["pads_by_axis", "flat", "pads_transpose",
                                                               "pads_reshape", "pads_cast", "s"]
    types = tensor_types(m)
    stitched = assemble(m, parts, {p.stage: part_model(m, p, types) for p in parts if p.kind == "npu"}, types)
    x = np.random.default_rng(2).standard_normal((1, 4, 64)).astype(np.float32)
    assert run(stitched, {"x": x})[0].tobytes() == run(m, {"x": x})[0].tobytes()


def test_boundary_types_are_made_static_by_a_cpu_probe():
    m = chain_model()
    for out in m.graph.output:  # declared symbolic, as exported models often are
        out.type.tensor_type.shape.dim[0].dim_param = "n"
    parts = split_stages(m, ["pow"])
    declared = tensor_types(m)
    types = boundary_types(m, parts, declared)
    for name in ("a", "p", "y", "z"):
        assert [d.dim_value for d in types[name].tensor_type.shape.dim] == [2, 8]
    assert types["y"].tensor_type.elem_type == T.FLOAT
    dynamic = chain_model()
    dynamic.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(ValueError, match="no static shape"):
        boundary_types(dynamic, split_stages(dynamic, ["pow"]))
