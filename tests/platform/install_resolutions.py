"""How pyproject.toml's dependencies resolve on each platform README names, recorded from the index.

Run it where the package index is reachable, after changing a dependency in pyproject.toml:

    python tests/platform/install_resolutions.py            # rewrites install_resolutions.json beside it

For each row of :data:`PLATFORMS` — a platform tag set, a Python version and the extras README
tells that platform to install — it evaluates pyproject's requirements with that platform's
environment markers (``sys_platform``, ``platform_machine``, ``platform_release``: macOS 14 is
Darwin 23, …), then asks pip to resolve them from wheels only, as an install there would:
``pip install --dry-run --ignore-installed --report R --only-binary=:all: --platform TAG …
--python-version X.Y --target T REQUIREMENTS``, with no pip configuration file and no extra index or
local wheel folder, so the answer is the public index's. It records the requirements, every
package pip would install with its version and wheel file, or pip's error. pip evaluates the
markers of *transitive* dependencies for this host, not for the target; the wheel files recorded
show each one has a wheel for the target.

``tests/platform/test_platform_install.py`` checks the record against pyproject.toml without the
network: the same requirements, each row resolving exactly where :data:`PLATFORMS` says it does
(the install facts README and docs/platforms.md state), and each resolved version within its
requirement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tomllib

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "install_resolutions.json")


def _manylinux(arch: str, glibc_minor: int) -> list[str]:
    """pip does not widen ``--platform manylinux_2_N`` to older manylinux tags: list them all."""
    return [f"manylinux_2_{m}_{arch}" for m in range(glibc_minor, 16, -1)] + [f"manylinux2014_{arch}"]


def _env(system: str, machine: str, python: str, release: str = "") -> dict[str, str]:
    return {"sys_platform": {"Windows": "win32", "Linux": "linux", "Darwin": "darwin"}[system],
            "platform_system": system, "platform_machine": machine, "platform_release": release,
            "python_version": python, "python_full_version": python + ".0", "os_name": "nt" if system == "Windows"
            else "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython"}


#: (label, platform tags, Python, marker environment, extras, resolves) — what README says per platform
PLATFORMS: tuple[tuple[str, list[str], str, dict, list[str], bool], ...] = (
    ("Windows ARM64, Python 3.12", ["win_arm64"], "3.12", _env("Windows", "ARM64", "3.12"), ["qnn", "qai", "test"],
     True),
    ("Windows ARM64, Python 3.11", ["win_arm64"], "3.11", _env("Windows", "ARM64", "3.11"), ["qnn", "test"], True),
    # qai-appbuilder needs PyYAML, which has no cp311 win_arm64 wheel
    ("Windows ARM64, Python 3.11, qai", ["win_arm64"], "3.11", _env("Windows", "ARM64", "3.11"), ["qai"], False),
    ("Linux aarch64, glibc 2.34", _manylinux("aarch64", 34), "3.11", _env("Linux", "aarch64", "3.11"),
     ["qnn", "test"], True),
    # qai-appbuilder's only Linux wheels are manylinux_2_39_aarch64
    ("Linux aarch64, glibc 2.34, qai", _manylinux("aarch64", 34), "3.11", _env("Linux", "aarch64", "3.11"), ["qai"],
     False),
    ("Linux aarch64, glibc 2.39", _manylinux("aarch64", 39), "3.11", _env("Linux", "aarch64", "3.11"),
     ["qnn", "qai", "test"], True),
    ("Linux x86-64, glibc 2.35", _manylinux("x86_64", 35), "3.11", _env("Linux", "x86_64", "3.11"),
     ["qnn", "test", "report"], True),
    # onnxruntime-qnn's x86-64 wheel is manylinux_2_35
    ("Linux x86-64, glibc 2.34, qnn", _manylinux("x86_64", 34), "3.11", _env("Linux", "x86_64", "3.11"), ["qnn"],
     False),
    ("Windows x86-64", ["win_amd64"], "3.11", _env("Windows", "AMD64", "3.11"), ["qnn", "aihub", "report"], True),
    ("macOS 14 arm64", ["macosx_14_0_arm64"], "3.11", _env("Darwin", "arm64", "3.11", "23.0.0"),
     ["aihub", "report"], True),
    ("macOS 13 arm64", ["macosx_13_0_arm64"], "3.11", _env("Darwin", "arm64", "3.11", "22.6.0"),
     ["aihub", "report"], True),
    ("macOS 13 x86-64 (Intel)", ["macosx_13_0_x86_64"], "3.11", _env("Darwin", "x86_64", "3.11", "22.6.0"),
     ["aihub", "report"], True),
    # onnxruntime-qnn has no macOS wheel
    ("macOS 14 arm64, qnn", ["macosx_14_0_arm64"], "3.11", _env("Darwin", "arm64", "3.11", "23.0.0"), ["qnn"], False),
)


def project() -> dict:
    """pyproject.toml's ``[project]`` table."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def requirements_for(env: dict, extras: list[str], table: dict | None = None) -> list[str]:
    """pyproject's requirements (core and ``extras``) that apply in ``env``, markers evaluated and removed."""
    table = table or project()
    found = []
    for extra, texts in [("", table["dependencies"])] + [(e, table["optional-dependencies"][e]) for e in extras]:
        for text in texts:
            requirement = Requirement(text)
            if requirement.marker is None or Marker(str(requirement.marker)).evaluate(dict(env, extra=extra)):
                extras_part = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
                found.append(f"{requirement.name}{extras_part}{requirement.specifier}")
    return found


