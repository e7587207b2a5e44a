"""``aipc diff`` against the QNN backend (HTP simulator on x86-64: device numerics, FP16 by default)."""

from __future__ import annotations

import json

import pytest

from onnxwrapper import diff
from tests.test_diff_support import (aipc_diff, child_env, conv_project, deep_mlp, mlp_project,  # noqa: F401
                                     overflow_model, write_script)

pytestmark = pytest.mark.qnn

OVERFLOW_SCRIPT = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession("overflow.onnx")
    x = np.linspace(150, 400, 16, dtype=np.float32)[None]
    print(sess.run(None, {"X": x})[0].round(1))
"""


@pytest.fixture(autouse=True)
def _need_qnn():
    import onnxwrapper

    info = {b.name: b for b in onnxwrapper.get_available_backends()}
    if "qnn" not in info or not info["qnn"].available:
        pytest.skip("needs the qnn backend: onnxruntime-qnn (pip install -e '.[qnn]') with its HTP simulator (x86-64) "
                    "or a Snapdragon NPU")


def test_fp16_overflow_fails_and_localize_names_the_overflowing_node(tmp_path, child_env):
    (tmp_path / "overflow.onnx").write_bytes(overflow_model())
    script = write_script(tmp_path, OVERFLOW_SCRIPT)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,qnn", "--localize", "--dir", d, script], tmp_path, child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = json.loads((d / "report.json").read_text())
    (out,) = rep["outputs"]
    assert out["backend"] == "qnn" and out["precision"] == "fp16" and not out["passed"]
    (loc,) = rep["localizations"]
    assert loc["cause"] == "overflow" and loc["culprit"]["node"] == "scale_up", loc["message"]
    assert loc["suspects"][0]["node"] == "scale_up" and loc["suspects"][0]["max_abs"] > 65504
    assert loc["first"]["node"] in ("scale_up", "scale_down")
    assert [c["node"] for c in loc["chain"]][-1] == "relu"
    assert "cause: overflow — FP16 overflow at 'scale_up' (Mul)" in proc.stdout


def test_deep_fp16_network_passes_with_the_default_tolerance(tmp_path, child_env):
    # 40 layers (120 nodes) on the HTP simulator at FP16: healthy rounding error, SNR far above the bar
    script = mlp_project(tmp_path, deep_mlp())
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,qnn", "--dir", d, "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (out,) = json.loads((d / "report.json").read_text())["outputs"]
    assert out["precision"] == "fp16" and 27.07 < out["worst"]["metrics"]["snr_db"] < 90
    # the former fp16 preset (median |Δ| ≤ 1e-3 or rel ≤ 1e-3) raises a false alarm on it
    old = diff.Tolerance(atol=1e-3, rtol=1e-3, check="median", min_cosine=0.999)
    assert diff.check(d, tolerances=old).state == "tensor_mismatch"


def test_fp16_overflow_in_the_middle_is_flagged_and_named(tmp_path, child_env):
    # a decomposed RMS normalisation after layer 5: its ReduceSum of squares (≈ 3e5) leaves FP16's range
    script = mlp_project(tmp_path, deep_mlp(layers=12, width=32, sumsq_after=5), scale=200.0)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,qnn", "--localize", "--dir", d, "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = json.loads((d / "report.json").read_text())
    assert not rep["outputs"][0]["passed"]
    (loc,) = rep["localizations"]
    assert loc["cause"] == "overflow" and loc["culprit"]["node"] == "sumsq", loc["message"]
    assert loc["culprit"]["reference_max_abs"] > 65504


def test_conv_agrees_on_qnn_fp16_and_fp32_in_replay_mode(tmp_path, child_env):
    script = conv_project(tmp_path)
    d = tmp_path / "d"
    proc = aipc_diff(["--replay", "--backends", "cpu,qnn,q32=qnn", "--backend-option", "q32:precision=fp32",
                      "--dir", d, "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = json.loads((d / "report.json").read_text())
    assert rep["mode"] == "replay"
    by_label = {o["backend"]: o for o in rep["outputs"]}
    assert by_label["qnn"]["precision"] == "fp16" and by_label["q32"]["precision"] == "fp32"
    assert by_label["qnn"]["worst"]["metrics"]["cosine_similarity"] > 0.999
    # FP32 simulation is held to the FP32 bar (77.9 dB), FP16 to 27.1 dB
    assert by_label["q32"]["tolerance"]["min_snr_db"] == 77.89 and by_label["qnn"]["tolerance"]["min_snr_db"] == 27.07
    q32_snr = by_label["q32"]["worst"]["metrics"]["snr_db"]
    assert q32_snr == "inf" or q32_snr > 77.89
