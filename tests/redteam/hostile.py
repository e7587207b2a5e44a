"""Builders of hostile inputs for the red-team tests (no tests here): special files where a regular
one belongs, and a hang guard.

Every test that feeds aipc a FIFO or a device runs under :func:`no_hang`: on the code before the
red-team fixes a FIFO made ``open()`` wait for a writer forever; with the guard such a case fails
(``Hang``) instead of stopping the suite.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

POSIX = pytest.mark.skipif(os.name != "posix" or not hasattr(signal, "SIGALRM"),
                           reason="FIFOs, device nodes and SIGALRM are POSIX")
GUARD_SECONDS = 10


class Hang(Exception):
    """A case ran past the hang guard."""


@contextlib.contextmanager
def no_hang(label: str = "case", seconds: int = GUARD_SECONDS):
    """Raise :class:`Hang` in the body after ``seconds`` (POSIX ``SIGALRM``; a blocking ``open`` of a
    FIFO is interrupted: the handler raises, so Python does not retry the call)."""
    def expire(*_):
        raise Hang(f"{label}: still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def make_special(path: Path, kind: str) -> Path:
    """Make ``path`` a ``"fifo"``, a symbolic link to ``/dev/zero`` (``"zero"``) or a folder (``"dir"``)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        os.symlink("/dev/zero", path)
    else:
        path.mkdir()
    return path


def special_files(folder: Path, name: str) -> dict[str, Path]:
    """``{kind: path}``: ``name`` made a FIFO, a symbolic link to ``/dev/zero`` and a directory, each
    in its own sub-folder of ``folder`` (so one name can be each kind)."""
    made = {}
    for kind in ("fifo", "zero", "dir"):
        (folder / kind).mkdir(parents=True, exist_ok=True)
        made[kind] = make_special(folder / kind / name, kind)
    return made
