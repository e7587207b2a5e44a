"""The qnn backend never crashes the user's process nor answers silently wrong: compiles in worker
processes, feeds bounded before compiling, ORT parity for odd inputs, read-only caches, typed fp32
errors, NaN/Inf warnings. Tiny generated models only."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import warnings

import numpy as np
import onnxruntime
import pytest

import onnxwrapper
from onnxwrapper.errors import BackendCapabilityError, BackendCompileError, CompileFailedError
from onnxwrapper.kernel import NonFiniteInputWarning, PartialOffloadWarning
from tests import cf_models, models
from tests.conftest import qnn_available, run_python

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]


def _relu_model(dims) -> bytes:
    from onnx import TensorProto as T
    from onnx import helper as h

    g = h.make_graph([h.make_node("Relu", ["X"], ["Y"])], "relu", [h.make_tensor_value_info("X", T.FLOAT, list(dims))],
                     [h.make_tensor_value_info("Y", T.FLOAT, list(dims))])
    return models.make_model(g)


# -- compile workers ----------------------------------------------------------------------------------
_HIT = """
import sys, numpy as np, onnxwrapper
from onnxwrapper.backends.qnn.workers._workers import default_pool
s = onnxwrapper.InferenceSession(sys.argv[1], backend="qnn")
s.run(None, {"X": np.ones((1, 3, 8, 8), np.float32)})
print(s.backend_session.artifacts[0].origin, len(default_pool().workers))
"""


def test_a_cache_hit_starts_no_worker_and_a_miss_one(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(models.smallconv(batch=1, seed=31))
    env = {"ONNXWRAPPER_CACHE_DIR": str(tmp_path / "cache")}
    first = run_python(_HIT, str(path), env=env)
    second = run_python(_HIT, str(path), env=env)
    assert first.stdout.split() == ["compiled", "1"], first.stderr[-2000:]
    assert second.stdout.split() == ["cache", "0"], second.stderr[-2000:]


def test_a_compiler_crash_is_a_typed_error_and_the_next_compile_works():
    """The worker dies mid-compile (SIGABRT, as std::bad_alloc would end it): the user's process gets
    BackendCompileError naming the model and the shapes; nothing is cached; the next compile works."""
    from onnxwrapper.backends.qnn.workers._workers import default_pool

    data = models.smallconv(batch="N", hw=(96, 96), seed=32)
    session = onnxwrapper.InferenceSession(data, backend="qnn")
    x = np.ones((2, 3, 96, 96), np.float32)
    caught: dict = {}

    def run():
        try:
            session.run(None, {"X": x})
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion below
            caught["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.time() + 60
    while time.time() < deadline and "error" not in caught:
        busy = [w for w in default_pool().workers if w.busy and w.pid]
        if busy:
            os.kill(busy[0].pid, signal.SIGABRT)
            break
        time.sleep(0.005)
    thread.join(120)
    error = caught.get("error")
    assert isinstance(error, BackendCompileError), error
    assert error.signal == "SIGABRT" and error.shapes == {"X": (2, 3, 96, 96)} and error.model == "the model (bytes)"
    assert "X=2x3x96x96" in str(error) and "killed the compiler process (SIGABRT" in str(error)
    reference = onnxruntime.InferenceSession(data).run(None, {"X": x})[0]
    np.testing.assert_allclose(session.run(None, {"X": x})[0], reference, atol=2e-2)
    assert session.backend_session.artifacts[-1].origin == "compiled"


def test_compile_many_runs_requests_on_parallel_workers(tmp_path):
    """The worker API another command builds on: N requests on ``jobs`` workers, results in order, a
    failing request returned as its (ORT) exception, not raised."""
    import onnx

    from onnxwrapper.backends.qnn import compile_many
    from onnxwrapper.backends.qnn.pipeline import _pipeline
    from onnxwrapper.backends.qnn.settings import _settings
    from onnxwrapper.kernel import ModelSource

    requests = []
    for seed in (1, 2, 3):
        source = ModelSource(None, models.smallconv(batch=1, seed=seed))
        setup = _settings.qnn_setup({}, {}, source, user_so=None, kwargs={}, label=f"m{seed}", real_npu=False)
        out = tmp_path / f"out{seed}"
        out.mkdir()
        model = source.read_bytes() if seed != 3 else b"not a model"
        requests.append(_pipeline.compile_request(setup, onnx.load_from_string(source.read_bytes()), model, str(out),
                                                  record=None))
    results = compile_many(requests, jobs=2)
    assert [r["partition"]["source"] for r in results[:2]] == ["compile", "compile"]
    assert os.path.isfile(tmp_path / "out1" / results[0]["ctx"])
    assert type(results[2]).__name__ == "InvalidProtobuf"


def test_precompile_fills_the_cache_on_parallel_workers(tmp_path):
    """``precompile``: the specializations a session would compile, ahead of time and two at once;
    the session then finds every one of them in the cache."""
    from onnxwrapper.backends.qnn import PrecompileResult, precompile

    path = tmp_path / "dyn.onnx"
    path.write_bytes(models.smallconv(batch="N", seed=33))
    batches = (1, 2, 3)
    results = precompile(str(path), [{"X": (b, 3, 8, 8)} for b in batches] + [{"X": (1, 3, 8, 2 ** 22)}], jobs=2)
    assert [type(r).__name__ for r in results] == ["PrecompileResult"] * 3 + ["BackendCapabilityError"]
    assert all(isinstance(r, PrecompileResult) and r.origin == "compiled" for r in results[:3])
    assert [r.shapes for r in results[:3]] == [{"X": (b, 3, 8, 8)} for b in batches]
    session = onnxwrapper.InferenceSession(str(path), backend="qnn")
    for b in batches:
        session.run(None, {"X": np.ones((b, 3, 8, 8), np.float32)})
    assert [a.origin for a in session.backend_session.artifacts] == ["cache"] * 3


# -- what a feed may cost ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape, words", [((1, 2 ** 23), "VTCM budget"), ((2, 2 ** 30), "VTCM budget"),
                                          ((1024, 2048, 160), "max_feed_mb=1024")])
def test_feeds_beyond_the_htp_compiler_are_refused_at_once(shape, words):
    """Broadcast views cost nothing in memory but the compiler allocates them in full (measured: 1×2²³
    fails after 6 s, 2×2³⁰ aborts the process after 46 s): refused before compiling."""
    session = onnxwrapper.InferenceSession(_relu_model(("N", "M", "K")[:len(shape)]), backend="qnn")
    start = time.perf_counter()
    with pytest.raises(BackendCapabilityError, match=words):
        session.run(None, {"X": np.broadcast_to(np.float32(1), shape)})
    assert time.perf_counter() - start < 5 and session.backend_session.artifacts == []


# -- ORT parity -----------------------------------------------------------------------------------
def test_a_size_zero_dim_returns_the_empty_output_as_ort():
    data = _relu_model(("N", 4))
    x = np.zeros((0, 4), np.float32)
    got = onnxwrapper.InferenceSession(data, backend="qnn").run(None, {"X": x})
    ref = onnxruntime.InferenceSession(data).run(None, {"X": x})
    assert [a.shape for a in got] == [a.shape for a in ref] == [(0, 4)] and got[0].dtype == ref[0].dtype


@pytest.mark.parametrize("sess_options", ["abc", 5])
def test_sess_options_of_another_type_raise_orts_type_error(sess_options):
    data = models.mul_1()
    with pytest.raises(TypeError) as ref:
        onnxruntime.InferenceSession(data, sess_options)
    with pytest.raises(TypeError) as got:
        onnxwrapper.InferenceSession(data, sess_options, backend="qnn")
    assert str(got.value).splitlines()[0] == str(ref.value).splitlines()[0]


def test_falsy_sess_options_mean_none_as_in_ort():
    x = np.ones((3, 2), np.float32)
    ref = onnxruntime.InferenceSession(models.mul_1(), {}).run(None, {"X": x})[0]
    np.testing.assert_allclose(onnxwrapper.InferenceSession(models.mul_1(), {}, backend="qnn").run(None, {"X": x})[0],
                               ref, atol=1e-2)


_READ_ONLY = """
import json, sys, numpy as np, onnxwrapper
out = []
for path in sys.argv[2:]:
    s = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"cache_dir": sys.argv[1]})
    s.run(None, {"X": np.ones((1, 3, 8, 8), np.float32)})
    out.append(s.backend_session.artifacts[0].origin)
