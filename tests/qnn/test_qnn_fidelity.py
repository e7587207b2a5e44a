"""qnn backend fidelity: the behaviours ONNX Runtime's own Python API tests exercise, asserted
identically against onnxruntime + the QNN plugin EP and onnxwrapper's qnn backend (fixture ``qrt``).

One test per fixed difference (``SessionOptions.optimized_model_filepath``, external initializers
supplied in memory, free-dimension overrides, overridable initializers and LoRA adapters,
``get_provider_graph_assignment_info``, an external-data file named ``<stem>.bin``) and per design
point (``get_providers``, ``set_providers``, models the QNN EP takes no node of). The complete
session-API table is tests/qnn/test_qnn_session_api.py.
"""

from __future__ import annotations

import contextlib
import os
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto
from onnxruntime.capi import onnxruntime_pybind11_state as C

from onnxwrapper.kernel import PartialOffloadWarning
from tests import models
from tests.qnn_flavours import set_providers_warning

pytestmark = pytest.mark.qnn

X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
#: ORT's exact text (onnxruntime 1.32.0) for a session with compiled nodes and optimized_model_filepath
SERIALIZE_FAIL = ("[ONNXRuntimeError] : 1 : FAIL : Unable to serialize model as it contains compiled nodes. "
                  "Please disable any execution providers which generate compiled nodes.")
FP16 = {"rtol": 1e-3, "atol": 1e-3}


