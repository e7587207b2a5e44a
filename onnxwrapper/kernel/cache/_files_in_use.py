"""Replacing and removing files that another process may be using, with Windows semantics in mind.

On Windows a file that a running program has open without delete sharing, or has mapped into
memory, cannot be deleted or replaced (``PermissionError``: WinError 32 "being used by another
process", 5 "access denied", 1224 "user-mapped section open"), and a folder holding one cannot be
renamed or removed; ``shutil.rmtree`` then deletes what it can and leaves a half-deleted folder.
onnxruntime-qnn maps QNN context binaries into memory on ``win_arm64``, so a compiled model in use
by an app is such a file. On POSIX systems all of this succeeds (an open file lives on unlinked).

* :func:`replace_files` moves new files over old ones all-or-nothing: every old file is first
  renamed aside; if one cannot be, the others are put back and nothing changed.
* :func:`remove_tree` removes a folder only by first renaming it aside (into a trash folder):
  a folder that cannot be renamed is in use and is left whole, never half-deleted.
* :func:`detach_entry` keeps a freshly built cache entry aside for this process when the entry's
  own folder is in use by another process.
"""

from __future__ import annotations

import logging
import os
import shutil
from typing import Sequence

from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel.cache._cache_safety import private_makedirs

__all__ = ["IN_USE_HINT", "detach_entry", "remove_tree", "replace_files"]

_log = logging.getLogger("onnxwrapper")

#: what a user reads when a file in use blocks a replacement
IN_USE_HINT = ("it is in use by another process (on Windows a file that a running program has open or "
               "memory-mapped, as onnxruntime-qnn maps context binaries, cannot be replaced or deleted)")


def replace_files(moves: Sequence[tuple[str, str]]) -> None:
    """Move each ``source`` over its ``target``, all or nothing.

    Args:
        moves: ``[(source path, target path)]``; sources are new files (e.g. in a temporary folder
            on the same file system), targets may exist.

    Raises:
        ArtifactError: a target is in use (module docstring) or cannot be moved aside; then no
            target was changed (``.path`` names the target). Other ``OSError`` of the moves.
    """
    aside: list[tuple[str, str]] = []
    failed = ""
    try:
        for _source, target in moves:
            if os.path.lexists(target):
                failed = target
                backup = f"{target}.old-{os.getpid()}-{os.urandom(3).hex()}"
                os.replace(target, backup)
                aside.append((target, backup))
    except OSError as exc:
        for target, backup in reversed(aside):
            os.replace(backup, target)
        raise ArtifactError(f"Cannot replace {failed}: {IN_USE_HINT}. Nothing was replaced. Close the program that "
                            f"uses it, or write to another output path. ({type(exc).__name__}: {exc})",
                            path=failed, transient=True) from exc
    for source, target in moves:
        os.replace(source, target)
    for target, backup in aside:
        try:
            os.remove(backup)
        except OSError:  # still open elsewhere: harmless, a later run may remove it
            _log.info("onnxwrapper: the previous %s is still in use; left as %s", target, backup)


def remove_tree(directory: str, trash: str) -> bool:
    """Remove ``directory`` by renaming it to ``trash`` (a path on the same file system) and deleting that.

    Returns:
        True when ``directory`` is gone (or was already); False when it is in use (it could not be
        renamed because of a ``PermissionError``) and was left untouched.
    """
    try:
        private_makedirs(os.path.dirname(trash))
        os.replace(directory, trash)
    except FileNotFoundError:
        return not os.path.exists(directory)
    except PermissionError:
        return False
    except OSError:  # not an in-use problem (e.g. no rename across mounts): delete in place
        trash = directory
    if os.path.isdir(trash) and not os.path.islink(trash):
        shutil.rmtree(trash, ignore_errors=True)
    else:  # a file or a link where an entry folder belongs: removed, never followed
        try:
            os.remove(trash)
        except OSError:
            pass
    return True


def detach_entry(tmp_root: str, key: str, built: str) -> str:
    """Move the freshly built cache entry folder ``built`` to a private name under ``tmp_root`` and
    return it: this process uses that copy because the entry's own folder holds a corrupt entry
    another process is using (a later process replaces the entry; the copy is removed later as a
    stale temporary).

    Args:
        tmp_root: the cache's folder of temporaries. key: the entry's hex key (logged, named).
        built: the built entry folder (same file system as ``tmp_root``).

    Raises:
        OSError: the rename failed.
    """
    detached = os.path.join(tmp_root, f"detached.{key[:16]}.{os.getpid()}.{os.urandom(4).hex()}")
    os.replace(built, detached)
    _log.warning("onnxwrapper cache: entry %s is in use by another process and could not be replaced; this "
                 "process uses a fresh copy (%s), and a later process will replace the entry", key[:16], detached)
    return detached
