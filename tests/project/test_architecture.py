"""The house rules that tools can check: the import contracts of ``pyproject.toml``
(``[tool.importlinter]``, explained in docs/architecture.md) hold, and every package's ``__all__``
is exact: the sorted public names it defines or re-exports (as httpx's tests/test_exported_members.py).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: packages with a curated ``__all__`` (onnxwrapper itself also forwards onnxruntime's names: test_surface.py)
PACKAGES = ["onnxwrapper.kernel", "onnxwrapper.toolkit", "onnxwrapper.diff", "onnxwrapper.diff._capture", "onnxwrapper.diff._runs",
            "onnxwrapper.diff._judge", "onnxwrapper.diff._localize", "onnxwrapper.diff._report", "onnxwrapper.patches",
            "onnxwrapper.repair", "onnxwrapper.repair.recipe", "onnxwrapper.repair.fix",
            "onnxwrapper.errors", "onnxwrapper.backends", "onnxwrapper.backends.base", "onnxwrapper.backends.qnn",
            "onnxwrapper.backends.qai", "onnxwrapper.backends.snpe", "onnxwrapper.backends.cpu",
            "onnxwrapper.backends.aihub", "aipc_loader", "aipc", "aipc.args", "aipc.commands"]
PACKAGES += [f"onnxwrapper.kernel.{name}" for name in ("cache", "host", "model", "session")]
PACKAGES += [f"onnxwrapper.backends.qnn.{name}" for name in ("artifacts", "binary", "compile", "model", "open",
                                                             "pipeline", "platform", "recovery", "session", "settings",
                                                             "workers")]


def test_import_contracts_hold():
    """import-linter, as ``lint-imports`` runs from the repository root: the packages are imported
    from their folders there (``onnxwrapper``, its ``backends`` included, ``aipc_loader``, ``aipc``)."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    proc = subprocess.run([sys.executable, "-c", code, "--config", str(REPO / "pyproject.toml"), "--no-cache"],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "0 broken" in proc.stdout and "KEPT" in proc.stdout


def _public_names(name: str, module) -> set[str]:
    """What ``__all__`` must list: for a package, every public attribute (a public alias of a
    submodule too, e.g. ``onnxwrapper.diff.metrics``, but not a submodule under its own name);
    for a plain module, every public class and function it defines."""
    is_package = hasattr(module, "__path__")
    names = set()
    for attr, value in vars(module).items():
        if attr.startswith("_") or attr == "annotations":
            continue
        if isinstance(value, type(sys)):
            if is_package and value.__name__.startswith(name + ".") and value.__name__ != f"{name}.{attr}":
                names.add(attr)
            continue
        if is_package or getattr(value, "__module__", None) == name:
            names.add(attr)
    return names | ({"__version__"} & set(vars(module)))


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_exact_and_sorted(name):
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__), f"{name}.__all__ is not sorted"
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ lists names it does not have: {missing}"
    public = _public_names(name, module)
    if hasattr(module, "__path__"):
        assert set(module.__all__) == public, (f"{name}.__all__ differs from its public names: missing "
                                               f"{sorted(public - set(module.__all__))}, extra "
                                               f"{sorted(set(module.__all__) - public)}")
    else:
        assert public <= set(module.__all__), f"{name}.__all__ misses {sorted(public - set(module.__all__))}"
