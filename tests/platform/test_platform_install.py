"""Install facts per platform (issue 23, fact 7), checked on pyproject.toml with the markers pip evaluates.

* Python ≥ 3.11: onnxruntime ≥ 1.24 and onnxruntime-qnn 2.x ship no cp310 wheels.
* The ``qai`` extra installs qai-appbuilder on Windows ARM64 and on Linux aarch64 (its
  ``manylinux_2_39_aarch64`` wheels), nowhere else.
* The ``test`` extra installs on Windows ARM64: rapidocr (opencv-python-headless, pyclipper: no
  win_arm64 wheels) is left out there.
"""

from __future__ import annotations

import os
import tomllib

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(_ROOT, "pyproject.toml"), "rb") as _f:
    PROJECT = tomllib.load(_f)["project"]


def _env(system: str, machine: str, python: str = "3.12") -> dict:
    platform = {"Windows": "win32", "Linux": "linux", "Darwin": "darwin"}[system]
    return {"sys_platform": platform, "platform_machine": machine, "python_version": python,
            "platform_system": system, "os_name": "nt" if system == "Windows" else "posix",
            "python_full_version": python + ".0", "implementation_name": "cpython", "extra": ""}


def _installs(extra: str, name: str, env: dict) -> bool:
    for text in PROJECT["optional-dependencies"][extra]:
        requirement = Requirement(text)
        if requirement.name == name:
            return requirement.marker is None or Marker(str(requirement.marker)).evaluate(env)
    return False


def test_python_311_or_newer():
    spec = SpecifierSet(PROJECT["requires-python"])
    assert "3.10.14" not in spec and "3.11.0" in spec and "3.13.1" in spec


@pytest.mark.parametrize("system, machine, expected", [("Windows", "ARM64", True), ("Linux", "aarch64", True),
                                                       ("Windows", "AMD64", False), ("Linux", "x86_64", False),
                                                       ("Darwin", "arm64", False)])
def test_the_qai_extra_installs_qai_appbuilder_where_it_has_wheels(system, machine, expected):
    assert _installs("qai", "qai-appbuilder", _env(system, machine)) is expected


@pytest.mark.parametrize("system, machine, expected", [("Windows", "ARM64", False), ("Linux", "aarch64", True),
                                                       ("Linux", "x86_64", True), ("Windows", "AMD64", True)])
def test_the_test_extra_leaves_rapidocr_out_on_windows_arm64(system, machine, expected):
    assert _installs("test", "rapidocr", _env(system, machine)) is expected


def test_readme_has_a_powershell_install_and_the_linux_aarch64_glibc():
    with open(os.path.join(_ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert "```powershell" in readme and "py -V:3.12-arm64 -m venv .venv" in readme
    assert "glibc ≥ 2.34" in readme and "examples/embeddings" in readme
