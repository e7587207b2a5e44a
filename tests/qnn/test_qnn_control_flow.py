"""Control-flow models on the qnn backend: ``If`` nodes decided by the shapes and by rank-0 control
inputs are folded before compiling; ``Loop``/``Scan`` models run with the QNN EP taking the nodes
around them. The analysis and the fold are checked on the CPU EP too."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest

import onnxwrapper
from onnxwrapper.kernel import bind_inputs, control_scalars, fold_ifs, specialize
from onnxwrapper.kernel.model._control_flow import value_taint
from tests import cf_models
from tests.conftest import qnn_available

def _max_diff(got, ref) -> float:
    return max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(got, ref))


# -- the analysis and the fold, on the CPU EP ------------------------------------------------------------------
def test_control_scalars_are_the_inputs_that_decide_an_if():
    assert control_scalars(onnx.load_from_string(cf_models.if_lstm())) == ["sr"]
    assert control_scalars(onnx.load_from_string(cf_models.loop())) == []  # a trip count decides no branch
    assert control_scalars(onnx.load_from_string(cf_models.scan())) == []


def test_shape_readers_cut_value_dependence_unless_the_shape_depends_on_values():
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("Shape", ["r"], ["s"]),   # shape of data: static
             h.make_node("NonZero", ["x"], ["nz"]), h.make_node("Shape", ["nz"], ["s2"])]  # value-dependent shape
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])], [])
    tainted, shaped = value_taint(g, {"x"})
    assert "r" in tainted and "s" not in tainted and {"nz", "s2"} <= tainted and "nz" in shaped


@pytest.mark.parametrize("samples, sr", [(8, 16000), (4, 8000)])
def test_fold_gives_a_control_flow_free_model_with_the_same_outputs(samples, sr):
    """Binding ``sr``, fixing shapes and folding leaves no ``If`` and changes no output bit (CPU EP,
    ORT_ENABLE_ALL), where ORT's own ConstantFolding on the specialized model fails to load it."""
    model = onnx.load_from_string(cf_models.if_lstm())
    feed = cf_models.if_feeds(samples, sr)
    rest = {k: v for k, v in feed.items() if k != "sr"}
    static = specialize(bind_inputs(model, {"sr": feed["sr"]}), {k: v.shape for k, v in rest.items()})
    folded, count = fold_ifs(static, rest)
    assert count == 3 and not [n for n in folded.graph.node if n.op_type == "If"]
    ref = onnxruntime.InferenceSession(model.SerializeToString()).run(None, feed)
    assert _max_diff(onnxruntime.InferenceSession(folded.SerializeToString()).run(None, rest), ref) == 0.0
    if sr == 16000:  # what a specialization without the fold runs into (the dead 8 kHz branch at 8 samples)
        with pytest.raises(Exception, match="rank 3"):
            onnxruntime.InferenceSession(specialize(model, {k: v.shape for k, v in rest.items()}).SerializeToString())


