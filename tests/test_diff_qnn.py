"""``aipc diff`` against the QNN backend (HTP simulator on x86-64: device numerics, FP16 by default)."""

from __future__ import annotations

import json

import pytest

from tests.test_diff_support import aipc_diff, child_env, conv_project, overflow_model, write_script  # noqa: F401

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
        pytest.skip("the qnn backend is not available here")


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
    named = {loc["first"]["node"]} | {s["node"] for s in loc["suspects"]}
    assert "scale_up" in named, loc
    assert loc["suspects"][0]["node"] == "scale_up" and loc["suspects"][0]["max_abs"] > 65504
    assert loc["first"]["node"] in ("scale_up", "scale_down")
    assert [c["node"] for c in loc["chain"]][-1] == "relu"
    assert "scale_up" in proc.stdout and "localization" in proc.stdout


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
    assert by_label["q32"]["tolerance"]["atol"] == 1e-5  # FP32 simulation is held to FP32 tolerances
