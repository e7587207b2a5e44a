"""Digest hints: the sha256 a model file had when a process last hashed it, with its CRC-32.

A new process must know a model's sha256 (:meth:`ModelSource.bytes_digest`) before it may use a
cache entry found by it, and computing it is most of the Python-side cost of a cache hit (13 ms
for a 21 MB model on a 2-core x86-64 host, measured). A hint keeps the digest a process computed,
in the compile cache: ``<cache root>/digests/<sha256 of the absolute path, 32 hex>.json`` holding
the path, the file's state ``(size, mtime_ns, ctime_ns, inode, device)``, its CRC-32 and the hex
digest.

:func:`recorded_digest` uses a hint only after a full check of the file on its first use in the
process: the state must be the recorded one, settled (older than
:data:`~onnxwrapper.kernel.cache._cache_entry.RACY_SECONDS`: a rewrite within the same timestamp tick
could keep it), and every byte is read again to compare the CRC-32 (3.5× faster than sha256,
measured). A content that changed keeping its size, mtime, ctime, inode and device — which on
Linux and macOS takes setting the clock back, since every write moves ``ctime`` — would also have
to keep its CRC-32 (probability 2⁻³² for a change that is no deliberate collision). The cache
trusts its folder, as it trusts the entries in it. Reading or writing a hint never raises: a
missing, stale, malformed or unwritable hint only costs the full sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from onnxwrapper.kernel.cache import crc32_file, prune_records, write_private_file
from onnxwrapper.kernel.model._model_source import ModelSource, file_state

__all__ = ["MAX_HINTS", "recorded_digest", "record_digest"]

FORMAT = 1
_FOLDER = "digests"
#: hints kept per cache (the most recently written; a hint is ≈ 250 bytes): models opened from ever
#: new paths (temporary folders) must not grow the folder without bound
MAX_HINTS = 1000


def _hint_file(cache_root: str, path: str) -> str:
    name = hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return os.path.join(cache_root, _FOLDER, f"{name}.json")


def _read(hint: str) -> tuple[str, tuple, str, int] | None:
    """``(path, state, hex digest, CRC-32)`` of a hint file, or ``None`` (missing or malformed)."""
    try:
        with open(hint, encoding="utf-8") as f:
            doc = json.load(f)
        path, state, digest, crc = doc["path"], tuple(doc["state"]), doc["digest"], doc["crc32"]
        if doc.get("format") == FORMAT and isinstance(path, str) and isinstance(digest, str) and len(digest) == 64 \
                and isinstance(crc, int):
            return path, state, digest, crc
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    return None


def _checked_crc32(path: str, state: tuple) -> int | None:
    """The file's CRC-32, or ``None`` when it cannot be read or its state moved while it was read."""
    start = time.time_ns()
    try:
        crc, size = crc32_file(path)
    except OSError:
        return None
    return crc if size == state[0] and file_state(path, start) == state else None


def recorded_digest(cache_root: str, source: ModelSource) -> str | None:
    """The hex :meth:`~ModelSource.bytes_digest` recorded for ``source``'s file, when the file still
    has the recorded, settled state and its bytes the recorded CRC-32 (read in full now); it is then
    also this process's :meth:`~ModelSource.bytes_digest` of the file. ``None`` otherwise (a bytes
    model, no hint, another state, another CRC-32, a hint that cannot be read).

    Args:
        cache_root: the compile cache's root folder (``ArtifactCache.root``).
        source: the model.
    """
    if source.path is None:
        return None
    path = os.path.abspath(source.path)
    state = file_state(path, time.time_ns())
    if state is None:
        return None
    recorded = _read(_hint_file(cache_root, path))
    if recorded is None or recorded[:2] != (path, state):
        return None
    _path, _state, digest, crc = recorded
    if _checked_crc32(path, state) != crc:
        return None
    source.remember_digest(state, digest)
    return digest


def record_digest(cache_root: str, source: ModelSource, digest: str) -> None:
    """Record ``digest`` (hex :meth:`~ModelSource.bytes_digest` of ``source``, just computed) with the
    file's state and CRC-32 (the file is read once more). Skipped for bytes models and for files
    not settled (changed within ``RACY_SECONDS``) or changed while read; written atomically; never
    raises (a read-only cache keeps none).
    """
    if source.path is None:
        return
    path = os.path.abspath(source.path)
    state = file_state(path, time.time_ns())
    target = _hint_file(cache_root, path)
    existing = _read(target) if state is not None else None
    if state is None or (existing is not None and existing[:3] == (path, state, digest)):
        return  # not settled, or recorded already (the CRC-32 is not read again)
    crc = _checked_crc32(path, state)
    if crc is None:
        return
    try:  # 0700 folder, 0600 file whatever the umask (docs/security.md, "the compile cache")
        write_private_file(target, json.dumps({"format": FORMAT, "path": path, "state": list(state), "crc32": crc,
                                               "digest": digest}).encode("utf-8"))
        prune_records(os.path.dirname(target), ".json", MAX_HINTS)
    except (OSError, ValueError, TypeError):
        pass
