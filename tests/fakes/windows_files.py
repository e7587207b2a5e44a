"""A double of Windows file semantics for files another process has open or memory-mapped.

On Windows (NTFS), while another process holds a file mapped (onnxruntime-qnn maps QNN context
binaries on ``win_arm64``) or open without ``FILE_SHARE_DELETE``:

* ``DeleteFile`` / ``os.remove`` / ``os.unlink`` of it fail (``PermissionError``, WinError 32/5);
* ``MoveFileEx`` / ``os.replace`` / ``os.rename`` of it, or *onto* it, fail the same way;
* a folder holding it cannot be renamed or removed; ``shutil.rmtree`` deletes everything else and
  fails (or, with ``ignore_errors``, silently leaves) the file and its folders.

:class:`WindowsFileSemantics` installs this behaviour for the paths it is told are in use, by
monkeypatching ``os.replace``, ``os.rename``, ``os.remove``, ``os.unlink``, ``os.rmdir`` and
``shutil.rmtree`` for the duration of a test; production code sees ordinary ``PermissionError``
exceptions, exactly as on Windows, and never knows about the double.
"""

from __future__ import annotations

import os
import shutil


def _winerror(path: str) -> PermissionError:
    error = PermissionError(13, "The process cannot access the file because it is being used by another process",
                            path)
    error.winerror = 32  # type: ignore[attr-defined]
    return error


class WindowsFileSemantics:
    """Files in :attr:`in_use` (absolute paths) behave as mapped by another process on Windows."""

    def __init__(self, monkeypatch) -> None:
        self.in_use: set[str] = set()
        self.blocked: list[tuple[str, str]] = []  # (operation, path) that failed, for assertions
        self._replace, self._rename, self._remove = os.replace, os.rename, os.remove
        self._unlink, self._rmdir, self._rmtree = os.unlink, os.rmdir, shutil.rmtree
        monkeypatch.setattr(os, "replace", self.replace)
        monkeypatch.setattr(os, "rename", self.rename)
        monkeypatch.setattr(os, "remove", self.remove)
        monkeypatch.setattr(os, "unlink", self.unlink)
        monkeypatch.setattr(os, "rmdir", self.rmdir)
        monkeypatch.setattr(shutil, "rmtree", self.rmtree)

    def use(self, *paths) -> None:
        """Mark files as mapped by another process."""
        self.in_use.update(os.path.abspath(os.fspath(p)) for p in paths)

    def release(self) -> None:
        """The other process ended: nothing is in use any more."""
        self.in_use.clear()

    def _holds(self, path) -> bool:
        """True when ``path`` is a file in use or a folder containing one."""
        full = os.path.abspath(os.fspath(path))
        return any(f == full or f.startswith(full.rstrip(os.sep) + os.sep) for f in self.in_use)

    def _check(self, operation: str, *paths) -> None:
        for path in paths:
            if self._holds(path):
                self.blocked.append((operation, os.path.abspath(os.fspath(path))))
                raise _winerror(os.fspath(path))

    def replace(self, src, dst, **kwargs) -> None:
        self._check("replace", src, dst)
        self._replace(src, dst, **kwargs)

    def rename(self, src, dst, **kwargs) -> None:
        self._check("rename", src, dst)
        self._rename(src, dst, **kwargs)

    def remove(self, path, **kwargs) -> None:
        self._check("remove", path)
        self._remove(path, **kwargs)

    def unlink(self, path, **kwargs) -> None:
        self._check("unlink", path)
        self._unlink(path, **kwargs)

    def rmdir(self, path, **kwargs) -> None:
        self._check("rmdir", path)
        self._rmdir(path, **kwargs)

    def rmtree(self, path, ignore_errors: bool = False, onerror=None, *, onexc=None, **kwargs) -> None:
        """``shutil.rmtree`` as on Windows: everything not in use is deleted, bottom-up."""
        def fail(func, target, exc):
            if ignore_errors:
                return
            if onexc is not None:
                onexc(func, target, exc)
            elif onerror is not None:
                onerror(func, target, (type(exc), exc, exc.__traceback__))
            else:
                raise exc

        for base, dirs, files in os.walk(os.fspath(path), topdown=False):
            for name, remove in [(n, self.unlink) for n in files] + [(n, self._rmdir_if_free) for n in dirs]:
                target = os.path.join(base, name)
                try:
                    remove(target)
                except OSError as exc:
                    fail(remove, target, exc)
        try:
            self._rmdir_if_free(os.fspath(path))
        except FileNotFoundError:
            if not ignore_errors:
                raise
        except OSError as exc:
            fail(os.rmdir, path, exc)

    def _rmdir_if_free(self, path) -> None:
        self._check("rmdir", path)
        self._rmdir(path)
