"""The newcomer mistakes of issue 34, each as a user makes it: one line naming what was typed, the
documented exit status (aipc/_exit_codes.py), never a traceback."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from onnxwrapper.diff import parse_backends

ROOT = pathlib.Path(__file__).parents[2]


def aipc(*args, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aipc", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})))


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


def test_backend_npu_suggests_qnn(tmp_path):
    script = tmp_path / "app.py"
    script.write_text("print('hi')\n")
    proc = aipc("--backend", "npu", script)
    assert proc.returncode == 64 and "Did you mean 'qnn'?" in one_line_error(proc)


def test_a_script_given_as_the_backends_value_is_named(tmp_path):
    script = tmp_path / "app.py"
    script.write_text("print('hi')\n")
    proc = aipc("diff", "--backends", script)
    line = one_line_error(proc)
    assert proc.returncode == 64 and "is a script, not a backend" in line and "--backends cpu,qnn" in line


def test_run_labels_differing_only_in_case_are_refused():
    with pytest.raises(ValueError, match="differ only in case"):
        parse_backends("Q=cpu,q=cpu")
    assert parse_backends("q16=cpu,q32=cpu") == {"q16": "cpu", "q32": "cpu"}


@pytest.mark.parametrize("command", [["inspect"], ["compile", "-o", "{tmp}/out_ctx.onnx"], ["run"]])
def test_a_file_that_is_not_onnx_is_one_line_and_exit_64(tmp_path, command):
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is not a model\n")
    args = [c.format(tmp=tmp_path) for c in command]
    proc = aipc(*args[:1], bad, *args[1:], cwd=tmp_path)
    line = one_line_error(proc)
    assert proc.returncode == 64 and f"{bad}: not an ONNX model" in line
    assert not (tmp_path / "out_ctx.onnx").exists()


@pytest.mark.parametrize("command", ["run", "diff", "capture"])
def test_the_default_run_folders_are_git_ignored(command):
    from onnxwrapper.diff import default_directory

    if subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    name = os.path.basename(default_directory(command=command))
    assert name.startswith(f"aipc-{command}-")
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", f"{name}/report.json"])
    assert ignored.returncode == 0, f"{name}/ is not covered by .gitignore"


@pytest.mark.parametrize("make, env_var", [("not-private", False), ("a-file", False), ("uncreatable", True)])
def test_an_unusable_cache_folder_stops_before_the_script_starts_naming_the_option(tmp_path, make, env_var):
    script = tmp_path / "app.py"
    script.write_text("print('SCRIPT STARTED')\n")
    cache = tmp_path / "cache"
    if make == "not-private":
        cache.mkdir()
        os.chmod(cache, 0o777)
    elif make == "a-file":
        cache.write_text("x")
    else:
        cache = tmp_path / "a-file" / "cache"
        (tmp_path / "a-file").write_text("x")
    args = ("--backend", "cpu", script) if env_var else ("--backend", "cpu", "--cache-dir", cache, script)
    proc = aipc(*args, cwd=tmp_path, env={"AIPC_CACHE_DIR": str(cache)} if env_var else None)
    line = one_line_error(proc)
    assert proc.returncode == 64 and "SCRIPT STARTED" not in proc.stdout
    assert line.startswith(f"aipc: error: {'$AIPC_CACHE_DIR' if env_var else '--cache-dir'} {cache}:")
    assert "'cache_dir'" not in line
