"""A long run call on the QNN HTP simulator says so while it runs: progress lines on logger
``onnxwrapper.qnn``, the first of the process adding that this is the simulator's speed, not the
device's (a QDQ encoder: about 110 s a call on the simulator). No line for a call that is quick,
no watch at all on a device.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import onnxwrapper
from onnxwrapper.backends.qnn.session import _run_progress
from tests import models
from tests.conftest import qnn_available


@pytest.fixture
def quick_progress(monkeypatch):
    """Progress after 0.05 s, then every 0.15 s; the simulator note not said yet in this process."""
    monkeypatch.setattr(_run_progress, "RUN_PROGRESS_AFTER_S", 0.05)
    monkeypatch.setattr(_run_progress, "RUN_PROGRESS_EVERY_S", 0.15)
    monkeypatch.setattr(_run_progress._CALLS, "said", False)


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "onnxwrapper.qnn" and "a call of" in r.getMessage()]


def test_a_long_call_says_once_that_it_is_the_simulators_speed(quick_progress, caplog):
    watch = _run_progress.simulator_watch("'encoder.onnx'", simulated=True)
    slow = watch("run", lambda names, feed, options=None: time.sleep(0.4) or ["y"])
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.qnn"):
        assert slow(None, {}) == ["y"]  # what the call returns, unchanged
        first = _lines(caplog)
        assert watch("run", lambda: "quick")() == "quick"
        time.sleep(0.1)  # past the first line's time: a quick call left no line
        assert _lines(caplog) == first
        slow(None, {})
    lines = _lines(caplog)
    assert first and first[0].startswith("onnxwrapper qnn: a call of 'encoder.onnx' has been running for 0 s on the "
                                         "QNN HTP simulator — this is the speed of the QNN HTP simulator"), lines
    assert "not the device's" in first[0] and sum("not the device's" in line for line in lines) == 1, lines
    assert len(lines) > len(first)  # the second long call: lines again, without the note


def test_no_watch_on_a_device_nor_for_run_async():
    assert _run_progress.simulator_watch("'m.onnx'", simulated=False) is None
    watch = _run_progress.simulator_watch("'m.onnx'", simulated=True)
    impl = object()
    assert watch("run_async", impl) is impl


def _matmul(rows) -> bytes:
    w = (np.random.default_rng(0).standard_normal((1024, 1024)) / 32).astype(np.float32)
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "mm", [h.make_tensor_value_info("x", T.FLOAT, [rows, 1024])],
                     [h.make_tensor_value_info("y", T.FLOAT, [rows, 1024])], [nh.from_array(w, "w")])
    return models.make_model(g)


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
@pytest.mark.parametrize("rows", [256, "N"])  # a static session (ORT's own run) and a dynamic one (its plans)
def test_a_qnn_session_on_the_simulator_reports_its_long_calls(quick_progress, caplog, tmp_path, rows):
    path = tmp_path / "mm.onnx"
    path.write_bytes(_matmul(rows))
    session = onnxwrapper.InferenceSession(str(path), backend="qnn")
    x = np.ones((256, 1024), np.float32)
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.qnn"):
        session.run(None, {"x": x})  # the dynamic one compiles here: not a call's wait
        caplog.clear()
        start = time.monotonic()
        session.run(None, {"x": x})
        took = time.monotonic() - start
    if took < 0.2:
        pytest.skip(f"a call took {took:.2f} s here: too quick to be reported")
    lines = _lines(caplog)
    assert lines and "mm.onnx" in lines[0] and "on the QNN HTP simulator" in lines[0], (took, lines)
