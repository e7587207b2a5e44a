"""The qai-hub 0.56 test double (tests/fakes/qai_hub): the contract of the real client it enforces.

The double stands in for ``qai_hub`` in the ``aihub`` backend's tests (through the
``FakeAihubBackend`` plugin); these tests pin what it does, each against the real client's source
(``qai_hub/client.py``, ``api_utils.py``, ``util/session.py`` of the 0.56.0 wheel). The last tests
compare it with the real client when one is available (``QAI_HUB_REAL_PYTHON`` = an interpreter
with qai-hub 0.56 installed, else this one); they need no network.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

FAKES = pathlib.Path(__file__).parent / "fakes"


def _import_double():
    """This module's own instance of the double; ``sys.modules`` is left as it was, so nothing else in
    the test session imports it as ``qai_hub`` by accident."""
    saved = {m: sys.modules.pop(m) for m in [m for m in sys.modules if m == "qai_hub" or m.startswith("qai_hub.")]}
    sys.path.insert(0, str(FAKES))
    try:
        import qai_hub
    finally:
        sys.path.remove(str(FAKES))
        for name in [m for m in sys.modules if m == "qai_hub" or m.startswith("qai_hub.")]:
            del sys.modules[name]
        sys.modules.update(saved)
    return qai_hub


hub = _import_double()
S25 = hub.Device("Samsung Galaxy S25")
QNN = "--target_runtime qnn_context_binary"


def _model(dynamic=True, op="Relu", dtype=TensorProto.FLOAT, name="x.in"):
    dims = ["N", 3] if dynamic else [2, 3]
    x = helper.make_tensor_value_info(name, dtype, dims)
    y = helper.make_tensor_value_info("y", dtype, None)
    node = helper.make_node(op, [name] * (2 if op == "Add" else 1), ["y"], name=f"{op.lower()}0")
    return helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])


def _two_inputs():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Sub", ["a", "b"], ["d"], name="sub"), helper.make_node("Abs", ["d"], ["y"], name="abs")]
    return helper.make_model(helper.make_graph(nodes, "g", [a, b], [y]), opset_imports=[helper.make_opsetid("", 17)])


def _ini(path, token="test-double-token", verbose=False, drop=None):
    keys = {"api_token": token, "api_url": "https://workbench.aihub.qualcomm.com",
            "web_url": "https://workbench.aihub.qualcomm.com", "verbose": str(verbose)}
    keys.pop(drop, None)
    path.write_text("[api]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()))
    return str(path)


@pytest.fixture(autouse=True)
def configured(tmp_path, monkeypatch):
    hub.reset()
    monkeypatch.setenv("QAIHUB_CLIENT_INI", _ini(tmp_path / "client.ini"))
    yield
    hub.reset()


def _compiled(model=None, specs=None, options=QNN):
    job = hub.submit_compile_job(model or _model(), S25, input_specs=specs if specs is not None else
                                 {"x.in": ((2, 3), "float32")}, options=options)
    assert job.wait().success, job.get_status().message
    return job


# -- configuration and token --------------------------------------------------------------------
def test_no_config_file_fails_at_first_api_call_not_at_construction(tmp_path, monkeypatch):
    monkeypatch.setenv("QAIHUB_CLIENT_INI", str(tmp_path / "missing.ini"))
    client = hub.Client()  # reads nothing
    with pytest.raises(hub.UserError, match=r"^Failed to load client configuration file\.") as info:
        client.get_devices()
    words = " ".join(str(info.value).replace("|", " ").split())  # the text is wrapped in the real text box
    assert "not found. Please request access" in words
    assert hub.farm.calls == []


def test_config_without_token_and_bad_token(tmp_path, monkeypatch):
    monkeypatch.setenv("QAIHUB_CLIENT_INI", _ini(tmp_path / "a.ini", drop="api_token"))
    with pytest.raises(hub.UserError, match=r"(?s)^Failed to load configuration file\..*API token is missing"):
        hub.Client().get_devices()
    monkeypatch.setenv("QAIHUB_CLIENT_INI", _ini(tmp_path / "b.ini", token="wrong"))
    with pytest.raises(hub.UserError, match=r"^Failed to authenticate\."):
        hub.Client().upload_model(_model())
    assert hub.farm.uploads == []


def test_explicit_client_config_and_profile_exclusive():
    client = hub.Client(config=hub.ClientConfig(api_token="test-double-token"))
    assert [d.name for d in client.get_devices(name="Samsung Galaxy S25")] == ["Samsung Galaxy S25"]
    with pytest.raises(ValueError, match="either config or profile"):
        hub.Client(config=hub.ClientConfig(api_token="x"), profile="p")


# -- devices ------------------------------------------------------------------------------------------
def test_device_names_match_exactly_and_os_filters():
    assert hub.get_devices(name="Samsung Galaxy") == []
    assert len(hub.get_devices(attributes="framework:qnn")) == len(hub.farm.devices)
    assert [d.name for d in hub.get_devices(os="[15,)", attributes=["os:android"])] == [
        "Samsung Galaxy S25", "Snapdragon 8 Elite QRD"]
    with pytest.raises(ValueError, match="only an OS version"):
        hub.Device(os="14")
    with pytest.raises(hub.UserError, match="is not available"):
        hub.submit_compile_job(_model(), hub.Device("Galaxy S25"), input_specs={"x.in": ((2, 3), "float32")},
                               options=QNN)
    assert hub.farm.uploads == []  # device checked before anything is uploaded


# -- compile -> inference ----------------------------------------------------------------------------------
def test_compile_states_url_and_target_model(tmp_path):
    job = hub.submit_compile_job(_model(), S25, input_specs={"x.in": ((2, 3), "float32")}, options=QNN)
    assert job.get_status().pending and job.url == f"https://workbench.aihub.qualcomm.com/jobs/{job.job_id}/"
    hub.farm.clock.advance(10)
    assert job.get_status() == hub.JobStatus.State.OPTIMIZING_MODEL and job.get_status().running
    assert job.wait().success and hub.farm.clock.now == 70.0  # polled every 10 simulated seconds
    target = job.get_target_model()
    assert target.input_spec == {None: [hub.TensorSpec("x_in", "float32", (2, 3))]}
    assert target.output_spec == {None: [hub.TensorSpec("y", "float32", (2, 3))]}
    assert job.get_target_shapes() == {"x_in": ((2, 3), "float32")}
    path = job.download_target_model(str(tmp_path / "model"))
    assert path == str(tmp_path / "model.bin") and open(path, "rb").read(6) == b"QAIHUB"


def test_batched_inference_returns_name_to_list_of_arrays():
    target = _compiled().get_target_model()
    xs = [np.arange(6, dtype=np.float32).reshape(2, 3) - k for k in range(5)]
    job = hub.submit_inference_job(target, S25, inputs={"x_in": xs})
    assert isinstance(job, hub.InferenceJob) and job.profiling  # profile defaults to True in 0.56
    out = job.download_output_data()
    assert list(out) == ["y"] and len(out["y"]) == 5
    for x, y in zip(xs, out["y"]):
        assert y.dtype == np.float32 and y.shape == (2, 3)
        np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert sum(1 for r in hub.farm.jobs.values() if r.kind == "inference") == 1  # one job for N samples
    states = [s for s, _ in hub.farm.jobs[job.job_id].schedule]
    assert states == ["CREATED", "PROVISIONING_DEVICE", "MEASURING_PERFORMANCE"]
    prof = job.download_profile()
    assert set(prof) == {"execution_summary", "execution_detail"}
    assert prof["execution_detail"][0]["compute_unit"] == "NPU" and "estimated_inference_time" in prof["execution_summary"]


def test_the_device_is_onnxruntime_cpu_even_when_other_providers_are_registered():
    pytest.importorskip("onnxruntime_qnn")
    from tests.conftest import run_python

    proc = run_python(f"""
        import sys, onnxruntime, onnxruntime_qnn
        onnxruntime.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
        assert "QNNExecutionProvider" in onnxruntime.get_available_providers()
        sys.path.insert(0, {str(FAKES)!r})
        from qai_hub._runtime import session_for
        from tests import models
        print(session_for(models.mul_1()).providers)
        """, cwd=str(FAKES.parents[1]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['CPUExecutionProvider']"


def test_outputs_match_onnxruntime_for_two_inputs():
    model = _two_inputs()
    target = _compiled(model, specs={"a": (1, 4), "b": (1, 4)}).get_target_model()
    a, b = np.random.default_rng(0).standard_normal((2, 1, 4)).astype(np.float32)
    out = hub.submit_inference_job(target, S25, inputs={"a": [a], "b": [b]}, profile=False).download_output_data()
    ref = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(out["y"][0], ref)


def test_dataset_schema_order_and_shape_fail_the_job():
    target = _compiled(_two_inputs(), specs={"a": (1, 4), "b": (1, 4)}).get_target_model()
    x = np.zeros((1, 4), np.float32)
    swapped = hub.submit_inference_job(target, S25, inputs={"b": [x], "a": [x]}, profile=False)
    assert swapped.wait().failure and "names and order" in swapped.get_status().message
    assert swapped.download_output_data() is None
    bad = hub.submit_inference_job(target, S25, inputs={"a": [x[:, :2]], "b": [x]}, profile=False)
    assert bad.wait().failure and "takes float32[1, 4]" in bad.get_status().message


def test_reuploaded_target_file_runs_and_is_bound_to_its_chipset(tmp_path):
    path = _compiled().download_target_model(str(tmp_path / "m"))
    x = np.ones((2, 3), np.float32)
    job = hub.submit_inference_job(path, S25, inputs={"x_in": [x]}, profile=False)
    np.testing.assert_array_equal(job.download_output_data()["y"][0], x)
    other = hub.submit_inference_job(path, hub.Device("Samsung Galaxy S24"), inputs={"x_in": [x]}, profile=False)
    assert other.wait().failure and "another chipset" in other.get_status().message


# -- client-side argument checks ---------------------------------------------------------------------
def test_input_specs_checks_are_client_side():
    m = _model()
    with pytest.raises(hub.UserError, match="input_specs must be dict"):
        hub.submit_compile_job(m, S25, input_specs=[("x.in", (2, 3))], options=QNN)
    with pytest.raises(AssertionError):
        hub.submit_compile_job(m, S25, input_specs={"x.in": ((np.int64(2), 3), "float32")}, options=QNN)
    with pytest.raises(AssertionError):
        hub.submit_compile_job(m, S25, input_specs={"x.in": [2, 3]}, options=QNN)
    with pytest.raises(hub.UserError, match="defines an empty tensor"):
        hub.submit_compile_job(m, S25, input_specs={"x.in": ((0, 3), "float32")}, options=QNN)
    with pytest.raises(ValueError, match="Unsupported tensor dtype=float64"):
        hub.submit_compile_job(m, S25, input_specs={"x.in": ((2, 3), "float64")}, options=QNN)


def test_dataset_checks_are_client_side():
    target = _compiled().get_target_model()
    x = np.zeros((2, 3), np.float32)
    for bad, pattern in (({"x_in": x}, "list of numpy arrays"), ({"x_in": [x.astype(np.float64)]}, "list of numpy"),
                         ([x], "Dataset must be dict"), ({"x_in": [x], "z": [x, x]}, "Batchsize of all inputs")):
        with pytest.raises(hub.UserError, match=pattern):
            hub.submit_inference_job(target, S25, inputs=bad)
    with pytest.raises(hub.UserError, match="Inference requires inputs"):
        hub.submit_inference_job(target, S25, inputs=None, profile=False)


def test_compile_failures_carry_a_message():
    dynamic = hub.submit_compile_job(_model(), S25, options=QNN)
    assert dynamic.wait().failure and "dynamic shape" in dynamic.get_status().message
    with pytest.raises(hub.UserError, match="could not be found"):
        dynamic.download_target_model("unused")
    unknown = hub.submit_compile_job(_model(dynamic=False), S25, options=QNN + " --frobnicate")
    assert unknown.wait().failure and "Unrecognized option '--frobnicate'" in unknown.get_status().message
    default_runtime = hub.submit_compile_job(_model(dynamic=False), S25)
    assert default_runtime.wait().failure and "tflite" in default_runtime.get_status().message


def test_int64_io_needs_truncation_and_becomes_int32():
    m = _model(op="Add", dtype=TensorProto.INT64, name="ids")
    plain = hub.submit_compile_job(m, S25, input_specs={"ids": ((2, 3), "int64")}, options=QNN)
    assert plain.wait().failure and "--truncate_64bit_io" in plain.get_status().message
    job = _compiled(m, specs={"ids": ((2, 3), "int64")}, options=QNN + " --truncate_64bit_io")
    assert job.get_target_model().input_spec[None][0].dtype == "int32"
    ids = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = hub.submit_inference_job(job.get_target_model(), S25, inputs={"ids": [ids]}).download_output_data()
    assert out["y"][0].dtype == np.int32 and (out["y"][0] == 2 * ids).all()


# -- injected failures, timeouts, rate limits ---------------------------------------------------------------
def test_failed_job_has_status_message_and_no_outputs():
    target = _compiled().get_target_model()
    hub.farm.fail_next_job("Device crashed", kind="inference")
    job = hub.submit_inference_job(target, S25, inputs={"x_in": [np.zeros((2, 3), np.float32)]})
    status = job.wait()
    assert status.failure and status.message == "Device crashed" and status.code == "FAILED"
    assert job.download_output_data() is None and job.download_profile() == {}


def test_wait_timeout_is_client_side_and_server_limit_fails_hung_jobs():
    hub.farm.hang_next_job()
    job = hub.submit_compile_job(_model(dynamic=False), S25, options=QNN)
    with pytest.raises(TimeoutError, match=r"compile job \(j\d+\) completion timed out after 10 seconds"):
        job.wait(timeout=5)
    with pytest.raises(TimeoutError):
        job.wait(timeout=600)
    assert job.get_status().running
    status = job.wait()  # no client timeout: the server's limit ends it
    assert status.failure and "timed out" in status.message and hub.farm.clock.now >= hub.farm.server_job_limit


def test_rate_limit_without_and_with_client_retry(capsys):
    hub.farm.reject_next_submits(1, status=429)
    with pytest.raises(hub.client.RateLimitedError, match="Too Many Requests"):
        hub.submit_compile_job(_model(dynamic=False), S25, options=QNN, retry=False)
    hub.farm.clock.slept.clear()
    hub.farm.reject_next_submits(2, status=429)
    job = hub.submit_compile_job(_model(dynamic=False), S25, options=QNN)  # retry=True default
    assert job.wait().success and hub.farm.clock.slept[:2] == [20.0, 40.0]
    assert "Retrying after 20 seconds." in capsys.readouterr().out
    hub.farm.reject_next_submits(30, status=429)
    with pytest.raises(hub.client.RateLimitedError, match="after retrying for 10 minutes"):
        hub.submit_compile_job(_model(dynamic=False), S25, options=QNN)


def test_service_errors_map_to_user_and_internal_errors():
    hub.farm.reject_next_submits(1, status=503)
    with pytest.raises(hub.InternalError, match="unavailable right now"):
        hub.submit_compile_job(_model(dynamic=False), S25, options=QNN)
    hub.farm.reject_next_submits(1, status=403, message="Quota exceeded")
    with pytest.raises(hub.UserError, match="Quota exceeded"):
        hub.submit_compile_job(_model(dynamic=False), S25, options=QNN)
    job = hub.submit_compile_job(_model(dynamic=False), S25, options=QNN)
    hub.farm.fail_next_polls(1)
    with pytest.raises(hub.InternalError):
        job.get_status()
    assert job.wait().success


def test_too_large_dataset_is_a_user_error():
    target = _compiled().get_target_model()
    hub.farm.max_dataset_bytes = 10
    with pytest.raises(hub.UserError, match="too large"):
        hub.submit_inference_job(target, S25, inputs={"x_in": [np.zeros((2, 3), np.float32)]})


# -- misc surface ------------------------------------------------------------------------------------------------
def test_profile_job_is_a_deprecated_inference_job_without_outputs(capsys):
    target = _compiled().get_target_model()
    hub.farm.cpu_op_types = {"Relu"}
    job = hub.submit_profile_job(target, S25)
    assert "submit_profile_job is deprecated" in capsys.readouterr().out
    assert isinstance(job, hub.InferenceJob) and hub.ProfileJob is hub.InferenceJob
    assert job.download_output_data() is None
    assert job.download_profile()["execution_detail"][0]["compute_unit"] == "CPU"


def test_get_job_and_uploads_log():
    job = _compiled()
    assert isinstance(hub.get_job(job.job_id), hub.CompileJob)
    with pytest.raises(ValueError, match="Requested job of type inference"):
        hub.get_job(job.job_id, hub.JobType.INFERENCE)
    with pytest.raises(hub.UserError, match="could not be found"):
        hub.get_job("jnope")
    assert [u["kind"] for u in hub.farm.uploads] == ["model"]
    assert hub.farm.uploads[0]["bytes"] == len(_model().SerializeToString())


def test_verbose_config_prints_like_the_real_client(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("QAIHUB_CLIENT_INI", _ini(tmp_path / "v.ini", verbose=True))
    hub.reset()
    job = hub.submit_compile_job(_model(dynamic=False), S25, options=QNN)
    assert f"Scheduled compile job ({job.job_id}) successfully" in capsys.readouterr().out
    job.wait()
    assert set(hub.farm.clock.slept) == {1}  # verbose polls every second


def test_rate_limited_error_is_only_in_the_client_namespace():
    assert not hasattr(hub, "RateLimitedError")
    assert issubclass(hub.client.RateLimitedError, hub.Error) and hub.client.UserError is hub.UserError


# -- parity with the real client (needs an interpreter with qai-hub 0.56; no network) ---------------------
_FUNCS = ["get_devices", "upload_model", "get_model", "submit_compile_job", "submit_inference_job",
          "submit_profile_job", "get_job", "upload_dataset", "get_dataset", "set_verbose"]
_METHODS = {"CompileJob": ["wait", "get_status", "get_target_model", "get_target_shapes", "download_target_model"],
            "InferenceJob": ["wait", "get_status", "get_output_dataset", "download_output_data", "download_profile"],
            "Model": ["download", "wait", "get_producer"], "Dataset": ["download"]}
_DESCRIBE = """
import inspect, json, os, sys
import qai_hub as hub
def params(fn):
    return [[p.name, str(p.kind), repr(p.default)] for p in inspect.signature(fn).parameters.values()
            if not p.name.startswith("_")]
