"""``aipc diff`` end to end on CPU-only runs: every exit status, live/replay/check modes, reports.

Failing comparisons use the TEST-ONLY ``perturb`` backend (tests/test_diff_support.py), installed
for the child processes as an entry-point plugin.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.test_diff_support import aipc_diff, child_env, conv_project, write_script  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow  # outside the fast subset: `aipc diff` runs, a child per backend


def _report(directory) -> dict:
    return json.loads((directory / "report.json").read_text())


def test_identical_backends_pass_exit_0(tmp_path, child_env):
    script = conv_project(tmp_path)
    proc = aipc_diff(["--backends", "cpu,cpu2=cpu", "--dir", tmp_path / "d", script], tmp_path, child_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: PASS — tensors within tolerance, app output identical (exit status 0)" in proc.stdout
    rep = _report(tmp_path / "d")
    assert rep["schema"] == "onnxwrapper-diff-report" and rep["verdict"] == "PASS" and rep["exit_status"] == 0
    (out,) = rep["outputs"]
    assert (out["backend"], out["output"], out["calls"], out["kind"]) == ("cpu2", "Y", 3, "pass")
    assert out["worst"]["metrics"]["snr_db"] == "inf"  # strict JSON for non-finite values
    assert rep["runs"]["cpu"]["status"] == "ok" and rep["runs"]["cpu2"]["calls"] == 3


def test_mismatch_exit_1_then_recheck_with_looser_tolerance(tmp_path, child_env):
    script = conv_project(tmp_path)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,perturb", "--backend-option", "perturb:scale=1e-3", "--dir", d, script],
                     tmp_path, child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL:tolerance" in proc.stdout and "would have passed with" in proc.stdout
    out = _report(d)["outputs"][0]
    assert out["failed_calls"] == 3 and out["precision"] == "fp32"
    assert out["min_rtol"] == pytest.approx(1e-3, rel=0.05)
    # the capture is re-judged without running anything: per-output override by glob
    proc = aipc_diff(["--check", d, "--tol", "Y=1e-5:2e-3", "--json", tmp_path / "r2.json", "--no-html"],
                     tmp_path, child_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = json.loads((tmp_path / "r2.json").read_text())
    assert rep["mode"] == "check" and rep["outputs"][0]["tolerance"]["rtol"] == 2e-3
    # a statistical check instead of elementwise still fails (max rel 1e-3 > 1e-4)
    proc = aipc_diff(["--check", d, "--error-stat", "max", "--rtol", "1e-4", "--no-html"], tmp_path, child_env)
    assert proc.returncode == 1


def test_nan_on_one_backend_is_its_own_failure_kind(tmp_path, child_env):
    script = conv_project(tmp_path)
    proc = aipc_diff(["--backends", "cpu,perturb", "--backend-option", "perturb:nan=true", "--dir", tmp_path / "d",
                      "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 1 and "FAIL:nonfinite" in proc.stdout


def test_crashed_backend_exit_2_keeps_other_results(tmp_path, child_env):
    script = conv_project(tmp_path)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,same=perturb,boom=perturb", "--backend-option", "boom:crash=true",
                      "--dir", d, script], tmp_path, child_env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert re.search(r"boom\s+perturb\s+CRASHED \(SIGSEGV\)", proc.stdout)
    rep = _report(d)
    assert rep["runs"]["boom"]["signal"] == "SIGSEGV" and rep["verdict"] == "INCOMPLETE"
    assert [(o["backend"], o["kind"]) for o in rep["outputs"]] == [("same", "pass")]


def test_unavailable_backend_exit_2(tmp_path, child_env):
    script = conv_project(tmp_path)
    proc = aipc_diff(["--backends", "cpu,qai", "--dir", tmp_path / "d", "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "UNAVAILABLE" in proc.stdout
    assert _report(tmp_path / "d")["runs"]["qai"]["status"] == "unavailable"


def test_failing_script_exit_2(tmp_path, child_env):
    script = write_script(tmp_path, "raise SystemExit(3)\n")
    proc = aipc_diff(["--backends", "cpu,cpu2=cpu", "--dir", tmp_path / "d", "--no-html", script], tmp_path,
                     child_env)
    assert proc.returncode == 2 and "SCRIPT_FAILED" in proc.stdout


@pytest.mark.parametrize("args", [
    [],                                                       # no script
    ["--backends", "cpu,nosuchbackend", "script.py"],        # unknown backend
    ["--backends", "cpu", "script.py"],                       # nothing to compare with
    ["--reference", "nosuch", "--backends", "cpu,cpu2=cpu", "script.py"],
    ["--tol", "Y", "script.py"],                              # malformed override
    ["--backend-option", "qnn-precision", "script.py"],
    ["missing.py"],
    ["--check", "nowhere"],
])
def test_usage_errors_exit_64(tmp_path, child_env, args):
    conv_project(tmp_path)
    proc = aipc_diff(args, tmp_path, child_env)
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert "aipc diff: error:" in proc.stderr


RANDOM_SCRIPT = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession("conv.onnx")
    rng = np.random.default_rng()          # unseeded: differs in every process
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    for _ in range(2):
        x = sess.run(None, {"X": x})[0].repeat(2, axis=1)[:, :3]   # next input depends on the output
    print("done")
"""


