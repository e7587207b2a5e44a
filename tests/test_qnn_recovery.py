"""The recovery ladder of the qnn backend: a compile the HTP cannot finalize (or that runs past its
budget) is rescued by options, a batch split or a graph split, or runs its failing nodes on the CPU
(typed error under strict), and a second session replays what worked. Real simulator failures where
they are cheap (fp32 long rows, fp32 Erf GELU, a budget the compiler's own start-up exceeds); a
batch-dependent failure injected at the compile-worker seam (``_pipeline.default_pool``)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import EPFail

import onnxwrapper
from onnxwrapper.errors import CompileBudgetError, CompileFailedError
from onnxwrapper.kernel import PartialOffloadWarning
from tests import recovery_models as rm
from tests.conftest import qnn_available

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]

_MEM_ALLOC = ("[ONNXRuntimeError] : 11 : EP_FAIL : Failed to finalize QNN graph. Error: QNN_COMMON_ERROR_MEM_ALLOC: "
              "Memory allocation related error., Code: 1002")


def _cpu(data: bytes, feed):
    return onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)


def _rungs(report) -> list[tuple[str, str]]:
    return [(step["rung"], step["result"]) for step in report.recovery]


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "cache")


def test_an_fp32_row_beyond_vtcm_is_rescued_by_the_vtcm_option_and_replayed(cache, caplog):
    data = rm.long_row()
    x = np.random.default_rng(0).standard_normal((1, 2048, 1024)).astype(np.float32)
    options = {"precision": "fp32", "cache_dir": cache}
    session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options=options)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.maximum(x, 0))
    report = session.get_partition()
    assert _rungs(report) == [("as given", "failed"), ("options", "compiled")]
    assert report.recovery[0]["error"] == "QNN_COMMON_ERROR_MEM_ALLOC 1002" and report.fully_offloaded
    assert "recovered by options (vtcm_mb=8) after QNN_COMMON_ERROR_MEM_ALLOC 1002" in report.summary()
    with caplog.at_level(logging.INFO, logger="onnxwrapper.qnn"):
        again = onnxwrapper.InferenceSession(data, backend="qnn", backend_options=options)
    assert "failed to compile before; using the recorded recovery (options)" in caplog.text
    assert "compiling the model (bytes) for the QNN HTP" not in caplog.text  # nothing compiled again
    assert again.get_partition().recovery == report.recovery


def test_an_fp32_gelu_net_runs_split_with_the_cpus_answers_and_strict_refuses_typed(cache):
    data = rm.gelu_net(batch=1)
    x = np.random.default_rng(1).standard_normal((1, 4, 64)).astype(np.float32)
    with pytest.warns(PartialOffloadWarning, match="recovered by graph split"):
        session = onnxwrapper.InferenceSession(data, backend="qnn",
                                               backend_options={"precision": "fp32", "cache_dir": cache})
    np.testing.assert_allclose(session.run(None, {"x": x})[0], _cpu(data, {"x": x})[0], atol=1e-5)
    report = session.get_partition()
    assert _rungs(report)[0] == ("as given", "failed") and report.recovery[-1]["rung"] == "graph split"
    assert report.target_nodes > 0 and report.offloaded_nodes  # most on the NPU, what fails on the CPU
    with pytest.raises(CompileFailedError) as info:
        onnxwrapper.InferenceSession(data, backend="qnn",
                                     backend_options={"precision": "fp32", "cache_dir": cache, "strict": True})
    error = info.value
    assert isinstance(error, EPFail)  # `except EPFail` keeps working
    assert (error.error_name, error.error_code, error.rung) == ("QNN_COMMON_ERROR_MEM_ALLOC", 1002, "graph split")
    assert error.largest and "float32" in error.largest and "strict=True forbids" in str(error)
    assert "the model (bytes)" in str(error) and "fp32 mode cannot finalize" in str(error)


class _BatchFailingPool:
    """The compile-worker seam with a batch-dependent failure: every compile of a model whose first
    input has a batch above 1 fails as the simulator fails (ORT's EPFail, MEM_ALLOC 1002)."""

    def __init__(self, real) -> None:
        self.real, self.failed = real, 0

    def run(self, request):
        model = onnx.load_from_string(request.model if isinstance(request.model, bytes) else open(request.model, "rb").read())
        dims = model.graph.input[0].type.tensor_type.shape.dim
        if dims and dims[0].dim_value > 1:
            self.failed += 1
            raise EPFail(_MEM_ALLOC)
        return self.real.run(request)


@pytest.fixture
def batch_failing(monkeypatch):
    from onnxwrapper.backends.qnn import _pipeline

    pool = _BatchFailingPool(_pipeline.default_pool())
    monkeypatch.setattr(_pipeline, "default_pool", lambda: pool)
    return pool


@pytest.mark.parametrize("batch", ["N", 4])
def test_a_per_sample_model_failing_at_batch_4_runs_as_4_calls_of_batch_1(cache, batch_failing, batch):
    data = rm.gelu_net(batch=batch, length=32)
    x = np.random.default_rng(2).standard_normal((4, 4, 32)).astype(np.float32)
    session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": cache})
    np.testing.assert_allclose(session.run(None, {"x": x})[0], _cpu(data, {"x": x})[0], atol=3e-2)
    report = session.get_partition()
    assert _rungs(report) == [("as given", "failed"), ("batch split", "failed"), ("batch split", "compiled")]
    assert report.recovery[-1]["detail"] == "4× batch 1" and report.fully_offloaded
    assert batch_failing.failed == 2  # batch 4, then batch 2


@pytest.mark.parametrize("name", sorted(rm.MIXING))
def test_a_batch_mixing_model_is_never_batch_split(cache, batch_failing, name):
    data, why = rm.MIXING[name]
    shape = [4, 8] if "attention" in name or "reshape" in name else [4, 4, 6]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialOffloadWarning)
        session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": cache})
        got = session.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, _cpu(data, {"x": x})[0], atol=3e-2)
    steps = session.get_partition().recovery
    split = [s for s in steps if s["rung"] == "batch split"]
    assert split == [{"rung": "batch split", "result": "skipped", "detail": split[0]["detail"]}] and why in split[0]["detail"]
    assert steps[-1]["rung"] in ("graph split", "cpu")


