"""``aipc diff`` verdicts end to end on CPU-only runs: numerics-derived tolerances, the app-level
verdict, localization causes, reports.

The backend under test is the TEST-ONLY ``perturb`` plugin (tests/test_diff_support.py) running a
perturbed copy of the model on ONNX Runtime CPU: every activation rounded to FP16 (an FP16 device
emulated), optionally one node's weights scaled or every weight slightly noisy.
"""

from __future__ import annotations

import json
import os
import re
import sys

import numpy as np
import onnxruntime as ort
import pytest

from onnxwrapper import diff
from tests import models
from tests.test_diff_support import aipc_diff, child_env, deep_mlp, mlp_project, write_script  # noqa: F401

pytestmark = pytest.mark.slow  # outside the fast subset: `aipc diff` runs, a child per backend

FP16 = ["--backend-option", "perturb:fp16=true", "--backend-option", "perturb:precision=fp16"]


def _report(directory) -> dict:
    return json.loads((directory / "report.json").read_text())


def _options(**options) -> list[str]:
    out = []
    for key, value in options.items():
        out += ["--backend-option", f"perturb:{key}={value}"]
    return out


def test_healthy_fp16_network_passes_where_the_old_one_step_rule_failed(tmp_path, child_env):
    script = mlp_project(tmp_path, deep_mlp())
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,perturb", *FP16, "--dir", d, "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (out,) = _report(d)["outputs"]
    assert out["precision"] == "fp16" and 27.07 < out["worst"]["metrics"]["snr_db"] < 80
    # the former fp16 preset (median |Δ| ≤ 1e-3 or rel ≤ 1e-3, cosine ≥ 0.999) fails this healthy run
    old = diff.Tolerance(atol=1e-3, rtol=1e-3, check="median", min_cosine=0.999)
    assert diff.check(d, tolerances=old).state == "tensor_mismatch"


@pytest.mark.parametrize("node,change", [("mm17", {"node_scale": 1.1}), ("add23", {"node_shift": 0.5})])
def test_one_slightly_wrong_node_fails_and_localize_names_exactly_it(tmp_path, child_env, node, change):
    script = mlp_project(tmp_path, deep_mlp())
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,perturb", *FP16, *_options(node=node, **change), "--localize",
                      "--dir", d, "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (loc,) = _report(d)["localizations"]
    assert loc["cause"] == "node" and loc["culprit"]["node"] == node, loc["message"]
    assert loc["first"]["node"] == node and loc["isolated_snr_db"] < loc["bar_db"]
    assert f"cause: node — one node breaks: '{node}'" in proc.stdout


def test_smooth_accumulation_is_reported_as_such_not_as_a_culprit(tmp_path, child_env):
    script = mlp_project(tmp_path, deep_mlp())
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,perturb", *FP16, *_options(weight_noise=0.01), "--localize",
                      "--dir", d, "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (loc,) = _report(d)["localizations"]
    assert loc["cause"] == "accumulation", loc["message"]
    assert "no single node is the cause" in loc["message"] and float(loc["isolated_snr_db"]) >= loc["bar_db"]
    snrs = [p[2] for p in loc["profile"] if isinstance(p[2], float)]
    assert max(snrs) - min(snrs) > 10  # the error grows through the graph …
    assert all(abs(a - b) < 10 for a, b in zip(snrs, snrs[1:]) if a < 60)  # … without a sharp step


def _threshold_project(tmp_path, scale: float) -> tuple:
    """conv.onnx + a script printing a label decided by a threshold just above the reference's value."""
    (tmp_path / "conv.onnx").write_bytes(models.smallconv(batch=1))
    x = np.linspace(-1, 1, 3 * 8 * 8, dtype=np.float32).reshape(1, 3, 8, 8)
    ref = ort.InferenceSession(str(tmp_path / "conv.onnx"), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    threshold = float(np.abs(ref).astype(np.float64).sum()) * (1 + scale / 2)
    script = write_script(tmp_path, f"""
        import sys
        import numpy as np
        import onnxruntime as ort

        sess = ort.InferenceSession("conv.onnx")
        x = np.linspace(-1, 1, 3 * 8 * 8, dtype=np.float32).reshape(1, 3, 8, 8)
        y = sess.run(None, {{"X": x}})[0]
        label = "cat" if float(np.abs(y).astype(np.float64).sum()) > {threshold!r} else "dog"
        print("label:", label, "argmax", int(y.argmax()))
        with open("result.txt", "w") as f:
            f.write(label + "\\n")
        if label == "cat" and "--raise" in sys.argv:
            raise RuntimeError("boom from the script")
        sys.exit(0 if label == "dog" else 3)
    """)
    return script


def test_printed_output_differs_while_tensors_pass_is_an_app_level_mismatch(tmp_path, child_env):
    script = _threshold_project(tmp_path, 1e-5)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,perturb", "--backend-option", "perturb:scale=1e-5",
                      "--compare-output", "stdout,result.txt", "--dir", d, "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = _report(d)
    assert rep["state"] == "app_mismatch" and rep["levels"] == {"tensor": "pass", "app": "differs"}
    assert rep["outputs"][0]["passed"]  # SNR 100 dB ≥ the FP32 bar
    app = rep["app"]["perturb"]
    assert {i["what"]: i["identical"] for i in app["items"]} == {"exit status": False, "stdout": False,
                                                                 "file result.txt": False}
    assert "-label: dog argmax" in "\n".join(app["items"][1]["diff"]) and "no output is beyond" in app["explanation"]
    assert "verdict: MISMATCH (app output)" in proc.stdout and "+label: cat" in proc.stdout


def test_tensors_beyond_tolerance_with_identical_app_output_is_a_tensor_level_mismatch(tmp_path, child_env):
    script = _threshold_project(tmp_path, 1.0)  # a threshold far above: both print "dog"
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,perturb", "--backend-option", "perturb:scale=1e-2", "--dir", d,
                      "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = _report(d)
    assert rep["state"] == "tensor_mismatch" and rep["levels"] == {"tensor": "mismatch", "app": "identical"}
    assert "verdict: MISMATCH (tensors) — app output identical, but 1 of 1 output(s) beyond tolerance" in proc.stdout


def test_an_exception_on_one_backend_is_incomplete_with_its_cause_in_one_line(tmp_path, child_env):
    script = _threshold_project(tmp_path, 1e-5)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,perturb", "--backend-option", "perturb:scale=1e-5", "--dir", d,
                      "--no-html", script, "--raise"], tmp_path, child_env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    cause = _report(d)["runs"]["perturb"]["cause"]
    assert re.fullmatch(r"RuntimeError: boom from the script \(in script\.py line \d+\)", cause), cause
    assert f"verdict: INCOMPLETE — perturb: script_failed — {cause} (exit status 2)" in proc.stdout


