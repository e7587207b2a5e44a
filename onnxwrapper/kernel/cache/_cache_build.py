"""Building a compile-cache entry and publishing it only when it is complete (:class:`CacheBuild`).

A mixin of :class:`~onnxwrapper.kernel.cache._cache.ArtifactCache` (see its module docstring,
"Atomic writes"). An entry is built in a private temporary folder and published by one rename,
and only after:

1. every file the builder wrote has reached the disk: each is ``fsync``-ed, because a write to a
   full disk (or a quota, a network file system) may succeed in the page cache and fail only when
   the data is written back — ``fsync`` reports that error (``ENOSPC``, ``EIO``; POSIX
   ``fsync(2)``), a plain ``close`` need not;
2. the builder's own check of the files passed (``verify(directory, meta)``, e.g. the QNN backend
   parses the EPContext model it is about to publish);
3. the manifest (sizes, sha256, CRC-32 of what is now on disk) is written and ``fsync``-ed too,
   and the folder itself (its directory entries) is.

Any failure on the way removes the temporary folder: no entry is left, and the next request builds
again (docs/security.md, "the compile cache"). :meth:`CacheBuild.loading` guards the use of a
published entry by another library (onnxruntime loading a context model): an entry that is moved,
removed or damaged meanwhile gives a typed error, and a damaged one is removed so that it is
rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel.cache._cache_entry import MANIFEST, CacheEntry, FORMAT_VERSION, _checksums, _list_files
from onnxwrapper.kernel.cache._cache_safety import make_private, private_makedirs
from onnxwrapper.kernel.cache._files_in_use import detach_entry

__all__ = ["Builder", "CacheBuild", "Verifier"]

_log = logging.getLogger("onnxwrapper.cache")
_POSIX = os.name == "posix"

#: ``build(directory) -> meta``: writes an entry's files into the empty ``directory``
Builder = Callable[[str], "Mapping[str, Any] | None"]
#: ``verify(directory, meta)``: raises when the files written are not a complete artifact
Verifier = Callable[[str, Mapping[str, Any]], None]


def _sync_file(path: str) -> None:
    """Flush a file's data to the disk (``OSError`` when the write-back fails, e.g. ``ENOSPC``)."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _sync_folder(path: str) -> None:
    """Flush a folder's directory entries (POSIX; Windows has no directory handles to sync)."""
    if not _POSIX:
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CacheBuild:
    """Building, publishing and guarded use of entries (uses the cache's ``root``, ``entry_dir``,
    ``_touch``, ``_remove_dir`` and ``lookup``)."""

    root: str

    if TYPE_CHECKING:  # provided by ArtifactCache
        def entry_dir(self, key: str) -> str: ...

        def _touch(self, directory: str) -> None: ...

        def _remove_dir(self, directory: str) -> bool: ...

        def lookup(self, key: str) -> CacheEntry | None: ...

    def _build(self, key: str, build: Builder, verify: Verifier | None = None) -> CacheEntry:
        tmp_root = os.path.join(self.root, "tmp")
        private_makedirs(tmp_root)
        tmp = os.path.join(tmp_root, f"{key[:32]}.{os.getpid()}.{os.urandom(4).hex()}")
        os.makedirs(tmp, mode=0o700)
        start = time.perf_counter()
        try:
            meta = dict(build(tmp) or {})
            seconds = time.perf_counter() - start
            files = self._complete(key, tmp, meta, verify)
            created = time.time()
            manifest = {"format": FORMAT_VERSION, "key": key, "created": created, "build_seconds": seconds,
                        "files": files, "meta": meta}
            with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
                json.dump(manifest, f, indent=1, sort_keys=True, default=str)
                f.flush()
                os.fsync(f.fileno())
            self._touch(tmp)
            make_private(tmp)  # 0700 folders, 0600 files, whatever the umask
            _sync_folder(tmp)
            final = self._publish(key, tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _log.info("onnxwrapper cache: built entry %s (%d files, %.1f MB) in %.2f s", key[:16], len(files),
                  sum(i["size"] for i in files.values()) / 1e6, seconds)
        return CacheEntry(key, final, {n: i["size"] for n, i in files.items()}, meta, created, False, seconds)

    def _complete(self, key: str, tmp: str, meta: Mapping[str, Any], verify: Verifier | None) -> dict:
        """The manifest's ``files`` of a built folder, once everything in it is on the disk and checked.

        Raises:
            ArtifactError: a file could not be written back (a full disk), or ``verify`` refused the files.
        """
        files = {}
        for name, path in sorted(_list_files(tmp).items()):
            try:
                _sync_file(path)
            except OSError as exc:
                raise ArtifactError(f"The cache entry {key[:16]}… could not be written completely ({name}: {exc}); "
                                    f"nothing was stored. Free disk space in {self.root} (or point the backend "
                                    f"option 'cache_dir' elsewhere) and run again.", path=self.root,
                                    transient=True) from exc
            sha256, crc32 = _checksums(path)
            files[name] = {"size": os.path.getsize(path), "sha256": sha256, "crc32": crc32}
        if verify is not None:
            try:
                verify(tmp, meta)
            except ArtifactError:
                raise
            except Exception as exc:  # noqa: BLE001 - the builder's check failed: the files are no artifact
                raise ArtifactError(f"The compiled files of cache entry {key[:16]}… are incomplete or unreadable "
                                    f"({type(exc).__name__}: {exc}); nothing was stored. Check the free space in "
                                    f"{self.root} and run again.", path=self.root, transient=True) from exc
        return files

    def _publish(self, key: str, tmp: str) -> str:
        """Move the complete folder ``tmp`` into place; returns where the entry now is."""
        final = self.entry_dir(key)
        private_makedirs(os.path.dirname(final))
        in_use = os.path.lexists(final) and not self._remove_dir(final)  # a corrupt entry still in use
        try:
            if not in_use:
                os.replace(tmp, final)
                _sync_folder(os.path.dirname(final))
        except PermissionError:  # it came back and is in use (Windows)
            in_use = True
        except OSError as exc:
            raise ArtifactError(f"Could not move the new cache entry into {final}: {exc}", path=final,
                                transient=True) from exc
        if in_use:
            final = detach_entry(os.path.join(self.root, "tmp"), key, tmp)
        return final

    @contextlib.contextmanager
    def loading(self, entry: CacheEntry) -> Iterator[None]:
        """Around a use of ``entry``'s files by another library (onnxruntime loading a context model):
        when that fails and the entry is no longer intact where it was — moved, removed, or damaged
        (another process evicted or replaced it, a disk error) — raise :class:`ArtifactError` naming
        it; a damaged entry is removed so that the next request rebuilds it. A failure of an intact
        entry is re-raised as it is (not the cache's doing).

        Raises:
            ArtifactError: the entry changed during the load (chained to the library's error).
        """
        try:
            yield
        except Exception as exc:
            try:
                now = self.lookup(entry.key)  # checks it (and removes it when corrupt), under its lock
            except ArtifactError:
                now = None
            if now is not None and now.path == entry.path:
                raise
            raise ArtifactError(f"The compile cache entry {entry.key[:16]}… in {self.root} was moved, removed or "
                                f"damaged while it was loaded (another process may have evicted or rebuilt it): "
                                f"{type(exc).__name__}. Open the session again: the entry is rebuilt.",
                                path=entry.path, transient=True) from exc
