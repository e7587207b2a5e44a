"""QNN backend sessions in this process (default target: Snapdragon X Elite, FP16 emulation).

The QNN configuration is process-global, so every test here uses the default configuration;
tests that need another one are in tests/qnn/test_qnn_process.py (fresh interpreters).
"""

from __future__ import annotations

import os
import uuid
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest

import onnxwrapper
from onnxwrapper.errors import BackendCapabilityError, PartitionError
from onnxwrapper.kernel.session._partition import PartialOffloadWarning, PartitionReport
from tests import models
from tests.conftest import qnn_available

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]

#: FP16 emulation tolerance for these tiny convs (measured max |Δ| ≈ 5e-4 at outputs of magnitude ~1)
FP16_ATOL = 1e-2


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNXWRAPPER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _unique(data: bytes) -> bytes:
    """The same model with a unique doc string: another content hash (fresh cache key, fresh warn-once)."""
    m = onnx.load_from_string(data)
    m.doc_string = f"{m.doc_string} {uuid.uuid4().hex}"
    return m.SerializeToString()


def _write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _origins(session) -> list:
    return [(a.origin, dict(a.shapes) if a.shapes else None) for a in session._ow_backend_session.artifacts]


def test_static_model_fp16_close_to_cpu_and_faithful_metadata(tmp_path):
    path = _write(tmp_path, "conv.onnx", _unique(models.smallconv(batch=1)))
    qnn = onnxwrapper.InferenceSession(path, backend="qnn")
    cpu = onnxruntime.InferenceSession(path)
    assert qnn.get_providers() == ["QNNExecutionProvider", "CPUExecutionProvider"]  # ORT + QNN EP's list
    assert qnn.get_partition().providers == ["QNNExecutionProvider"]  # the truth: every node on QNN
    assert isinstance(qnn, onnxruntime.InferenceSession) and qnn.backend_name == "qnn"
    assert [str(a) for a in qnn.get_inputs()] == [str(a) for a in cpu.get_inputs()]
    assert [str(a) for a in qnn.get_outputs()] == [str(a) for a in cpu.get_outputs()]
    meta_q, meta_c = qnn.get_modelmeta(), cpu.get_modelmeta()
    for attr in ("producer_name", "graph_name", "domain", "description", "graph_description", "version",
                 "custom_metadata_map"):
        assert getattr(meta_q, attr) == getattr(meta_c, attr), attr
    x = np.random.default_rng(1).random((1, 3, 8, 8), np.float32)
    got, ref = qnn.run(None, {"X": x})[0], cpu.run(None, {"X": x})[0]
    assert got.shape == ref.shape and got.dtype == np.float32
    diff = np.abs(got - ref).max()
    assert 0 < diff < FP16_ATOL  # FP16 emulation: close, but not bit-identical
    report = qnn._ow_backend_session.partition()
    assert isinstance(report, PartitionReport) and report.fully_offloaded
    assert report.counts == {"QNNExecutionProvider": len(report.nodes)}
    # ORT methods work natively on a static session
    ov = qnn.run_with_ort_values(None, {"X": onnxruntime.OrtValue.ortvalue_from_numpy(x)})[0]
    np.testing.assert_array_equal(ov.numpy(), got)
    binding = qnn.io_binding()
    binding.bind_cpu_input("X", x)
    binding.bind_output("Y")
    qnn.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], got)
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument, match="Got invalid dimensions"):
        qnn.run(None, {"X": np.zeros((1, 3, 4, 4), np.float32)})


def test_second_session_hits_the_cache(tmp_path, _cache):
    path = _write(tmp_path, "conv.onnx", _unique(models.smallconv(batch=1)))
    first = onnxwrapper.InferenceSession(path, backend="qnn")
    second = onnxwrapper.InferenceSession(path, backend="qnn")
    assert _origins(first) == [("compiled", None)] and _origins(second) == [("cache", None)]
    assert second._ow_backend_session.partition().source == "cache"
    x = np.ones((1, 3, 8, 8), np.float32)
    np.testing.assert_array_equal(first.run(None, {"X": x})[0], second.run(None, {"X": x})[0])
    # model given as bytes: same content, same cache entry
    third = onnxwrapper.InferenceSession(open(path, "rb").read(), backend="qnn")
    assert _origins(third) == [("cache", None)]


def test_corrupted_cache_entry_recovers(tmp_path, _cache, caplog):
    path = _write(tmp_path, "conv.onnx", _unique(models.smallconv(batch=1)))
    first = onnxwrapper.InferenceSession(path, backend="qnn")
    ctx = first._ow_backend_session.artifacts[0].ctx_path
    binary = ctx.replace("model_ctx.onnx", "model_ctx_qnn.bin")
    del first
    with open(binary, "r+b") as f:  # truncate the QNN context binary
        f.truncate(100)
    with caplog.at_level("WARNING", logger="onnxwrapper.cache"):
        again = onnxwrapper.InferenceSession(path, backend="qnn")
    assert "corrupt" in caplog.text
    assert _origins(again) == [("compiled", None)]
    assert again.run(None, {"X": np.ones((1, 3, 8, 8), np.float32)})[0].shape == (1, 2, 8, 8)


