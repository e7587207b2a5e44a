"""What a recorded session did beyond its calls — what a repair recipe changed in it, and the shape buckets
that served its calls — read from its partition report (captures note both; the diff report says them)."""

from __future__ import annotations

import weakref

__all__ = ["note_buckets", "note_session", "repairs_applied"]


def repairs_applied(session) -> str:
    """What a repair recipe changed in ``session`` (``""`` when none): the ``repaired: …`` part of its
    partition report's note (the QNN backend's ``repairs`` option), read after the first call."""
    try:
        report = session.get_partition() if hasattr(session, "get_partition") else None
    except Exception:  # noqa: BLE001 - a backend without a partition report: nothing to say
        return ""
    note = getattr(report, "note", "") or ""
    return note.split("repaired: ", 1)[1] if "repaired: " in note else ""


def note_session(session, record: dict) -> None:
    """Fill ``record`` (a capture header's session record) with what :func:`repairs_applied` says, and
    arrange for the shape buckets ``session`` used to be added to it when the session is collected
    (a script's sessions usually are before the capture closes): its backend session is kept until then."""
    repaired = repairs_applied(session)
    if repaired:
        record["repaired"] = repaired
    backend_session = getattr(session, "backend_session", None)
    if backend_session is not None and hasattr(backend_session, "partition"):
        try:
            weakref.finalize(session, _buckets_into, record, backend_session)
        except TypeError:  # an object that cannot be weakly referenced: noted at close only
            pass


def _buckets_into(record: dict, backend_session) -> None:
    try:
        buckets = backend_session.partition().buckets
    except Exception:  # noqa: BLE001 - nothing to add
        return
    if buckets:
        record["buckets"] = _plain(buckets)


def _plain(buckets) -> list:
    return [{k: b[k] for k in ("shapes", "calls", "distinct_shapes", "saved") if k in b} for b in buckets]


def note_buckets(records: list, sessions) -> None:
    """Add to each session record of ``records`` (``{"ordinal", …}`` dicts) the shape buckets its session
    used (``"buckets"``: the partition report's :attr:`~onnxwrapper.kernel.PartitionReport.buckets`: per
    compiled size, the calls and distinct shapes it served; the compiles saved), for ``sessions``
    (``{session: record holding .ordinal}``, still alive: read when the capture closes)."""
    by_ordinal = {r.get("ordinal"): r for r in records if isinstance(r, dict)}
    for session, sess in list(sessions.items()):
        try:
            buckets = session.get_partition().buckets if hasattr(session, "get_partition") else ()
        except Exception:  # noqa: BLE001 - a closed session or a backend without a report: nothing to add
            continue
        if buckets and sess.ordinal in by_ordinal:
            by_ordinal[sess.ordinal]["buckets"] = _plain(buckets)