def resolve(tags: list[str], python: str, requirements: list[str]) -> dict:
    """What pip would install from wheels for ``tags`` and ``python`` (module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    env["PIP_CONFIG_FILE"] = os.devnull
    with tempfile.TemporaryDirectory() as folder:
        report = os.path.join(folder, "report.json")
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                   "--disable-pip-version-check", "--report", report, "--only-binary=:all:", "--python-version",
                   python, "--implementation", "cp", "--target", os.path.join(folder, "t")]
        for tag in tags:
            command += ["--platform", tag]
        proc = subprocess.run(command + requirements, capture_output=True, text=True, env=env, timeout=600)
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")] or [proc.stderr.strip()]
            return {"resolved": {}, "files": {}, "error": lines[0][:300]}
        with open(report, encoding="utf-8") as f:
            installed = json.load(f)["install"]
    names = [canonicalize_name(i["metadata"]["name"]) for i in installed]
    return {"resolved": {n: i["metadata"]["version"] for n, i in zip(names, installed)},
            "files": {n: i["download_info"]["url"].rsplit("/", 1)[-1] for n, i in zip(names, installed)}, "error": None}


def record(only: str = "", previous: dict | None = None) -> dict:
    """Resolve the rows of :data:`PLATFORMS` whose label contains ``only`` (needs the index); the others
    are taken from ``previous`` (an earlier record) when it has them."""
    import pip

    kept = {row["platform"]: row for row in (previous or {}).get("rows", [])}
    rows = []
    for label, tags, python, env, extras, _resolves in PLATFORMS:
        if only not in label and label in kept:
            rows.append(kept[label])
            continue
        requirements = requirements_for(env, extras)
        rows.append(dict({"platform": label, "tags": tags, "python": python, "extras": extras,
                          "requirements": requirements}, **resolve(tags, python, requirements)))
        print(f"{label:<34} {'resolves' if rows[-1]['error'] is None else rows[-1]['error']}")
    return {"recorded_with": f"pip {pip.__version__}", "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=RECORD, help="the record to write (default: install_resolutions.json beside)")
    parser.add_argument("--only", default="", help="re-resolve only the rows whose label contains this text")
    args = parser.parse_args(argv)
    previous = None
    if args.only and os.path.isfile(args.out):
        with open(args.out, encoding="utf-8") as f:
            previous = json.load(f)
    data = record(args.only, previous)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
