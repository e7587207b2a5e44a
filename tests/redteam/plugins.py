"""A TEST-ONLY backend for the red-team tests of ``aipc fix``'s confirmation (no tests here).

``rtfix`` is the ``perturb`` backend of the diff tests (tests/test_diff_support.py: ONNX Runtime on
the CPU with scaled outputs) that also takes a ``repairs`` option and ignores it, so that ``aipc
fix`` reaches its confirmation run with a recipe. It is installed for child processes as a plugin
is (a module and a ``*.dist-info`` with an ``onnxwrapper.backends`` entry point on ``PYTHONPATH``)
and registered in this process by the :func:`rtfix` fixture.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from onnxwrapper._registry import default_registry
from tests.test_diff_support import child_env  # noqa: F401 (fixture)

SOURCE = '''
"""TEST ONLY: the perturb backend, taking (and ignoring) a repair recipe."""
from diff_perturb_backend import PerturbBackend
from onnxwrapper.backends.base import OptionSpec


class RepairablePerturb(PerturbBackend):
    """TEST ONLY: perturb whose ``repairs`` option is accepted and ignored."""

    name = "rtfix"
    options = {**PerturbBackend.options, "repairs": OptionSpec("repairs", "accepted and ignored", None, lambda v: v)}
'''


@pytest.fixture(scope="session")
def rtfix_env(tmp_path_factory, child_env) -> dict:  # noqa: F811
    """The environment of child processes that find ``rtfix`` (and ``perturb``)."""
    folder = tmp_path_factory.mktemp("rtfix_plugin")
    (folder / "redteam_fix_backend.py").write_text(SOURCE)
    info = folder / "redteam_fix_backend-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: redteam-fix-backend\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[onnxwrapper.backends]\nrtfix = redteam_fix_backend:RepairablePerturb\n")
    return {**child_env, "PYTHONPATH": os.pathsep.join([str(folder), child_env["PYTHONPATH"]])}


@pytest.fixture
def rtfix(rtfix_env):
    """``rtfix`` registered in this process too; yields the environment of its children."""
    folders = rtfix_env["PYTHONPATH"].split(os.pathsep)
    modules = {}
    for name, folder in (("diff_perturb_backend", folders[1]), ("redteam_fix_backend", folders[0])):
        spec = importlib.util.spec_from_file_location(name, os.path.join(folder, f"{name}.py"))
        modules[name] = importlib.util.module_from_spec(spec)
        sys.modules[name] = modules[name]
        spec.loader.exec_module(modules[name])
    default_registry().register(modules["redteam_fix_backend"].RepairablePerturb)
    yield rtfix_env
    default_registry().unregister("rtfix")
    for name in modules:
        sys.modules.pop(name, None)
