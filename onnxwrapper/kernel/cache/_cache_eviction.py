"""Size bound of the compile cache: least-recently-used entries are evicted (:class:`CacheEviction`).

A mixin of :class:`~onnxwrapper.kernel.cache._cache.ArtifactCache` (see its module docstring, "Size
bound"): every hit touches the entry's ``.last_used`` stamp; after a build, entries are evicted
oldest stamp first until the total is at most ``max_bytes``, skipping entries another process
holds the lock of.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from typing import TYPE_CHECKING, Any

from onnxwrapper.kernel.cache._cache_entry import MANIFEST, STAMP, _STALE_TMP_SECONDS, _list_files

__all__ = ["CacheEviction"]

_log = logging.getLogger("onnxwrapper.cache")


class CacheEviction:
    """Listing and LRU eviction of an :class:`~onnxwrapper.kernel.cache._cache.ArtifactCache`'s entries
    (uses its ``root``, ``max_bytes``, ``_lock`` and ``_remove_dir``)."""

    root: str
    max_bytes: int

    if TYPE_CHECKING:  # provided by ArtifactCache
        def _lock(self, key: str, timeout: float | None = None) -> Any: ...

        def _remove_dir(self, directory: str) -> bool: ...

        def entry_dir(self, key: str) -> str: ...

        def remove(self, key: str) -> bool: ...

    def entries(self) -> list[tuple[str, int, float]]:
        """``(key, size in bytes, last-used time)`` of every entry, least recently used first
        (unverified: read from the manifests)."""
        base = os.path.join(self.root, "entries")
        result = []
        try:
            names = os.listdir(base)
        except OSError:
            return []
        for key in names:
            directory = os.path.join(base, key)
            try:
                with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
                    manifest = json.load(f)
                size = sum(int(i["size"]) for i in manifest.get("files", {}).values())
            except (OSError, ValueError, KeyError, TypeError):
                files = _list_files(directory) if os.path.isdir(directory) else {}
                size = sum(os.path.getsize(p) for p in files.values())
            try:
                used = os.lstat(os.path.join(directory, STAMP)).st_mtime  # a planted link is not followed
            except OSError:
                used = 0.0
            result.append((key, size, used))
        result.sort(key=lambda item: item[2])
        return result

    def size_bytes(self) -> int:
        """Total size of all entries in bytes."""
        return sum(size for _key, size, _used in self.entries())

    def prune(self, max_bytes: int | None = None, *, keep: tuple[str, ...] = ()) -> list[str]:
        """Evict least-recently-used entries until the total is at most ``max_bytes``.

        Args:
            max_bytes: bound in bytes; ``None`` → :attr:`max_bytes`.
            keep: keys never evicted by this call.

        Returns:
            The evicted keys. Entries whose lock another process holds, or whose files another process
            has open or mapped (Windows), are skipped. Stale
            temporary directories (older than 6 h) of crashed builders are removed too.
        """
        import filelock

        bound = self.max_bytes if max_bytes is None else int(max_bytes)
        self._clean_tmp()
        entries = self.entries()
        total = sum(size for _k, size, _u in entries)
        evicted = []
        for key, size, _used in entries:
            if total <= bound:
                break
            if key in keep:
                continue
            try:
                lock = self._lock(key, timeout=0)
                lock.acquire()
            except (filelock.Timeout, OSError):  # held by another process, or a read-only cache
                continue
            try:
                removed = self._remove_dir(self.entry_dir(key))
            finally:
                lock.release()
            if not removed:  # in use by another process (Windows): left whole
                continue
            total -= size
            evicted.append(key)
            _log.info("onnxwrapper cache: evicted least-recently-used entry %s (%.1f MB)", key[:16], size / 1e6)
        return evicted

    def _clean_tmp(self) -> None:
        tmp_root = os.path.join(self.root, "tmp")
        try:
            names = os.listdir(tmp_root)
        except OSError:
            return
        now = time.time()
        for name in names:
            path = os.path.join(tmp_root, name)
            try:
                if now - os.path.getmtime(path) > _STALE_TMP_SECONDS:
                    shutil.rmtree(path, ignore_errors=True)
            except OSError:
                continue
