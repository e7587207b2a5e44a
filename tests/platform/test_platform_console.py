"""Console encodings and Windows process facts (issue 23, facts 5 and 6), emulated on this host.

* ``aipc diff``'s report on a cp1252 stdout (Windows' encoding of a redirected stream) — a real
  ``python -m aipc diff`` with ``PYTHONIOENCODING=cp1252`` — finishes, and its children write the
  script's non-Latin output in the encoding the parent reads;
* run labels that cannot be folder names are refused;
* NTSTATUS crash codes are named; a timeout on Windows kills the whole process tree
  (``taskkill /T``), emulated with a double of ``taskkill`` under ``sys.platform == "win32"``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

from onnxwrapper.diff import parse_backends

_SCRIPT = textwrap.dedent("""
    import numpy as np, onnxruntime as ort
    from onnx import helper as h, TensorProto as T
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9)
    y = ort.InferenceSession(m.SerializeToString()).run(None, {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2})[0]
    print("\\u8bc6\\u522b\\u7ed3\\u679c: \\u4f60\\u597d \\u2713", float(y.sum()))
""")


def test_diff_report_and_children_survive_a_cp1252_console(tmp_path):
    script = tmp_path / "ocr_like.py"
    script.write_text(_SCRIPT, encoding="utf-8")
    env = dict(os.environ, PYTHONIOENCODING="cp1252")
    proc = subprocess.run([sys.executable, "-m", "aipc", "diff", "--backends", "cpu,cpu2=cpu", "--dir", "d",
                           "--jobs", "2", str(script)], cwd=tmp_path, env=env, capture_output=True, timeout=300)
    out, err = proc.stdout.decode("cp1252"), proc.stderr.decode("cp1252", "replace")
    assert proc.returncode == 0, err
    assert "UnicodeEncodeError" not in out + err
    assert "verdict: PASS" in out and "max|d|" in out  # the report was printed whole, with ASCII spellings
    for run in ("cpu", "cpu2"):  # each child wrote the script's text in the encoding the parent reads
        assert (tmp_path / "d" / run / "stdout.txt").read_text(encoding="utf-8").startswith("识别结果: 你好 ✓")
    report = json.loads((tmp_path / "d" / "report.json").read_text(encoding="utf-8"))
    assert report["runs"]["cpu2"]["status"] == "ok"


def test_make_output_safe_spells_symbols_in_ascii():
    from aipc._console_encoding import make_output_safe

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="cp1252")
    make_output_safe(stream)
    stream.write("max|Δ| ≥ 1 ✓ ✗ → 你\n")
    stream.flush()
    assert raw.getvalue().decode("cp1252") == "max|d| >= 1 ok FAIL -> \\u4f60\n"
    utf8 = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    make_output_safe(utf8)
    assert utf8.errors == "strict"  # a stream that encodes everything is left alone


@pytest.mark.parametrize("label", ["a:b", "run?", "x*", "con", "LPT1.txt", "trailing.", "-x", "a/b", "a\\b"])
def test_run_labels_that_cannot_be_folder_names_are_refused(label):
    with pytest.raises(ValueError, match="run label"):
        parse_backends(f"cpu,{label}=cpu")


def test_valid_run_labels_are_kept():
    assert parse_backends("cpu,q32=qnn,ref_2.b+c=cpu") == {"cpu": "cpu", "q32": "qnn", "ref_2.b+c": "cpu"}


@pytest.mark.parametrize("code, name", [(0xC0000005, "ACCESS_VIOLATION (0xC0000005)"),
                                        (0xC0000135, "DLL_NOT_FOUND (0xC0000135)"),
                                        (0xC0000409, "STACK_BUFFER_OVERRUN (0xC0000409)"),
                                        (0xC0001234, "NTSTATUS 0xC0001234"), (1, None), (0, None)])
def test_ntstatus_crash_codes_are_named_on_windows(monkeypatch, code, name):
    from onnxwrapper.diff._runs._orchestrate import crash_name

    monkeypatch.setattr(sys, "platform", "win32")
    assert crash_name(code) == name


def test_a_timeout_on_windows_kills_the_process_tree(monkeypatch, tmp_path):
    from onnxwrapper.diff._runs._orchestrate import kill_child

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    calls = []
    real_run = subprocess.run

    def taskkill(argv, **kwargs):  # Windows' taskkill: /T ends the process and the processes it started
        calls.append(list(argv))
        if argv[:1] == ["taskkill"] and "/T" in argv and "/F" in argv:
            os.killpg(int(argv[argv.index("/PID") + 1]), 9)
            return subprocess.CompletedProcess(argv, 0)
        return real_run(argv, **kwargs)

    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(subprocess, "run", taskkill)
    try:
        kill_child(child)
    finally:
        if child.poll() is None:
            child.kill()
    assert calls == [["taskkill", "/PID", str(child.pid), "/T", "/F"]]
    assert child.wait(timeout=10) != 0