@pytest.mark.parametrize("batch, hw, shapes", [
    ("N", (8, 8), [(1, 3, 8, 8), (2, 3, 8, 8)]),                       # dynamic batch
    (1, ("H", "W"), [(1, 3, 8, 8), (1, 3, 6, 10)]),                     # dynamic H×W (named)
    (1, (None, None), [(1, 3, 4, 4), (1, 3, 5, 7)]),                    # dynamic H×W (unnamed dims)
])
def test_dynamic_shapes_one_compile_per_shape(tmp_path, batch, hw, shapes):
    path = _write(tmp_path, "dyn.onnx", _unique(models.smallconv(batch=batch, hw=hw)))
    qnn = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"shape_buckets": False})
    cpu = onnxruntime.InferenceSession(path)
    assert [str(a) for a in qnn.get_inputs()] == [str(a) for a in cpu.get_inputs()]  # symbolic dims kept
    pending = qnn.get_partition()  # before the first run: a pending report, not None (the README tour prints it)
    assert pending.source == "pending" and not pending.nodes and "first run" in pending.summary()
    for shape in shapes + shapes:  # each shape twice: the second time is an in-memory hit
        x = np.random.default_rng(sum(shape)).random(shape, np.float32)
        got, ref = qnn.run(None, {"X": x})[0], cpu.run(None, {"X": x})[0]
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, atol=FP16_ATOL)
    assert _origins(qnn) == [("compiled", {"X": s}) for s in shapes]
    assert qnn.get_providers() == ["QNNExecutionProvider", "CPUExecutionProvider"]
    assert qnn.get_partition().providers == ["QNNExecutionProvider"]
    assert qnn._ow_backend_session.partition().fully_offloaded
    # a new session of the same model finds both specializations in the disk cache
    again = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"shape_buckets": False})
    for shape in shapes:
        again.run(None, {"X": np.zeros(shape, np.float32)})
    assert _origins(again) == [("cache", {"X": s}) for s in shapes]


def test_external_data_models_static_and_dynamic(tmp_path):
    for name, batch, shape in [("ext_static", 1, (1, 3, 8, 8)), ("ext_dyn", "N", (2, 3, 8, 8))]:
        model = onnx.load_from_string(_unique(models.smallconv(batch=batch)))
        path = str(tmp_path / f"{name}.onnx")
        onnx.save(model, path, save_as_external_data=True, location=f"{name}.data", size_threshold=0)
        qnn = onnxwrapper.InferenceSession(path, backend="qnn")
        x = np.ones(shape, np.float32)
        ref = onnxruntime.InferenceSession(path).run(None, {"X": x})[0]
        np.testing.assert_allclose(qnn.run(None, {"X": x})[0], ref, atol=FP16_ATOL)
    # nothing is written next to the user's model (the specialization is compiled from memory)
    assert sorted(os.listdir(tmp_path)) == ["cache", "ext_dyn.data", "ext_dyn.onnx", "ext_static.data",
                                            "ext_static.onnx"]
    qnn.close()
    assert qnn._ow_backend_session._live == {}


def test_dynamic_session_validates_like_ort_and_bounds_specializations(tmp_path):
    path = _write(tmp_path, "dyn.onnx", _unique(models.smallconv(batch="N")))
    qnn = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"max_specializations": 1})
    errors = onnxruntime.capi.onnxruntime_pybind11_state
    with pytest.raises(ValueError, match=r"Required inputs \(\['X'\]\) are missing"):
        qnn.run(None, {"Z": np.zeros((1, 3, 8, 8), np.float32)})
    with pytest.raises(errors.InvalidArgument, match="Unexpected input data type"):
        qnn.run(None, {"X": np.zeros((1, 3, 8, 8), np.float64)})
    with pytest.raises(errors.InvalidArgument, match=r"index: 1 Got: 4 Expected: 3"):
        qnn.run(None, {"X": np.zeros((1, 4, 8, 8), np.float32)})
    with pytest.raises(errors.InvalidArgument, match="Invalid output name:nope"):
        qnn.run(["nope"], {"X": np.zeros((1, 3, 8, 8), np.float32)})
    assert _origins(qnn) == []  # nothing compiled for invalid feeds
    x = np.ones((2, 3, 8, 8), np.float32)
    out = qnn.run_with_ort_values(["Y"], {"X": onnxruntime.OrtValue.ortvalue_from_numpy(x)})
    assert out[0].shape() == [2, 2, 8, 8]
    qnn.run(None, {"X": np.ones((1, 3, 8, 8), np.float32)})
    assert len(qnn._ow_backend_session._live) == 1  # max_specializations=1: the LRU keeps one session
    with pytest.raises(BackendCapabilityError, match="dynamic input"):
        qnn.run_with_iobinding(qnn.io_binding())


