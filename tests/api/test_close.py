"""``InferenceSession.close()`` means one thing on every backend: release, idempotent, then every
run method raises ``SessionClosedError`` (also onnxruntime's ``Fail``)."""

from __future__ import annotations

import numpy as np
import pytest
from onnxruntime.capi import onnxruntime_pybind11_state as C

import onnxwrapper
from onnxwrapper._registry import default_registry
from onnxwrapper.errors import SessionClosedError
from tests import models
from tests.conftest import qnn_available
from tests.api.test_backends_registry import FakeForeignBackend

needs_qnn = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
MESSAGE = r"the session was closed with close\(\); create a new InferenceSession"


def _run_methods(sess, feed):
    ort_values = {name: onnxwrapper.OrtValue.ortvalue_from_numpy(value) for name, value in feed.items()}
    return {
        "run": lambda: sess.run(None, feed),
        "run_with_ort_values": lambda: sess.run_with_ort_values(None, ort_values),
        "run_async": lambda: sess.run_async(None, feed, lambda *args: None, None),
        "run_with_iobinding": lambda: sess.run_with_iobinding(None),
    }


def _check_closed(sess, feed):
    inputs = [i.name for i in sess.get_inputs()]
    sess.close()
    sess.close()  # idempotent
    for method, call in _run_methods(sess, feed).items():
        with pytest.raises(SessionClosedError, match=MESSAGE) as info:
            call()
        assert isinstance(info.value, C.Fail) and method in str(info.value), method
        assert info.value.backend == sess.backend_name
    undo = onnxwrapper.add_run_observer(lambda **record: None)  # the observed path checks too
    try:
        with pytest.raises(SessionClosedError):
            sess.run(None, feed)
    finally:
        undo()
    with pytest.raises(SessionClosedError):  # the fast path is not restored for a closed session
        sess.run(None, feed)
    assert [i.name for i in sess.get_inputs()] == inputs  # metadata stays readable


def test_cpu_close_releases_and_later_runs_raise():
    feed = {"X": np.ones((3, 2), np.float32)}
    sess = onnxwrapper.InferenceSession(models.mul_1(), backend="cpu")
    assert "run" in vars(sess)  # ORT's own run, bound on the instance (no observer)
    sess.run(None, feed)
    _check_closed(sess, feed)
    assert sess._sess is None
    with pytest.raises(SessionClosedError):
        sess.io_binding()


def test_foreign_close_releases_and_later_runs_raise():
    registry = default_registry()
    registry.register(FakeForeignBackend)
    try:
        feed = {"X": np.ones((3, 2), np.float32)}
        sess = onnxwrapper.InferenceSession(models.mul_1(), backend="fakeforeign")
        sess.run(None, feed)
        _check_closed(sess, feed)
    finally:
        registry.unregister("fakeforeign")


@needs_qnn
@pytest.mark.qnn
def test_qnn_static_close_releases_and_later_runs_raise():
    feed = {"X": np.ones((1, 3, 8, 8), np.float32)}
    sess = onnxwrapper.InferenceSession(models.smallconv(batch=1, seed=21), backend="qnn")
    sess.run(None, feed)
    _check_closed(sess, feed)


@needs_qnn
@pytest.mark.qnn
def test_qnn_dynamic_close_releases_specializations_and_does_not_recompile():
    feed = {"X": np.ones((2, 3, 8, 8), np.float32)}
    sess = onnxwrapper.InferenceSession(models.smallconv(batch="N", seed=22), backend="qnn")
    sess.run(None, feed)
    backend_session = sess.backend_session
    assert len(backend_session._live) == 1
    _check_closed(sess, feed)
    assert backend_session._live == {} and len(backend_session.artifacts) == 1  # nothing was compiled again