print(json.dumps(out))
"""


def _read_only_prefix(folder) -> list | None:
    """A command prefix under which ``folder`` is read-only, or None when this host cannot make one."""
    if os.name != "posix":
        return None
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(folder)], check=True)
        return []
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        return None
    return ["unshare", "-rm", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
            str(folder)]


def test_a_read_only_populated_cache_is_used_and_a_miss_compiles_elsewhere(tmp_path):
    """A cache shipped inside an application: hits need no lock file; a miss compiles into a temporary
    cache with one warning, instead of refusing the model."""
    import sys

    cache, known, unknown = tmp_path / "cache", tmp_path / "known.onnx", tmp_path / "unknown.onnx"
    known.write_bytes(models.smallconv(batch=1, seed=41))
    unknown.write_bytes(models.smallconv(batch=1, seed=42))
    onnxwrapper.InferenceSession(str(known), backend="qnn", backend_options={"cache_dir": str(cache)})
    prefix = _read_only_prefix(cache)
    if prefix is None:
        pytest.skip("cannot make a read-only folder here (needs a non-root user, or root with unshare)")
    try:
        proc = subprocess.run(prefix + [sys.executable, "-c", _READ_ONLY, str(cache), str(known), str(unknown)],
                              capture_output=True, text=True, timeout=300, env=dict(os.environ))
    finally:
        if os.geteuid() != 0:
            subprocess.run(["chmod", "-R", "u+w", str(cache)], check=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == ["cache", "compiled"]
    assert proc.stderr.count("is read-only") == 1


# -- fp32 graphs the simulator cannot finalize ----------------------------------------------------
def test_fp32_of_an_unsupported_op_runs_on_the_cpu_or_is_a_typed_error_saying_what_to_do_under_strict():
    with pytest.raises(CompileFailedError) as info:
        onnxwrapper.InferenceSession(cf_models.gather_embedding(), backend="qnn",
                                     backend_options={"precision": "fp32", "strict": True})
    text = str(info.value)
    assert "fp32 mode cannot finalize" in text and "Gather ×1" in text and "precision='fp16'" in text
    assert info.value.error_name == "QNN_COMMON_ERROR_MEM_ALLOC" and "MEM_ALLOC" in str(info.value.__cause__)
    ids = np.array([[1, 2, 3, 7]], np.int64)
    ref = onnxruntime.InferenceSession(cf_models.gather_embedding()).run(None, {"ids": ids})[0]
    with pytest.warns(PartialOffloadWarning, match="QNN_COMMON_ERROR_MEM_ALLOC"):  # the recovery ladder: the CPU
        fp32 = onnxwrapper.InferenceSession(cf_models.gather_embedding(), backend="qnn",
                                            backend_options={"precision": "fp32"})
    np.testing.assert_array_equal(fp32.run(None, {"ids": ids})[0], ref)
    fp16 = onnxwrapper.InferenceSession(cf_models.gather_embedding(), backend="qnn")  # FP16 compiles it
    np.testing.assert_allclose(fp16.run(None, {"ids": ids})[0], ref, atol=1e-2)


# -- NaN / Inf feeds on FP16 targets -------------------------------------------------------------
@pytest.mark.parametrize("batch", [1, "N"])
def test_nonfinite_feeds_warn_once_per_session_on_fp16(batch):
    data = models.smallconv(batch=batch, seed=51)
    x = np.random.default_rng(0).random((1, 3, 8, 8), np.float32)
    bad = x.copy()
    bad[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    session = onnxwrapper.InferenceSession(data, backend="qnn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session.run(None, {"X": x})
        for _ in range(3):
            session.run(None, {"X": bad})
    found = [w for w in caught if issubclass(w.category, NonFiniteInputWarning)]
    assert len(found) == 1 and "1 NaN / 1 +Inf / 1 -Inf" in str(found[0].message)
    assert found[0].filename == __file__  # attributed to the user's run() call
    if batch == 1:
        assert "run" in vars(session)  # after the warning, run() is ORT's own again (no per-run cost)
    again = onnxwrapper.InferenceSession(data, backend="qnn")
    with pytest.warns(NonFiniteInputWarning):  # once per *session*
        again.run(None, {"X": bad})


def test_nonfinite_feeds_do_not_warn_in_fp32():
    data = models.smallconv(batch=1, seed=52)
    bad = np.full((1, 3, 8, 8), np.nan, np.float32)
    session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"precision": "fp32"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", NonFiniteInputWarning)
        session.run(None, {"X": bad})


def test_aipc_says_a_dynamic_session_is_compiled_at_run_not_that_it_runs_on_cpu():
    """The one-line placement of ``aipc -v`` for a dynamic-shape session before its first run (a
    pending partition report, no nodes yet) is not 'runs on CPU'."""
    from aipc_loader._report import _placement

    session = onnxwrapper.InferenceSession(models.smallconv(batch="N", seed=53), backend="qnn")
    line = _placement(session, {"report": session.backend_session.partition()})
    assert "not compiled yet" in line and "runs on CPU" not in line
