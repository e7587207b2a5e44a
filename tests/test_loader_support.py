"""Helpers shared by the aipc loader tests (test_loader_*.py, test_cli_run.py); no tests here.

Subprocess helpers run a fresh interpreter with an environment cleaned of every ``AIPC_*`` and
``ONNXWRAPPER_BACKEND`` variable (a developer's shell must not change results) and with the
repository root first on ``PYTHONPATH`` (the package is importable from any working directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def clean_env(**extra: str) -> dict:
    """``os.environ`` without AIPC_* / ONNXWRAPPER_BACKEND, repo root on PYTHONPATH, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AIPC_") and k not in ("ONNXWRAPPER_BACKEND", "PYTHONPATH")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def run(argv: list, *, cwd=None, env: dict | None = None, timeout: float = 300,
        text: bool = True) -> subprocess.CompletedProcess:
    """Run ``[sys.executable, *argv]`` and capture its output."""
    return subprocess.run([sys.executable, *map(str, argv)], cwd=cwd, env=env or clean_env(),
                          capture_output=True, text=text, timeout=timeout)


def aipc(argv: list, **kwargs) -> subprocess.CompletedProcess:
    """``python -m aipc *argv``."""
    return run(["-m", "aipc", *argv], **kwargs)


def write(path: Path, source: str) -> Path:
    """Write dedented ``source`` to ``path`` (parents created) and return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def write_model(path: Path) -> Path:
    """``mul_1`` (Y = X * W, X float[3,2]) at ``path``."""
    from tests import models

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(models.mul_1())
    return path


def qnn_available() -> bool:
    """True when onnxruntime-qnn is importable (the HTP simulator on x86-64 Linux)."""
    try:
        import onnxruntime_qnn  # noqa: F401
    except ImportError:
        return False
    return True


needs_qnn = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn is not installed")
