"""Trust boundary, code execution (docs/security.md): a model's file name or a received diff folder
never runs code — ``--gen-script`` writes names as inert literals, and ``aipc fix`` runs only a
command the user names, or the recorded one of a folder made here when its script is byte-for-byte
the one the diff ran (more cases: tests/redteam/test_redteam_confirm.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from aipc.args._script_literals import comment_line, docstring
from onnxwrapper import diff
from onnxwrapper.repair.fix import _api as _fix
from onnxwrapper.repair import ModelRecipe
from onnxwrapper.repair.fix import fix
from tests import models
from tests.redteam.plugins import rtfix, rtfix_env  # noqa: F401 (fixture)
from tests.test_diff_support import child_env, conv_project  # noqa: F401 (fixture)

HOSTILE = 'x"""+__import__("os").system("touch pwned")+"""y.onnx'
NASTY = [HOSTILE, "a\\", 'q"', '"""', "\\N{BULLET}", "line\nbreak", "cr\rhere", "\x1b[8mhidden", "nul\x00",
         "sep\u2028x", "tab\tx", "'''", "\\x41", "end\\"]


@pytest.mark.parametrize("text", NASTY)
def test_generated_script_literals_are_inert_and_exact(text):
    assert ast.literal_eval(docstring(text)) == text
    line = comment_line(text)
    assert "\n" not in line and "\r" not in line and line.startswith("# ")
    module = ast.parse(f"{docstring(text)}\n{line}\nX = 1\n")
    assert [type(n).__name__ for n in module.body] == ["Expr", "Assign"]  # the docstring and X = 1, nothing else


def test_gen_script_of_a_hostile_model_name_runs_no_command(tmp_path, child_env):
    (tmp_path / HOSTILE).write_bytes(models.smallconv(batch=1))
    proc = subprocess.run([sys.executable, "-m", "aipc", "run", HOSTILE, "--backend", "cpu", "--gen-script", "gen.py"],
                          cwd=tmp_path, env=child_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "gen.py").read_text()
    assert ast.get_docstring(ast.parse(text)).startswith(f"Run {HOSTILE} on cpu.")
    rerun = subprocess.run([sys.executable, "gen.py"], cwd=tmp_path, env=child_env, capture_output=True, text=True,
                           timeout=300)
    assert not (tmp_path / "pwned").exists()
    assert rerun.returncode == 0 and "cpu (cpu): ok" in rerun.stdout, rerun.stdout + rerun.stderr


@pytest.fixture
def received_diff(tmp_path, rtfix, monkeypatch):  # noqa: F811
    """A failing diff (cpu vs rtfix: perturbed outputs) whose diff.json was edited by its sender to
    name a hostile script; the repair itself is stubbed (rtfix ignores recipes) so that fix reaches
    its confirmation step."""
    script = conv_project(tmp_path)
    d = tmp_path / "d"
    env = {"PYTHONPATH": rtfix["PYTHONPATH"]}
    result = diff.run(script, backends="cpu,rtfix", backend_options={"rtfix": {"scale": 1e-2}}, directory=d,
                      cwd=tmp_path, env=env)
    assert result.exit_status == 1
    manifest = json.loads((d / "diff.json").read_text())
    assert manifest["target"]["sha256"] == _fix_confirm_digest(script)
    hostile = tmp_path / "hostile.py"
    hostile.write_text("open('PWNED', 'w').write('ran')\n")
    manifest["target"].update(argv=[str(hostile)], sha256="0" * 64)  # a digest that matches no script here
    (d / "diff.json").write_text(json.dumps(manifest))

    def stub_fix_model(mf, *args, **kwargs):
        mf.recipe = ModelRecipe(mf.sha256, cpu_subgraphs=(("conv",),))

    monkeypatch.setattr(_fix, "_fix_model", stub_fix_model)
    return d, script, hostile, env


def _fix_confirm_digest(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fix_never_runs_the_script_a_received_diff_names(tmp_path, received_diff):
    d, script, hostile, env = received_diff
    result = fix(d, localize=False, cwd=tmp_path, env=env)
    assert not (tmp_path / "PWNED").exists() and result.confirmation is None
    assert any("A diff folder never chooses what runs" in n for n in result.notes), result.notes
    # --confirm: the recorded command only for a folder made here (its diff.json was edited: it is not)
    asked = fix(d, localize=False, cwd=tmp_path, env=env, confirm=True, output=tmp_path / "r2.json")
    assert not (tmp_path / "PWNED").exists() and asked.confirmation is None
    assert any("not made on this machine by you" in n for n in asked.notes), asked.notes


def test_fix_confirms_with_the_command_the_user_names(tmp_path, received_diff):
    d, script, hostile, env = received_diff
    result = fix(d, localize=False, cwd=tmp_path, env=env, confirm=[str(script)], output=tmp_path / "r.json")
    assert not (tmp_path / "PWNED").exists()
    assert result.confirmation is not None and any("named by you" in n for n in result.notes)
    # restoring the digest and the script by hand does not make the folder one made here
    manifest = json.loads((d / "diff.json").read_text())
    manifest["target"].update(argv=[str(script)], sha256=_fix_confirm_digest(script))
    (d / "diff.json").write_text(json.dumps(manifest))
    recorded = fix(d, localize=False, cwd=tmp_path, env=env, confirm="recorded", output=tmp_path / "r3.json")
    assert recorded.confirmation is None and any("not made on this machine" in n for n in recorded.notes)


def test_fix_cli_options_for_the_confirmation(tmp_path):
    (tmp_path / "diff.json").write_text("{}")
    proc = subprocess.run([sys.executable, "-m", "aipc", "fix", str(tmp_path), "--confirm-with"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 64 and "--confirm-with: expected SCRIPT" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "aipc", "fix", str(tmp_path), "--confirm", "--confirm-with", "s.py"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 64 and "not allowed with argument" in proc.stderr
