"""The qai-hub 0.56 test double (tests/fakes/qai_hub): its jobs, as the real client and service run them.

Compile and inference jobs (states, target models, batched datasets, outputs equal to onnxruntime's),
the checks the real client makes before anything is sent, and the failures a test can inject
(failed and hung jobs, timeouts, rate limits, service errors). Each behaviour is the real client's
(``qai_hub/client.py``, ``api_utils.py`` of the 0.56.0 wheel); the double's client surface and its
parity with the real package are in test_qai_hub_double.py.
"""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto

from tests.conftest import run_python
from tests.qai_hub_double import FAKES, QNN, S25, compiled, configured, hub, one_node, two_inputs  # noqa: F401


# -- compile -> inference ----------------------------------------------------------------------------------
def test_compile_states_url_and_target_model(tmp_path):
    job = hub.submit_compile_job(one_node(), S25, input_specs={"x.in": ((2, 3), "float32")}, options=QNN)
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
    target = compiled().get_target_model()
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
    model = two_inputs()
    target = compiled(model, specs={"a": (1, 4), "b": (1, 4)}).get_target_model()
    a, b = np.random.default_rng(0).standard_normal((2, 1, 4)).astype(np.float32)
    out = hub.submit_inference_job(target, S25, inputs={"a": [a], "b": [b]}, profile=False).download_output_data()
    ref = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(out["y"][0], ref)


def test_dataset_schema_order_and_shape_fail_the_job():
    target = compiled(two_inputs(), specs={"a": (1, 4), "b": (1, 4)}).get_target_model()
    x = np.zeros((1, 4), np.float32)
    swapped = hub.submit_inference_job(target, S25, inputs={"b": [x], "a": [x]}, profile=False)
    assert swapped.wait().failure and "names and order" in swapped.get_status().message
    assert swapped.download_output_data() is None
    bad = hub.submit_inference_job(target, S25, inputs={"a": [x[:, :2]], "b": [x]}, profile=False)
    assert bad.wait().failure and "takes float32[1, 4]" in bad.get_status().message


def test_reuploaded_target_file_runs_and_is_bound_to_its_chipset(tmp_path):
    path = compiled().download_target_model(str(tmp_path / "m"))
    x = np.ones((2, 3), np.float32)
    job = hub.submit_inference_job(path, S25, inputs={"x_in": [x]}, profile=False)
    np.testing.assert_array_equal(job.download_output_data()["y"][0], x)
    other = hub.submit_inference_job(path, hub.Device("Samsung Galaxy S24"), inputs={"x_in": [x]}, profile=False)
    assert other.wait().failure and "another chipset" in other.get_status().message


# -- client-side argument checks ---------------------------------------------------------------------
def test_input_specs_checks_are_client_side():
    m = one_node()
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
    target = compiled().get_target_model()
    x = np.zeros((2, 3), np.float32)
    for bad, pattern in (({"x_in": x}, "list of numpy arrays"), ({"x_in": [x.astype(np.float64)]}, "list of numpy"),
                         ([x], "Dataset must be dict"), ({"x_in": [x], "z": [x, x]}, "Batchsize of all inputs")):
        with pytest.raises(hub.UserError, match=pattern):
            hub.submit_inference_job(target, S25, inputs=bad)
    with pytest.raises(hub.UserError, match="Inference requires inputs"):
        hub.submit_inference_job(target, S25, inputs=None, profile=False)


def test_compile_failures_carry_a_message():
    dynamic = hub.submit_compile_job(one_node(), S25, options=QNN)
    assert dynamic.wait().failure and "dynamic shape" in dynamic.get_status().message
    with pytest.raises(hub.UserError, match="could not be found"):
        dynamic.download_target_model("unused")
    unknown = hub.submit_compile_job(one_node(dynamic=False), S25, options=QNN + " --frobnicate")
    assert unknown.wait().failure and "Unrecognized option '--frobnicate'" in unknown.get_status().message
    default_runtime = hub.submit_compile_job(one_node(dynamic=False), S25)
    assert default_runtime.wait().failure and "tflite" in default_runtime.get_status().message


def test_int64_io_needs_truncation_and_becomes_int32():
    m = one_node(op="Add", dtype=TensorProto.INT64, name="ids")
    plain = hub.submit_compile_job(m, S25, input_specs={"ids": ((2, 3), "int64")}, options=QNN)
    assert plain.wait().failure and "--truncate_64bit_io" in plain.get_status().message
    job = compiled(m, specs={"ids": ((2, 3), "int64")}, options=QNN + " --truncate_64bit_io")
    assert job.get_target_model().input_spec[None][0].dtype == "int32"
    ids = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = hub.submit_inference_job(job.get_target_model(), S25, inputs={"ids": [ids]}).download_output_data()
    assert out["y"][0].dtype == np.int32 and (out["y"][0] == 2 * ids).all()


# -- injected failures, timeouts, rate limits ---------------------------------------------------------------
def test_failed_job_has_status_message_and_no_outputs():
    target = compiled().get_target_model()
    hub.farm.fail_next_job("Device crashed", kind="inference")
    job = hub.submit_inference_job(target, S25, inputs={"x_in": [np.zeros((2, 3), np.float32)]})
    status = job.wait()
    assert status.failure and status.message == "Device crashed" and status.code == "FAILED"
    assert job.download_output_data() is None and job.download_profile() == {}


def test_wait_timeout_is_client_side_and_server_limit_fails_hung_jobs():
    hub.farm.hang_next_job()
    job = hub.submit_compile_job(one_node(dynamic=False), S25, options=QNN)
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
        hub.submit_compile_job(one_node(dynamic=False), S25, options=QNN, retry=False)
    hub.farm.clock.slept.clear()
    hub.farm.reject_next_submits(2, status=429)
    job = hub.submit_compile_job(one_node(dynamic=False), S25, options=QNN)  # retry=True default
    assert job.wait().success and hub.farm.clock.slept[:2] == [20.0, 40.0]
    assert "Retrying after 20 seconds." in capsys.readouterr().out
    hub.farm.reject_next_submits(30, status=429)
    with pytest.raises(hub.client.RateLimitedError, match="after retrying for 10 minutes"):
        hub.submit_compile_job(one_node(dynamic=False), S25, options=QNN)


def test_service_errors_map_to_user_and_internal_errors():
    hub.farm.reject_next_submits(1, status=503)
    with pytest.raises(hub.InternalError, match="unavailable right now"):
        hub.submit_compile_job(one_node(dynamic=False), S25, options=QNN)
    hub.farm.reject_next_submits(1, status=403, message="Quota exceeded")
    with pytest.raises(hub.UserError, match="Quota exceeded"):
        hub.submit_compile_job(one_node(dynamic=False), S25, options=QNN)
    job = hub.submit_compile_job(one_node(dynamic=False), S25, options=QNN)
    hub.farm.fail_next_polls(1)
    with pytest.raises(hub.InternalError):
        job.get_status()
    assert job.wait().success


def test_too_large_dataset_is_a_user_error():
    target = compiled().get_target_model()
    hub.farm.max_dataset_bytes = 10
    with pytest.raises(hub.UserError, match="too large"):
        hub.submit_inference_job(target, S25, inputs={"x_in": [np.zeros((2, 3), np.float32)]})
