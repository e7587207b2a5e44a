"""Shared fixtures: the two modules under the fidelity contract, model files, QNN availability."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import pytest

import onnxruntime
import onnxwrapper

from tests import models


@pytest.fixture(scope="session", autouse=True)
def _isolated_compile_cache(tmp_path_factory):
    """Every test (and every subprocess it starts) uses a fresh QNN compile cache, never the
    user's: results must not depend on what earlier runs left in the platform cache dir. Compiles
    run on each process's own worker, not on the user's compile server (a process that outlives
    the test run): tests/qnn/test_compile_server.py tests the server with a folder of its own."""
    names = ("ONNXWRAPPER_CACHE_DIR", "ONNXWRAPPER_COMPILE_SERVER")
    previous = {name: os.environ.get(name) for name in names}
    os.environ["ONNXWRAPPER_CACHE_DIR"] = str(tmp_path_factory.mktemp("onnxwrapper-cache"))
    os.environ["ONNXWRAPPER_COMPILE_SERVER"] = "0"
    yield
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _library_loggers_given_back():
    """A test that runs aipc in this process (``aipc.cli.main``) makes the library's loggers aipc's
    (aipc_loader._verbosity); the next test gets them back as ``import onnxwrapper`` leaves them."""
    yield
    verbosity = sys.modules.get("aipc_loader._verbosity")
    if verbosity is not None and getattr(verbosity, "_state", None) is not None and verbosity._state.adopted:
        verbosity.release()


@pytest.fixture(params=["onnxruntime", "onnxwrapper"])
def rt(request):
    """The module under test: API-fidelity tests run the same assertions against both."""
    return importlib.import_module(request.param)


@pytest.fixture
def mul_1_path(tmp_path):
    """``mul_1.onnx`` on disk (Y = X * W, X float[3,2])."""
    path = tmp_path / "mul_1.onnx"
    path.write_bytes(models.mul_1())
    return path


@pytest.fixture(params=["onnxruntime+qnn", "onnxwrapper"])
def qrt(request):
    """qnn fidelity tests run the same assertions against onnxruntime + the QNN plugin EP and
    onnxwrapper's qnn backend (tests/qnn_flavours.py); skipped without onnxruntime-qnn."""
    if not qnn_available():
        pytest.skip("needs onnxruntime-qnn (pip install -e '.[qnn]'): its HTP simulator or a Snapdragon NPU")
    from tests.qnn_flavours import FLAVOURS

    return FLAVOURS[request.param]


def qnn_available() -> bool:
    """True when onnxruntime-qnn can be imported (the HTP simulator on x86-64 Linux)."""
    try:
        importlib.import_module("onnxruntime_qnn")
    except ImportError:
        return False
    return True


def run_python(code: str, *args: str, env: dict | None = None, timeout: float = 600,
               cwd=None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (QNN configuration is process-global)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True,
                          text=True, env=full_env, timeout=timeout, cwd=cwd)


assert onnxruntime is not None and onnxwrapper is not None
