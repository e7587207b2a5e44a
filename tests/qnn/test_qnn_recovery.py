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
from tests import models
from tests import recovery_models as rm
from tests.conftest import qnn_available

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]

_MEM_ALLOC = ("[ONNXRuntimeError] : 11 : EP_FAIL : Failed to finalize QNN graph. Error: QNN_COMMON_ERROR_MEM_ALLOC: "
              "Memory allocation related error., Code: 1002")


def _cpu(data: bytes, feed):
    return onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)


def _rungs(report) -> list[tuple[str, str]]:
    return [(step["rung"], step["result"]) for step in report.recovery]


def _split_fp32_with_the_cpus_answers(data: bytes, cache: str):
    """The partition report of an fp32 session of ``data`` (x float[1, 4, 64]) that the recovery
    ladder split, after checking its answer against onnxruntime on the CPU."""
    x = np.random.default_rng(1).standard_normal((1, 4, 64)).astype(np.float32)
    with pytest.warns(PartialOffloadWarning, match="recovered by graph split"):
        session = onnxwrapper.InferenceSession(data, backend="qnn",
                                               backend_options={"precision": "fp32", "cache_dir": cache})
    np.testing.assert_allclose(session.run(None, {"x": x})[0], _cpu(data, {"x": x})[0], atol=1e-5)
    return session.get_partition()


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
    report = _split_fp32_with_the_cpus_answers(data, cache)
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


def test_a_split_keeps_constants_and_what_is_computed_from_them_inside_each_part(cache):
    """silero-vad's models at fp32: ``Constant`` nodes, and values computed from constants only (pads
    through a ``Transpose``), are copied into each range that reads them, never cut into a range of
    their own (ORT folds such a range away, and the next part's ``EPContext`` node then reads an
    initializer: "The count of graph inputs should be at least the count of tensor_wrapper")."""
    from onnxwrapper.backends.qnn.recovery._graph_split import SplitRange, _order, range_parts

    data = rm.padded_gelu_net()
    model = onnx.load_from_string(data)
    names = [model.graph.node[i].name for i in _order(model)]
    assert names[0] == "pad" and "pads_transpose" not in names and "s" not in names
    parts = range_parts(model, [SplitRange(0, 2, "npu"), SplitRange(2, len(names), "npu")])
    copied = [[model.graph.node[i].name for i in p.copies] for p in parts]
    assert copied[0] == ["pads_by_axis", "flat", "pads_transpose", "pads_reshape", "pads_cast"]
    assert copied[1] == ["s", "one", "half"] and all(p.inputs for p in parts)
    report = _split_fp32_with_the_cpus_answers(data, cache)
    assert report.recovery[-1]["rung"] == "graph split" and report.recovery[-1]["result"] == "compiled"
    assert [n.op_type for n in report.nodes if n.ep != "QNNExecutionProvider"] == ["Erf"]


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
    from onnxwrapper.backends.qnn.pipeline import _pipeline

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
    from onnxwrapper.backends.qnn.compile import _budget

    monkeypatch.setattr(_budget, "PROGRESS_AFTER_S", 0.0)
    watch = _budget.CompileWatch(None, "m.onnx [x=3x1x7500]", "graph split", 60.0, None)
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.qnn"):
        assert watch.check() is None
        assert watch.check() is None  # the next line only PROGRESS_EVERY_S later
    assert [r.getMessage() for r in caplog.records] == [
        "onnxwrapper qnn: still compiling m.onnx [x=3x1x7500] for the QNN HTP (graph split): 0 s (budget 60 s)"]
    assert _budget.CompileWatch(None, "m", "", 1e-9, None).check() == "time"


