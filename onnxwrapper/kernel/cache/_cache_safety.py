"""The compile cache's defences against other local users (docs/security.md, "the compile cache").

A cache entry answers for a model: whoever can write the cache root can make another model's
compiled files answer (a planted entry), redirect a ``.last_used`` stamp through a symbolic link,
or record a false digest hint. So:

* **The root is checked** (:func:`check_root`, POSIX): it must be owned by this user (or by root,
  for a read-only cache shipped with an application) and not writable by group or others.
  Anything else raises :class:`~onnxwrapper.errors.ArtifactError` with the fix — the cache is
  never used then, since anyone who could write it may have planted entries. A symbolic link as the
  root is fine (its target is checked). Windows ACLs are not checked (see docs/security.md).
* **Everything it creates is private** regardless of the umask: folders ``0700``
  (:func:`private_makedirs`), an entry's files ``0600`` (:func:`make_private`).
* **No symbolic link is followed inside it**: entry folders and files must be what they claim
  (:func:`is_plain_dir`, :func:`regular_stat`), and the ``.last_used`` stamp is touched without
  following a link (:func:`touch_stamp`; a planted link is removed).
* **Small records next to the entries** (digest hints ``digests/``, the plugin index ``plugins/``,
  the records of diff folders made here ``diff-folders/``) are written by :func:`write_private_file`:
  ``0700`` folders, a ``0600`` file created new (never through a link) and renamed into place.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading

from onnxwrapper.errors import ArtifactError

__all__ = ["root_problem", "check_root", "private_makedirs", "make_private", "is_plain_dir", "regular_stat",
           "touch_stamp", "write_private_file"]

_POSIX = os.name == "posix"
_log = logging.getLogger("onnxwrapper.cache")
_checked: dict[tuple, str | None] = {}
_lock = threading.Lock()


def root_problem(root: str) -> str | None:
    """Why the cache root ``root`` must not be trusted, or ``None`` (also when it does not exist
    yet: it is then created private). Memoized per process by the folder's identity and mode."""
    if not _POSIX:
        return None
    try:
        st = os.stat(root)
    except OSError:
        return None
    state = (root, st.st_dev, st.st_ino, st.st_mode, st.st_uid)
    with _lock:
        if state in _checked:
            return _checked[state]
    problem = None
    me = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        problem = "it is not a directory"
    elif st.st_uid not in (me, 0):
        problem = f"it is owned by user id {st.st_uid}, not by you ({me}) or root"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = " and ".join(w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit)
        problem = f"{who} may write it (mode {stat.S_IMODE(st.st_mode):o})"
    with _lock:
        _checked[state] = problem
    return problem


def check_root(root: str) -> None:
    """Raise when the cache root cannot be trusted (see :func:`root_problem`).

    Raises:
        ArtifactError: another owner, or writable by group/others — with what to do.
    """
    problem = root_problem(root)
    if problem is not None:
        raise ArtifactError(
            f"The compile cache {root} is not private: {problem}. Anyone who can write it can plant compiled "
            f"models that answer for yours, so onnxwrapper does not use it. Use a cache of your own (backend option "
            f"'cache_dir' or $ONNXWRAPPER_CACHE_DIR), or, if you trust what is in it, make it yours: "
            f"`chmod go-w {root}` (owner: you).", path=root)


def private_makedirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)`` with every folder it creates set to ``0700`` (whatever
    the umask). A file, a symbolic link or anything else that is not a folder at ``path`` itself (a
    folder of the cache such as ``entries``, damaged or planted) is removed first, with a WARNING:
    the cache's own names are never followed or left in the way.

    Raises:
        OSError: a folder cannot be created (permissions, a file in place of a parent folder).
    """
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            _log.warning("onnxwrapper cache: %s is not a folder (mode %o); replacing it with one", path, st.st_mode)
            os.unlink(path)
    except FileNotFoundError:
        pass
    missing = []
    probe = os.path.abspath(path)
    while not os.path.isdir(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    os.makedirs(path, mode=0o700, exist_ok=True)
    if _POSIX:
        for folder in missing:
            try:
                os.chmod(folder, 0o700)
            except OSError:
                pass


def make_private(tree: str) -> None:
    """Set the folders below (and of) ``tree`` to ``0700`` and its files to ``0600``; symbolic links
    are left alone (never followed)."""
    if not _POSIX:
        return
    for base, dirs, files in os.walk(tree):
        os.chmod(base, 0o700)
        for name in files:
            path = os.path.join(base, name)
            if not os.path.islink(path):
                os.chmod(path, 0o600)


def is_plain_dir(path: str) -> bool:
    """True when ``path`` is a directory and not a symbolic link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def regular_stat(path: str) -> os.stat_result:
    """``os.lstat(path)`` when it is a regular file.

    Raises:
        OSError: missing, or not a regular file (a symbolic link, a folder, a device) — ``ELOOP``.
    """
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.ELOOP, "not a regular file (a symbolic link?)", path)
    return st


def touch_stamp(path: str) -> None:
    """Create or touch the file ``path`` (``0600``) without following a symbolic link; a link there
    is removed first. Never raises (a read-only cache keeps working, only LRU order degrades)."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _attempt in range(2):
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK) or os.path.islink(path):
                try:
                    os.unlink(path)
                    continue
                except OSError:
                    return
            return
        try:
            if os.utime in os.supports_fd:
                os.utime(fd)
            else:  # pragma: no cover - Windows
                os.utime(path)
        except OSError:
            pass
        finally:
            os.close(fd)
        return



def write_private_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and privately: its missing folders ``0700``
    (:func:`private_makedirs`), the file ``0600`` whatever the umask, created new under a temporary
    name (``O_EXCL | O_NOFOLLOW``: never through a planted link), flushed to disk, then renamed.

    Raises:
        OSError: it cannot be written (nothing is left behind).
    """
    folder = os.path.dirname(os.path.abspath(path))
    private_makedirs(folder)
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        try:
            if _POSIX:
                os.fchmod(fd, 0o600)  # the umask may have taken bits away; never adds any
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
