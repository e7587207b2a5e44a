"""QNN behaviour that needs fresh processes: the QNN configuration is process-global.

Each test runs snippets with ``tests.conftest.run_python`` (a new ``sys.executable``), with the
compile cache in the test's temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests import models
from tests.conftest import qnn_available, run_python

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "conv.onnx"
    path.write_bytes(models.smallconv(batch=1))
    return str(path)


@pytest.fixture
def env(tmp_path):
    return {"ONNXWRAPPER_CACHE_DIR": str(tmp_path / "cache")}


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


_DIFF = """
import sys, json, numpy as np, onnxruntime, onnxwrapper
path, options = sys.argv[1], json.loads(sys.argv[2])
x = np.random.default_rng(3).random((1, 3, 8, 8), np.float32)
s = onnxwrapper.InferenceSession(path, backend="qnn", backend_options=options)
ref = onnxruntime.InferenceSession(path).run(None, {"X": x})[0]
opts = s.get_provider_options()["QNNExecutionProvider"]
print(json.dumps({"diff": float(np.abs(s.run(None, {"X": x})[0] - ref).max()), "soc_model": opts.get("soc_model"),
                  "providers": s.get_partition().providers}))
"""


def test_fp32_precision_matches_cpu_within_1e5(model_path, env):
    out = json.loads(_ok(run_python(_DIFF, model_path, json.dumps({"precision": "fp32"}), env=env)))
    assert out["diff"] <= 1e-5 and out["soc_model"] == "30" and out["providers"] == ["QNNExecutionProvider"]


def test_other_target_emulates_fp16(model_path, env):
    out = json.loads(_ok(run_python(_DIFF, model_path, json.dumps({"target": "snapdragon-8-gen-3"}), env=env)))
    assert 1e-5 < out["diff"] < 1e-2 and out["soc_model"] == "57"


_MIXED = """
import json, sys, numpy as np, onnxruntime, onnxruntime_qnn, onnxwrapper
path = sys.argv[1]
x = np.random.default_rng(3).random((1, 3, 8, 8), np.float32)
ref = onnxruntime.InferenceSession(path).run(None, {"X": x})[0]
def diff(s):
    return float(np.abs(s.run(None, {"X": x})[0] - ref).max())
out = {}
if sys.argv[2] == "raw":  # the user's own plain-ORT QNN session with soc_model=60 (FP16) comes first
    onnxruntime.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
    so = onnxruntime.SessionOptions()
    so.add_provider_for_devices([d for d in onnxruntime.get_ep_devices() if d.ep_name == "QNNExecutionProvider"],
                                {"backend_type": "htp", "soc_model": "60", "htp_arch": "73"})
    out["raw"] = diff(onnxruntime.InferenceSession(path, so))
if sys.argv[2] == "failed":  # a session that fails (missing external data) must not pin anything
    try:
        onnxwrapper.InferenceSession(sys.argv[3], backend="qnn")
    except Exception as exc:
        out["failed"] = type(exc).__name__
for name, options in (("fp16", {}), ("8gen3", {"target": "snapdragon-8-gen-3"}), ("fp32", {"precision": "fp32"})):
    out[name] = diff(onnxwrapper.InferenceSession(path, backend="qnn", backend_options=options))
