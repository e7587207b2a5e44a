"""Sessions of models the QNN EP takes no node of: one ORT CPU session for every shape, the verdict found
once (the static op table, the candidate ops compiled alone, or one shape's compile) and remembered."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import onnxruntime
import pytest

import onnxwrapper
from onnxwrapper.kernel import PartialOffloadWarning
from tests.conftest import qnn_available

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "cache")


def _cpu(data: bytes, feed):
    return onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)


# -- a model the NPU can take no node of -----------------------------------------------------------
def test_a_model_without_a_qnn_op_is_one_cpu_session_whatever_the_shapes(cache, caplog):
    from onnxwrapper.backends.qnn.session._no_node import QnnCpuSession
    from tests.models import tree_ensemble_dynamic

    data = tree_ensemble_dynamic()
    with caplog.at_level(logging.INFO, logger="onnxwrapper"), warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialOffloadWarning)  # once per model and process (other tests use it)
        session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": cache})
        for n in (1, 2, 7):
            x = np.random.default_rng(n).random((n, 3)).astype(np.float32)
            for a, b in zip(session.run(None, {"X": x}), _cpu(data, {"X": x})):
                np.testing.assert_array_equal(a, b)
    assert isinstance(session.backend_session, QnnCpuSession)
    assert session.get_partition().source == "predicted" and session.get_inputs()[0].shape == [None, 3]
    assert caplog.text.count("took none of the 1 node(s)") == 1  # the text of the one warning
    assert "for the QNN HTP" not in caplog.text and "specialization" not in caplog.text
    with pytest.raises(onnxwrapper.PartitionError):
        onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": cache, "strict": True})


def test_a_model_whose_builder_ops_the_ep_refuses_is_found_out_once_and_remembered(cache, caplog, monkeypatch):
    """A tree ensemble whose label goes through a ``Cast`` to double (the QNN EP has a builder for Cast
    but refuses it): handed over as bytes, dynamic batch. Its candidate op compiled alone gives the
    verdict at once — one CPU session for every batch, no "compiling … for the QNN HTP" line. It looks
    like classical ML (an ``ai.onnx.ml`` op), so the compile worker finds the verdict: the user's process
    does not parse the model, not even on the first open; the next session reads the verdict from the
    cache."""
    from onnxwrapper.backends.qnn.session._no_node import QnnCpuSession
    from onnxwrapper.kernel import ModelSource
    from tests.models import tree_ensemble_dynamic

    data = tree_ensemble_dynamic(cast_label=True)
    with caplog.at_level(logging.INFO, logger="onnxwrapper"), warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialOffloadWarning)
        with monkeypatch.context() as patch:
            patch.setattr(ModelSource, "load_proto", lambda self: pytest.fail("the model was parsed here"))
            session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": cache})
        assert session.get_partition().source == "predicted"
        for n in (2, 5):
            x = np.random.default_rng(n).random((n, 3)).astype(np.float32)
            for a, b in zip(session.run(None, {"X": x}), _cpu(data, {"X": x})):
                np.testing.assert_array_equal(a, b)
        assert isinstance(session.backend_session, QnnCpuSession) and session.get_partition().target_nodes == 0
        assert "for the QNN HTP" not in caplog.text and "the QNN EP takes none of its 2 node(s)" in caplog.text
        monkeypatch.setattr(ModelSource, "load_proto", lambda self: pytest.fail("the model was parsed"))
        again = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": cache})
    assert isinstance(again.backend_session, QnnCpuSession) and again.get_partition().source == "cache"


def test_a_classical_ml_model_the_ep_takes_a_node_of_is_compiled_as_always(cache):
    """The worker's verdict is a shortcut, never a decision: an ``ai.onnx.ml`` model with a ``Mul`` the
    QNN EP takes gets no verdict, and the session partitions and compiles as any other."""
    from onnxwrapper.backends.qnn.session._no_node import QnnCpuSession
    from tests.models import tree_ensemble_dynamic

    data = tree_ensemble_dynamic(scaled_probs=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialOffloadWarning)
        session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": cache})
        x = np.random.default_rng(3).random((4, 3)).astype(np.float32)
        got, want = session.run(None, {"X": x}), _cpu(data, {"X": x})
    assert not isinstance(session.backend_session, QnnCpuSession)
    assert session.get_partition().target_nodes == 1  # the Mul
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=2e-3)


def test_without_a_probe_a_no_node_verdict_from_one_shape_serves_every_shape(cache, caplog, monkeypatch):
    """When the probe cannot decide (say, too many candidate nodes), the first shape's compile gives the
    verdict for the whole model: the other shapes are not compiled."""
    from onnxwrapper.backends.qnn import _backend
    from onnxwrapper.backends.qnn.open import _open
    from tests.models import tree_ensemble_dynamic

    monkeypatch.setattr(_backend, "first_no_node", lambda *args: False)
    monkeypatch.setattr(_open, "probe_no_node", lambda setup, proto: None)
    data = tree_ensemble_dynamic(cast_label=True)
    with caplog.at_level(logging.INFO, logger="onnxwrapper.qnn"), warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialOffloadWarning)
        session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": cache,
                                                                                     "shape_buckets": False})
        for n in (1, 3, 4):
            session.run(None, {"X": np.ones((n, 3), np.float32)})
    assert caplog.text.count("for the QNN HTP") == 1, caplog.text
    assert session.get_partition().target_nodes == 0
