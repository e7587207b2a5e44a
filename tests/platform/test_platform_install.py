"""Install facts per platform (issues 23 and 34), checked on pyproject.toml with the markers pip evaluates.

* Python ≥ 3.11: onnxruntime ≥ 1.24 and onnxruntime-qnn 2.x ship no cp310 wheels.
* Every platform README names installs what README says it installs: the resolutions recorded from
  the index by ``tests/platform/install_resolutions.py`` (``install_resolutions.json``) are for
  pyproject's current requirements, and resolve exactly where that script's table says — Intel
  Macs and macOS 13 with onnxruntime 1.23.2, the ``qai`` extra on glibc ≥ 2.39 and on Windows
  ARM64 with Python ≥ 3.12 only, onnxruntime-qnn nowhere on macOS. Checked offline; the
  ``index`` test resolves them again from the index.
* The ``qai`` extra installs qai-appbuilder on Windows ARM64 and on Linux aarch64 (its
  ``manylinux_2_39_aarch64`` wheels), nowhere else.
* The ``test`` extra installs on Windows ARM64: rapidocr (opencv-python-headless, pyclipper: no
  win_arm64 wheels) is left out there.
"""

from __future__ import annotations

import json
import os
import tomllib

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from tests.platform import install_resolutions as resolutions

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


with open(resolutions.RECORD, encoding="utf-8") as _f:
    RECORDED = {row["platform"]: row for row in json.load(_f)["rows"]}


@pytest.mark.parametrize("label, tags, python, env, extras, resolves", resolutions.PLATFORMS,
                         ids=[p[0] for p in resolutions.PLATFORMS])
def test_each_platform_readme_names_resolves_as_recorded(label, tags, python, env, extras, resolves):
    row = RECORDED.get(label)
    assert row is not None, f"{label}: not recorded; run python tests/platform/install_resolutions.py --only '{label}'"
    assert row["requirements"] == resolutions.requirements_for(env, extras) and row["tags"] == tags, (
        f"{label}: pyproject's requirements changed since they were resolved; run "
        f"python tests/platform/install_resolutions.py --only '{label}'")
    assert (row["error"] is None) is resolves, f"{label}: {row['error'] or 'resolves, but should not'}"
    for text in row["requirements"] if resolves else ():
        requirement = Requirement(text)
        version = row["resolved"].get(canonicalize_name(requirement.name))
        assert version is not None and requirement.specifier.contains(version, prereleases=True), (label, text, version)


def test_intel_macs_and_macos_13_get_the_last_onnxruntime_with_their_wheels():
    for label in ("macOS 13 x86-64 (Intel)", "macOS 13 arm64"):
        assert RECORDED[label]["resolved"]["onnxruntime"] == "1.23.2"
        assert "macosx_13_0" in RECORDED[label]["files"]["onnxruntime"]
    assert RECORDED["macOS 14 arm64"]["resolved"]["onnxruntime"] != "1.23.2"  # macOS 14 gets the newest


def test_the_qai_extras_glibc_and_python_facts_are_the_recorded_wheels():
    assert "manylinux_2_39_aarch64" in RECORDED["Linux aarch64, glibc 2.39"]["files"]["qai-appbuilder"]
    assert "qai-appbuilder" in RECORDED["Linux aarch64, glibc 2.34, qai"]["error"]
    assert "pyyaml" in RECORDED["Windows ARM64, Python 3.11, qai"]["error"].lower()
    assert RECORDED["Windows ARM64, Python 3.12"]["files"]["pyyaml"].endswith("win_arm64.whl")
    with open(os.path.join(_ROOT, "docs", "platforms.md"), encoding="utf-8") as f:
        platforms = f.read()
    assert "glibc ≥ 2.39" in platforms and "Python ≥ 3.12" in platforms and "PyYAML" in platforms


@pytest.mark.index
@pytest.mark.slow
@pytest.mark.parametrize("label", ["macOS 13 x86-64 (Intel)", "Windows ARM64, Python 3.11, qai"])
def test_a_recorded_platform_resolves_the_same_way_from_the_index(label):
    _label, tags, python, env, extras, resolves = next(p for p in resolutions.PLATFORMS if p[0] == label)
    found = resolutions.resolve(tags, python, resolutions.requirements_for(env, extras))
    if found["error"] and ("connection" in found["error"].lower() or "network" in found["error"].lower()):
        pytest.skip(f"the package index is not reachable: {found['error']}")
    assert (found["error"] is None) is resolves, found["error"]
