"""QDQ quantization (onnxwrapper.toolkit._quantize): W8A8/W8A16 through onnxruntime.quantization's QNN
configuration, calibration from a capture, and the three-way accuracy check."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import onnxwrapper
from onnxwrapper.toolkit import (CalibrationError, CalibrationSet, calibration_from_capture, quantize_qdq,
                                 three_way_check)
from onnxwrapper.diff import start_capture
from tests import models
from tests.conftest import qnn_available, run_python


def feeds(n=6, seed=0, shape=(1, 3, 8, 8)):
    rng = np.random.default_rng(seed)
    return [{"X": rng.random(shape, dtype=np.float32)} for _ in range(n)]


@pytest.fixture
def cnn(tmp_path):
    path = tmp_path / "cnn.onnx"
    path.write_bytes(models.smallconv(batch=1))
    return path


@pytest.mark.parametrize("precision,act", [("w8a8", "QUInt8"), ("w8a16", "QUInt16")])
def test_quantize_and_check_on_cpu(cnn, tmp_path, precision, act):
    out = tmp_path / f"cnn_{precision}.onnx"
    result = quantize_qdq(cnn, out, feeds(), precision=precision)
    assert result.path == str(out) and result.activation_type == act and result.weight_type == "QUInt8"
    assert result.samples == 6 and result.qdq_nodes > 0
    qdq = onnx.load(out)
    ops = {n.op_type for n in qdq.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    zero_points = {i.data_type for i in qdq.graph.initializer if i.name.endswith("zero_point")}
    assert (onnx.TensorProto.UINT16 in zero_points) == (precision == "w8a16")
    # the QDQ model keeps the float model's identity (get_modelmeta() of a session on it)
    assert qdq.producer_name == "onnxwrapper-tests" and {p.key for p in qdq.metadata_props} == {"license", "author"}
    report = three_way_check(cnn, out, feeds(4, seed=9), run_qnn=False)
    (row,) = report.outputs
    assert row.output == "Y" and row.backend is None and row.total is None
    assert row.quantization.cosine > 0.999 and row.quantization.snr_db > 25
    assert report.samples == 4 and "quantization" in report.format_text()
    json.dumps(report.to_dict())


def test_w8a16_is_more_accurate_than_w8a8(cnn, tmp_path):
    snr = {}
    for precision in ("w8a8", "w8a16"):
        out = tmp_path / f"{precision}.onnx"
        quantize_qdq(cnn, out, feeds(8), precision=precision)
        snr[precision] = three_way_check(cnn, out, feeds(4, seed=3), run_qnn=False).outputs[0].quantization.snr_db
    assert snr["w8a16"] > snr["w8a8"]


def test_bad_arguments(cnn, tmp_path):
    with pytest.raises(ValueError, match="w8a8, w8a16"):
        quantize_qdq(cnn, tmp_path / "x.onnx", feeds(), precision="int4")
    with pytest.raises(ValueError, match="calibrate_method"):
        quantize_qdq(cnn, tmp_path / "x.onnx", feeds(), calibrate_method="median")
    with pytest.raises(CalibrationError, match="No calibration feeds"):
        quantize_qdq(cnn, tmp_path / "x.onnx", [])
    with pytest.raises(CalibrationError, match="same input shapes"):
        CalibrationSet.from_feeds(feeds(1) + feeds(1, shape=(1, 3, 4, 4)))


def _capture(directory, model_path, batches):
    """Run ``model_path`` on the CPU backend for each feed list under a capture."""
    with start_capture(directory):
        session = onnxwrapper.InferenceSession(str(model_path))
        for batch in batches:
            for feed in batch:
                session.run(None, feed)


def test_capture_feeds_a_quantization(tmp_path):
    """A capture of a dynamic model's real feeds calibrates the quantization of its static version."""
    dyn = tmp_path / "dyn.onnx"
    dyn.write_bytes(models.smallconv(batch="N", hw=("H", "W")))
    cap = tmp_path / "cap"
    _capture(cap, dyn, [feeds(5, seed=1), feeds(2, seed=2, shape=(1, 3, 4, 4))])
    calib = calibration_from_capture(cap, dyn, max_samples=4)
    assert calib.note == "matched by sha256" and calib.skipped == 2
    assert len(calib.feeds) == 4 and calib.shapes == {"X": (1, 3, 8, 8)}
    np.testing.assert_array_equal(calib.feeds[0]["X"], feeds(1, seed=1)[0]["X"])
    from onnxwrapper.toolkit._inspect import make_static

    static = make_static(onnx.load(dyn), shapes=calib.shapes)
    out = tmp_path / "q.onnx"
    result = quantize_qdq(static, out, calib, precision="w8a16")
    assert result.samples == 4
    report = three_way_check(static, out, calib, run_qnn=False)
    assert report.outputs[0].quantization.cosine > 0.999


def test_calibration_matching_rules(tmp_path):
    a = tmp_path / "a.onnx"
    a.write_bytes(models.smallconv(batch=1, seed=0))
    cap = tmp_path / "cap"
    _capture(cap, a, [feeds(2)])
    other = tmp_path / "b.onnx"  # different weights, same inputs: matched by input names, with a note
    other.write_bytes(models.smallconv(batch=1, seed=5))
    calib = calibration_from_capture(cap, other)
    assert "input names" in calib.note and len(calib.feeds) == 2
    unrelated = tmp_path / "c.onnx"
    unrelated.write_bytes(models.add_mul_add())
    with pytest.raises(CalibrationError, match="holds no feeds of this model.*a-"):
        calibration_from_capture(cap, unrelated)


_QNN_THREE_WAY = r'''
import json, sys
import numpy as np
from onnxwrapper.toolkit import quantize_qdq, three_way_check
from tests.toolkit.test_quantize import feeds
cnn, out = sys.argv[1], sys.argv[2]
quantize_qdq(cnn, out, feeds(8), precision="w8a8")
report = three_way_check(cnn, out, feeds(3, seed=4))
print("RESULT" + json.dumps(report.to_dict()))
'''


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_three_way_check_on_qnn(cnn, tmp_path):
    import pathlib

    proc = run_python(_QNN_THREE_WAY, str(cnn), str(tmp_path / "q.onnx"), timeout=600,
                      cwd=str(pathlib.Path(__file__).parents[2]))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    report = json.loads(lines[-1][len("RESULT"):])
    assert report["qnn_error"] == ""
    (row,) = report["outputs"]
    for leg in ("quantization", "backend", "total"):
        assert row[leg]["cosine"] > 0.99, (leg, row)
    # quantization loss and backend error are separate numbers
    assert row["backend"]["snr_db"] != row["quantization"]["snr_db"]
