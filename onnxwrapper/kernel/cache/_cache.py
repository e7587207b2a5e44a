"""A content-addressed artifact cache: key → directory of files, shared by processes.

Backends store compiled artifacts here (QNN EPContext models and context binaries); they never
manage cache files themselves. Properties:

* **Location**: the ``root`` argument (backend option ``cache_dir``), else the environment
  variable ``ONNXWRAPPER_CACHE_DIR``, else ``platformdirs.user_cache_dir("onnxwrapper")``
  (e.g. ``~/.cache/onnxwrapper`` on Linux, ``%LOCALAPPDATA%\\onnxwrapper\\Cache`` on Windows).
* **Keys** are hex sha256 digests of everything that determines the artifact
  (:func:`make_key`); an entry is the directory ``<root>/entries/<key>/``.
* **Atomic writes**: an entry is built in the ``tmp`` folder of the cache root (``<key>.<pid>.<random>``) and moved into
  place with one ``os.replace``; readers never see half-written entries. It is published only when
  complete: its files flushed to the disk (a write to a full disk fails there, not later), the
  builder's own check passed, the manifest written (:mod:`onnxwrapper.kernel.cache._cache_build`);
  otherwise nothing is left and the next request builds again.
* **One builder per key across processes**: a ``filelock.FileLock`` on ``<root>/locks/<key>.lock``
  is held while an entry is checked, built or removed, so N processes asking for the same
  missing key build it once; the others wait and then hit (``fcntl``/``msvcrt`` locks are
  released by the OS if the holder dies).
* **Integrity**: ``manifest.json`` records every file's size, sha256 and CRC-32. On lookup sizes
  are always checked and the content once per process per file state (size, mtime_ns, ctime_ns,
  inode; a file changed less than ``RACY_SECONDS`` before is checked every time) against its CRC-32
  (3.5× faster than sha256, measured; entries written before the CRC-32 was recorded are checked
  against their sha256); a corrupt or
  truncated entry is logged (logger ``onnxwrapper.cache``, WARNING) and rebuilt. A reader that
  only wants a hit may check an entry without its lock (:meth:`ArtifactCache.peek`, the same
  checks) and takes the locked path when anything is off.
* **Size bound**: after each build, least-recently-used entries (a ``.last_used`` stamp touched
  on every hit) are evicted until the total is at most ``max_bytes`` (default 5 GiB, env
  ``ONNXWRAPPER_CACHE_MAX_BYTES``); entries locked by another process and the entry just built
  are skipped (an entry just returned is the most recently used one, so it is evicted last).

* **Entries in use** (Windows: a process has an entry's context binary open or mapped, so it cannot
  be renamed or deleted): eviction skips such an entry, a corrupt one is left whole and rebuilt
  beside it (this process gets a *detached* copy under ``tmp``), never half-deleted
  (:func:`onnxwrapper.kernel.cache._files_in_use.remove_tree`).
* **Read-only caches** (a cache shipped inside an application, a read-only mount): when the lock
  folder cannot be written (``EROFS``, ``EACCES``, ``EPERM``; probed once per root and process with
  a file of our own, because filelock reads ``EACCES`` on Windows as "held by another process" and
  would wait ``lock_timeout``) or the lock file cannot be created, a lookup verifies the entry without a
  lock (sizes and sha256, as always; nothing can be half-written there by this process) and uses
  it; a miss builds into a temporary per-process cache instead, with one WARNING (logger
  ``onnxwrapper.cache``) per cache root; that temporary cache is removed at exit.

* **Other users**: the root must be owned by this user (or root) and not writable by group or
  others, else :class:`~onnxwrapper.errors.ArtifactError`; what the cache creates is private
  (``0700``/``0600``) whatever the umask; no symbolic link inside it is followed; a hit of the QNN
  backend is served only when the entry's provenance record matches the session
  (:mod:`onnxwrapper.kernel.cache._cache_safety`, docs/security.md).
* **Damage**: a folder of the cache (``entries``, ``locks``, ``tmp``, …) that is something else (a
  file, a link) is replaced, with a WARNING; an entry moved or removed while it is loaded gives an
  :class:`~onnxwrapper.errors.ArtifactError` (:meth:`ArtifactCache.loading`), never a traceback of
  another library.

Limits: on network file systems without working ``flock`` the single-builder guarantee is lost
(entries stay consistent because of the atomic rename).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from typing import Iterator, Mapping

from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel.cache._cache_build import Builder, CacheBuild, Verifier
from onnxwrapper.kernel.cache._cache_entry import (CacheEntry, DEFAULT_MAX_BYTES, ENV_CACHE_DIR, ENV_CACHE_MAX_BYTES,
                                                   FORMAT_VERSION, MANIFEST, RACY_SECONDS, STAMP, _sha256_file,
                                                   crc32_file, default_cache_dir, make_key)
from onnxwrapper.kernel.cache._cache_eviction import CacheEviction
from onnxwrapper.kernel.cache._cache_safety import check_root, is_plain_dir, private_makedirs, regular_stat, touch_stamp
from onnxwrapper.kernel.cache._files_in_use import remove_tree

__all__ = ["ENV_CACHE_DIR", "ENV_CACHE_MAX_BYTES", "FORMAT_VERSION", "CacheEntry", "ArtifactCache",
           "default_cache_dir", "make_key"]

_log = logging.getLogger("onnxwrapper.cache")
_READ_ONLY_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM}


class _ReadOnlyCache(Exception):
    """The cache root cannot be written (its lock files cannot be created)."""


class ArtifactCache(CacheBuild, CacheEviction):
    """A directory of content-addressed entries (see the module docstring).

    Args:
        root: cache directory; ``None`` → :func:`default_cache_dir`.
        max_bytes: size bound in bytes for all entries together; ``None`` →
            ``$ONNXWRAPPER_CACHE_MAX_BYTES`` or 5 GiB. ``0`` disables eviction.
        lock_timeout: seconds to wait for another process building the same key (default 3600);
            on timeout :class:`~onnxwrapper.errors.ArtifactError` is raised.
    """

    _verified: dict[tuple[str, str], tuple] = {}
    _verified_lock = threading.Lock()
    _scratch_caches: dict[str, "ArtifactCache"] = {}
    _writable_roots: dict[str, bool] = {}

    def __init__(self, root: str | os.PathLike | None = None, *, max_bytes: int | None = None,
                 lock_timeout: float = 3600.0) -> None:
        self.root = default_cache_dir(root)
        check_root(self.root)  # owned by this user (or root), not writable by others: kernel/cache/_cache_safety.py
        if max_bytes is None:
            env = os.environ.get(ENV_CACHE_MAX_BYTES, "").strip()
            max_bytes = int(env) if env.isdigit() else DEFAULT_MAX_BYTES
        self.max_bytes = int(max_bytes)
        self.lock_timeout = float(lock_timeout)

    # -- layout ----------------------------------------------------------------------------------
    def entry_dir(self, key: str) -> str:
        """Directory of entry ``key`` (it may not exist)."""
        return os.path.join(self.root, "entries", key)

    def _lock(self, key: str, timeout: float | None = None):
        import filelock

        locks = os.path.join(self.root, "locks")
        private_makedirs(locks)
        return filelock.FileLock(os.path.join(locks, key + ".lock"),
                                 timeout=self.lock_timeout if timeout is None else timeout)

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """Hold ``key``'s inter-process lock (no build, no eviction of it meanwhile).

        Raises:
            ArtifactError: the lock was not obtained within ``lock_timeout`` seconds.
        """
        import filelock

        if not self._lock_folder_writable():
            raise _ReadOnlyCache(f"{self.root} is not writable")
        try:
            lock = self._lock(key)
            lock.acquire()
        except OSError as exc:
            if exc.errno in _READ_ONLY_ERRNOS:
                raise _ReadOnlyCache(str(exc)) from exc
            raise ArtifactError(f"The compile cache {self.root} is not usable ({exc}). Point the backend option "
                                f"'cache_dir' or ${ENV_CACHE_DIR} to a writable directory.", path=self.root,
                                transient=True) from exc
        except filelock.Timeout as exc:
            raise ArtifactError(f"Timed out after {self.lock_timeout:.0f} s waiting for the cache lock of entry "
                                f"{key[:16]}… in {self.root}; another process may be stuck compiling it. "
                                f"Remove {lock.lock_file} if no such process exists.",
                                path=self.entry_dir(key), transient=True) from exc
        try:
            yield
        finally:
            lock.release()

    def _lock_folder_writable(self) -> bool:
        """Whether a file of our own can be created in ``<root>/locks`` (probed once per root and process;
        see the module docstring, "Read-only caches")."""
        known = self._writable_roots.get(self.root)
        if known is not None:
            return known
        locks = os.path.join(self.root, "locks")
        try:
            private_makedirs(locks)
            with tempfile.TemporaryFile(dir=locks, prefix=".probe-"):
                pass
            writable = True
        except OSError as exc:
            if exc.errno not in _READ_ONLY_ERRNOS:
                return True  # not a permission problem: let the lock report it
            writable = False
        self._writable_roots[self.root] = writable
        return writable

    # -- reading ---------------------------------------------------------------------------------
    def _read_verified(self, key: str, repair: bool = True, quiet: bool = False) -> CacheEntry | None:
        """The entry if present and intact; a corrupt one is logged (unless ``quiet``) and (``repair``)
        removed. Caller holds the lock, or the cache is read-only (``repair=False``), or the caller
        falls back to the locked path on ``None`` (``quiet``)."""
        directory = self.entry_dir(key)
        if not os.path.isdir(directory):
            return None
        problem = None if is_plain_dir(directory) else "its folder is a symbolic link (never followed)"
        manifest: dict = {}
        try:
            if problem is None:
                with open(os.path.join(directory, MANIFEST), encoding="utf-8") as f:
                    manifest = json.load(f)
        except (OSError, ValueError) as exc:
            problem = f"unreadable manifest ({type(exc).__name__}: {exc})"
        if problem is None and (manifest.get("format") != FORMAT_VERSION or manifest.get("key") != key):
            problem = f"manifest format {manifest.get('format')!r} / key mismatch (expected format {FORMAT_VERSION})"
        files = manifest.get("files", {}) if problem is None else {}
        if problem is None:
            problem = self._check_files(key, directory, files)
        if problem is not None and quiet:
            return None
        if problem is not None:
            _log.warning("onnxwrapper cache: entry %s in %s is corrupt (%s); %s", key[:16], self.root, problem,
                         "removing it, it will be rebuilt" if repair else "not using it (the cache is read-only)")
            if repair and not self._remove_dir(directory):
                _log.warning("onnxwrapper cache: entry %s is in use by another process; it is left whole and "
                             "rebuilt beside it", key[:16])
            return None
        return CacheEntry(key, directory, {n: int(i["size"]) for n, i in files.items()}, manifest.get("meta", {}),
                          float(manifest.get("created", 0.0)), True, float(manifest.get("build_seconds", 0.0)))

    def _check_files(self, key: str, directory: str, files: Mapping[str, Mapping]) -> str | None:
        start = time.time_ns()
        racy = False
        states = []
        for name, info in sorted(files.items()):
            if any(part in ("", ".", "..") for part in name.split("/")) or os.path.isabs(name):
                return f"file name {name!r} leaves the entry"
            path = os.path.join(directory, *name.split("/"))
            try:
                st = regular_stat(path)  # no symbolic link is followed inside the cache
            except OSError:
                return f"file {name} is missing or not a regular file"
            if st.st_size != int(info["size"]):
                return f"file {name} has {st.st_size} bytes, expected {info['size']} (truncated or modified)"
            states.append((name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev))
            # a file changed within RACY_SECONDS may change again within its timestamp tick: no memo
            racy = racy or max(st.st_mtime_ns, st.st_ctime_ns) > start - int(RACY_SECONDS * 1e9)
        memo_key = (self.root, key)
        state = tuple(states)
        with self._verified_lock:
            if self._verified.get(memo_key) == state:
                return None
        for name, info in sorted(files.items()):
            path = os.path.join(directory, *name.split("/"))
            if "crc32" in info:  # the corruption check; entries built before it have the sha256 only
                if crc32_file(path)[0] != info["crc32"]:  # a malformed value never matches
                    return f"file {name} does not match its CRC-32 (corrupted)"
            elif _sha256_file(path) != info["sha256"]:
                return f"file {name} does not match its sha256 (corrupted)"
        if not racy:
            with self._verified_lock:
                self._verified[memo_key] = state
        return None

    def _touch(self, directory: str) -> None:
        touch_stamp(os.path.join(directory, STAMP))  # never through a symbolic link; never raises

    def _used(self, entry: CacheEntry | None) -> CacheEntry | None:
        """``entry``, marked as used (LRU order) when it is not ``None``."""
        if entry is not None:
            self._touch(entry.path)
        return entry

    def lookup(self, key: str) -> CacheEntry | None:
        """The verified entry for ``key`` (marked as used), or ``None``. Corrupt entries are removed
        (left alone in a read-only cache)."""
        try:
            with self.hold(key):
                return self._used(self._read_verified(key))
        except _ReadOnlyCache:
            return self._read_verified(key, repair=False) or self._scratch().lookup(key)

    def peek(self, key: str) -> CacheEntry | None:
        """The verified entry for ``key`` (marked as used), read without its lock; ``None`` when it is
        absent or anything about it is off (missing or changed files, a bad manifest, a concurrent
        removal). Nothing is logged or removed then: the caller takes the locked path
        (:meth:`lookup`, :meth:`get_or_create`), which reports and repairs. The checks are
        :meth:`lookup`'s: sizes always, the content (CRC-32) once per process per file state
        (module docstring).
        Entries appear and disappear by one rename, so a reader without the lock sees a whole
        entry or none; the lock only serializes builders and removers."""
        try:
            entry = self._read_verified(key, repair=False, quiet=True)
        except (OSError, ValueError, KeyError, TypeError):  # removed meanwhile, or an odd manifest
            return None
        return self._used(entry)

    def store(self, key: str, build: Builder, verify: Verifier | None = None) -> CacheEntry | None:
        """:meth:`get_or_create` for records that only save later work: in a read-only cache nothing
        is stored or said (``None``), and no eviction runs after the build.

        Raises:
            Whatever ``build`` raises; ArtifactError as :meth:`get_or_create`.
        """
        try:
            with self.hold(key):
                return self._used(self._read_verified(key)) or self._build(key, build, verify)
        except _ReadOnlyCache:
            return None

    def _scratch(self) -> "ArtifactCache":
        """The temporary per-process cache that takes the builds of this read-only cache (warned once)."""
        with self._verified_lock:
            scratch = self._scratch_caches.get(self.root)
            if scratch is None:
                folder = tempfile.mkdtemp(prefix="onnxwrapper-cache-")
                atexit.register(shutil.rmtree, folder, True)
                scratch = self._scratch_caches[self.root] = ArtifactCache(folder, max_bytes=0,
                                                                          lock_timeout=self.lock_timeout)
                _log.warning("onnxwrapper cache: %s is read-only; what is not in it is compiled into the temporary "
                             "cache %s and not kept after this process. Point the backend option 'cache_dir' or $%s "
                             "to a writable directory to keep it.", self.root, folder, ENV_CACHE_DIR)
        return scratch

    # -- writing ---------------------------------------------------------------------------------
    def get_or_create(self, key: str, build: Builder, verify: Verifier | None = None) -> CacheEntry:
        """Return entry ``key``, building it with ``build`` if it is missing or corrupt.

        Args:
            key: hex key from :func:`make_key`.
            build: ``build(directory) -> meta`` writes the artifact files into the empty temporary
                ``directory`` and returns JSON-serializable metadata (or ``None``). It runs with
                the key's inter-process lock held, at most once per key across processes.
            verify: ``verify(directory, meta)``, called once the files are on the disk and before
                the entry is published; it raises when they are no complete artifact (e.g. a file
                cut short by a full disk). ``None``: no check beyond the cache's own.

        Returns:
            The entry; ``hit`` is False when this call built it.

        Raises:
            Whatever ``build`` raises (the temporary directory is removed); ArtifactError on lock
            timeout, when a file cannot be written back to the disk, when ``verify`` refuses the
            files (no entry is left in these cases), or when the built entry cannot be moved into
            place.
        """
        try:
            with self.hold(key):
                entry = self._used(self._read_verified(key))
                if entry is not None:
                    return entry
                entry = self._build(key, build, verify)
        except _ReadOnlyCache:
            return self._read_verified(key, repair=False) or self._scratch().get_or_create(key, build, verify)
        if self.max_bytes:
            self.prune(keep=(key,))
        return entry

    # -- maintenance -----------------------------------------------------------------------------
    def _remove_dir(self, directory: str) -> bool:
        """Remove an entry folder, never half: False when it is in use (left whole)."""
        trash = os.path.join(self.root, "tmp", f"trash.{os.getpid()}.{os.urandom(4).hex()}")
        return remove_tree(directory, trash)

    def remove(self, key: str) -> bool:
        """Delete entry ``key`` (waiting for its lock). Returns True if it existed and is gone (False in a
        read-only cache, or when it is in use by another process: then it is left whole)."""
        try:
            with self.hold(key):
                directory = self.entry_dir(key)
                if not os.path.isdir(directory):
                    return False
                return self._remove_dir(directory)
        except _ReadOnlyCache:
            scratch = self._scratch_caches.get(self.root)
            return scratch.remove(key) if scratch is not None else False

    def clear(self) -> int:
        """Remove every entry; returns how many were removed."""
        count = 0
        for key, _size, _used in self.entries():
            count += bool(self.remove(key))
        return count