def _write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@contextlib.contextmanager
def _offload_quiet():
    """Where a model runs partly or wholly on the CPU, onnxwrapper warns once per model (at the session,
    or at the first run of a dynamic one): expected, and not what these tests check."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialOffloadWarning)
        yield


def _quiet(qrt, *args, **kwargs):
    """A session of a model the QNN EP takes not all nodes of (see :func:`_offload_quiet`)."""
    with _offload_quiet():
        return qrt.InferenceSession(*args, **kwargs)


# -- bug 1: optimized_model_filepath -------------------------------------------------------------------
def test_optimized_model_filepath_raises_with_compiled_nodes_and_is_written_without(qrt, tmp_path):
    so = qrt.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "mul_opt.onnx")
    with pytest.raises(C.Fail) as info:
        qrt.InferenceSession(_write(tmp_path, "mul_1.onnx", models.mul_1()), so)
    assert str(info.value) == SERIALIZE_FAIL
    assert not os.path.exists(so.optimized_model_filepath)
    # QNN takes no node of a string Identity, nor of a model with symbolic dims: ORT writes the file
    for name, data in (("str.onnx", models.identity(TensorProto.STRING, (2,))), ("sym.onnx", models.matmul_symbolic())):
        so = qrt.SessionOptions()
        so.optimized_model_filepath = str(tmp_path / f"opt_{name}")
        _quiet(qrt, _write(tmp_path, name, data), so)
        assert onnx.load(so.optimized_model_filepath).graph.node, name


# -- bug 2: external initializers supplied in memory ------------------------------------------------
@pytest.mark.parametrize("relu_first", [False, True], ids=["pad-on-cpu", "relu-on-qnn"])
@pytest.mark.parametrize("supply", ["ortvalues", "files_in_memory"])
def test_external_initializers_supplied_in_memory(qrt, tmp_path, supply, relu_first):
    path = models.write_pad_with_user_initializer(tmp_path, relu_first=relu_first)
    pads = np.array([0, 0, 1, 1], np.int64)
    so = qrt.SessionOptions()
    value, buffer = onnxruntime.OrtValue.ortvalue_from_numpy(pads), pads.tobytes()  # alive, as ORT requires
    if supply == "ortvalues":
        so.add_external_initializers(["Pads_not_on_disk"], [value])
    else:
        so.add_external_initializers_from_files_in_memory(["Pads_not_on_disk.bin"], [buffer], [len(buffer)])
    session = _quiet(qrt, path, so)
    out = session.run(None, {"X": np.array([[-1.0, 2.0]], np.float32)})[0]
    np.testing.assert_allclose(out, [[0.0 if relu_first else -1.0, 2.0, 0.0], [0.0, 0.0, 0.0]], **FP16)
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]  # nothing written next to the model


# -- bug 3: free-dimension overrides -----------------------------------------------------------------
@pytest.mark.parametrize("how, overrides, shape", [
    ("name", {"Dim1": 4, "Dim2": 6}, [4, 6, 5]),
    ("denotation", {"DATA_BATCH": 3, "DATA_CHANNEL": 5}, [3, 5, 5]),
])
def test_free_dimension_overrides(qrt, tmp_path, how, overrides, shape):
    so = qrt.SessionOptions()
    for key, size in overrides.items():
        getattr(so, f"add_free_dimension_override_by_{how}")(key, size)
    session = qrt.InferenceSession(_write(tmp_path, "abs.onnx", models.abs_free_dimensions()), so)
    assert [(i.name, i.shape) for i in session.get_inputs()] == [("x", shape)]
    with pytest.raises(C.InvalidArgument, match="Got invalid dimensions for input: x"):
        session.run(None, {"x": np.ones((2, 2, 5), np.float32)})
    x = -np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7
    np.testing.assert_allclose(session.run(None, {"x": x})[0], -x, **FP16)
    backend_session = getattr(session, "backend_session", None)
    if backend_session is not None:  # onnxwrapper: the static model was compiled once, at open
        assert [a.origin for a in backend_session.artifacts] == ["compiled"]
        assert backend_session.partition().fully_offloaded


# -- bug 4: overridable initializers, LoRA adapters ---------------------------------------------------
def test_overridable_initializers_and_lora_adapter(qrt, tmp_path):
    session = _quiet(qrt, _write(tmp_path, "lora.onnx", models.lora_two_params()))  # MatMul, Gemm on the CPU
    assert [(o.name, o.type, o.shape) for o in session.get_overridable_initializers()] == [
        ("lora_param_a", "tensor(float)", [4, "dim"]), ("lora_param_b", "tensor(float)", ["dim", 4])]
    ones = {"input_x": np.ones((4, 4), np.float32)}
    np.testing.assert_allclose(session.run(None, ones)[0], [[28, 32, 36, 40]] * 4, **FP16)
    models.write_lora_adapter(tmp_path / "lora.onnx_adapter")
    adapter = onnxruntime.LoraAdapter()
    adapter.Load(str(tmp_path / "lora.onnx_adapter"))
    options = qrt.RunOptions()
    options.add_active_adapter(adapter)
    np.testing.assert_allclose(session.run(None, ones, options)[0], [[154, 176, 198, 220]] * 4, **FP16)
    fed = dict(ones, lora_param_a=np.ones((4, 1), np.float32), lora_param_b=np.ones((1, 4), np.float32))
    np.testing.assert_allclose(session.run(None, fed)[0], [[32, 36, 40, 44]] * 4, **FP16)


def test_an_overridable_initializer_compiled_into_the_npu_graph_can_still_be_fed(qrt, tmp_path):
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Mul", ["X", "W"], ["Y"])], "mul_w",
        [onnx.helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 2]),
         onnx.helper.make_tensor_value_info("W", TensorProto.FLOAT, [3, 2])],
        [onnx.helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 2])],
        [onnx.helper.make_tensor("W", TensorProto.FLOAT, [3, 2], [1, 2, 3, 4, 5, 6])])
    session = qrt.InferenceSession(_write(tmp_path, "mul_w.onnx", models.make_model(graph)))
    assert [o.name for o in session.get_overridable_initializers()] == ["W"]
    np.testing.assert_allclose(session.run(None, {"X": X})[0], X * X, **FP16)
    np.testing.assert_allclose(session.run(None, {"X": X, "W": np.full((3, 2), 10, np.float32)})[0], X * 10, **FP16)


# -- bug 5: get_provider_graph_assignment_info ------------------------------------------------------
def _assignment(session):
    return [(g.ep_name, [f"{n.domain}:{n.op_type}/{n.name}" for n in g.get_nodes()])
            for g in session.get_provider_graph_assignment_info()]


def test_graph_assignment_needs_the_config_entry_and_lists_the_users_nodes(qrt, tmp_path):
    path = _write(tmp_path, "add_mul_add.onnx", models.add_mul_add())
    with pytest.raises(C.Fail, match="Session configuration entry 'session.record_ep_graph_assignment_info' "
                                     "must be set to \"1\""):
        qrt.InferenceSession(path).get_provider_graph_assignment_info()
    so = qrt.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    assert _assignment(qrt.InferenceSession(path, so)) == [
        ("QNNExecutionProvider", [":Add/add_0", ":Mul/mul_0", ":Add/add_1"])]
    so = qrt.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    partial = _quiet(qrt, _write(tmp_path, "det.onnx", models.conv_det_relu()), so)
    got = _assignment(partial)  # ORT's order: both QNN subgraphs first, then the CPU one
    assert [ep for ep, _nodes in got] == ["QNNExecutionProvider", "QNNExecutionProvider", "CPUExecutionProvider"]
    assert got[1][1] == [":Relu/relu"] and got[2][1] == [":Det/det"]


# -- bug 6: an external-data file named <stem>.bin ----------------------------------------------------
def test_external_data_named_stem_bin_is_not_taken_for_a_context_binary(qrt, tmp_path):
    model = onnx.load_from_string(models.smallconv(batch=1))
    onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.bin", size_threshold=0)
    session = qrt.InferenceSession(str(tmp_path / "ext.onnx"))
    x = np.random.default_rng(0).random((1, 3, 8, 8), np.float32)
    reference = onnxruntime.InferenceSession(str(tmp_path / "ext.onnx")).run(None, {"X": x})[0]
    np.testing.assert_allclose(session.run(None, {"X": x})[0], reference, atol=1e-2)


# -- design points --------------------------------------------------------------------------------
def test_get_providers_is_ort_plus_qnn_list_on_every_kind_of_session(qrt, tmp_path):
    for name, data in (("mul_1.onnx", models.mul_1()), ("sym.onnx", models.matmul_symbolic()),
                       ("str.onnx", models.identity(TensorProto.STRING, (2,))),
                       ("det.onnx", models.conv_det_relu())):
        session = _quiet(qrt, _write(tmp_path, name, data))
        assert session.get_providers() == ["QNNExecutionProvider", "CPUExecutionProvider"], name
        assert list(session.get_provider_options()) == ["CPUExecutionProvider", "QNNExecutionProvider"], name


def test_set_providers_is_checked_like_ort_and_cpu_moves_the_session(qrt, tmp_path):
    path = _write(tmp_path, "mul_1.onnx", models.mul_1())
    session = qrt.InferenceSession(path)
    with set_providers_warning(qrt), pytest.warns(UserWarning, match="not in available provider names"):
        with pytest.raises(RuntimeError, match="Unknown Provider Type: InvalidProvider"):
            session.set_providers(["InvalidProvider"])
    session = qrt.InferenceSession(path)
    with pytest.raises(ValueError, match="'providers' and 'provider_options' should be the same length"):
        session.set_providers(["CPUExecutionProvider"], [{}, {}])
    with set_providers_warning(qrt):
        session.set_providers(["CPUExecutionProvider"])
    assert session.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_array_equal(session.run(None, {"X": X})[0], X * X)  # exact: CPU
    session = qrt.InferenceSession(path)
    session.set_providers(None)  # re-created as it was
    assert session.get_providers() == ["QNNExecutionProvider", "CPUExecutionProvider"]
    np.testing.assert_allclose(session.run(None, {"X": X})[0], X * X, **FP16)


@pytest.mark.parametrize("kind", ["string-identity", "sequence", "tree-ensemble-dynamic"])
def test_models_qnn_takes_no_node_of_run_on_cpu(qrt, tmp_path, kind):
    if kind == "string-identity":
        data, feed = models.identity(TensorProto.STRING, (2,)), {"X": np.array(["a", "b"], object)}
        expected = [np.array(["a", "b"], object)]
    elif kind == "sequence":
        graph = onnx.helper.make_graph(
            [onnx.helper.make_node("SequenceConstruct", ["A", "B"], ["S"]),
             onnx.helper.make_node("SequenceLength", ["S"], ["N"])], "seq",
            [onnx.helper.make_tensor_value_info("A", TensorProto.FLOAT, [2]),
             onnx.helper.make_tensor_value_info("B", TensorProto.FLOAT, [2])],
            [onnx.helper.make_tensor_value_info("N", TensorProto.INT64, [])])
        data, feed = models.make_model(graph), {"A": np.ones(2, np.float32), "B": np.ones(2, np.float32)}
        expected = [np.array(2, np.int64)]
    else:
        data = models.tree_ensemble_dynamic()
        feed = {"X": np.array([[0.2, 0, 0], [0.9, 0, 0]], np.float32)}
        expected = None
    with _offload_quiet():
        session = qrt.InferenceSession(data)
        got = session.run(None, feed)
    if expected is None:
        expected = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)  # ORT's CPU EP ran it: exact
    assert session.get_providers() == ["QNNExecutionProvider", "CPUExecutionProvider"]


# -- an unchanged onnxruntime script under aipc -----------------------------------------------------
_UNCHANGED = """
import numpy as np
import onnxruntime as ort

