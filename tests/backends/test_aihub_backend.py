"""Backend ``aihub`` against the qai-hub TEST DOUBLE (tests/fakes/qai_hub): compile on creation and
the compile cache, dynamic shapes, batched runs, outputs in ONNX dtypes, profiles, options, and that
nothing is uploaded unless the backend was selected by name.

The double enforces qai-hub 0.56's API (signatures, job states, dataset format, errors) and runs the
compiled model with onnxruntime on the CPU, on a simulated clock: these tests check the backend's
use of the client, not AI Hub itself. Error paths are in tests/backends/test_aihub_errors.py.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import sys

import numpy as np
import onnx
import onnxruntime
import pytest
from onnxruntime.capi import onnxruntime_pybind11_state as C

import onnxwrapper as ow
from onnxwrapper.errors import BackendCapabilityError, BackendOptionError
from tests import models

FAKES = pathlib.Path(__file__).parents[1] / "fakes"
sys.path.insert(0, str(FAKES))
import aihub_cases as cases  # noqa: E402
from aihub_cases import S25, jobs  # noqa: E402

sys.path.remove(str(FAKES))


@pytest.fixture
def hub(tmp_path, monkeypatch):
    with cases.plugged_hub(tmp_path, monkeypatch) as double:
        yield double


def _write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _ort(path, feed, names=None):
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(names, feed)


X = np.arange(6, dtype=np.float32).reshape(3, 2) - 2


# -- compile on creation, cache ------------------------------------------------------------------------
def test_compiles_at_creation_runs_jobs_and_reports_onnx_metadata(hub, tmp_path, capsys):
    path = _write(tmp_path, "mul.onnx", models.mul_1())
    sess = ow.InferenceSession(path, backend="aihub", backend_options=S25)
    assert len(jobs(hub, "compile")) == 1 and not jobs(hub, "inference")  # compiled by the constructor
    (compile_job,) = jobs(hub, "compile")
    assert compile_job["options"] == "--target_runtime qnn_context_binary"
    assert compile_job["input_specs"] == {"X": ((3, 2), "float32")} and compile_job["device"] == "Samsung Galaxy S25"
    y = sess.run(None, {"X": X})
    np.testing.assert_array_equal(y[0], _ort(path, {"X": X})[0])
    assert len(jobs(hub, "inference")) == 1 and jobs(hub, "inference")[0]["samples"] == 1
    assert [(i.name, i.shape, i.type) for i in sess.get_inputs()] == [("X", [3, 2], "tensor(float)")]
    assert sess.get_providers() == ["QNNContextBinary(aihub:Samsung Galaxy S25,FAKE)"]
    options = sess.get_provider_options()[sess.get_providers()[0]]
    assert options["device"] == "Samsung Galaxy S25" and options["qai_hub"] == "0.56.0"
    assert capsys.readouterr().out == ""  # the client's prints ("Scheduled …", "Downloaded model to …") stay off stdout


def test_second_session_hits_the_compile_cache(hub, tmp_path):
    path = _write(tmp_path, "mul.onnx", models.mul_1())
    ow.InferenceSession(path, backend="aihub", backend_options=S25)
    uploads = len(hub.farm.uploads)
    again = ow.InferenceSession(path, backend="aihub", backend_options=S25)
    assert len(jobs(hub, "compile")) == 1 and len(hub.farm.uploads) == uploads  # no compile, no upload
    np.testing.assert_array_equal(again.run(None, {"X": X})[0], _ort(path, {"X": X})[0])
    entries = list((tmp_path / "cache" / "entries").iterdir())
    assert len(entries) == 1 and (entries[0] / "target.bin").is_file()
    ow.InferenceSession(path, backend="aihub", backend_options={**S25, "compile_options": "--compute_unit npu"})
    assert len(jobs(hub, "compile")) == 2  # other options: another key
    ow.InferenceSession(path, backend="aihub", backend_options={"device": "Samsung Galaxy S24"})
    assert len(jobs(hub, "compile")) == 3  # another device: another key


def test_cache_hit_on_a_service_that_lost_the_model_uploads_the_cached_target(hub, tmp_path):
    path = _write(tmp_path, "mul.onnx", models.mul_1())
    ow.InferenceSession(path, backend="aihub", backend_options=S25)
    hub.reset()  # another process or account: the service knows no model id of ours
    sess = ow.InferenceSession(path, backend="aihub", backend_options=S25)
    assert not jobs(hub, "compile")
    (upload,) = hub.farm.uploads
    (entry,) = (tmp_path / "cache" / "entries").iterdir()
    assert upload["sha256"] == hashlib.sha256((entry / "target.bin").read_bytes()).hexdigest()
    np.testing.assert_array_equal(sess.run(None, {"X": X})[0], _ort(path, {"X": X})[0])


# -- dynamic shapes ------------------------------------------------------------------------------------------
def test_dynamic_shapes_compile_once_per_shape_at_first_run(hub, tmp_path):
    path = _write(tmp_path, "dyn.onnx", cases.dynamic_model())
    sess = ow.InferenceSession(path, backend="aihub", backend_options=S25)
    assert not jobs(hub, "compile") and not hub.farm.uploads  # nothing is compiled before a shape is known
    assert sess.get_inputs()[0].shape == ["N", 3]
    for n in (2, 2, 5):
        feed = cases.relu_feed(n, seed=n)
        np.testing.assert_allclose(sess.run(None, feed)[0], _ort(path, feed)[0], rtol=0, atol=0)
    assert [j["input_specs"]["x"] for j in jobs(hub, "compile")] == [((2, 3), "float32"), ((5, 3), "float32")]
    assert len(jobs(hub, "inference")) == 3
    uploaded = [u for u in hub.farm.uploads if u["kind"] == "model"]
    assert len(uploaded) == 2  # a static copy per shape (kernel.specialize), never the symbolic model
    with pytest.raises(C.InvalidArgument):  # the façade validates against the symbolic dims, as ORT
        sess.run(None, {"x": np.zeros((2, 4), np.float32)})


def test_run_batch_submits_one_job_per_shape(hub, tmp_path):
    path = _write(tmp_path, "dyn.onnx", cases.dynamic_model())
    sess = ow.InferenceSession(path, backend="aihub", backend_options=S25)
    feeds = [cases.relu_feed(n, seed=i) for i, n in enumerate((2, 4, 2, 2, 4))]
    results = sess.backend_session.run_batch(None, feeds)
    for feed, got in zip(feeds, results):
        np.testing.assert_array_equal(got[0], _ort(path, feed)[0])
    infer = jobs(hub, "inference")
    assert [(j["samples"], j["shapes"]["x"]) for j in infer] == [(3, [2, 3]), (2, [4, 3])]
    assert all(j["profile"] for j in infer)  # batched runs are profiled by default ("auto")
    profiles = sess.backend_session.device_profiles()
    assert [p.shapes for p in profiles] == [{"x": (2, 3)}, {"x": (4, 3)}]


def test_run_batch_splits_datasets_above_max_batch_bytes(hub, tmp_path):
    path = _write(tmp_path, "dyn.onnx", cases.dynamic_model())
    sess = ow.InferenceSession(path, backend="aihub", backend_options={**S25, "max_batch_bytes": 2 * 24})
    feeds = [cases.relu_feed(2, seed=i) for i in range(5)]  # 24 bytes each: 2 per job
    results = sess.backend_session.run_batch(["y"], feeds)
    assert [j["samples"] for j in jobs(hub, "inference")] == [2, 2, 1]
    np.testing.assert_array_equal(results[4][0], _ort(path, feeds[4])[0])


def test_run_batch_checks_every_feed_like_run(hub, tmp_path):
    path = _write(tmp_path, "dyn.onnx", cases.dynamic_model())
    sess = ow.InferenceSession(path, backend="aihub", backend_options=S25)
    good, bad = cases.relu_feed(2), {"x": np.zeros((2, 3), np.float64)}
    with pytest.raises(C.InvalidArgument, match="Unexpected input data type"):
        sess.backend_session.run_batch(None, [good, bad])
    assert not hub.farm.uploads


# -- dtypes -----------------------------------------------------------------------------------------------------
def test_int64_io_is_truncated_on_the_device_and_widened_back(hub, tmp_path):
    path = _write(tmp_path, "ids.onnx", cases.int64_model())
    sess = ow.InferenceSession(path, backend="aihub", backend_options=S25)
    assert jobs(hub, "compile")[0]["options"] == "--target_runtime qnn_context_binary --truncate_64bit_io"
    ids = np.array([[1, 2, 3, -4]], np.int64)
    out = sess.run(None, {"ids": ids})[0]
    assert out.dtype == np.int64 and (out == ids + 1).all()
    with pytest.raises(C.InvalidArgument, match="outside the int32 range"):
        sess.run(None, {"ids": np.array([[2 ** 40, 0, 0, 0]], np.int64)})
    assert len(jobs(hub, "inference")) == 1


def test_bad_feeds_raise_what_onnxruntime_raises_and_submit_nothing(hub, tmp_path):
    path = _write(tmp_path, "mul.onnx", models.mul_1())
    sess, ref = ow.InferenceSession(path, backend="aihub", backend_options=S25), onnxruntime.InferenceSession(path)
    for feed, names in (({}, None), ({"X": X.astype(np.float64)}, None), ({"X": X[:2]}, None), ({"X": X}, ["nope"])):
        with pytest.raises(Exception) as theirs:
            ref.run(names, feed)
        with pytest.raises(type(theirs.value)) as ours:
            sess.run(names, feed)
        assert str(ours.value).splitlines()[0] == str(theirs.value).splitlines()[0]
    assert not jobs(hub, "inference")


def test_model_with_external_data_is_uploaded_with_it(hub, tmp_path):
    model = onnx.load_from_string(models.smallconv(batch=1))
    onnx.save_model(model, str(tmp_path / "conv.onnx"), save_as_external_data=True, location="conv.data",
                    size_threshold=0)
    path = str(tmp_path / "conv.onnx")
    sess = ow.InferenceSession(path, backend="aihub", backend_options=S25)
    (upload,) = [u for u in hub.farm.uploads if u["kind"] == "model"]
    assert upload["bytes"] > os.path.getsize(path) + 300  # the weights went too (one .onnx + one .data)
    x = np.random.default_rng(3).random((1, 3, 8, 8), dtype=np.float32)
    np.testing.assert_allclose(sess.run(None, {"X": x})[0], _ort(path, {"X": x})[0], rtol=1e-6, atol=1e-6)


# -- profiles -----------------------------------------------------------------------------------------------------
def test_device_profile_of_a_run_or_of_a_profiling_job(hub, tmp_path):
    hub.farm.cpu_op_types = {"Mul"}
    path = _write(tmp_path, "dyn.onnx", cases.dynamic_model())
    sess = ow.InferenceSession(path, backend="aihub", backend_options=S25)
    with pytest.raises(BackendCapabilityError, match="has not run yet"):
        sess.backend_session.device_profile()
    sess.run(None, cases.relu_feed(2))
    assert jobs(hub, "inference")[0]["profile"] is False  # single runs are not profiled by default
    profile = sess.backend_session.device_profile()  # one profiling job, random inputs made by the service
    (profiling,) = jobs(hub, "inference")[1:]
    assert profiling["profile"] is True and profiling["samples"] == 0
    assert profile.compute_units == {"NPU": 1, "CPU": 1} and profile.device == "Samsung Galaxy S25"
    assert profile.latency_ms == pytest.approx(0.02) and profile.job_url.endswith(f"/jobs/{profiling['job_id']}/")
    assert [layer["compute_unit"] for layer in profile.layers] == ["NPU", "CPU"]
    assert "ms per inference on Samsung Galaxy S25 [x=2x3]; layers NPU 1, CPU 1" in profile.summary()
    assert sess.backend_session.device_profile() is profile  # no second job
    profiled = ow.InferenceSession(path, backend="aihub", backend_options={**S25, "profile": True})
    profiled.run(None, cases.relu_feed(2))
    assert jobs(hub, "inference")[-1]["profile"] is True and profiled.backend_session.device_profiles()


# -- options and selection ----------------------------------------------------------------------------------------
def test_options_are_validated_with_hints(hub, tmp_path):
    path = _write(tmp_path, "mul.onnx", models.mul_1())
    for options, pattern in (({}, "needs the AI Hub device"), ({**S25, "devcie_os": "15"}, "Did you mean 'device_os'"),
                             ({**S25, "compile_options": "--compute_units npu"}, "Did you mean '--compute_unit'"),
                             ({**S25, "compile_options": "--target_runtime tflite"}, "options\\['target_runtime'\\]"),
                             ({**S25, "compile_options": "--quantize_io"}, "quantized IO"),
                             ({**S25, "target_runtime": "tflite"}, "Expected one of"),
                             ({**S25, "max_wait": -1}, "seconds >= 0"),
                             ({**S25, "target": "Samsung Galaxy S24"}, "name two devices")):
        with pytest.raises(BackendOptionError, match=pattern):
            ow.InferenceSession(path, backend="aihub", backend_options=options)
    with pytest.raises(BackendOptionError, match="no device named 'Galaxy S25'.*closest: 'Samsung Galaxy S2"):
        ow.InferenceSession(path, backend="aihub", backend_options={"device": "Galaxy S25"})
    assert not hub.farm.uploads and not hub.farm.jobs


def test_device_os_selects_a_device_version(hub, tmp_path):
    path = _write(tmp_path, "mul.onnx", models.mul_1())
    sess = ow.InferenceSession(path, backend="aihub", backend_options={"target": "Samsung Galaxy S24"})  # aipc --target
    assert sess.get_providers() == ["QNNContextBinary(aihub:Samsung Galaxy S24,FAKE)"]
    ow.InferenceSession(path, backend="aihub", backend_options={**S25, "device_os": "[15,16)"})
    with pytest.raises(BackendOptionError, match="with OS '13'"):
        ow.InferenceSession(path, backend="aihub", backend_options={**S25, "device_os": "13"})


def test_nothing_is_uploaded_unless_aihub_is_selected(hub, tmp_path, monkeypatch):
    path = _write(tmp_path, "mul.onnx", models.mul_1())
    monkeypatch.delenv("ONNXWRAPPER_BACKEND", raising=False)
    info = {b.name: b for b in ow.get_available_backends()}["aihub"]
    assert info.available and not info.auto_selectable and info.simulated  # configured, yet never automatic
    for sess in (ow.InferenceSession(path), ow.InferenceSession(path, providers=["QNNExecutionProvider",
                                                                                 "CPUExecutionProvider"]),
                 ow.InferenceSession(path, backend="cpu")):
        assert sess.backend_name != "aihub"
        sess.run(None, {"X": X})
    assert hub.farm.calls == [] and hub.farm.uploads == [] and hub.farm.jobs == {}
    monkeypatch.setenv("ONNXWRAPPER_BACKEND", "aihub")  # explicit selection by environment does upload
    with pytest.raises(BackendOptionError, match="needs the AI Hub device"):
        ow.InferenceSession(path)
    assert hub.farm.uploads == []


def test_real_client_missing_is_unavailable_with_the_install_hint(monkeypatch, tmp_path):
    from onnxwrapper._registry import default_registry

    monkeypatch.setitem(sys.modules, "qai_hub", None)  # as if not installed (the `test` extra installs the real one)
    default_registry().reload()
    try:
        path = _write(tmp_path, "mul.onnx", models.mul_1())
        with pytest.raises(ow.BackendUnavailableError, match=r"pip install 'onnxwrapper\[aihub\]'"):
            ow.InferenceSession(path, backend="aihub", backend_options=S25)
        assert not {b.name: b for b in ow.get_available_backends()}["aihub"].available
    finally:
        default_registry().reload()
