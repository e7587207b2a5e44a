"""Backend ``aihub``: each error path against the qai-hub TEST DOUBLE (tests/fakes/qai_hub).

* no API token (no configuration file, no ``api_token`` key) → ``BackendUnavailableError`` saying how
  to configure, before anything is sent; a token the service rejects (HTTP 401) → the same class;
* a failed compile or inference job → ``RemoteJobError`` with the job's URL and the service's message;
* a job that does not end → ``RemoteJobError`` after ``job_timeout`` (simulated seconds);
* rate limits (HTTP 429, also how a quota refusal arrives) and service errors → retried with
  exponential backoff on the client's clock, giving up within ``max_wait``; other refusals (4xx) are
  reported at once with the service's text.

The double's clock is simulated: every wait below takes microseconds of wall time.
"""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np
import pytest
from onnxruntime.capi import onnxruntime_pybind11_state as C

import onnxwrapper as ow
from onnxwrapper.errors import BackendUnavailableError, RemoteJobError
from tests import models

FAKES = pathlib.Path(__file__).parents[1] / "fakes"
sys.path.insert(0, str(FAKES))
import aihub_cases as cases  # noqa: E402
from aihub_cases import S25, jobs  # noqa: E402

sys.path.remove(str(FAKES))

X = np.ones((3, 2), np.float32)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    with cases.plugged_hub(tmp_path, monkeypatch) as double:
        yield double


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "mul.onnx"
    path.write_bytes(models.mul_1())
    return str(path)


def _open(model, **options):
    return ow.InferenceSession(model, backend="aihub", backend_options={**S25, **options})


# -- no token ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("setup", ["no file", "no api_token key"])
def test_no_token_is_unavailable_and_says_how_to_configure(tmp_path, monkeypatch, model, setup):
    with cases.plugged_hub(tmp_path, monkeypatch, token=None) as hub:
        if setup == "no file":
            monkeypatch.setenv("QAIHUB_CLIENT_INI", str(tmp_path / "missing.ini"))
        from onnxwrapper._registry import default_registry

        default_registry().reload()  # probes are cached per process
        with pytest.raises(BackendUnavailableError) as info:
            _open(model)
        text = str(info.value)
        assert "qai-hub configure --api_token <your token>" in text and "workbench.aihub.qualcomm.com/account" in text
        assert ("not found" if setup == "no file" else "API token is missing") in text
        assert info.value.install_hint.startswith("qai-hub configure")
        listed = {b.name: b for b in ow.get_available_backends()}["aihub"]
        assert not listed.available and "no Qualcomm AI Hub API token" in listed.reason
        assert hub.farm.calls == [] and hub.farm.uploads == []


def test_rejected_token_is_unavailable_before_any_upload(hub, model):
    hub.farm.tokens = {"another-token"}  # HTTP 401 on the first request
    with pytest.raises(BackendUnavailableError, match="refused the configured API token .*Failed to authenticate") as info:
        _open(model)
    assert "qai-hub configure" in str(info.value) and hub.farm.uploads == []


# -- failed jobs ------------------------------------------------------------------------------------------
def test_failed_compile_job_gives_its_url_and_message(hub, model, tmp_path):
    hub.farm.fail_next_job("QNN graph finalize failed: op Mul unsupported", kind="compile")
    with pytest.raises(RemoteJobError) as info:
        _open(model)
    (job,) = jobs(hub, "compile")
    url = f"{cases.API}/jobs/{job['job_id']}/"
    assert info.value.job_url == url and info.value.job_kind == "compile" and url in str(info.value)
    assert "QNN graph finalize failed: op Mul unsupported" in str(info.value)
    entries = tmp_path / "cache" / "entries"
    assert not entries.exists() or not list(entries.iterdir())  # nothing cached for a failed compile
    assert _open(model).run(None, {"X": X})  # a failed compile is not cached: the next session compiles again
    assert len(jobs(hub, "compile")) == 2


def test_failed_inference_job_gives_its_url_and_message(hub, model):
    sess = _open(model)
    hub.farm.fail_next_job("Device crashed", kind="inference")
    with pytest.raises(RemoteJobError, match="inference job j\\d+ failed on 'Samsung Galaxy S25': Device crashed. "
                                             "See https://workbench.aihub.qualcomm.com/jobs/j\\d+/") as info:
        sess.run(None, {"X": X})
    assert isinstance(info.value, C.EPFail) and info.value.status_message == "Device crashed"
    np.testing.assert_array_equal(sess.run(None, {"X": X})[0], X * np.array([[1, 2], [3, 4], [5, 6]], np.float32))


# -- timeouts ------------------------------------------------------------------------------------------------
def test_job_that_never_ends_times_out_within_job_timeout(hub, model):
    sess = _open(model, job_timeout=600, poll_interval=30)
    hub.farm.hang_next_job(kind="inference")
    clock, start, wall = hub.farm.clock, hub.farm.clock.now, time.perf_counter()
    with pytest.raises(RemoteJobError, match="did not finish within 600 s .*It may still be running: https://") as info:
        sess.run(None, {"X": X})
    assert 570 <= clock.now - start <= 600 and set(clock.slept[-5:]) == {30.0}
    assert info.value.job_url and time.perf_counter() - wall < 5  # simulated time, no real sleeping


# -- rate limits, quota, service errors ---------------------------------------------------------------------
def test_rate_limit_is_retried_with_exponential_backoff(hub, model):
    sess = _open(model, poll_interval=10)
    hub.farm.reject_next_submits(3, status=429)
    before = len(hub.farm.clock.slept)
    np.testing.assert_array_equal(sess.run(None, {"X": X})[0], X * np.array([[1, 2], [3, 4], [5, 6]], np.float32))
    backoff = [s for s in hub.farm.clock.slept[before:] if s != 10.0]
    assert backoff == [20.0, 40.0, 80.0]  # then the poll loop (10 s) until the job ended
    assert len(jobs(hub, "inference")) == 1


def test_rate_limit_gives_up_within_max_wait(hub, model):
    sess = _open(model, max_wait=300)
    hub.farm.reject_next_submits(50, status=429, message="Too Many Requests: quota of jobs per day reached")
    start = hub.farm.clock.now
    with pytest.raises(RemoteJobError, match="kept failing the request to create the inference job \\(rate limited: "
                                             "Too Many Requests: quota of jobs per day reached\\); gave up after") as info:
        sess.run(None, {"X": X})
    assert hub.farm.clock.now - start <= 300 and info.value.job_url is None
    assert [s for s in hub.farm.clock.slept if s != 10.0][-3:] == [20.0, 40.0, 80.0]
    assert not jobs(hub, "inference")  # no job was ever created


def test_service_errors_are_retried_and_polls_survive_transient_failures(hub, model):
    hub.farm.reject_next_submits(1, status=503)
    sess = _open(model)  # the compile job's creation failed once with HTTP 503
    hub.farm.fail_next_polls(2)
    sess.run(None, {"X": X})
    assert len(jobs(hub, "compile")) == 1 and len(jobs(hub, "inference")) == 1


def test_other_refusals_are_reported_at_once(hub, model):
    sess = _open(model)
    hub.farm.reject_next_submits(1, status=403, message="Quota exceeded for this organization")
    with pytest.raises(RemoteJobError, match="refused to run mul on 'Samsung Galaxy S25': Quota exceeded"):
        sess.run(None, {"X": X})
    hub.farm.max_dataset_bytes = 8
    with pytest.raises(RemoteJobError, match="too large"):
        sess.run(None, {"X": X})
