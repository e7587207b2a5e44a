"""``ADSP_LIBRARY_PATH`` (issue 23, fact 6): set for qnn and snpe where a real DSP is driven (an ARM64
Windows or Linux host) and only when the user has not set it; never at import."""

from __future__ import annotations

import os
import subprocess
import sys

from onnxwrapper.backends._adsp_path import ensure_adsp_library_path
from onnxwrapper.backends.snpe import Sdk
from onnxwrapper.kernel import HostArchitecture
from tests.platform_doubles import emulate_linux, emulate_windows


def _host(system, arch):
    return HostArchitecture(system, arch, arch, "3.12")


def test_set_where_it_applies_and_only_when_unset(tmp_path):
    folder = str(tmp_path)
    for host, expected in ((_host("Windows", "arm64"), folder), (_host("Linux", "arm64"), folder),
                           (_host("Linux", "x86_64"), None), (_host("Darwin", "arm64"), None)):
        env: dict = {}
        assert ensure_adsp_library_path([folder, str(tmp_path / "missing")], host, env) == expected
        assert env.get("ADSP_LIBRARY_PATH") == expected
    user = {"ADSP_LIBRARY_PATH": "C:/my/skels"}
    assert ensure_adsp_library_path([folder], _host("Windows", "arm64"), user) is None
    assert user == {"ADSP_LIBRARY_PATH": "C:/my/skels"}
    two = {}
    ensure_adsp_library_path([folder, folder + "/.."], _host("Linux", "arm64"), two)
    assert two["ADSP_LIBRARY_PATH"].count(";") == 1  # FastRPC's separator on every platform


def _sdk(tmp_path) -> Sdk:
    for arch in ("v73", "v81"):
        os.makedirs(tmp_path / "lib" / f"hexagon-{arch}" / "unsigned")
    return Sdk(str(tmp_path), "aarch64-ubuntu-gcc9.4", "snpe-net-run", None, str(tmp_path / "lib" / "x"))


def test_snpe_tools_get_the_sdk_skels_on_an_arm64_os(monkeypatch, tmp_path):
    monkeypatch.delenv("ADSP_LIBRARY_PATH", raising=False)
    emulate_linux(monkeypatch, "aarch64")
    env = _sdk(tmp_path).env()
    assert env["ADSP_LIBRARY_PATH"].split(";") == [str(tmp_path / "lib" / f"hexagon-{a}" / "unsigned")
                                                   for a in ("v81", "v73")]
    assert "ADSP_LIBRARY_PATH" not in os.environ  # the tool's environment only


def test_snpe_tools_on_arm64_windows_from_an_emulated_x64_python(monkeypatch, tmp_path):
    monkeypatch.delenv("ADSP_LIBRARY_PATH", raising=False)
    emulate_windows(monkeypatch, "win-amd64")  # the tools are native ARM64 processes all the same
    assert "hexagon-v81" in _sdk(tmp_path).env()["ADSP_LIBRARY_PATH"]


def test_snpe_tools_on_x86_64_get_nothing(monkeypatch, tmp_path):
    monkeypatch.delenv("ADSP_LIBRARY_PATH", raising=False)
    emulate_linux(monkeypatch, "x86_64")
    assert "ADSP_LIBRARY_PATH" not in _sdk(tmp_path).env()


def test_importing_the_backends_changes_no_environment():
    code = ("import os, onnxwrapper, onnxwrapper.backends.qnn, onnxwrapper.backends.snpe; "
            "print('ADSP_LIBRARY_PATH' in os.environ)")
    env = {k: v for k, v in os.environ.items() if k != "ADSP_LIBRARY_PATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
