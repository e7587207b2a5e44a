"""Capture format: writer (observer), limits, reader, and in-process comparison of captures."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import onnxwrapper
from onnxwrapper.diff import (CaptureFormatError, CaptureLimitWarning, Tolerance, compare, read_capture,
                              start_capture)
from tests import models

X = np.arange(6, dtype=np.float32).reshape(3, 2)


def _run_mul(n: int = 3, model=None):
    sess = onnxwrapper.InferenceSession(model if model is not None else models.mul_1(), backend="cpu")
    return [sess.run(None, {"X": X + i})[0] for i in range(n)]


def test_capture_records_every_call_and_reads_back(tmp_path, mul_1_path):
    with start_capture(tmp_path / "cap", metadata={"purpose": "test"}) as handle:
        outs = _run_mul(2, str(mul_1_path))
        sess2 = onnxwrapper.InferenceSession(models.add_mul_add(), backend="cpu")
        a = np.ones((2, 2), np.float32)
        sess2.run(["C"], {"A": a, "B": a})
        ort_out = sess2.run_with_ort_values(["C"], {"A": onnxwrapper.OrtValue.ortvalue_from_numpy(a),
                                                     "B": onnxwrapper.OrtValue.ortvalue_from_numpy(a)})
    assert handle.writer.calls_recorded == 4
    cap = read_capture(tmp_path / "cap")
    assert cap.status == "complete" and cap.metadata == {"purpose": "test"}
    assert [(c.session, c.index, c.method) for c in cap.calls] == [
        (1, 0, "run"), (1, 1, "run"), (2, 0, "run"), (2, 1, "run_with_ort_values")]  # sessions from 1
    first = cap.calls[0]
    info = cap.models[first.model]
    assert first.model.startswith("mul_1-") and info.path == str(mul_1_path.resolve())
    assert info.stored is None  # given as a path: not copied
    assert info.input_names == ["X"] and info.output_names == ["Y"]
    assert first.backend == "cpu" and first.backend_options == {}
    np.testing.assert_array_equal(first.inputs()["X"], X)
    np.testing.assert_array_equal(first.outputs()["Y"], outs[0])
    assert first.output_names == ("Y",) and first.requested_output_names is None and first.seconds >= 0
    # a model given as bytes is stored so that replay can load it
    bytes_model = cap.models[cap.calls[2].model]
    assert bytes_model.path is None and bytes_model.stored and isinstance(bytes_model.model_source(), bytes)
    np.testing.assert_allclose(cap.calls[3].outputs()["C"], ort_out[0].numpy())


def test_observer_is_removed_by_stop(tmp_path):
    handle = start_capture(tmp_path / "cap")
    _run_mul(1)
    handle.stop()
    handle.stop()  # idempotent
    _run_mul(1)
    assert len(read_capture(tmp_path / "cap").calls) == 1


def test_size_limit_stops_recording_with_a_warning_and_the_script_goes_on(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with start_capture(tmp_path / "cap", max_bytes=2000) as handle:
            outs = _run_mul(20)
    assert len(outs) == 20  # the script was not interrupted
    assert any(issubclass(w.category, CaptureLimitWarning) and "size limit" in str(w.message) for w in caught)
    cap = read_capture(tmp_path / "cap")
    assert cap.status == "truncated" and "size limit" in cap.truncated["reason"]
    assert 0 < len(cap.calls) < 20 and handle.writer.bytes_written <= 2000


def test_max_calls_per_model_keeps_indices(tmp_path):
    with start_capture(tmp_path / "cap", max_calls_per_model=2):
        _run_mul(5)
    cap = read_capture(tmp_path / "cap")
    assert [c.index for c in cap.calls] == [0, 1]
    assert list(cap.header["skipped_calls"].values()) == [3]


def test_reader_tolerates_a_cut_line_and_rejects_foreign_dirs(tmp_path):
    with start_capture(tmp_path / "cap"):
        _run_mul(2)
    with open(tmp_path / "cap" / "calls.jsonl", "a") as f:
        f.write('{"seq": 2, "sess')  # a process killed mid-write
    assert len(read_capture(tmp_path / "cap").calls) == 2
    with pytest.raises(CaptureFormatError, match="no capture.json"):
        read_capture(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "capture.json").write_text(json.dumps({"format": "onnxwrapper-capture", "version": 99}))
    with pytest.raises(CaptureFormatError, match="newer"):
        read_capture(tmp_path / "bad")


def test_existing_capture_is_not_overwritten(tmp_path):
    start_capture(tmp_path / "cap").stop()
    with pytest.raises(FileExistsError):
        start_capture(tmp_path / "cap")


def test_compare_captures_in_process(tmp_path):
    for name in ("a", "b"):
        with start_capture(tmp_path / name):
            _run_mul(3)
    result = compare(tmp_path / "a", {"b": tmp_path / "b"})
    assert result.passed and result.compared_calls == 3
    assert [(s.model.split("-")[0], s.output, s.calls, s.passed) for s in result.outputs] == [("model", "Y", 3, True)]
    # a call sequence that differs is a divergence (mismatch), reported in the table
    with start_capture(tmp_path / "c"):
        _run_mul(2)
    result = compare(tmp_path / "a", {"c": tmp_path / "c"}, tolerances=Tolerance(atol=0.0, rtol=0.0))
    assert result.exit_status == 1 and "no counterpart" in result.table()
