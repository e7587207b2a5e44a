"""Digest hints: the sha256 a model file had the last time a process hashed it, by file state.

A new process must hash a model in full before it may trust a cache entry found by that hash
(:meth:`ModelSource.bytes_digest`; 13 ms for a 21 MB model on a 2-core x86-64 host, measured). A
backend that knows the hash the file had before can start loading the cached artifact while the
hash is computed in the background, and discard that load if the hash turns out different. A hint
is that earlier hash: ``<cache root>/digests/<sha256 of the absolute path, 32 hex>.json`` holding
the path, its file state ``(size, mtime_ns, ctime_ns, inode, device)`` and the hex digest.

A hint is **never trusted**: it only lets work start early. :func:`recorded_digest` returns it
only while the file still has the recorded state and that state is older than
:data:`~onnxwrapper.kernel._cache_entry.RACY_SECONDS` (a rewrite within the same timestamp tick
could keep it; ``ctime`` cannot be set back by a user), and the caller still compares it with the
full hash before it lets anybody use what it found. Reading or writing a hint never raises: an
unreadable, malformed or unwritable hint only costs the early start.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from onnxwrapper.kernel._model_source import ModelSource, file_state

__all__ = ["recorded_digest", "record_digest"]

FORMAT = 1
_FOLDER = "digests"


def _hint_file(cache_root: str, path: str) -> str:
    name = hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return os.path.join(cache_root, _FOLDER, f"{name}.json")


def recorded_digest(cache_root: str, source: ModelSource) -> str | None:
    """The hex :meth:`~ModelSource.bytes_digest` recorded for ``source``'s file in its current, settled
    state, or ``None`` (a bytes model, no hint, another state, a hint that cannot be read).

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
    try:
        with open(_hint_file(cache_root, path), encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("format") != FORMAT or doc.get("path") != path or tuple(doc.get("state") or ()) != state:
            return None
        digest = doc.get("digest")
        return digest if isinstance(digest, str) and len(digest) == 64 else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def record_digest(cache_root: str, source: ModelSource, digest: str) -> None:
    """Record ``digest`` (hex :meth:`~ModelSource.bytes_digest` of ``source``, just computed) as the
    hint of the file's current state. Skipped for bytes models and for files not settled (within
    ``RACY_SECONDS`` of a change); written atomically; never raises (a read-only cache keeps none).
    """
    if source.path is None:
        return
    path = os.path.abspath(source.path)
    state = file_state(path, time.time_ns())
    if state is None:
        return
    target = _hint_file(cache_root, path)
    tmp = f"{target}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"format": FORMAT, "path": path, "state": list(state), "digest": digest}, f)
        os.replace(tmp, target)
    except (OSError, ValueError, TypeError):
        try:
            os.remove(tmp)
        except OSError:
            pass
