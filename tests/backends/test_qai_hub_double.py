"""The qai-hub 0.56 test double (tests/fakes/qai_hub): the client around the jobs.

The double stands in for ``qai_hub`` in the ``aihub`` backend's tests (through the
``FakeAihubBackend`` plugin); these tests pin its configuration and token handling, device list,
deprecated and auxiliary calls and cross-process control, each against the real client's source
(``qai_hub/client.py``, ``api_utils.py``, ``util/session.py`` of the 0.56.0 wheel), and compare its
signatures, job states and errors with the real package (the ``test`` extra installs qai-hub 0.56.0;
no network). Its jobs are in test_qai_hub_double_jobs.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.qai_hub_double import FAKES, QNN, S25, client_ini, compiled, configured, hub, one_node  # noqa: F401


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
    monkeypatch.setenv("QAIHUB_CLIENT_INI", client_ini(tmp_path / "a.ini", drop="api_token"))
    with pytest.raises(hub.UserError, match=r"(?s)^Failed to load configuration file\..*API token is missing"):
        hub.Client().get_devices()
    monkeypatch.setenv("QAIHUB_CLIENT_INI", client_ini(tmp_path / "b.ini", token="wrong"))
    with pytest.raises(hub.UserError, match=r"^Failed to authenticate\."):
        hub.Client().upload_model(one_node())
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
        hub.submit_compile_job(one_node(), hub.Device("Galaxy S25"), input_specs={"x.in": ((2, 3), "float32")},
                               options=QNN)
    assert hub.farm.uploads == []  # device checked before anything is uploaded


# -- misc surface ------------------------------------------------------------------------------------------------
def test_profile_job_is_a_deprecated_inference_job_without_outputs(capsys):
    target = compiled().get_target_model()
    hub.farm.cpu_op_types = {"Relu"}
    job = hub.submit_profile_job(target, S25)
    assert "submit_profile_job is deprecated" in capsys.readouterr().out
    assert isinstance(job, hub.InferenceJob) and hub.ProfileJob is hub.InferenceJob
    assert job.download_output_data() is None
    assert job.download_profile()["execution_detail"][0]["compute_unit"] == "CPU"


def test_get_job_and_uploads_log():
    job = compiled()
    assert isinstance(hub.get_job(job.job_id), hub.CompileJob)
    with pytest.raises(ValueError, match="Requested job of type inference"):
        hub.get_job(job.job_id, hub.JobType.INFERENCE)
    with pytest.raises(hub.UserError, match="could not be found"):
        hub.get_job("jnope")
    assert [u["kind"] for u in hub.farm.uploads] == ["model"]
    assert hub.farm.uploads[0]["bytes"] == len(one_node().SerializeToString())


def test_verbose_config_prints_like_the_real_client(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("QAIHUB_CLIENT_INI", client_ini(tmp_path / "v.ini", verbose=True))
    hub.reset()
    job = hub.submit_compile_job(one_node(dynamic=False), S25, options=QNN)
    assert f"Scheduled compile job ({job.job_id}) successfully" in capsys.readouterr().out
    job.wait()
    assert set(hub.farm.clock.slept) == {1}  # verbose polls every second


def test_rate_limited_error_is_only_in_the_client_namespace():
    assert not hasattr(hub, "RateLimitedError")
    assert issubclass(hub.client.RateLimitedError, hub.Error) and hub.client.UserError is hub.UserError


# -- parity with the real client (qai-hub 0.56.0 from the `test` extra, inspected in a subprocess; no network) ----
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
    """``(real, double)`` descriptions; the real one from this interpreter (the ``test`` extra installs
    qai-hub 0.56.0) or from ``QAI_HUB_REAL_PYTHON``, an interpreter that has it."""
    python = os.environ.get("QAI_HUB_REAL_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('qai-hub'))"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=""))
    if probe.returncode != 0:
        pytest.skip(f"qai-hub is not installed for {python} (pip install -e '.[test]' installs qai-hub 0.56.0; "
                    "or set QAI_HUB_REAL_PYTHON to an interpreter that has it)")
    tmp = tmp_path_factory.mktemp("real-qai-hub")
    inis = [str(tmp / "missing.ini"), client_ini(tmp / "notoken.ini", drop="api_token")]
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
    job = hub.submit_compile_job(one_node(dynamic=False), S25, options=QNN)
    assert job.wait().message == "planned"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in events] == ["upload", "job"] and events[1]["kind"] == "compile"
    with pytest.raises(ValueError, match="unknown fault injection"):
        hub.farm.apply_plan([{"call": "explode"}])
