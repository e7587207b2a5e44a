"""Files named on a command line or inside a folder from elsewhere: regular files only, bounded reads.

``open(path)`` of a FIFO waits for a writer forever, a read of ``/dev/zero`` or ``/dev/urandom``
never ends, and a folder where a file belongs fails deep inside a parser. A received diff folder
(a tar archive can carry FIFOs and device nodes) or a mistyped argument (``--repairs /dev/stdin``)
must get a clear error instead (docs/security.md, "tensor files" and "repair recipes"):

* :func:`open_regular` opens without blocking (``O_NONBLOCK``: opening a FIFO for reading does
  not wait for a writer, POSIX ``open(2)``), checks with ``fstat`` on the open descriptor — the
  file that will be read, not a name that may change meanwhile — that it is a regular file, and
  only then hands back an ordinary blocking binary file object;
* :func:`read_regular` reads at most ``max_bytes`` of such a file (its size is checked before any
  byte is read).

Both raise :class:`NotRegularFileError` (an ``OSError``, so callers that already turn ``OSError``
into their typed error keep doing so): ``str()`` is ``"[Errno 22] a FIFO (named pipe), not a regular
file: 'PATH'"``, ``strerror`` what was found, ``filename`` the path.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

__all__ = ["NotRegularFileError", "open_regular", "read_regular"]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class NotRegularFileError(OSError):
    """A path that had to be a regular file of bounded size is something else (a FIFO, a device, a
    directory, a socket) or is larger than the reader accepts. ``filename`` is the path."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path, max_bytes: int | None = None) -> BinaryIO:
    """Open ``path`` for reading in binary mode when it is a regular file (symbolic links to one
    are followed, as ``open`` does) of at most ``max_bytes`` bytes (``None``: any size).

    Raises:
        FileNotFoundError: no such file. NotRegularFileError: a directory, FIFO, device or socket,
            or larger than ``max_bytes``. OSError: it cannot be opened (permissions, …).
    """
    path = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError as exc:  # Windows refuses to open a folder
        raise NotRegularFileError(errno.EISDIR, "a directory, not a regular file", path) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(errno.EINVAL, f"{_kind(st.st_mode)}, not a regular file", path)
        if max_bytes is not None and st.st_size > max_bytes:
            raise NotRegularFileError(errno.EFBIG, f"{st.st_size} bytes, more than the {max_bytes} bytes "
                                                   f"accepted for it", path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them (a file that grows
    while it is read is cut there and refused).

    Raises:
        As :func:`open_regular`.
    """
    with open_regular(path, max_bytes) as f:
        size = os.fstat(f.fileno()).st_size  # what is there now (a read of max_bytes would allocate that much)
        data = f.read(size + 1)
        if len(data) > size:  # it grew meanwhile: read on, up to the bound
            data += f.read(max_bytes + 1 - len(data))
    if len(data) > max_bytes:
        raise NotRegularFileError(errno.EFBIG, f"grew past the {max_bytes} bytes accepted for it while "
                                               f"it was read", os.fspath(path))
    return data
