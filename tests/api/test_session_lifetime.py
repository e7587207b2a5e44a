"""A session is freed when its last reference goes, without the cyclic garbage collector (issue 34).

With the collector disabled, a dropped ``InferenceSession`` (and its backend session: ORT session,
HTP context, on Windows ARM64 its mapped context binaries) must be freed at once: nothing it holds
may refer back to it. Checked with a weakref callback, for the cpu backend and for qnn sessions of
a static and of a dynamic-shape model (the latter compiled per shape, with run plans).
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import onnxwrapper
from tests import models
from tests.conftest import qnn_available


def _freed_after_drop(model: bytes, backend: str, feed: dict, runs: int = 3) -> list[str]:
    """Open, run ``runs`` times (the run plans and fast path are built), drop; what was freed at once."""
    freed: list[str] = []
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        session = onnxwrapper.InferenceSession(model, backend=backend)
        for _ in range(runs):
            session.run(None, feed)
        facade = weakref.ref(session, lambda _r: freed.append("session"))
        inner = weakref.ref(session.backend_session, lambda _r: freed.append("backend session"))
        del session
        assert facade() is None and inner() is None, f"still alive without the cyclic collector: {freed}"
    finally:
        if was_enabled:
            gc.enable()
    return freed


def test_a_dropped_cpu_session_is_freed_without_the_cyclic_collector():
    assert sorted(_freed_after_drop(models.mul_1(), "cpu", {"X": np.ones((3, 2), np.float32)})) == [
        "backend session", "session"]


def test_a_run_taken_from_a_dropped_session_still_runs_as_in_ort():
    feed = {"X": np.ones((3, 2), np.float32)}
    assert onnxwrapper.InferenceSession(models.mul_1(), backend="cpu").run(None, feed)[0].shape == (3, 2)
    run = onnxwrapper.InferenceSession(models.mul_1(), backend="cpu").run  # holds the session, as ORT's does
    assert run(None, feed)[0].shape == run(None, feed)[0].shape == (3, 2)


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
@pytest.mark.parametrize("model, feed", [
    (models.mul_1, {"X": np.ones((3, 2), np.float32)}),                 # static: one EPContext session
    (models.smallconv, {"X": np.ones((1, 3, 8, 8), np.float32)}),       # dynamic: a specialization per shape
], ids=["static", "dynamic"])
def test_a_dropped_qnn_session_is_freed_without_the_cyclic_collector(model, feed):
    assert sorted(_freed_after_drop(model(), "qnn", feed)) == ["backend session", "session"]


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_a_run_taken_from_a_dropped_dynamic_qnn_session_still_runs():
    run = onnxwrapper.InferenceSession(models.smallconv(), backend="qnn").run  # the plans path, then a plan
    for batch in (1, 1, 2):
        assert run(None, {"X": np.ones((batch, 3, 8, 8), np.float32)})[0].shape[0] == batch
