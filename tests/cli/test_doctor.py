"""``aipc doctor`` (issues 23, 34): the field self-test. On this host it finds the HTP simulator and runs
the canaries; its JSON has every field the issue lists. Kept cheap with a subset of canaries. Only a
real NPU is exit 0 (the simulator is 69), the report is printed whatever the cache, each Linux
aarch64 case (doubles of onnxruntime-qnn 2.7.0's lists) gets its reason, and the canaries' sessions
are closed before their temporary folder is removed."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import weakref

import pytest

from tests.conftest import qnn_available
from tests.fakes import ep_devices
from tests.platform_doubles import emulate_linux, qnn_lists

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]


def test_doctor_on_this_host_says_simulator_and_runs_the_canaries(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "aipc", "doctor", "--json", "--canary", "softmax", "--canary",
                           "conv7tap_len8", "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 69, proc.stderr[-2000:]  # usable, but no NPU on this machine
    report = json.loads(proc.stdout)
    assert report["mode"] == "simulator" and report["usable"] is True and report["npu_usable"] is False
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
    assert proc.returncode == 69 and "verdict     simulator usable" in proc.stdout, proc.stderr
    assert "no NPU on this machine" in proc.stdout
    assert "EP devices  CPU" in proc.stdout and "HTP         simulator" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "aipc", "doctor", "--canary", "nope"], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert bad.returncode == 64 and "unknown canary nope" in bad.stderr


@pytest.mark.parametrize("dev, registered_before, expected", [
    (("null",), False, "fastrpc kernel module"),                            # no FastRPC node
    (ep_devices.DOWNSTREAM_DEV, True, "Set ORT_QNN_ENABLE_CPU_BACKEND=1"),  # adsprpc-smd only, EP registered first
])
def test_doctor_gives_the_reason_of_each_linux_aarch64_case(monkeypatch, capsys, tmp_path, dev, registered_before,
                                                             expected):
    from aipc.cli import main

    emulate_linux(monkeypatch, "aarch64")
    qnn_lists(monkeypatch, ep_devices.LINUX_QCS6490, dev=dev, registered_before=registered_before)
    assert main(["doctor", "--json", "--no-canaries", "--cache-dir", str(tmp_path)]) == 69
    report = json.loads(capsys.readouterr().out)
    assert report["mode"] == "none" and not report["usable"] and report["qnn"]["ep_devices"] == []
    assert expected in report["verdict"]
    assert "ADSP_LIBRARY_PATH" not in os.environ  # onnxruntime-qnn sets its own on Linux aarch64


def test_doctor_finds_the_npu_of_both_kinds_of_linux_aarch64_board(monkeypatch, capsys, tmp_path):
    from aipc.cli import main

    for dev, node in ((ep_devices.UPSTREAM_DEV, "/dev/fastrpc-cdsp"), (ep_devices.DOWNSTREAM_DEV, "/dev/adsprpc-smd")):
        emulate_linux(monkeypatch, "aarch64")
        qnn_lists(monkeypatch, ep_devices.LINUX_QCS6490, dev=dev)
        main(["doctor", "--json", "--no-canaries", "--cache-dir", str(tmp_path)])
        report = json.loads(capsys.readouterr().out)
        assert report["mode"] == "npu" and node in report["qnn"]["reason"], report["qnn"]["reason"]


def test_doctor_prints_its_report_when_the_cache_is_not_private(tmp_path):
    cache = tmp_path / "shared-cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    proc = subprocess.run([sys.executable, "-m", "aipc", "doctor", "--no-canaries", "--cache-dir", str(cache)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "not private" in proc.stdout and "chmod go-w" in proc.stdout and "verdict" in proc.stdout
    assert proc.returncode == 69  # no NPU here; with one it would be 1: the cache cannot be used


def test_doctor_closes_every_canary_session_before_removing_its_folder(monkeypatch):
    import onnxwrapper
    from onnxwrapper.toolkit import run_doctor

    opened, at_removal = [], []
    real_session, real_rmtree = onnxwrapper.InferenceSession, shutil.rmtree

    def tracked(*args, **kwargs):
        session = real_session(*args, **kwargs)
        opened.append(weakref.ref(session))
        return session

    def rmtree(path, *args, **kwargs):
        if "aipc-doctor-" in os.fspath(path):
            at_removal.extend(not (r() is None or r()._ow_closed) for r in opened)
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(onnxwrapper, "InferenceSession", tracked)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    gc.disable()  # only what is closed or freed by reference counting counts (Windows maps the binaries)
    try:
        report = run_doctor(["softmax", "pow2_negzero"])
    finally:
        gc.enable()
    assert len(opened) == 2 and at_removal and not any(at_removal), report.format_text()
