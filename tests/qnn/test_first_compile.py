"""The first compile of a process: the compile server (one warm worker per user and installation, shared
by processes, private, bounded) and a plain model's first compile done where it is parsed.

Each server test gives the server a folder of its own (``ONNXWRAPPER_COMPILE_SERVER_DIR``) and a short idle
time, so no server outlives the test run. Jobs are module-level functions of the standard library
(``time.sleep``, ``os.write``): the protocol under test is the server's, not a compile's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from onnxwrapper.backends.qnn.workers import CompileRequest
from onnxwrapper.backends.qnn.workers._server import state_dir
from onnxwrapper.backends.qnn.workers._shared import ServerBusy, SharedWorker
from onnxwrapper.errors import CompileBudgetError
from tests.conftest import qnn_available

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]


@pytest.fixture
def server_dir(tmp_path, monkeypatch):
    folder = tmp_path / "servers"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("ONNXWRAPPER_COMPILE_SERVER_DIR", str(folder))
    monkeypatch.setenv("ONNXWRAPPER_COMPILE_SERVER_IDLE", "3")
    monkeypatch.setenv("ONNXWRAPPER_COMPILE_SERVER", "1")
    yield folder
    for state in folder.glob("*.json"):  # end what a test left running
        try:
            os.kill(json.loads(state.read_text())["pid"], 9)
        except (OSError, ValueError, KeyError):
            pass


def _job(function, *args, seconds=None) -> CompileRequest:
    return CompileRequest("job", "", {}, kind="job", label="job", job=function, job_args=args, budget_seconds=seconds)


def _state(folder) -> dict:
    (state,) = folder.glob("*.json")
    return json.loads(state.read_text())


def test_a_server_is_started_once_and_serves_later_handles(server_dir):
    assert SharedWorker().run(_job(time.sleep, 0)) is None
    first = _state(server_dir)["pid"]
    assert SharedWorker().run(_job(time.sleep, 0)) is None  # a new handle, as a new process has
    assert _state(server_dir)["pid"] == first
    assert oct(os.stat(server_dir / next(p.name for p in server_dir.glob("*.key"))).st_mode & 0o777) == "0o600"


def test_a_busy_server_says_so_at_once(server_dir):
    SharedWorker().run(_job(time.sleep, 0))
    thread = threading.Thread(target=SharedWorker().run, args=(_job(time.sleep, 2),))
    thread.start()
    time.sleep(0.5)
    start = time.monotonic()
    with pytest.raises(ServerBusy):
        SharedWorker().run(_job(time.sleep, 0))
    assert time.monotonic() - start < 1.5
    thread.join()


def test_a_request_past_its_budget_ends_the_server_and_the_next_starts_anew(server_dir):
    SharedWorker().run(_job(time.sleep, 0))
    first = _state(server_dir)["pid"]
    with pytest.raises(CompileBudgetError):
        SharedWorker().run(_job(time.sleep, 30, seconds=1))
    assert SharedWorker().run(_job(time.sleep, 0)) is None
    assert _state(server_dir)["pid"] != first


def test_only_a_holder_of_the_key_is_served(server_dir):
    from multiprocessing.connection import Client

    SharedWorker().run(_job(time.sleep, 0))
    state = _state(server_dir)
    with pytest.raises(Exception):  # multiprocessing's AuthenticationError (or a closed connection)
        Client(state["address"], family=state["family"], authkey=b"x" * 32).send(("run", None, "/"))
    assert SharedWorker().run(_job(time.sleep, 0)) is None  # still serving


def test_an_idle_server_exits_and_cleans_up(server_dir):
    SharedWorker().run(_job(time.sleep, 0))
    pid = _state(server_dir)["pid"]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and list(server_dir.glob("*.json")):
        time.sleep(0.2)
    assert not list(server_dir.glob("*.json")) and not list(server_dir.glob("*.sock"))
    with pytest.raises(ProcessLookupError):
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)


def test_a_folder_open_to_others_is_not_used(server_dir):
    os.chmod(server_dir, 0o755)
    assert state_dir() is None


_STDERR = """
import os, sys
from onnxwrapper.backends.qnn.workers import CompileRequest
from onnxwrapper.backends.qnn.workers._shared import SharedWorker
SharedWorker().run(CompileRequest("job", "", {}, kind="job", label="job", job=os.write, job_args=(2, b"from the job\\n")))
"""


def test_what_a_request_writes_to_stderr_reaches_the_requesters_stderr(server_dir):
    done = subprocess.run([sys.executable, "-c", _STDERR], capture_output=True, text=True, env=dict(os.environ),
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "from the job" in done.stderr


_NO_ONNX = """
import sys, onnxwrapper
s = onnxwrapper.InferenceSession(sys.argv[1], backend="qnn")
print(s.backend_session.artifacts[0].origin, s.get_partition().source, "onnx" in sys.modules)
"""


def test_a_plain_models_first_compile_parses_it_in_the_worker_only(tmp_path):
    """The user's process neither imports onnx nor parses the model: the worker parses, records the
    model's facts and compiles; the process opens the result as a hit, reported as compiled now."""
    from tests import models
    from tests.conftest import run_python

    path = tmp_path / "m.onnx"
    path.write_bytes(models.smallconv(batch=1, seed=81))
    env = {"ONNXWRAPPER_CACHE_DIR": str(tmp_path / "cache")}
    first, again = run_python(_NO_ONNX, str(path), env=env), run_python(_NO_ONNX, str(path), env=env)
    assert first.stdout.split() == ["compiled", "compile", "False"], first.stderr[-2000:]
    assert again.stdout.split() == ["cache", "cache", "False"], again.stderr[-2000:]


def test_a_first_compile_that_fails_is_where_the_ladder_starts_not_compiled_twice(tmp_path, monkeypatch):
    """fp32 GELU fails to finalize on the simulator: the worker's first compile fails, and the recovery
    ladder of the full path starts from that failure — no second compile of the whole model."""
    import numpy as np
    import onnxruntime

    import onnxwrapper
    from onnxwrapper.backends.qnn.workers._workers import WorkerPool
    from tests import recovery_models as rm

    path = tmp_path / "gelu.onnx"
    path.write_bytes(rm.gelu_net(batch=1, seed=91))  # its own model: warnings are once per model
    whole = []
    real = WorkerPool.run

    def counting(self, request):
        if request.kind == "epcontext" and isinstance(request.model, str):
            whole.append(request.model)
        return real(self, request)
    monkeypatch.setattr(WorkerPool, "run", counting)
    session = onnxwrapper.InferenceSession(str(path), backend="qnn",
                                           backend_options={"precision": "fp32", "cache_dir": str(tmp_path / "c")})
    x = np.random.default_rng(0).standard_normal((1, 4, 64)).astype(np.float32)
    ref = onnxruntime.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(session.run(None, {"x": x})[0], ref, atol=1e-4)
    assert whole == [] and session.get_partition().recovery[0]["rung"] == "as given"