def test_timings_and_values_that_vary_on_the_reference_are_not_differences(tmp_path, child_env):
    (tmp_path / "conv.onnx").write_bytes(models.smallconv(batch=1))
    script = write_script(tmp_path, """
        import time
        import numpy as np
        import onnxruntime as ort

        start = time.perf_counter()
        sess = ort.InferenceSession("conv.onnx")
        y = sess.run(None, {"X": np.ones((1, 3, 8, 8), np.float32)})[0]
        print("sum", round(float(y.sum()), 3), "(took", f"{time.perf_counter() - start:.6f}s)")
        print("run id", np.random.default_rng().integers(1 << 40))
    """)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,cpu2=cpu", "--dir", d, "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = _report(d)
    (stdout,) = [i for i in rep["app"]["cpu2"]["items"] if i["what"] == "stdout"]
    assert stdout["identical"] and stdout["timings"] == 1 and stdout["masked"] == 1 and not stdout["exact"]
    assert rep["runs"]["cpu+rerun"]["rerun_of"] == "cpu"


def test_check_writes_a_new_report_and_the_written_paths_are_reported(tmp_path, child_env):
    script = _threshold_project(tmp_path, 1.0)
    d = tmp_path / "d"
    assert aipc_diff(["--backends", "cpu,cpu2=cpu", "--dir", d, script], tmp_path, child_env).returncode == 0
    original = (d / "report.json").read_bytes()
    proc = aipc_diff(["--check", d, "--min-snr", "200"], tmp_path, child_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # identical runs: inf dB
    new = sorted(d.glob("report-check-*.json"))
    assert len(new) == 1 and (d / "report.json").read_bytes() == original
    assert str(new[0]) in proc.stderr and str(new[0].with_suffix(".html")) in proc.stderr
    html = tmp_path / "sub" / "r.html"
    proc = aipc_diff(["--check", d, "--html", os.path.relpath(html, tmp_path)], tmp_path, child_env)
    assert html.exists() and f"{html}" in proc.stderr and len(list(d.glob("report-check-*.json"))) == 2


def test_session_numbers_are_the_ones_aipc_v_prints(tmp_path, child_env):
    (tmp_path / "a.onnx").write_bytes(models.smallconv(batch=1))
    (tmp_path / "b.onnx").write_bytes(models.smallconv(batch=1, seed=1))
    script = write_script(tmp_path, """
        import numpy as np
        import onnxruntime as ort

        a = ort.InferenceSession("a.onnx")
        b = ort.InferenceSession("b.onnx")
        x = np.ones((1, 3, 8, 8), np.float32)
        b.run(None, {"X": x})          # b is used first, a created first
        a.run(None, {"X": x})
    """)
    verbose = __import__("subprocess").run([sys.executable, "-m", "aipc", "-v", "--backend", "cpu", script],
                                           cwd=tmp_path, env=child_env, capture_output=True, text=True)
    numbers = dict(re.findall(r"session (\d+): (\w)\.onnx", verbose.stderr))
    assert numbers == {"1": "a", "2": "b"}, verbose.stderr
    d = tmp_path / "d"
    assert aipc_diff(["--backends", "cpu,perturb", "--backend-option", "perturb:scale=0.1", "--dir", d, script],
                     tmp_path, child_env).returncode == 1
    rep = _report(d)
    by_model = {o["model"][0]: o["worst"]["session"] for o in rep["outputs"]}
    assert by_model == {"a": 1, "b": 2}
    html = (d / "report.html").read_text()
    assert "session 1, call 0" in html and "session 2, call 0" in html


def test_nan_in_an_input_is_counted_per_feed(tmp_path, child_env):
    (tmp_path / "conv.onnx").write_bytes(models.smallconv(batch=1))
    script = write_script(tmp_path, """
        import numpy as np
        import onnxruntime as ort

        x = np.ones((1, 3, 8, 8), np.float32)
        x[0, 0, 0, :3] = np.nan
        ort.InferenceSession("conv.onnx").run(None, {"X": x})
    """)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,cpu2=cpu", "--dir", d, "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    feeds = {(f["run"], f["feed"], f["nan"], f["calls"]) for f in _report(d)["nonfinite_feeds"]}
    assert feeds == {("cpu", "X", 3, 1), ("cpu2", "X", 3, 1)}
    assert "maps NaN and ±Inf inputs to 131008" in proc.stdout