funcs, methods = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {"version": str(getattr(hub.__version__, "base_version", hub.__version__)),
       "file": hub.__file__, "funcs": {f: params(getattr(hub, f)) for f in funcs},
       "methods": {c: {m: params(getattr(getattr(hub, c), m)) for m in ms} for c, ms in methods.items()},
       "client": params(hub.Client.__init__), "device": params(hub.Device),
       "states": {s.name: s.value for s in hub.JobStatus.State}, "tensor_spec": list(hub.TensorSpec._fields),
       "rate_limited_exported": hasattr(hub, "RateLimitedError"), "in_client": hasattr(hub.client, "RateLimitedError"),
       "errors": {}}
for ini in sys.argv[3:]:
    os.environ["QAIHUB_CLIENT_INI"] = ini
    try:
        hub.Client().get_devices()
    except hub.UserError as e:
        out["errors"][ini] = str(e)
print(json.dumps(out))
"""


def _describe(python: str, ini_files, *, fake: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(FAKES) if fake else "")
    proc = subprocess.run([python, "-c", _DESCRIBE, json.dumps(_FUNCS), json.dumps(_METHODS), *ini_files],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def real_client(tmp_path_factory):
    python = os.environ.get("QAI_HUB_REAL_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('qai-hub'))"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=""))
    if probe.returncode != 0:
        pytest.skip("no interpreter with the real qai-hub (set QAI_HUB_REAL_PYTHON to compare the double with it)")
    tmp = tmp_path_factory.mktemp("real-qai-hub")
    inis = [str(tmp / "missing.ini"), _ini(tmp / "notoken.ini", drop="api_token")]
    return _describe(python, inis, fake=False), _describe(sys.executable, inis, fake=True)


def test_signatures_states_and_errors_match_the_real_client(real_client):
    real, double = real_client
    assert "fakes" not in real["file"] and "fakes" in double["file"]
    assert real["version"] == double["version"] == hub.__version__
    for key in ("funcs", "methods", "client", "device", "states", "tensor_spec", "rate_limited_exported",
                "in_client", "errors"):
        assert real[key] == double[key], key
    assert real["rate_limited_exported"] is False and real["in_client"] is True


def test_missing_profile_file_is_a_raw_file_not_found_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="nope.ini not found"):
        hub.Client(profile="nope")


# -- cross-process control ----------------------------------------------------------------------------------
def test_plan_and_log_from_the_environment(tmp_path, monkeypatch):
    log = tmp_path / "hub.log"
    monkeypatch.setenv("QAI_HUB_DOUBLE_LOG", str(log))
    monkeypatch.setenv("QAI_HUB_DOUBLE_PLAN", json.dumps([{"call": "fail_next_job", "message": "planned",
                                                           "kind": "compile"}]))
    hub.reset()
    job = hub.submit_compile_job(_model(dynamic=False), S25, options=QNN)
    assert job.wait().message == "planned"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in events] == ["upload", "job"] and events[1]["kind"] == "compile"
    with pytest.raises(ValueError, match="unknown fault injection"):
        hub.farm.apply_plan([{"call": "explode"}])