print(json.dumps(out))
"""


@pytest.mark.parametrize("first", ["ours", "raw", "failed"])
def test_configurations_mix_in_one_process_and_never_leak(model_path, env, tmp_path, first):
    """Sessions of different QNN configurations coexist in one process with their own numerics,
    whatever ran before (the user's soc_model=60 session, a failed session); and a fresh process served
    from the cache those runs filled gets fp32 numerics for fp32 (nothing poisoned was stored)."""
    import onnx

    broken = tmp_path / "broken.onnx"
    onnx.save(onnx.load(model_path), str(broken), save_as_external_data=True, location="gone.data",
              size_threshold=0)
    os.remove(tmp_path / "gone.data")
    out = json.loads(_ok(run_python(_MIXED, model_path, first, str(broken), env=env)).splitlines()[-1])
    assert out["fp32"] <= 1e-5, out  # the fp32 math of the simulator (FP16 gives ~1e-3 here)
    assert 1e-5 < out["fp16"] < 2e-2 and 1e-5 < out["8gen3"] < 2e-2, out
    if first == "failed":
        assert out["failed"] in ("Fail", "NoSuchFile", "InvalidArgument"), out
    again = json.loads(_ok(run_python(_MIXED, model_path, "ours", "", env=env)).splitlines()[-1])
    assert again["fp32"] <= 1e-5, again


_SCRIPT = """
import sys, numpy as np
import onnxwrapper as ort
print("before session")
s = ort.InferenceSession(sys.argv[1], backend=sys.argv[2])
print("providers", s.get_providers()[0] in ("QNNExecutionProvider", "CPUExecutionProvider"))
print("output", s.run(None, {"X": np.ones((1, 3, 8, 8), np.float32)})[0].shape)
"""


def test_stdout_is_the_same_as_on_cpu(model_path, env):
    """The one-time native ' # LIBNATIVE: …' line must not reach a script's stdout."""
    qnn_result = run_python(_SCRIPT, model_path, "qnn", env=env)
    qnn = _ok(qnn_result)
    cpu = _ok(run_python(_SCRIPT, model_path, "cpu", env=env))
    assert qnn == cpu == "before session\nproviders True\noutput (1, 2, 8, 8)\n"
    assert qnn_result.stderr == ""  # and the QNN EP's W-level lines stay off stderr by default
    # the cache hit path (first native QNN call is then a load, not a compile) too
    assert _ok(run_python(_SCRIPT, model_path, "qnn", env=env)) == cpu


def test_qnn_warning_lines_follow_an_explicit_log_severity(model_path, env):
    code = """
    import sys, onnxruntime, onnxwrapper
    so = onnxruntime.SessionOptions()
    so.log_severity_level = int(sys.argv[2])
    onnxwrapper.InferenceSession(sys.argv[1], so, backend="qnn")
    """
    verbose, quiet = run_python(code, model_path, "2", env=env), run_python(code, model_path, "3", env=env)
    _ok(verbose), _ok(quiet)
    assert "File mapped weights" in verbose.stderr and "File mapped weights" not in quiet.stderr


def test_native_stdout_guard_keeps_other_output(tmp_path):
    code = """
    import os, sys
    from onnxwrapper.backends.qnn.platform._runtime import native_stdout_guard
    print("a", flush=True)
    with native_stdout_guard():
        os.write(1, b" # LIBNATIVE: noise\\nkept 1\\n")
        print("kept 2")
    with native_stdout_guard():  # second use: no capture at all
        os.write(1, b" # LIBNATIVE: later\\n")
    print("z")
    """
    assert _ok(run_python(code)) == "a\nkept 1\nkept 2\n # LIBNATIVE: later\nz\n"


_CONCURRENT = """
import sys, onnxwrapper
s = onnxwrapper.InferenceSession(sys.argv[1], backend="qnn")
print(s._ow_backend_session.artifacts[0].origin)
"""


def test_one_compile_under_four_concurrent_processes(env):
    import onnx

    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")
    full_env = dict(os.environ, **env)
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(_CONCURRENT), light], env=full_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert sorted(r[0].strip() for r in results) == ["cache", "cache", "cache", "compiled"], results


_NO_NODE = """
import sys, warnings
import onnxwrapper
from onnxwrapper.backends.qnn.settings import _settings as _qnn_settings
from onnxwrapper.errors import PartitionError
# let an option through that the validation rejects: the QNN EP then silently takes no node
_qnn_settings.validate_ep_options = lambda options, **kw: {str(k): str(v) for k, v in options.items()}
providers = [("QNNExecutionProvider", {"device_id": "3"})]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    s = onnxwrapper.InferenceSession(sys.argv[1], backend="qnn", providers=providers)
print("cpu", s.get_partition().target_nodes, len(s.get_partition().nodes),
      any("strict" in str(w.message) and "took none" in str(w.message) for w in caught))
try:
    onnxwrapper.InferenceSession(sys.argv[1], backend="qnn", backend_options={"strict": True}, providers=providers)
except PartitionError as exc:
    print("PartitionError", len(exc.cpu_nodes), "took none" in str(exc))
"""


def test_qnn_taking_no_node_runs_on_cpu_with_a_warning_and_strict_refuses(model_path, env):
    assert _ok(run_python(_NO_NODE, model_path, env=env)).split() == ["cpu", "0", "3", "True",
                                                                        "PartitionError", "3", "True"]


def test_ep_creation_failure_raises(model_path, env):
    """An EP that cannot be created (here: the shared-memory allocator, which the simulator lacks; the
    option validation that refuses it is bypassed) raises BackendUnavailableError from the compile worker."""
    code = """
    import sys
    import onnxwrapper
    from onnxwrapper.backends.qnn.settings import _settings as _qnn_settings
    from onnxwrapper.errors import BackendUnavailableError
    _qnn_settings.validate_ep_options = lambda options, **kw: {str(k): str(v) for k, v in options.items()}
    try:
        onnxwrapper.InferenceSession(sys.argv[1], backend="qnn",
                                     backend_options={"provider_options": {"enable_htp_shared_memory_allocator": "1"}})
    except BackendUnavailableError as exc:
        print("BackendUnavailableError", "does not fall back to CPU" in str(exc), exc.backend)
    """
    assert _ok(run_python(code, model_path, env=env)).split() == ["BackendUnavailableError", "True", "qnn"]
