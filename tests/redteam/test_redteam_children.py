"""Red team, child processes (docs/security.md, "child processes"): every child aipc starts imports
nothing from its working directory or a received folder — ``python -P`` (safe-path mode), started
in its own run folder — while a live run of the user's script still sees the ``sys.path`` and the
working directory plain ``python script.py`` gives it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from onnxwrapper import diff
from onnxwrapper.repair.fix import _verify
from tests.diff.test_diff_api import perturb_registered  # noqa: F401 (fixture)
from tests.test_diff_support import child_env, conv_project, write_script  # noqa: F401 (fixture)

#: modules of the standard library aipc's children import after start-up (none is preloaded by Python)
PLANTED = ("json", "argparse", "faulthandler", "zipfile", "difflib", "textwrap", "tempfile")


def plant(folder, marker) -> None:
    """A module for each of :data:`PLANTED` in ``folder`` that records who imported it."""
    for name in PLANTED:
        (folder / f"{name}.py").write_text(
            f"import os, sys\nopen({str(marker)!r}, 'a').write(f'{name} imported by {{sys.argv}}\\n')\n"
            f"raise SystemExit('planted {name}.py ran')\n")


@pytest.mark.slow
@pytest.mark.parametrize("python", [["-m", "aipc"], ["-P", "-m", "aipc"]], ids=["python -m aipc", "python -P -m aipc"])
def test_fix_in_a_received_folder_imports_nothing_shipped_there(tmp_path, child_env, perturb_registered,  # noqa: F811
                                                                python):
    """``python -P -m aipc`` keeps the command itself clean (Python's own flag): what is left to aipc
    are its children; plain ``python -m aipc`` also takes the folder out of its own ``sys.path``."""
    script = conv_project(tmp_path)
    folder = tmp_path / "received"
    result = diff.run(script, backends="cpu,perturb", backend_options={"perturb": {"scale": 1e-2}}, directory=folder,
                      cwd=tmp_path, env={"PYTHONPATH": child_env["PYTHONPATH"]})
    assert result.exit_status == 1
    marker = tmp_path / "IMPORTED"
    plant(folder, marker)
    # `python -m aipc fix .` there: the command itself and its localization children
    proc = subprocess.run([sys.executable, *python, "fix", ".", "--timeout", "120"], cwd=folder, env=child_env,
                          capture_output=True, text=True, timeout=600)
    assert not marker.exists(), marker.read_text()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "has no 'repairs' option" in proc.stdout, proc.stdout + proc.stderr  # it got as far as the candidates


@pytest.mark.slow
def test_a_live_run_sees_what_plain_python_gives_it(tmp_path, child_env):
    """The script's own folder first on sys.path, the user's working directory, `import helper` from
    its folder — and nothing of the working directory imported by aipc's child itself."""
    marker = tmp_path / "IMPORTED"
    plant(tmp_path, marker)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "helper.py").write_text("X = 42\n")
    write_script(tmp_path / "sub", """
        import json, os, sys
        import helper
        print(json.dumps({"path0": sys.path[0], "cwd": os.getcwd(), "helper": helper.X,
                          "json": os.path.basename(os.path.dirname(json.__file__))}))
    """, name="s.py")
    plain = subprocess.run([sys.executable, "sub/s.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    result = diff.run("sub/s.py", backends="cpu,twin=cpu", directory=tmp_path / "d", cwd=tmp_path,
                      env={"PYTHONPATH": child_env["PYTHONPATH"]}, compare_output=["none"])
    assert not marker.exists(), marker.read_text()
    for label in ("cpu", "twin"):
        run = result.runs[label]
        assert run.status == "ok", run.message
        seen = json.loads((tmp_path / "d" / label / "stdout.txt").read_text())
        assert seen == json.loads(plain.stdout), (seen, plain.stdout)  # path0 = sub/, cwd = tmp_path, stdlib json


@pytest.mark.slow
def test_a_live_module_run_finds_modules_in_the_working_directory(tmp_path, child_env):
    """``aipc diff -m mod``: the working directory first on sys.path, as ``python -m mod`` puts it."""
    (tmp_path / "mymod.py").write_text("import os, sys\nprint(sys.path[0] == os.getcwd())\n")
    result = diff.run("mymod", module=True, backends="cpu,twin=cpu", directory=tmp_path / "d", cwd=tmp_path,
                      env={"PYTHONPATH": child_env["PYTHONPATH"]}, compare_output=["none"])
    assert result.runs["cpu"].status == "ok", result.runs["cpu"].message
    assert (tmp_path / "d" / "cpu" / "stdout.txt").read_text().strip() == "True"


def test_fix_trial_children_start_in_safe_path_mode_in_their_own_folder(tmp_path, monkeypatch):
    started = {}

    class Proc:
        def wait(self, timeout=None):
            return 0

    def popen(cmd, **kwargs):
        started.update(cmd=cmd, cwd=kwargs.get("cwd"))
        return Proc()

    monkeypatch.setattr(_verify.subprocess, "Popen", popen)
    (tmp_path / "trial").mkdir()
    _verify._run(str(tmp_path / "trial" / "request.json"), str(tmp_path / "trial"), None, {})
    assert started["cmd"][1:4] == ["-P", "-m", "onnxwrapper.repair.fix._child"]
    assert started["cwd"] == str(tmp_path / "trial")
