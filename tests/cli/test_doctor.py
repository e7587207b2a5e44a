"""``aipc doctor`` (issue 23): the field self-test. On this host it finds the HTP simulator and runs the
canaries; its JSON has every field the issue lists. Kept cheap with a subset of canaries."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import qnn_available
from tests.fakes import ep_devices
from tests.platform_doubles import emulate_linux, qnn_lists

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]


def test_doctor_on_this_host_says_simulator_and_runs_the_canaries(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "aipc", "doctor", "--json", "--canary", "softmax", "--canary",
                           "conv7tap_len8", "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["mode"] == "simulator" and report["usable"] is True
    assert report["verdict"].startswith("simulator usable")
    host = report["host"]
    assert {"system", "process_arch", "os_arch", "emulated", "python"} <= set(host)
    assert {"onnxwrapper", "onnxruntime", "onnxruntime-qnn", "qnn_sdk"} <= set(report["packages"])
    qnn = report["qnn"]
    assert qnn["htp"] == "simulator" and qnn["ep_devices"] and qnn["versions"]["qnn_sdk"]
    assert {"soc_model", "htp_arch"} <= set(qnn["soc"]) and qnn["fp16"] is True and qnn["skel"]["verdict"]
    assert report["cache"]["path"] == str(tmp_path / "cache") and report["cache"]["writable"] is True
    canaries = {c["name"]: c for c in report["canaries"]}
    assert canaries["softmax"]["status"] == "pass" and canaries["softmax"]["compile_seconds"] > 0
    assert canaries["softmax"]["run_seconds"] > 0 and canaries["softmax"]["outputs"][0]["snr_db"] > 27
    assert canaries["softmax"]["binary_soc_model"] == qnn["soc"]["soc_model"]  # the context binary's header
    assert canaries["conv7tap_len8"]["status"] in ("bug reproduced", "bug not reproduced")  # never decides


def test_doctor_text_report_and_usage_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "aipc", "doctor", "--no-canaries"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0 and "verdict     simulator usable" in proc.stdout, proc.stderr
    assert "EP devices  CPU" in proc.stdout and "HTP         simulator" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "aipc", "doctor", "--canary", "nope"], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert bad.returncode == 64 and "unknown canary nope" in bad.stderr


def test_doctor_says_the_npu_is_not_usable_without_a_dsp(monkeypatch, capsys, tmp_path):
    from aipc.cli import main

    emulate_linux(monkeypatch, "aarch64")
    qnn_lists(monkeypatch, ep_devices.LINUX_QCS6490)
    assert main(["doctor", "--json", "--no-canaries", "--cache-dir", str(tmp_path)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["mode"] == "none" and not report["usable"]
    assert "fastrpc" in report["verdict"].lower() and report["qnn"]["ep_devices"]
    assert os.environ.get("ADSP_LIBRARY_PATH")  # an ARM64 Linux process gets the skel path when unset
