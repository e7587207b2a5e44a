"""Red team, onnxruntime's telemetry (docs/security.md, "telemetry"): off by default — ``aipc`` sets
``ORT_DISABLE_TELEMETRY=1`` for itself and every process it starts before onnxruntime is imported,
and a session made through onnxwrapper calls ``onnxruntime.disable_telemetry_events()`` once —
unless the user sets ``ONNXWRAPPER_ORT_TELEMETRY=1``; nothing happens at import time."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from aipc_loader import _env
from onnxwrapper import kernel
from tests import models

SHOW = "import os; print('ORT_DISABLE_TELEMETRY=' + str(os.environ.get('ORT_DISABLE_TELEMETRY')))\n"


def _aipc(args, cwd, **env):
    environ = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "ONNXWRAPPER_ORT_TELEMETRY")}
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "aipc", *map(str, args)], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("env, seen", [({}, "1"), ({"ONNXWRAPPER_ORT_TELEMETRY": "1"}, "None"),
                                       ({"ORT_DISABLE_TELEMETRY": "0"}, "0")])
def test_aipc_turns_onnxruntime_telemetry_off_for_itself_and_its_script(tmp_path, env, seen):
    (tmp_path / "show.py").write_text(SHOW)
    proc = _aipc(["--backend", "cpu", "show.py"], tmp_path, **env)
    assert proc.returncode == 0 and f"ORT_DISABLE_TELEMETRY={seen}" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_children_of_aipc_diff_inherit_it(tmp_path):
    (tmp_path / "show.py").write_text(SHOW)
    proc = _aipc(["diff", "--backends", "cpu,twin=cpu", "--dir", "d", "--no-html", "show.py"], tmp_path)
    assert proc.returncode in (0, 2), proc.stderr
    for label in ("cpu", "twin"):
        assert (tmp_path / "d" / label / "stdout.txt").read_text().strip() == "ORT_DISABLE_TELEMETRY=1"


LIBRARY = r"""
import onnxruntime
calls = []
onnxruntime.disable_telemetry_events = lambda: calls.append(1)
import onnxwrapper
print("after import:", len(calls))
s = onnxwrapper.InferenceSession(open(__import__("sys").argv[1], "rb").read(), backend="cpu")
s2 = onnxwrapper.InferenceSession(open(__import__("sys").argv[1], "rb").read(), backend="cpu")
print("after sessions:", len(calls))
"""


@pytest.mark.parametrize("wanted", [False, True])
def test_a_library_session_turns_it_off_once_and_import_does_nothing(tmp_path, wanted):
    (tmp_path / "m.onnx").write_bytes(models.smallconv(batch=1))
    environ = {k: v for k, v in os.environ.items() if k != "ONNXWRAPPER_ORT_TELEMETRY"}
    if wanted:
        environ["ONNXWRAPPER_ORT_TELEMETRY"] = "1"
    proc = subprocess.run([sys.executable, "-c", LIBRARY, str(tmp_path / "m.onnx")], env=environ, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "after import: 0" in proc.stdout
    assert f"after sessions: {0 if wanted else 1}" in proc.stdout, proc.stdout


def test_one_variable_name_in_the_library_and_the_command_line():
    from onnxwrapper.kernel.session import _ort_telemetry

    assert _env.ENV_ORT_TELEMETRY == kernel.ENV_ORT_TELEMETRY == _ort_telemetry.ENV_ORT_TELEMETRY
    assert _env.ORT_TELEMETRY_OFF == _ort_telemetry.ORT_TELEMETRY_OFF_VARIABLE
    environ = {}
    assert _env.keep_ort_telemetry_off(environ) and environ == {"ORT_DISABLE_TELEMETRY": "1"}
    assert not _env.keep_ort_telemetry_off({"ONNXWRAPPER_ORT_TELEMETRY": "yes"})