print("available", "QNNExecutionProvider" in ort.get_available_providers())
so = ort.SessionOptions()
so.add_free_dimension_override_by_name("Dim1", 4)
so.add_free_dimension_override_by_name("Dim2", 6)
s = ort.InferenceSession("abs.onnx", so)
print("abs", s.get_inputs()[0].shape, s.get_providers())
pads = ort.OrtValue.ortvalue_from_numpy(np.array([0, 0, 1, 1], np.int64))
so = ort.SessionOptions()
so.add_external_initializers(["Pads_not_on_disk"], [pads])
s = ort.InferenceSession("pad.onnx", so)
print("pad", s.run(None, {"X": np.array([[1.0, 2.0]], np.float32)})[0].tolist())
"""


def test_an_unchanged_onnxruntime_script_under_aipc(tmp_path):
    """aipc records ORT's own SessionOptions calls, registers the QNN EP at start and says in one
    line per session what runs where."""
    from tests.test_loader_support import aipc

    (tmp_path / "abs.onnx").write_bytes(models.abs_free_dimensions())
    models.write_pad_with_user_initializer(tmp_path)
    (tmp_path / "s.py").write_text(_UNCHANGED)
    result = aipc(["-v", "--backend", "qnn", "--cache-dir", str(tmp_path / "cache"), "s.py"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["available True",
                                          "abs [4, 6, 5] ['QNNExecutionProvider', 'CPUExecutionProvider']",
                                          "pad [[1.0, 2.0, 0.0], [0.0, 0.0, 0.0]]"]
    lines = [line for line in result.stderr.splitlines() if line.startswith("aipc: session ")]
    assert lines[0].startswith("aipc: session 1: abs.onnx on backend 'qnn' (") and lines[0].endswith(
        "QNNExecutionProvider 1/1 nodes, 1 partition ['abs.onnx']")
    assert lines[1].startswith("aipc: session 2: pad.onnx on backend 'qnn' (") and lines[1].endswith(
        "runs on CPU: QNNExecutionProvider took none of its 1 node(s) (Pad); --strict refuses such sessions")
    assert "File mapped weights" not in result.stderr  # the QNN EP's two W-lines per session are dropped
    refused = aipc(["--backend", "qnn", "--strict", "--cache-dir", str(tmp_path / "cache"), "s.py"], cwd=tmp_path)
    assert refused.returncode == 1 and "PartitionError: strict=True but the QNN execution provider took none" in (
        refused.stderr)


def test_only_the_two_qnn_warning_lines_are_dropped_from_stderr():
    from tests.conftest import run_python

    code = """
    import os, sys
    from onnxwrapper.backends.qnn.session._user_session import quiet_qnn_warnings
    print("a", file=sys.stderr, flush=True)
    with quiet_qnn_warnings():
        os.write(2, b"W: File mapped weights feature is only available on Windows arm64\\nkept 1\\n")
        print("kept 2", file=sys.stderr)
        os.write(2, b"W: EPContext encryption config unavailable (x)\\n")
    with quiet_qnn_warnings(False):
        os.write(2, b"W: File mapped weights feature is only available (shown)\\n")
    print("z", file=sys.stderr)
    """
    result = run_python(code)
    assert result.returncode == 0 and result.stderr == (
        "a\nkept 1\nkept 2\nW: File mapped weights feature is only available (shown)\nz\n")


def test_aipc_records_ort_session_options_while_active_and_uninstall_restores_the_methods():
    import aipc_loader
    import onnxwrapper
    from onnxwrapper.kernel import RECORDED_METHODS, recorded_calls

    before = {name: vars(onnxruntime.SessionOptions)[name] for name in RECORDED_METHODS}
    with aipc_loader.activated("cpu"):
        so = onnxruntime.SessionOptions()
        so.add_free_dimension_override_by_name("Dim1", 4)
        assert recorded_calls(so) == (("add_free_dimension_override_by_name", ("Dim1", 4)),)
        own = onnxwrapper.SessionOptions()  # records itself: once, not again through the wrapper
        own.add_free_dimension_override_by_denotation("DATA_BATCH", 3)
        assert recorded_calls(own) == (("add_free_dimension_override_by_denotation", ("DATA_BATCH", 3)),)
    assert all(vars(onnxruntime.SessionOptions)[name] is method for name, method in before.items())
    after = onnxruntime.SessionOptions()
    after.add_free_dimension_override_by_name("Dim1", 4)
    assert recorded_calls(after) == ()
