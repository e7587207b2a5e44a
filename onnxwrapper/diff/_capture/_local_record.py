"""Which diff folders were made on this machine by this user: a private record of every ``diff.json`` written here.

``aipc fix DIR --confirm`` runs the command a diff recorded only for a folder this user made on this
machine (docs/security.md, "aipc fix"). Nothing inside a folder can prove that — its ``diff.json``,
digests and paths could all have been written by whoever sent it — so the proof is kept outside it:
each time aipc writes a ``diff.json`` (:func:`~onnxwrapper.diff._capture.write_manifest`), it writes
a record in the user's private compile cache,

    ``<cache root>/diff-folders/<sha256 of the diff.json bytes>.json``

holding that digest, the folder's path, the working directory of the process that wrote it (a
target recorded without one ran there) and the manifest's ``target`` and ``app`` objects as they
were written. :func:`local_record` hashes a folder's ``diff.json`` and returns the record of that digest,
or ``None``: a folder from elsewhere (or edited since, or made by another user, or made before
records were kept). The cache root's own rule applies (owned by the user, not writable by others:
:class:`~onnxwrapper.kernel.ArtifactCache`); a root that fails it has no records. The record, not
the folder, is what a confirmation reads the command from.

A folder's earlier versions of ``diff.json`` (a run rewrites it as each backend ends) lose their
record when the next one is written by the same process; at most :data:`MAX_RECORDS` records are
kept (the most recent). Writing a record never fails a diff: a read-only or unusable cache only
means ``--confirm`` later asks for ``--confirm-with``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import Any, Mapping

from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel import ArtifactCache, default_cache_dir, prune_records, read_regular, write_private_file

__all__ = ["MAX_RECORDS", "RECORD_FORMAT", "local_record", "record_manifest"]

RECORD_FORMAT = "onnxwrapper-diff-record"
#: records kept (the most recently written); one is ≈ 1 kB
MAX_RECORDS = 2000
_FOLDER = "diff-folders"
_MAX_RECORD_BYTES = 1 << 20
_MAX_MANIFEST_BYTES = 64 << 20
_last: dict[str, str] = {}  # folder -> the record this process wrote for it last
_lock = threading.Lock()


def _records_dir() -> str | None:
    """The records folder of the user's compile cache, or ``None`` when its root cannot be trusted."""
    root = default_cache_dir()
    try:
        ArtifactCache(root)  # owned by this user (or root), not writable by others
    except ArtifactError:
        return None
    return os.path.join(root, _FOLDER)


def record_manifest(directory: str, data: bytes, doc: Mapping[str, Any]) -> None:
    """Record that this user wrote ``data`` (the bytes of ``directory/diff.json``, parsed: ``doc``)
    on this machine. Never raises."""
    digest = hashlib.sha256(data).hexdigest()
    folder = os.path.abspath(directory)
    try:
        records = _records_dir()
        if records is None:
            return
        record = {"format": RECORD_FORMAT, "version": 1, "manifest_sha256": digest, "directory": folder,
                  "cwd": os.getcwd(), "target": doc.get("target"), "app": doc.get("app")}
        write_private_file(os.path.join(records, f"{digest}.json"), json.dumps(record, default=str).encode("utf-8"))
        with _lock:
            previous, _last[folder] = _last.get(folder), digest
        if previous is not None and previous != digest:
            try:
                os.remove(os.path.join(records, f"{previous}.json"))
            except OSError:
                pass
        prune_records(records, ".json", MAX_RECORDS)
    except (OSError, ValueError, TypeError):
        return


def local_record(directory: str) -> dict | None:
    """The record of ``directory/diff.json`` as it is now (``{"manifest_sha256", "directory", "cwd",
    "target", "app"}``), or ``None`` when this user wrote no such ``diff.json`` on this machine
    (module docstring). Never raises."""
    try:
        data = read_regular(os.path.join(directory, "diff.json"), _MAX_MANIFEST_BYTES)
        records = _records_dir()
        if records is None:
            return None
        digest = hashlib.sha256(data).hexdigest()
        record = json.loads(read_regular(os.path.join(records, f"{digest}.json"), _MAX_RECORD_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or record.get("manifest_sha256") != digest:
        return None
    return record
