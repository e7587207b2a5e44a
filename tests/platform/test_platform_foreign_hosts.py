"""qai and snpe read the project's host-architecture facts, never ``platform.machine()`` (issue 34).

Under an x64 Python emulated on ARM64 Windows, Python ≥ 3.12's ``platform.machine()`` says
``ARM64`` (the CPU, via WMI) and Python 3.11's says ``AMD64``: neither is the answer each backend
needs. qai_appbuilder is loaded into this process, so the *process* must be ARM64; SNPE's tools run
as processes of their own, natively, so the *OS's* architecture picks their folder.
"""

from __future__ import annotations

import platform

import pytest

from onnxwrapper.backends import qai, snpe
from tests.platform_doubles import AMD64, ARM64, emulate_linux, emulate_windows


def test_qai_is_unavailable_to_an_emulated_x64_python_and_names_the_fix(monkeypatch):
    emulate_windows(monkeypatch, "win-amd64", native=ARM64)  # platform.machine() == "ARM64" (Python ≥ 3.12)
    availability = qai.QaiBackend.probe()
    assert not availability.available
    assert "process x86_64, OS arm64" in availability.reason and "ARM64 Python" in availability.reason


@pytest.mark.parametrize("interpreter, native, supported", [("win-arm64", ARM64, True), ("win-amd64", ARM64, False),
                                                            ("win-amd64", AMD64, False)])
def test_qai_host_check_follows_the_process_architecture(monkeypatch, interpreter, native, supported):
    from onnxwrapper.kernel import host_architecture

    emulate_windows(monkeypatch, interpreter, native)
    assert qai._host_supported(host_architecture()) is supported


def test_snpe_tools_of_the_os_architecture_under_an_emulated_python_311(monkeypatch):
    emulate_windows(monkeypatch, "win-amd64", native=ARM64)
    monkeypatch.setattr(platform, "machine", lambda: "AMD64")  # Python 3.11 under emulation
    assert snpe.host_arch_dirs()[0] == "aarch64-windows-msvc"
    emulate_windows(monkeypatch, "win-amd64", native=AMD64)
    assert snpe.host_arch_dirs() == ["x86_64-windows-msvc"]
    emulate_linux(monkeypatch, "aarch64")
    assert snpe.host_arch_dirs()[0].startswith("aarch64-")
