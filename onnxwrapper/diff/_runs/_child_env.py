"""The environment of the child processes of ``aipc diff`` / ``aipc fix`` (one per backend run).

A child's stdout and stderr are files the parent reads as UTF-8 (``stdout.txt``, ``stderr.txt``).
Python writes a redirected stream in the locale's encoding — cp1252 on a Western Windows — so a
script that prints non-Latin text (OCR results, Chinese labels) dies with ``UnicodeEncodeError`` in
every child, and a ``PYTHONIOENCODING`` of the user's would do the same. The children therefore
get ``PYTHONIOENCODING=utf-8`` (Python docs, "PYTHONIOENCODING": the encoding of
stdin/stdout/stderr), the encoding their reader uses, and unbuffered output; nothing else of the
script's behaviour changes (its own ``open()`` calls keep the locale's default).
"""

from __future__ import annotations

import os
from typing import Mapping

__all__ = ["CHILD_STREAM_ENCODING", "child_environment"]

#: what the parent decodes a child's stdout/stderr files with
CHILD_STREAM_ENCODING = "utf-8"


def child_environment(*extra: Mapping[str, str] | None) -> dict[str, str]:
    """This process's environment, updated with each mapping of ``extra`` in turn, then
    ``PYTHONIOENCODING`` set to :data:`CHILD_STREAM_ENCODING` and ``PYTHONUNBUFFERED`` defaulted to 1."""
    env = dict(os.environ)
    for layer in extra:
        env.update(layer or {})
    env["PYTHONIOENCODING"] = CHILD_STREAM_ENCODING
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