# -- the batch-split proof, checked against onnxruntime on the CPU --------------------------------
@pytest.mark.parametrize("name", sorted(rm.PER_SAMPLE) + ["unet1d"])
def test_a_proven_per_sample_model_gives_the_same_answer_in_chunks_on_the_cpu(name):
    """What the batch split runs (the rebatched model, chunk by chunk, outputs concatenated) equals
    onnxruntime's answer for the whole batch, for each model the proof accepts."""
    from onnxruntime.tools.onnx_model_utils import make_input_shape_fixed

    from onnxwrapper.backends.qnn.recovery._batch_proof import BatchPlan, batch_plan
    from onnxwrapper.backends.qnn.recovery._batch_split import BatchSplitRunner, rebatch

    data = rm.unet1d(length=250, chans=(8, 16)) if name == "unet1d" else rm.PER_SAMPLE[name]
    model = onnx.load_from_string(data)
    rng = np.random.default_rng(5)
    feed = {}
    for vi in model.graph.input:
        dims = [6] + [d.dim_value or 250 for d in vi.type.tensor_type.shape.dim[1:]]
        make_input_shape_fixed(model.graph, vi.name, dims)
        feed[vi.name] = rng.standard_normal(dims).astype(np.float32)
    static = onnx.shape_inference.infer_shapes(model)
    plan = batch_plan(static, 6)
    assert isinstance(plan, BatchPlan), plan
    for chunk in (3, 2, 1):
        sub = onnxruntime.InferenceSession(rebatch(static, plan, chunk).SerializeToString(),
                                           providers=["CPUExecutionProvider"])
        got = BatchSplitRunner(sub, plan, chunk).run(None, feed)
        for a, b in zip(got, _cpu(data, feed)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(rm.MIXING))
def test_the_proof_names_why_a_mixing_model_cannot_be_split(name):
    from onnxruntime.tools.onnx_model_utils import make_input_shape_fixed

    from onnxwrapper.backends.qnn.recovery._batch_proof import batch_plan

    data, why = rm.MIXING[name]
    model = onnx.load_from_string(data)
    vi = model.graph.input[0]
    make_input_shape_fixed(model.graph, vi.name, [4] + [d.dim_value for d in vi.type.tensor_type.shape.dim[1:]])
    reason = batch_plan(onnx.shape_inference.infer_shapes(model), 4)
    assert isinstance(reason, str) and why in reason


# -- loaded contexts budgeted by memory ------------------------------------------------------------
def test_a_decoder_whose_shape_grows_runs_40_steps_within_a_lowered_context_budget(cache, caplog):
    data = rm.growing_decoder(dim=256)
    session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={  # one context per step
        "cache_dir": cache, "context_memory_mb": 1, "shape_buckets": False})
    rng = np.random.default_rng(6)
    live = []
    with caplog.at_level(logging.INFO, logger="onnxwrapper.qnn"):
        for step in range(1, 41):
            x = rng.standard_normal((1, step, 256)).astype(np.float32)
            np.testing.assert_allclose(session.run(None, {"x": x})[0], _cpu(data, {"x": x})[0], atol=3e-2)
            live.append(session.backend_session._live_mb())
    sizes = [s.nbytes for s in session.backend_session._live.values()]
    assert min(sizes) > 256 * 1024 and max(live) <= 1 + max(sizes) / 2**20  # over budget by one context at most
    assert caplog.text.count("released a specialization") >= 40 - len(sizes)


def test_a_context_load_failing_for_memory_releases_others_and_retries_then_fails_typed():
    """The session's build seam (``QnnDynamicSession(build=…)``) loads contexts; a load that fails as
    the simulator's does past ~2.9 GiB (ORT's InvalidGraph, measured text) releases the least
    recently used context and retries; with nothing left to release it is a ContextLoadError."""
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidGraph

    from onnxwrapper.backends.qnn.session._session import ArtifactInfo, QnnDynamicSession
    from onnxwrapper.errors import ContextLoadError
    from onnxwrapper.kernel import PartitionReport

    data = rm.PER_SAMPLE["mlp-softmax"]
    failing = "[ONNXRuntimeError] : 10 : INVALID_GRAPH : Failed to load from EpContext model. contextCreateFromBinary " \
              "failed. Error: QNN_COMMON_ERROR_MEM_ALLOC: Memory allocation related error."
    limit = {"live": 2}
    session: QnnDynamicSession

    def build(signature, feed=None):
        if len(session._live) >= limit["live"]:
            raise InvalidGraph(failing)
        cpu = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
        report = PartitionReport("QNNExecutionProvider", (), (), "compile")
        return cpu, PartitionReport.from_dict(dict(report.to_dict(), nodes=[{"name": "mm", "op_type": "MatMul",
                                                                             "domain": "", "ep": "QNNExecutionProvider"}])), \
            ArtifactInfo("compiled", "")

    session = QnnDynamicSession(data, None, {}, build=build, dynamic_names=["x"], ep_options={}, max_specializations=8,
                                strict=False, label="m", warn_key="m")
    for n in range(1, 6):
        x = np.ones((n, 8), np.float32)
        np.testing.assert_allclose(session.run(None, {"x": x})[0], _cpu(data, {"x": x})[0], rtol=1e-6)
        assert len(session._live) <= 2
    limit["live"] = 0
    with pytest.raises(ContextLoadError) as info:
        session.run(None, {"x": np.ones((9, 8), np.float32)})
    assert info.value.error_name == "QNN_COMMON_ERROR_MEM_ALLOC" and isinstance(info.value, EPFail)
    assert not session._live


