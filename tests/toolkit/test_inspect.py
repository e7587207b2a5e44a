"""Model inspection (onnxwrapper.toolkit._inspect): facts, static shapes, rules, and — on QNN — the
predicted partition equals what a QNN session reports."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

from onnxwrapper.kernel.model._shapes import dynamic_inputs
from onnxwrapper.toolkit._inspect import (CPU_EP, QNN_EP, inspect_model, make_static, parse_dim_arg, parse_shape_arg,
                                          predict_partition_rules)
from tests import models
from tests.conftest import qnn_available, run_python
from tests.models import IR_VERSION


def mixed_model(batch=1) -> onnx.ModelProto:
    """x[1,3,4,4] → Conv → Relu → Reshape[1,4,16] → Mod(fmod=1) → Einsum('bij,kj->bki') → y[1,5,4], and
    a branch Slice(axis 2, step 4) → Reshape[1,4,4] → Det → d[1]: ops the QNN EP takes and rejects,
    some patchable."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w"),
             onnx.numpy_helper.from_array(np.array([batch, 4, 16], np.int64), "shape"),
             onnx.numpy_helper.from_array(np.array(0.75, np.float32), "k"),
             onnx.numpy_helper.from_array(rng.standard_normal((5, 16)).astype(np.float32), "e"),
             onnx.numpy_helper.from_array(np.array([batch, 4, 4], np.int64), "sq")]
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             h.make_node("Relu", ["c"], ["r"], name="relu"),
             h.make_node("Reshape", ["r", "shape"], ["f"], name="flatten"),
             h.make_node("Mod", ["f", "k"], ["m"], fmod=1, name="mod"),
             h.make_node("Einsum", ["m", "e"], ["y"], equation="bij,kj->bki", name="einsum"),
             h.make_node("Slice", ["f", "zero", "sixteen", "axis2", "two"], ["s"], name="slice"),
             h.make_node("Reshape", ["s", "sq"], ["sr"], name="square"),
             h.make_node("Det", ["sr"], ["d"], name="det")]
    inits += [onnx.numpy_helper.from_array(np.array([0], np.int64), "zero"),
              onnx.numpy_helper.from_array(np.array([16], np.int64), "sixteen"),
              onnx.numpy_helper.from_array(np.array([4], np.int64), "two"),
              onnx.numpy_helper.from_array(np.array([2], np.int64), "axis2")]
    g = h.make_graph(nodes, "mixed", [h.make_tensor_value_info("x", T.FLOAT, [batch, 3, 4, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [batch, 5, 4]),
                      h.make_tensor_value_info("d", T.FLOAT, [batch])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=IR_VERSION)


def test_facts_of_a_dynamic_model():
    result = inspect_model(models.smallconv(batch="N", hw=("H", 8)))
    assert result.ir_version == IR_VERSION and result.opsets == {"ai.onnx": 17}
    assert result.producer == "onnxwrapper-tests"
    (x,) = result.inputs
    assert x.name == "X" and x.dtype == "float32" and x.shape == ["N", 3, "H", 8] and x.dynamic
    assert result.op_histogram == {"Conv": 2, "Relu": 1}
    assert result.num_nodes == 3 and result.initializer_bytes > 0 and result.partition is None
    json.dumps(result.to_dict())
    assert "dynamic" in result.format_text()


@pytest.mark.parametrize("text,expected", [("x=1,3,224,224", ("x", [1, 3, 224, 224])), ("in:0=2x8", ("in:0", [2, 8]))])
def test_parse_shape(text, expected):
    assert parse_shape_arg(text) == expected


@pytest.mark.parametrize("bad", ["x", "=1,2", "x=1,a", "x=0,3", "x="])
def test_parse_shape_errors(bad):
    with pytest.raises(ValueError, match="--shape"):
        parse_shape_arg(bad)


def test_parse_dim():
    assert parse_dim_arg("batch=4") == ("batch", 4)
    for bad in ("batch", "batch=0", "batch=x", "=3"):
        with pytest.raises(ValueError, match="--dim"):
            parse_dim_arg(bad)


def test_make_static_partially_fixed_dims():
    model = onnx.load_model_from_string(models.smallconv(batch="N", hw=("H", "W")))
    half = make_static(model, dims={"N": 1})
    assert dynamic_inputs(half) == {"X": [1, 3, "H", "W"]}
    full = make_static(half, shapes={"X": [1, 3, 16, 12]})
    assert dynamic_inputs(full) == {}
    assert [d.dim_value for d in full.graph.output[0].type.tensor_type.shape.dim] == [1, 2, 16, 12]
    both = make_static(model, shapes={"X": [2, 3, 8, 8]}, dims={"N": 2})
    assert dynamic_inputs(both) == {}
    assert dynamic_inputs(model) == {"X": ["N", 3, "H", "W"]}  # the input model is untouched
    with pytest.raises(ValueError, match="no dynamic dim named 'batch'.*H, N, W"):
        make_static(model, dims={"batch": 1})
    with pytest.raises(InvalidArgument):
        make_static(model, shapes={"X": [1, 4, 8, 8]})  # contradicts the fixed channel dim 3
    with pytest.raises(InvalidArgument):
        make_static(model, dims={"N": 1}, shapes={"X": [2, 3, 8, 8]})  # contradicts --dim N=1


def test_rules_prediction_with_reasons_and_patches():
    result = inspect_model(mixed_model(), backend="qnn", probe=False)
    p = result.partition
    assert p.source == "rules"
    by_name = {n.name: n for n in p.nodes}
    assert by_name["conv"].ep == QNN_EP and by_name["conv"].reason is None
    assert by_name["det"].ep == CPU_EP and "Det" in by_name["det"].reason and by_name["det"].patch is None
    assert by_name["mod"].ep == CPU_EP and "fmod" in by_name["mod"].reason and by_name["mod"].patch == "mod"
    assert by_name["einsum"].ep == CPU_EP and by_name["einsum"].patch == "einsum"
    assert {m.patch for m in result.patches if m.applicable} == {"mod", "einsum"}
    text = result.format_text()
    assert "patch 'mod'" in text and "from rules" in text


def test_rules_dynamic_model_puts_everything_on_cpu():
    pred = predict_partition_rules(onnx.load_model_from_string(models.smallconv(batch="N")))
    assert {n.ep for n in pred.nodes} == {CPU_EP}
    assert all("dynamic" in n.reason for n in pred.nodes)


def test_cpu_backend_and_bad_backend():
    assert {n.ep for n in inspect_model(mixed_model(), backend="cpu").partition.nodes} == {CPU_EP}
    with pytest.raises(ValueError, match="'qnn' or 'cpu'"):
        inspect_model(mixed_model(), backend="tpu")


def test_unnamed_nodes_get_names():
    result = inspect_model(models.conv_det_relu(), backend="qnn", probe=False)
    names = [n.name for n in result.partition.nodes]
    assert all(names) and len(set(names)) == len(names)


_SESSION_VS_INSPECT = r'''
import json, sys, tempfile
import onnxwrapper
from onnxwrapper.toolkit._inspect import inspect_model
path = sys.argv[1]
result = inspect_model(path, backend="qnn")
rules = inspect_model(path, backend="qnn", probe=False)
with tempfile.TemporaryDirectory() as cache:
    session = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"cache_dir": cache,
                                                                                "patches": False})
    patched = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"cache_dir": cache})
    print("RESULT" + json.dumps({"inspect": result.partition.to_dict(), "rules": rules.partition.to_dict(),
                                 "session": session.get_partition().to_dict(),
                                 "patched": patched.get_partition().to_dict()}))
'''


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_inspect_partition_equals_session_partition(tmp_path):
    import re

    path = tmp_path / "mixed.onnx"
    onnx.save(mixed_model(), path)
    proc = run_python(_SESSION_VS_INSPECT, str(path), timeout=600, cwd=str(tmp_path))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    data = json.loads(lines[-1][len("RESULT"):])
    inspect_eps = {n["name"]: n["ep"] for n in data["inspect"]["nodes"]}
    session_eps: dict[str, str] = {}
    for n in data["session"]["nodes"]:
        base = re.sub(r"(_token_\d+)+$", "", n["name"])
        if base in inspect_eps:
            session_eps[base] = QNN_EP if QNN_EP in (n["ep"], session_eps.get(base)) else n["ep"]
    assert data["inspect"]["source"] == "session"
    compared = {k: inspect_eps[k] for k in session_eps}
    assert compared == session_eps
    assert set(inspect_eps) - set(session_eps) <= {k for k, v in inspect_eps.items() if v == "optimized"}
    assert session_eps["det"] == CPU_EP and session_eps["conv"] == QNN_EP and session_eps["mod"] == CPU_EP
    assert data["inspect"]["num_partitions"] == data["session"]["num_partitions"]
    reasons = {n["name"]: n["reason"] for n in data["inspect"]["nodes"]}
    assert "fmod" in reasons["mod"] and "Det" in reasons["det"] and "equation" in reasons["einsum"]
    # "after patches" is what the backend's automatic patches give a session
    assert data["inspect"]["after_patches"] == data["patched"]["counts"]
    assert data["inspect"]["after_patches"]["CPUExecutionProvider"] == 1  # Det: no patch for it
    assert data["inspect"]["applied_patches"] == data["patched"]["patches"]
    assert sorted(p["patch"] for p in data["patched"]["patches"]) == ["einsum", "mod"]
    # the static rules agree with the session on this model
    assert {n["name"]: n["ep"] for n in data["rules"]["nodes"] if n["name"] in session_eps} == session_eps