def test_partial_offload_is_reported_and_strict_fails(tmp_path):
    path = _write(tmp_path, "det.onnx", _unique(models.conv_det_relu()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        qnn = onnxwrapper.InferenceSession(path, backend="qnn")
        onnxwrapper.InferenceSession(path, backend="qnn")  # same model: no second warning
    partial = [w for w in caught if issubclass(w.category, PartialOffloadWarning)]
    assert len(partial) == 1 and "Det" in str(partial[0].message)
    assert partial[0].filename == __file__  # attributed to the caller
    report = qnn.get_partition()
    assert report is qnn._ow_backend_session.partition()
    assert report.counts["CPUExecutionProvider"] == 1 and report.cpu_nodes == [("det", "Det")]
    assert report.target_nodes >= 2 and report.num_partitions == 3
    assert "CPUExecutionProvider 1 (Det)" in report.summary()
    assert report.to_dict()["counts"] == report.counts
    assert qnn.get_providers() == ["QNNExecutionProvider", "CPUExecutionProvider"]
    x = np.array([[[[1.0, 2.0], [3.0, 5.0]]]], np.float32)
    np.testing.assert_allclose(qnn.run(None, {"X": x})[0], onnxruntime.InferenceSession(path).run(None, {"X": x})[0],
                               atol=FP16_ATOL)
    with pytest.raises(PartitionError, match=r"det \(Det\)") as info:
        onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"strict": True})
    assert info.value.cpu_nodes == [("det", "Det")] and info.value.backend == "qnn"


def test_user_session_options_are_copied_not_mutated(tmp_path):
    path = _write(tmp_path, "conv.onnx", _unique(models.smallconv(batch=1)))
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.set_denormal_as_zero", "1")
    qnn = onnxwrapper.InferenceSession(path, so, providers=["QNNExecutionProvider"])
    assert qnn.backend_name == "qnn" and qnn.get_providers()[0] == "QNNExecutionProvider"
    assert not so.has_providers() and so.log_severity_level == -1
    used = qnn.get_session_options()
    assert used.intra_op_num_threads == 1 and used.get_session_config_entry("session.set_denormal_as_zero") == "1"


def test_light_squeezenet_as_a_new_user(tmp_path):
    """The issue's acceptance check on the onnx wheel's light squeezenet (compile path)."""
    import os

    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")
    s = onnxwrapper.InferenceSession(light, backend="qnn")
    assert s.get_providers()[0] == "QNNExecutionProvider"
    assert s._ow_backend_session.partition().fully_offloaded
    name = s.get_inputs()[0].name
    x = np.random.default_rng(0).random((1, 3, 224, 224), np.float32)
    ref = onnxruntime.InferenceSession(light).run(None, {name: x})[0]
    np.testing.assert_allclose(s.run(None, {name: x})[0], ref, atol=1e-3)


def test_expected_qdq_io_offload_is_reported_but_not_warned():
    """QDQ models keep graph-IO Quantize/Dequantize on CPU by the QNN EP's default
    (offload_graph_io_quantization=1): reported, not warned; strict still refuses it."""
    import warnings

    from onnxwrapper.kernel.session._partition import NodeAssignment, known_reason
    from onnxwrapper.backends.qnn.session._partition_check import check_partition
    from onnxwrapper.errors import PartitionError

    q = NodeAssignment("x_QuantizeLinear", "QuantizeLinear", "", "CPUExecutionProvider", 0,
                       known_reason("QuantizeLinear", "", "QNNExecutionProvider"))
    body = NodeAssignment("ctx", "EPContext", "com.microsoft", "QNNExecutionProvider", 1)
    report = PartitionReport("QNNExecutionProvider", (q, body), ("CPUExecutionProvider", "QNNExecutionProvider"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PartialOffloadWarning)
        check_partition(report, strict=False, label="'qdq.onnx'", warn_key="qdq-test")
    with pytest.raises(PartitionError, match="x_QuantizeLinear"):
        check_partition(report, strict=True, label="'qdq.onnx'", warn_key="qdq-test")
    det = NodeAssignment("det", "Det", "", "CPUExecutionProvider", 2, "not claimed")
    mixed = PartitionReport("QNNExecutionProvider", (q, body, det), ("CPUExecutionProvider", "QNNExecutionProvider",
                                                                      "CPUExecutionProvider"))
    with pytest.warns(PartialOffloadWarning, match="Det"):
        check_partition(mixed, strict=False, label="'mixed.onnx'", warn_key="mixed-test")
