"""Telling "the network is not there" from a transient service error.

qai-hub 0.56.0 maps every ``requests.exceptions.ConnectionError`` to ``InternalError("Internal API
failure. … Could not connect to Qualcomm AI Hub …")`` raised ``from`` it (``Client._handle_api_exception``),
after its own transport retries (7 tries, about 30 s at most: ``util/session.py``). Under it,
urllib3 chains the operating system's answer (``NewConnectionError`` / ``NameResolutionError``
``from`` the ``OSError``). A refused connection, a failed name lookup or an unreachable network
will not heal in the next minutes, so the backend reports them at once instead of backing off for
``max_wait`` (15 minutes by default); a timeout or an HTTP 5xx stays transient.
"""

from __future__ import annotations

import errno
import socket

__all__ = ["unreachable_cause"]

_PERMANENT_ERRNOS = {errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH}


def _chain(exc: BaseException, depth: int = 12):
    seen: set = set()
    todo = [exc]
    while todo and len(seen) < depth:
        item = todo.pop(0)
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        todo += [item.__cause__, item.__context__, getattr(item, "reason", None)]
        todo += [a for a in getattr(item, "args", ()) if isinstance(a, BaseException)]


def unreachable_cause(exc: BaseException) -> str | None:
    """``"connection refused"``, ``"name lookup failed"`` or ``"network unreachable"`` when the
    chain of ``exc`` holds such an operating-system error, else ``None`` (transient or unknown)."""
    for item in _chain(exc):
        if isinstance(item, socket.gaierror):
            return f"name lookup failed ({item})"
        if isinstance(item, ConnectionRefusedError) or (isinstance(item, OSError) and item.errno in _PERMANENT_ERRNOS):
            return "connection refused" if item.errno in (None, errno.ECONNREFUSED) else f"network unreachable ({item})"
    return None
