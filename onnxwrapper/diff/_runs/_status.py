"""How a child process of ``aipc diff`` / ``aipc fix`` tells its parent how it ended: ``status.json``.

The child writes ``<run dir>/status.json`` before it exits: ``{"status": "ok" | "script_failed" |
"unavailable" | "error", "exit_code": int, "message": str, …}`` (:func:`write_status`); a child
killed by a signal writes none, and the parent (:func:`read_status`) then reports the signal.
"""

from __future__ import annotations

import json
import os

__all__ = ["read_status", "write_status"]


def write_status(directory: str, status: str, exit_code: int, message: str = "", **extra) -> None:
    """Write ``directory/status.json`` (atomically): ``status``, ``exit_code``, ``message`` and ``extra``."""
    os.makedirs(directory, exist_ok=True)
    doc = {"status": status, "exit_code": exit_code, "message": message, **extra}
    tmp = os.path.join(directory, "status.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, os.path.join(directory, "status.json"))


def read_status(directory: str) -> dict | None:
    """The child's ``status.json`` as a dict, or ``None`` when it wrote none."""
    try:
        with open(os.path.join(directory, "status.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
