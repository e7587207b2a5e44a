"""A file in the working directory that would shadow a package aipc itself imports.

``python -m aipc`` puts the working directory first on ``sys.path`` (as ``python -m`` always does),
so a user script named ``onnxruntime.py`` there is what ``import onnxruntime`` inside aipc would
load — a ``partially initialized module`` traceback before anything runs (and ``python
onnxruntime.py`` fails the same way). :func:`shadowed` finds such files without importing
anything, so the CLI can say what is wrong and exit with the usage status instead.

:func:`drop_working_directory` then takes the working directory out of that first slot, so that
nothing aipc imports later (lazily: a subcommand, numpy, a standard-library module not loaded yet)
comes from it — ``aipc fix .`` in a received diff folder must not import a ``struct.py`` shipped
there (docs/security.md). A script aipc runs still gets the ``sys.path`` plain ``python`` gives it:
the script runner puts the script's directory (for ``-m``, the working directory) into that slot.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

__all__ = ["NEEDED", "NO_FOLDER", "drop_working_directory", "shadowed"]

#: the packages aipc imports before a script runs
NEEDED = ("onnxruntime", "onnx", "numpy", "wrapt", "onnxwrapper", "aipc_loader")
_dropped: str | None = None  # the working directory drop_working_directory() took out of sys.path[0]
#: what takes the working directory's place in ``sys.path[0]``: a path inside aipc's package that is no folder
NO_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "(working directory: not imported from)")


def _real(path: str | None) -> str | None:
    return os.path.realpath(path) if path else None


def shadowed(names=NEEDED) -> list[tuple[str, str]]:
    """``[(package, file)]`` for each of ``names`` that a module or package in ``sys.path[0]`` would
    replace although the package is installed elsewhere. Empty under ``python -P`` (nothing is
    prepended) and when ``sys.path[0]`` holds the installed package itself (a source checkout)."""
    if _dropped is not None:
        first = _dropped
    elif getattr(sys.flags, "safe_path", False) or not sys.path:
        return []
    else:
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


def drop_working_directory() -> None:
    """When ``sys.path[0]`` is the working directory (``python -m aipc``, ``python -c``), put a path that
    names no folder in its place (:data:`NO_FOLDER`: nothing becomes importable, and the order of
    the other entries — ``PYTHONPATH`` before site-packages — is kept); the slot stays, so the
    script runner replaces it as Python would. Nothing changes under ``python -P`` or for the
    ``aipc`` console script (its first entry is its own folder)."""
    global _dropped
    if getattr(sys.flags, "safe_path", False) or not sys.path or _dropped is not None:
        return
    first = sys.path[0] or os.getcwd()
    if _real(first) == _real(os.getcwd()):
        _dropped = first  # what shadowed() still looks at: the files there are reported, never imported
        sys.path[0] = NO_FOLDER
