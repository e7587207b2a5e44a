"""Red team, exit statuses (aipc/_exit_codes.py, docs/loader.md): every typed refusal of input — a
recipe, a cache, a tensor file, a received folder — reaches the user as one line and status 64,
never a traceback or status 1; a bad option is found before any work starts (the script does not
run, no child starts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import models
from tests.redteam.folders import diff_folder
from tests.redteam.hostile import POSIX

SCRIPT = "open('RAN', 'w').write('ran')\n"


def aipc(args, cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aipc", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def one_line_64(proc: subprocess.CompletedProcess, message: str) -> None:
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert proc.returncode == 64, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and len(errors) == 1 and message in errors[0], proc.stderr


@pytest.fixture
def project(tmp_path):
    (tmp_path / "m.onnx").write_bytes(models.smallconv(batch=1))
    (tmp_path / "s.py").write_text(SCRIPT)
    (tmp_path / "bad.json").write_text(json.dumps({"format": "onnxwrapper-repair-recipe", "version": 7, "models": {}}))
    return tmp_path


def test_a_recipe_refused_by_compile_is_status_64(project):
    one_line_64(aipc(["compile", "m.onnx", "--repairs", "bad.json", "-o", "out.onnx"], project), "format version 7")


@POSIX
def test_a_cache_others_can_write_is_refused_before_the_script_runs(project):
    shared = project / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    proc = aipc(["--cache-dir", shared, "s.py"], project)
    one_line_64(proc, "is not private: group and others may write it")
    assert not (project / "RAN").exists()


@POSIX
def test_a_fifo_given_as_a_recipe_or_tensor_file_is_status_64_at_once(project):
    os.mkfifo(project / "fifo.json")
    one_line_64(aipc(["run", "m.onnx", "--backend", "cpu", "--load-inputs", "fifo.json"], project, timeout=60),
                "a FIFO (named pipe), not a regular file")
    one_line_64(aipc(["--repairs", "fifo.json", "s.py"], project, timeout=60), "a FIFO (named pipe), not a regular file")
    assert not (project / "RAN").exists()


def test_a_bad_option_of_a_diff_is_found_before_any_run(project):
    proc = aipc(["diff", "--backends", "cpu,qnn", "--backend-option", "qnn:repairs=bad.json", "--dir", "d", "s.py"],
                project)
    one_line_64(proc, "format version 7")
    assert not (project / "RAN").exists() and not (project / "d" / "cpu").exists()


def test_a_received_folder_error_is_one_escaped_line(project):
    folder = diff_folder(project / "d", backend="twin")
    doc = json.loads((folder / "diff.json").read_text())
    doc["runs"]["twin\x1b]0;owned\x07\x1b[8m"] = {"backend": 3}
    (folder / "diff.json").write_text(json.dumps(doc))
    for args in (["diff", "--check", folder], ["fix", folder]):
        proc = aipc(args, project)
        one_line_64(proc, r"runs.twin\x1b]0;owned\x07\x1b[8m.backend: found int")
        assert "\x1b" not in proc.stderr


def test_a_received_folders_oversized_app_output_is_refused_not_read_whole(project, monkeypatch):
    """The runs' ``stdout.txt`` of a received folder are untrusted: one larger than the bound the
    comparison reads is a typed error naming the file, before it is read (a FIFO too, at once)."""
    from onnxwrapper import diff
    from onnxwrapper.diff._judge import _app_level
    from onnxwrapper.errors import MalformedFileError

    folder = diff_folder(project / "d", backend="twin")
    assert diff.check(folder).app  # the app level is compared as received
    monkeypatch.setattr(_app_level, "MAX_APP_OUTPUT_BYTES", 16)
    (folder / "twin" / "stdout.txt").write_text("x" * 17)
    with pytest.raises(MalformedFileError, match=r"twin.stdout\.txt: 17 bytes, more than the 16 bytes") as info:
        diff.check(folder)
    assert info.value.path == str(folder / "twin" / "stdout.txt")


@POSIX
def test_a_received_folders_app_output_that_is_a_fifo_is_status_64_at_once(project):
    folder = diff_folder(project / "d", backend="twin")
    os.unlink(folder / "twin" / "stdout.txt")
    os.mkfifo(folder / "twin" / "stdout.txt")
    one_line_64(aipc(["diff", "--check", folder], project, timeout=60), "a FIFO (named pipe), not a regular file")
