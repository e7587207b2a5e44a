"""Red team, ``aipc fix --confirm`` (docs/security.md, "aipc fix"): a received diff folder never
chooses what runs — not a standard-library module, not a script it ships (with its correct sha256),
not a symbolic link to either, not an argument or a working directory for the user's own script,
not a file to copy into the folder; ``--confirm`` runs a recorded command only for a folder made on
this machine by this user (a private record of its ``diff.json``), and only the very bytes whose
digest was checked."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from onnxwrapper import diff
from onnxwrapper.diff import _capture
from onnxwrapper.repair import ModelRecipe
from onnxwrapper.repair.fix import _api as _fix
from onnxwrapper.repair.fix import fix
from tests.redteam.plugins import rtfix, rtfix_env  # noqa: F401 (fixture)
from tests.test_diff_support import child_env, conv_project, write_script  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow  # diff runs: one child process per backend


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def made_here(tmp_path, rtfix, monkeypatch):  # noqa: F811
    """A failing diff (cpu vs rtfix: perturbed outputs) made by this user here, whose script appends
    its arguments to ``log.txt``; the repair itself is stubbed (rtfix ignores recipes) so that fix
    reaches its confirmation step."""
    conv_project(tmp_path)
    script = write_script(tmp_path, """
        import sys
        import numpy as np
        import onnxruntime as ort
        open("log.txt", "a").write(" ".join(sys.argv[1:]) + "\\n")
        sess = ort.InferenceSession("conv.onnx")
        x = np.linspace(-1, 1, 3 * 8 * 8, dtype=np.float32).reshape(1, 3, 8, 8)
        print("sum", round(float(sess.run(None, {"X": x})[0].sum()), 3))
    """, name="app.py")
    d = tmp_path / "d"
    env = {"PYTHONPATH": rtfix["PYTHONPATH"]}
    result = diff.run(script, backends="cpu,rtfix", backend_options={"rtfix": {"scale": 1e-2}}, directory=d,
                      cwd=tmp_path, env=env)
    assert result.exit_status == 1

    def stub_fix_model(mf, *args, **kwargs):
        mf.recipe = ModelRecipe(mf.sha256, cpu_subgraphs=(("conv",),))

    monkeypatch.setattr(_fix, "_fix_model", stub_fix_model)
    return d, script, env


def received(d, tmp_path, **target):
    """A copy of the diff folder ``d`` as it would arrive from someone else: ``diff.json``'s target
    edited (any edit: its private record no longer matches)."""
    folder = tmp_path / "received"
    shutil.copytree(d, folder)
    manifest = json.loads((folder / "diff.json").read_text())
    manifest["target"].update(target)
    (folder / "diff.json").write_text(json.dumps(manifest))
    return folder


def test_a_folder_made_here_confirms_with_its_recorded_command(tmp_path, made_here):
    d, script, env = made_here
    assert _capture.local_record(d)["target"]["argv"] == [str(script)]
    said = []
    result = fix(d, localize=False, env=env, confirm=True, progress=said.append)
    assert result.confirmation is not None and result.confirmation.runs["cpu"].status == "ok"
    assert any(s.startswith("confirming:") and str(script) in s for s in said)  # shown before it ran
    assert any("recorded by your diff on this machine" in n for n in result.notes), result.notes


@pytest.mark.parametrize("kind", ["stdlib module", "shipped script", "link to a shipped script"])
def test_a_received_folder_never_chooses_what_runs(tmp_path, made_here, kind):
    d, script, env = made_here
    marker = tmp_path / "PWNED"
    shipped = tmp_path / "received-payload.py"
    shipped.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    if kind == "stdlib module":  # python -m timeit runs a statement
        target = {"argv": ["timeit", f"open({str(marker)!r}, 'w').write('ran')"], "module": True}
    elif kind == "shipped script":  # with its correct digest: the digest proves nothing by itself
        target = {"argv": [str(shipped)], "sha256": sha(shipped), "module": False}
    else:
        os.symlink(shipped, tmp_path / "link.py")
        target = {"argv": [str(tmp_path / "link.py")], "sha256": sha(shipped), "module": False}
    folder = received(d, tmp_path, **target)
    result = fix(folder, localize=False, env=env, confirm=True)
    assert not marker.exists() and result.confirmation is None
    assert any("not made on this machine by you" in n for n in result.notes), result.notes
    assert _capture.local_record(folder) is None


def test_recorded_arguments_and_working_directory_never_reach_the_users_script(tmp_path, made_here):
    """The folder names the user's own script (its real digest) with arguments and a working
    directory of its choosing: --confirm refuses; --confirm-with runs the user's command line only."""
    d, script, env = made_here
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(tmp_path / "conv.onnx", elsewhere)
    folder = received(d, tmp_path, argv=[str(script), "--chosen-by-the-folder"], cwd=str(elsewhere),
                      sha256=sha(script))
    before = (tmp_path / "log.txt").read_text()
    assert fix(folder, localize=False, env=env, confirm=True, output=tmp_path / "r1.json").confirmation is None
    result = fix(folder, localize=False, env=env, confirm=[str(script), "--mine"], cwd=tmp_path,
                 output=tmp_path / "r2.json")
    assert result.confirmation is not None
    added = (tmp_path / "log.txt").read_text()[len(before):]
    assert "--chosen-by-the-folder" not in added and "--mine" in added, added
    assert not (elsewhere / "log.txt").exists()


def test_a_script_swapped_after_its_check_is_not_what_runs(tmp_path, made_here, monkeypatch):
    d, script, env = made_here
    marker = tmp_path / "PWNED"
    real_run = _fix.run

    def swap_then_run(*args, **kwargs):  # the swap lands between the digest check and the children
        script.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
        return real_run(*args, **kwargs)

    monkeypatch.setattr(_fix, "run", swap_then_run)
    result = fix(d, localize=False, env=env, confirm=True)
    assert not marker.exists()
    run = result.confirmation.runs["cpu"]
    assert run.status == "error" and "no longer the script whose sha256 was checked" in run.message, run.message


def test_a_received_compare_file_is_never_copied_into_the_folder(tmp_path, made_here):
    """``app.compare`` names a file the user's script writes (``log.txt``, any path could be named):
    a confirmation run of a received folder compares stdout only; nothing is copied in."""
    d, script, env = made_here
    folder = received(d, tmp_path, note="edited")
    manifest = json.loads((folder / "diff.json").read_text())
    manifest["app"]["compare"] = ["stdout", "log.txt"]
    (folder / "diff.json").write_text(json.dumps(manifest))
    result = fix(folder, localize=False, env=env, confirm=[str(script)], cwd=tmp_path)
    assert result.confirmation is not None
    copied = [p for p in folder.rglob("*log.txt*")]
    assert not copied, copied


def test_confirm_with_a_missing_script_fails_before_any_work(tmp_path, made_here, monkeypatch):
    d, script, env = made_here
    started = []
    monkeypatch.setattr(_fix, "check", lambda *a, **k: started.append("check"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        fix(d, localize=False, env=env, confirm=[str(tmp_path / "missing.py")])
    assert not started


def test_cli_confirm_with_a_missing_script_is_a_usage_error_at_once(tmp_path, made_here, rtfix_env):  # noqa: F811
    d, script, env = made_here
    proc = subprocess.run([sys.executable, "-m", "aipc", "fix", str(d), "--confirm-with", "missing.py"],
                          cwd=tmp_path, env=rtfix_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 64 and "--confirm-with: the script 'missing.py' does not exist" in proc.stderr
    assert "baseline" not in proc.stderr and not (d / "fix.json").exists()
