"""What a repair recipe changed in a recorded session (captures note it; the diff report says it)."""

from __future__ import annotations

__all__ = ["repairs_applied"]


def repairs_applied(session) -> str:
    """What a repair recipe changed in ``session`` (``""`` when none): the ``repaired: …`` part of its
    partition report's note (the QNN backend's ``repairs`` option), read after the first call."""
    try:
        report = session.get_partition() if hasattr(session, "get_partition") else None
    except Exception:  # noqa: BLE001 - a backend without a partition report: nothing to say
        return ""
    note = getattr(report, "note", "") or ""
    return note.split("repaired: ", 1)[1] if "repaired: " in note else ""