# -- sessions on the HTP simulator ------------------------------------------------------------------------------
@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
@pytest.mark.parametrize("samples, sr", [(8, 16000), (4, 8000)])
def test_if_lstm_model_runs_on_qnn_like_ort(samples, sr):
    """silero-vad's structure: the rank-0 ``sr`` is part of the specialization; QNN takes every node."""
    data = cf_models.if_lstm(seed=3)
    feed = cf_models.if_feeds(samples, sr)
    session = onnxwrapper.InferenceSession(data, backend="qnn")
    got = session.run(None, feed)
    assert _max_diff(got, onnxruntime.InferenceSession(data).run(None, feed)) < 2e-2
    report = session.get_partition()
    assert report.fully_offloaded and report.counts == {"QNNExecutionProvider": report.target_nodes}
    artifact = session.backend_session.artifacts[-1]
    assert artifact.shapes == {"input": (1, samples), "state": (2, 1, 4)}


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_if_lstm_state_fed_back_over_many_calls_and_both_rates():
    """20 calls with the state fed back (silero's loop), then the other rate: one specialization each."""
    data = cf_models.if_lstm(seed=4)
    session, reference = onnxwrapper.InferenceSession(data, backend="qnn"), onnxruntime.InferenceSession(data)

    def stream(s, sr, samples):
        feed, outs = cf_models.if_feeds(samples, sr), []
        for i in range(20):
            out, state = s.run(None, feed)
            outs.append(out)
            feed = dict(feed, state=state, input=np.roll(feed["input"], i))
        return np.concatenate(outs)

    for sr, samples in ((16000, 8), (8000, 4)):
        assert float(np.abs(stream(session, sr, samples) - stream(reference, sr, samples)).max()) < 2e-2
    assert [dict(a.shapes) for a in session.backend_session.artifacts] == [
        {"input": (1, 8), "state": (2, 1, 4)}, {"input": (1, 4), "state": (2, 1, 4)}]


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_static_dims_model_with_a_control_input_is_specialized_per_value():
    """All dims static, only ``sr`` picks the branch: compiled per value of ``sr`` (ORT's EPContext
    generation of the unfolded model fails with an 'ORT in-memory address marker')."""
    data = cf_models.if_lstm(seed=5, static=True, stride8k=8)
    session, reference = onnxwrapper.InferenceSession(data, backend="qnn"), onnxruntime.InferenceSession(data)
    for sr in (16000, 8000):
        feed = cf_models.if_feeds(8, sr)
        assert _max_diff(session.run(None, feed), reference.run(None, feed)) < 2e-2
    assert session.get_partition().fully_offloaded and len(session.backend_session.artifacts) == 2


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
@pytest.mark.parametrize("static", [True, False])
def test_loop_and_scan_models_run_with_qnn_around_the_bodies(static):
    cases = [(cf_models.loop(static), {"x": np.ones((2, 4), np.float32), "M": np.array(3, np.int64)}),
             (cf_models.scan(static), {"x": np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)})]
    for data, feed in cases:
        with pytest.warns(onnxwrapper.PartialOffloadWarning) as caught:
            session = onnxwrapper.InferenceSession(data, backend="qnn")
            got = session.run(None, feed)
        assert caught[0].filename == __file__  # attributed to the user's call (open, or run when dynamic)
        assert _max_diff(got, onnxruntime.InferenceSession(data).run(None, feed)) < 2e-2
        counts = session.get_partition().counts
        assert counts["QNNExecutionProvider"] >= 2 and counts["CPUExecutionProvider"] >= 1


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_compile_model_binds_control_values_and_sessions_use_it_per_value(tmp_path):
    """``compile_model(..., input_values={"sr": 16000})`` next to the model is that specialization:
    used for sr=16000 (verified by its record), not for sr=8000 (compiled)."""
    from onnxwrapper.backends.qnn import compile_model
    from onnxwrapper.errors import BackendOptionError

    path = tmp_path / "vad.onnx"
    path.write_bytes(cf_models.if_lstm(seed=6))
    shapes = {"input": (1, 8), "state": (2, 1, 4)}
    with pytest.raises(BackendOptionError, match="input_values"):
        compile_model(str(path), tmp_path / "vad_ctx_16k.onnx", input_shapes=shapes)
    compile_model(str(path), tmp_path / "vad_ctx_16k.onnx", input_shapes=shapes, input_values={"sr": 16000})
    session, reference = onnxwrapper.InferenceSession(str(path), backend="qnn"), onnxruntime.InferenceSession(str(path))
    for sr, samples in ((16000, 8), (8000, 4)):
        feed = cf_models.if_feeds(samples, sr)
        assert _max_diff(session.run(None, feed), reference.run(None, feed)) < 2e-2
    assert [a.origin for a in session.backend_session.artifacts] == ["precompiled", "compiled"]


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
@pytest.mark.parametrize("static", [True, False])
def test_an_if_decided_by_data_stays_on_cpu_and_the_model_runs(static):
    """An ``If`` whose condition depends on data values is not folded; ORT cannot write an EPContext
    model around it (its branches hold initializers), so the model is compiled just in time: it runs,
    with the ``If`` on CPU, and answers as ORT."""
    data = cf_models.if_lstm_on_data(seed=7, static=static)
    feed = {k: v for k, v in cf_models.if_feeds(8, 16000).items() if k != "sr"}
    with pytest.warns(onnxwrapper.PartialOffloadWarning):
        session = onnxwrapper.InferenceSession(data, backend="qnn")
        got = session.run(None, feed)
    assert _max_diff(got, onnxruntime.InferenceSession(data).run(None, feed)) < 2e-2
    assert session.backend_session.artifacts[-1].origin == "jit"
    assert "If" in {n.op_type for n in session.get_partition().offloaded_nodes}