def test_a_compile_past_its_budget_is_stopped_and_ends_on_the_cpu_or_typed_under_strict(cache):
    data = rm.gelu_net(batch=1, length=16)
    x = np.random.default_rng(4).standard_normal((1, 4, 16)).astype(np.float32)
    budget = {"cache_dir": cache, "compile_memory_mb": 1}  # below the compiler process's own start-up memory
    with pytest.raises(CompileBudgetError) as info:
        onnxwrapper.InferenceSession(data, backend="qnn", backend_options=dict(budget, strict=True))
    assert info.value.budget == "memory" and info.value.rung == "graph split" and info.value.peak_mb > 1
    with pytest.warns(PartialOffloadWarning, match="budget:memory"):
        session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options=budget)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], _cpu(data, {"x": x})[0], rtol=1e-6, atol=1e-6)
    report = session.get_partition()  # nothing compiled: ORT's CPU session of the model runs it all
    assert report.target_nodes == 0 and report.recovery[-1]["rung"] == "cpu"
    with pytest.raises(CompileFailedError, match="budget:memory"):  # remembered: no compile tried again
        onnxwrapper.InferenceSession(data, backend="qnn", backend_options=dict(budget, strict=True))
    assert "compile_memory_mb" in str(info.value)


def test_progress_lines_name_the_rung_and_the_elapsed_time(monkeypatch, caplog):
    from onnxwrapper.backends.qnn import _budget

    monkeypatch.setattr(_budget, "PROGRESS_AFTER_S", 0.0)
    watch = _budget.CompileWatch(None, "m.onnx [x=3x1x7500]", "graph split", 60.0, None)
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.qnn"):
        assert watch.check() is None
        assert watch.check() is None  # the next line only PROGRESS_EVERY_S later
    assert [r.getMessage() for r in caplog.records] == [
        "onnxwrapper qnn: still compiling m.onnx [x=3x1x7500] for the QNN HTP (graph split): 0 s (budget 60 s)"]
    assert _budget.CompileWatch(None, "m", "", 1e-9, None).check() == "time"
