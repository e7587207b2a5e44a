"""A file in the working directory that would shadow a package aipc itself imports.

``python -m aipc`` puts the working directory first on ``sys.path`` (as ``python -m`` always does),
so a user script named ``onnxruntime.py`` there is what ``import onnxruntime`` inside aipc would
load — a ``partially initialized module`` traceback before anything runs (and ``python
onnxruntime.py`` fails the same way). :func:`shadowed` finds such files without importing
anything, so the CLI can say what is wrong and exit with the usage status instead.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

__all__ = ["NEEDED", "shadowed"]

#: the packages aipc imports before a script runs
NEEDED = ("onnxruntime", "onnx", "numpy", "wrapt", "onnxwrapper", "aipc_loader")


def _real(path: str | None) -> str | None:
    return os.path.realpath(path) if path else None


def shadowed(names=NEEDED) -> list[tuple[str, str]]:
    """``[(package, file)]`` for each of ``names`` that a module or package in ``sys.path[0]`` would
    replace although the package is installed elsewhere. Empty under ``python -P`` (nothing is
    prepended) and when ``sys.path[0]`` holds the installed package itself (a source checkout)."""
    if getattr(sys.flags, "safe_path", False) or not sys.path:
        return []
    first = sys.path[0] or os.getcwd()
    found = []
    for name in names:
        if name in sys.modules:
            continue
        local = importlib.machinery.PathFinder.find_spec(name, [first])
        if local is None or local.origin is None:  # nothing there, or a namespace portion (never wins)
            continue
        saved = list(sys.path)
        try:
            sys.path[:] = [p for p in sys.path if (p or os.getcwd()) != first]
            installed = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            installed = None
        finally:
            sys.path[:] = saved
        if installed is not None and _real(installed.origin) != _real(local.origin):
            found.append((name, local.origin))
    return found