# -- the 1-D conv U-Net pattern under aipc ----------------------------------------------------------
_UNET_APP = """
import sys
import numpy as np
import onnxruntime as ort

rng = np.random.default_rng(7)
a = rng.standard_normal((3, 1, 250)).astype(np.float32)
b = rng.standard_normal((3, 15, 250)).astype(np.float32)
prob = ort.InferenceSession("unet1d.onnx").run(None, {"a": a, "b": b})[0]
np.save(sys.argv[1], prob)
print("detections", int((prob > 0.5).sum()))
"""


def test_the_unet_stand_in_runs_to_the_end_under_aipc_in_fp32_with_the_cpus_answers(tmp_path):
    """The 1-D conv U-Net pattern (Conv1d, Erf GELU, ConvTranspose, inputs [n,1,L] + [n,15,L]) at a
    small size: fp32 simulation fails to finalize it whole (the fused GELU); the ladder splits it and
    the unchanged app ends with the CPU's detections (benchmarks/calibrate/calibrate_recovery.py: [3,·,7500])."""
    from tests.test_loader_support import aipc, run

    (tmp_path / "unet1d.onnx").write_bytes(rm.unet1d(length=250, chans=(8, 16)))
    (tmp_path / "app.py").write_text(_UNET_APP)
    cpu = run(["app.py", str(tmp_path / "cpu.npy")], cwd=tmp_path)
    npu = aipc(["--backend", "qnn", "--precision", "fp32", "--cache-dir", str(tmp_path / "cache"), "app.py",
                str(tmp_path / "npu.npy")], cwd=tmp_path)
    assert cpu.returncode == 0 and npu.returncode == 0, npu.stderr[-3000:]
    assert npu.stdout == cpu.stdout and "recovered by graph split" in npu.stderr
    np.testing.assert_allclose(np.load(tmp_path / "npu.npy"), np.load(tmp_path / "cpu.npy"), atol=1e-5)
    assert "Traceback" not in npu.stderr


# -- the total compile budget of a model ---------------------------------------------------------------
def test_past_its_total_budget_a_model_runs_on_the_cpu_with_one_line_and_strict_raises(cache, recwarn):
    """All compiles of one model's ladder share ``compile_budget``: with (almost) none, the compile is
    stopped, no rung is tried, the session runs on ORT's CPU with one warning naming the budget and
    the precompile command; under strict the typed error, ``budget == "total"``."""
    from onnxwrapper.errors import CompileBudgetError

    data = models.smallconv(batch=1, seed=71)
    options = {"cache_dir": cache, "compile_budget": 1e-6}  # spent before the first compile starts
    session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options=options)
    x = np.ones((1, 3, 8, 8), np.float32)
    np.testing.assert_array_equal(session.run(None, {"X": x})[0], _cpu(data, {"X": x})[0])  # the CPU's own answer
    assert session.get_partition().target_nodes == 0
    lines = [str(w.message) for w in recwarn if "total budget" in str(w.message)]
    assert len(lines) == 1 and "aipc compile --from-capture" in lines[0] and "for the rest of this run" in lines[0]
    with pytest.raises(CompileBudgetError) as caught:
        onnxwrapper.InferenceSession(models.smallconv(batch=1, seed=72), backend="qnn",
                                     backend_options=dict(options, strict=True))
    assert caught.value.budget == "total"
