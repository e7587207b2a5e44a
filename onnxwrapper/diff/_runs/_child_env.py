"""How the child processes of ``aipc diff`` / ``aipc fix`` start: command line, working directory, environment.

**Command line** (:func:`module_command`). Every child is aipc's own module run by this interpreter
in Python's *safe-path* mode: ``python -P -m MODULE …`` (Python ≥ 3.11, "-P: don't prepend a
potentially unsafe path to sys.path"). Plain ``python -m`` puts the working directory first on
``sys.path``, so a ``struct.py`` or ``numpy.py`` in a received diff folder — the directory ``aipc fix
.`` runs in — would be imported by aipc's own child before any of its code ran (docs/security.md).
The flag is not inherited: the processes a script starts see Python's usual ``sys.path``. A live run
of the user's script still runs it exactly as ``python script.py`` would: the child puts the
script's own directory (for ``-m module``: the working directory) first on ``sys.path`` itself
(:func:`aipc_loader.run_script`, ``safe_path=False``), unless the user's environment sets
``PYTHONSAFEPATH``, as Python does.

**Working directory** (:func:`child_cwd`). A live run of the user's script runs where the user ran
it (or where they asked). Every other child — replays, localization rounds, model runs, the fix's
baseline and candidates — runs in its own run folder, which aipc has just created: never in the
directory of a folder from elsewhere, and nothing it does depends on the caller's directory (every
path on its command line and in its request is absolute).

**Environment** (:func:`child_environment`). A child's stdout and stderr are files the parent reads
as UTF-8 (``stdout.txt``, ``stderr.txt``). Python writes a redirected stream in the locale's
encoding — cp1252 on a Western Windows — so a script that prints non-Latin text (OCR results,
Chinese labels) dies with ``UnicodeEncodeError`` in every child, and a ``PYTHONIOENCODING`` of the
user's would do the same. The children therefore get ``PYTHONIOENCODING=utf-8`` (Python docs,
"PYTHONIOENCODING": the encoding of stdin/stdout/stderr), the encoding their reader uses, and
unbuffered output; nothing else of the script's behaviour changes (its own ``open()`` calls keep the
locale's default).
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

__all__ = ["CHILD_STREAM_ENCODING", "child_cwd", "child_environment", "module_command"]

#: what the parent decodes a child's stdout/stderr files with
CHILD_STREAM_ENCODING = "utf-8"


def module_command(module: str, *args: str) -> list[str]:
    """``[sys.executable, "-P", "-m", module, *args]``: aipc's own ``module`` in a child that imports
    nothing from its working directory (module docstring)."""
    return [sys.executable, "-P", "-m", module, *map(str, args)]


def child_cwd(run_directory: str, user_cwd: str | None = None, *, live: bool = False) -> str:
    """The working directory of a child: ``user_cwd`` (default: this process's) for a live run of
    the user's script, else the child's own ``run_directory`` (module docstring)."""
    if live:
        return os.fspath(user_cwd) if user_cwd else os.getcwd()
    return os.path.abspath(run_directory)


def child_environment(*extra: Mapping[str, str] | None) -> dict[str, str]:
    """This process's environment, updated with each mapping of ``extra`` in turn, then
    ``PYTHONIOENCODING`` set to :data:`CHILD_STREAM_ENCODING` and ``PYTHONUNBUFFERED`` defaulted to 1."""
    env = dict(os.environ)
    for layer in extra:
        env.update(layer or {})
    env["PYTHONIOENCODING"] = CHILD_STREAM_ENCODING
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
