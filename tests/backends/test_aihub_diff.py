"""``aipc diff`` with the ``aihub`` backend against the qai-hub TEST DOUBLE, end to end.

The children of ``aipc diff`` find the double the way they find any third-party backend: a
distribution on ``PYTHONPATH`` whose entry point ``aihub`` names ``FakeAihubBackend``
(``fake_backends.plugin_distribution``), ahead of the installed ``aihub``; fault plans and the
double's event log travel by environment (``QAI_HUB_DOUBLE_PLAN``, ``QAI_HUB_DOUBLE_LOG``).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import onnxwrapper.diff as diff

REPO = pathlib.Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes"
sys.path.insert(0, str(FAKES))
import aihub_cases as cases  # noqa: E402
from fake_backends import plugin_distribution  # noqa: E402

pytestmark = pytest.mark.slow  # outside the fast subset: `aipc diff` runs of the OCR example and others

sys.path.remove(str(FAKES))

DEVICE = "Samsung Galaxy S25"


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    """Environment of the diff's children: the FakeAihubBackend plugin first on PYTHONPATH, a client
    configuration, the double's event log and a fresh compile cache."""
    plugins = plugin_distribution(tmp_path / "plugins", aihub="fake_backends:FakeAihubBackend")
    log = tmp_path / "hub.log"
    env = {"PYTHONPATH": os.pathsep.join([plugins, str(FAKES), str(REPO)]),
           "QAIHUB_CLIENT_INI": cases.write_ini(tmp_path / "client.ini"), "QAI_HUB_DOUBLE_LOG": str(log),
           "ONNXWRAPPER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("QAI_HUB_DOUBLE_PLAN", raising=False)
    # `python -m` children put their working directory first on sys.path: not the repository, whose
    # onnxwrapper.egg-info (editable install) would list the installed `aihub` ahead of the plugin
    monkeypatch.chdir(tmp_path)
    return env, log


def _jobs(log, kind: str) -> list[dict]:
    return [e for e in cases.read_log(log) if e["event"] == "job" and e["kind"] == kind]


def test_ocr_example_replayed_on_aihub_produces_the_usual_reports(tmp_path, hub_env):
    pytest.importorskip("rapidocr")
    _env, log = hub_env
    out = tmp_path / "d"
    proc = subprocess.run([sys.executable, "-m", "aipc", "diff", "--replay", "--backends", "cpu,aihub",
                           "--backend-option", f"aihub:device={DEVICE}", "--dir", str(out),
                           str(REPO / "examples" / "ocr" / "ocr.py")], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: PASS" in proc.stdout and "(exit status 0)" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["mode"] == "replay" and report["runs"]["aihub"]["status"] == "ok"
    models = {o["model"].rsplit("-", 1)[0] for o in report["outputs"] if o["backend"] == "aihub" and o["passed"]}
    assert models == {"PP-OCRv6_det_small", "ch_ppocr_mobile_v2.0_cls_mobile", "PP-OCRv6_rec_small"}
    assert (out / "report.html").stat().st_size > 1000
    profiles = json.loads((out / "aihub" / "device_profiles.json").read_text())
    assert len(profiles) == 3 and all(p["device"] == DEVICE and p["compute_units"]["NPU"] > 0 for p in profiles)
    notes = [n for n in report["notes"] if "device profile of" in n]
    assert len(notes) == 3 and all("ms per inference on Samsung Galaxy S25" in n for n in notes)
    assert "device profile of PP-OCRv6_det_small" in proc.stdout
    inference = _jobs(log, "inference")
    assert len(inference) == 3 and len({e["model_id"] for e in inference}) == 3  # one job per model and shape
    assert len({e["pid"] for e in cases.read_log(log)}) == 1  # only the aihub child talked to the service


DYNAMIC_SCRIPT = """
import sys
import numpy as np
import onnxruntime as ort

sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
for n in (2, 4, 2, 4, 2, 2):
    y = sess.run(None, {"x": rng.standard_normal((n, 3)).astype(np.float32)})[0]
print("done")
"""


def _dynamic_project(tmp_path) -> tuple[pathlib.Path, pathlib.Path]:
    model = tmp_path / "dyn.onnx"
    model.write_bytes(cases.dynamic_model())
    script = tmp_path / "script.py"
    script.write_text(DYNAMIC_SCRIPT)
    return script, model


def test_replay_batches_all_calls_of_a_model_and_shape_into_one_job(tmp_path, hub_env):
    env, log = hub_env
    script, model = _dynamic_project(tmp_path)
    result = diff.run(script, [str(model)], backends="cpu,aihub", replay=True, backend_options={"aihub": {"device": DEVICE}},
                      directory=tmp_path / "d", env=env)
    assert result.exit_status == 0, result.table()
    assert result.runs["aihub"].calls == 6 and result.compared_calls == 6
    inference = _jobs(log, "inference")
    assert sorted((e["samples"], e["shapes"]["x"][0]) for e in inference) == [(2, 4), (4, 2)]  # 6 calls, 2 jobs
    assert len(_jobs(log, "compile")) == 2
    assert sum("device profile of dyn-" in n for n in result.notes) == 2


def test_live_mode_runs_one_job_per_call(tmp_path, hub_env):
    env, log = hub_env
    script, model = _dynamic_project(tmp_path)
    result = diff.run(script, [str(model)], backends="cpu,aihub", backend_options={"aihub": {"device": DEVICE}},
                      directory=tmp_path / "d", env=env)
    assert result.exit_status == 0, result.table()
    assert len(_jobs(log, "inference")) == 6 and len(_jobs(log, "compile")) == 2


def test_fault_plan_reaches_the_child_and_fails_the_run_with_the_job_url(tmp_path, hub_env, monkeypatch):
    env, log = hub_env
    plan = json.dumps([{"call": "fail_next_job", "message": "Device crashed", "kind": "inference"}])
    monkeypatch.setenv("QAI_HUB_DOUBLE_PLAN", plan)
    script, model = _dynamic_project(tmp_path)
    result = diff.run(script, [str(model)], backends="cpu,aihub", replay=True, backend_options={"aihub": {"device": DEVICE}},
                      directory=tmp_path / "d", env={**env, "QAI_HUB_DOUBLE_PLAN": plan})
    run = result.runs["aihub"]
    assert result.exit_status == 2 and run.status == "script_failed"
    assert "Device crashed. See https://workbench.aihub.qualcomm.com/jobs/j" in run.message
    assert any(e.get("plan") == "fail" for e in _jobs(log, "inference"))


def test_aipc_runs_an_unchanged_script_on_aihub(tmp_path, hub_env):
    _env, log = hub_env
    script, model = _dynamic_project(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "aipc", "--backend", "aihub", "--target", DEVICE, str(script),
                           str(model)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr
    assert len(_jobs(log, "inference")) == 6  # each run() of the script is one job on the device