def test_random_inputs_diverge_live_but_agree_in_replay(tmp_path, child_env):
    conv_project(tmp_path)
    script = write_script(tmp_path, RANDOM_SCRIPT, "random_script.py")
    live = aipc_diff(["--no-auto-replay", "--backends", "cpu,cpu2=cpu", "--dir", tmp_path / "live", "--no-html",
                      script], tmp_path, child_env)
    assert live.returncode == 1, live.stdout + live.stderr
    assert "fed different inputs" in live.stdout and "--replay" in live.stdout
    # live mode by default re-runs exactly the diverging calls on the reference's inputs
    auto = aipc_diff(["--backends", "cpu,cpu2=cpu", "--dir", tmp_path / "auto", "--no-html", script], tmp_path,
                     child_env)
    assert auto.returncode == 0, auto.stdout + auto.stderr
    assert "judged by replaying the reference's inputs" in auto.stdout
    rep = _report(tmp_path / "auto")
    assert rep["runs"]["cpu2+replay"]["replay_of"] == "cpu2" and rep["runs"]["cpu2+replay"]["calls"] == 2
    assert rep["outputs"][0]["worst"]["replayed"] is True
    replay = aipc_diff(["--replay", "--backends", "cpu,cpu2=cpu", "--dir", tmp_path / "replay", "--no-html", script],
                       tmp_path, child_env)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    rep = _report(tmp_path / "replay")
    assert rep["mode"] == "replay" and rep["compared_calls"] == 2


def test_module_mode_and_show_output(tmp_path, child_env):
    conv_project(tmp_path)
    (tmp_path / "convmod.py").write_text((tmp_path / "script.py").read_text())
    proc = aipc_diff(["--backends", "cpu,cpu2=cpu", "--dir", tmp_path / "d", "--no-html", "--show-output",
                      "-m", "convmod"], tmp_path, child_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("sum ") == 6 and "cpu2: script output" in proc.stdout


def test_html_report_is_self_contained_with_plots(tmp_path, child_env):
    pytest.importorskip("matplotlib")
    script = conv_project(tmp_path)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,perturb", "--backend-option", "perturb:scale=1e-3", "--dir", d, script],
                     tmp_path, child_env)
    assert proc.returncode == 1
    text = (d / "report.html").read_text()
    assert text.startswith("<!DOCTYPE html>") and "MISMATCH" in text
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), "external URL in the report"
    assert not re.search(r"<(script|link|iframe)\b", text, re.I)
    srcs = re.findall(r"src='([^']*)'", text)
    assert len(srcs) == 3 and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "sum " in text  # the script's output per backend
