"""Reading ``.npy`` arrays and ``.npz`` members with every size checked before any allocation.

``numpy.load`` trusts the header: a 100-byte member declaring ``shape (10**12,)`` makes it allocate
terabytes, and a truncated ZIP raises ``zipfile.BadZipFile`` deep inside. Files from elsewhere
(tensor files, captures: docs/security.md) are read here instead. An array is allocated only when
its header (format 1.0–3.0, at most 10 kB, no object dtype: nothing is ever unpickled) declares no
more bytes than the member holds; a compressed member may not claim more than DEFLATE's largest
ratio (1032:1) of its compressed size. An array stored in the other byte order (a big-endian
``.npy`` on a little-endian host) is converted to the host's order — its values kept, never
reinterpreted: onnxruntime reads a tensor's buffer in the host's order whatever the numpy dtype
says (measured: ``[1.0, 2.0]`` as ``>f4`` fed to an ``Identity`` model comes back as
``[4.6e-41, 9.0e-44]``). A ``.npz`` holding two members of one name (a ZIP may; ``numpy.load``
silently gives the last, a reader that stops at the first gives another tensor) is refused. Only a
regular file is opened (a FIFO or a device never blocks). Every problem is a
:class:`~onnxwrapper.errors.MalformedFileError` naming the file, the member and what was expected.
The result is what ``numpy.load(path, allow_pickle=False)`` returns for a well-formed file, in the
host's byte order.
"""

from __future__ import annotations

import io
import math
import os
import zipfile
import zlib
from typing import IO

import numpy as np
from numpy.lib import format as npformat

from onnxwrapper.diff._capture._untrusted import malformed, open_untrusted
from onnxwrapper.errors import MalformedFileError

__all__ = ["read_npy", "read_npy_bytes", "BoundedNpz"]

#: DEFLATE cannot expand data by more than about 1032:1; a member claiming more is a ZIP bomb or a lie
_MAX_RATIO = 1032
_READ_ERRORS = (ValueError, EOFError, OSError, zipfile.BadZipFile, zlib.error, NotImplementedError)


def read_npy(fp: IO[bytes], size: int, path, entry: str | None = None) -> np.ndarray:
    """The array of the ``.npy`` stream ``fp`` that holds ``size`` bytes in all (header included),
    in the host's byte order.

    Raises:
        MalformedFileError: not a ``.npy`` stream, an object dtype, a declared shape of more bytes
            than the stream holds, or a stream that ends early.
    """
    try:
        version = npformat.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = npformat.read_array_header_1_0(fp)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = npformat.read_array_header_2_0(fp)
        else:
            raise ValueError(f"format version {version}")
    except Exception as exc:  # noqa: BLE001 - numpy's header parser raises SyntaxError, TokenError, …
        raise malformed(path, entry, f"not a readable .npy header ({type(exc).__name__}: {exc})",
                        "a numpy .npy array (format 1.0-3.0)") from exc
    if dtype.hasobject:
        raise malformed(path, entry, f"dtype {dtype} holds Python objects", "a numeric, bool or string array "
                        "(objects would need unpickling, which aipc never does)")
    count = math.prod(shape)
    need = count * dtype.itemsize
    try:
        header = fp.tell()
    except (OSError, AttributeError):
        header = None
    holds = size - header if header is not None else size
    if need > holds:
        raise malformed(path, entry, f"its header declares shape {tuple(shape)} of {dtype} ({need} bytes) but the "
                        f"file holds {max(holds, 0)} bytes after it", "an array no larger than its data")
    array = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
    if need:
        view = memoryview(array.reshape(-1, order="A").view(np.uint8))
        try:
            got = _read_into(fp, view)
        except _READ_ERRORS as exc:
            raise malformed(path, entry, f"its data cannot be read ({type(exc).__name__}: {exc})",
                            "an intact array") from exc
        if got != need:
            raise malformed(path, entry, f"the data ends after {got} of {need} bytes", "an intact array")
    return _native(array)


def _native(array: np.ndarray) -> np.ndarray:
    """``array`` with the same values in the host's byte order (fields of a structured dtype too)."""
    native = array.dtype.newbyteorder("=") if array.dtype.fields is None else _native_dtype(array.dtype)
    return array if native == array.dtype else array.astype(native)


def _native_dtype(dtype: np.dtype) -> np.dtype:
    fields = [(name, _native_dtype(dtype.fields[name][0]) if dtype.fields[name][0].fields else
               dtype.fields[name][0].newbyteorder("=")) for name in dtype.names]
    return np.dtype(fields)


def _read_into(fp: IO[bytes], view: memoryview) -> int:
    done = 0
    while done < len(view):
        n = fp.readinto(view[done:])
        if not n:
            break
        done += n
    return done


class BoundedNpz:
    """An ``.npz`` file read member by member with bounded sizes (module docstring).

    Use as a context manager; ``files`` lists the member keys (``.npy`` stripped, as
    ``numpy.load``'s ``NpzFile.files``); ``npz[key]`` reads one array.

    Raises:
        FileNotFoundError: no such file. MalformedFileError: not a regular file, not a ZIP file
            (truncated, another format), two members of one name, or a member that is not a
            bounded ``.npy`` array.
    """

    def __init__(self, path) -> None:
        self.path = os.fspath(path)
        self._file = open_untrusted(self.path, None, None, "a .npz file (a regular file)")
        try:
            self._zip = zipfile.ZipFile(self._file)
        except _READ_ERRORS as exc:
            self._file.close()
            raise malformed(self.path, None, f"not a readable .npz (ZIP) file ({exc})",
                            "a .npz file as numpy.savez or aipc --save-outputs writes it") from exc
        self._members = {}
        for info in self._zip.infolist():
            key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if key in self._members:
                self.close()
                raise malformed(self.path, key, "two members of this name (numpy.load reads the last one, other "
                                "readers the first)", "one member per name")
            self._members[key] = info
        self.files = list(self._members)

    def __enter__(self) -> "BoundedNpz":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the ZIP file."""
        self._zip.close()
        self._file.close()

    def __contains__(self, key: str) -> bool:
        return key in self._members

    def __getitem__(self, key: str) -> np.ndarray:
        info = self._members.get(key)
        if info is None:
            raise malformed(self.path, key, "no such member", f"one of {', '.join(self.files[:8]) or '(none)'}")
        if info.compress_type != zipfile.ZIP_STORED and info.file_size > _MAX_RATIO * info.compress_size + 1024:
            raise malformed(self.path, key, f"claims {info.file_size} bytes from {info.compress_size} compressed",
                            "a member DEFLATE can produce (at most 1032:1)")
        try:
            with self._zip.open(info) as member:
                return read_npy(member, info.file_size, self.path, key)
        except MalformedFileError:
            raise
        except _READ_ERRORS as exc:
            raise malformed(self.path, key, f"cannot be read ({type(exc).__name__}: {exc})",
                            "an intact ZIP member") from exc


def read_npy_bytes(data: bytes, path, entry: str | None = None) -> np.ndarray:
    """:func:`read_npy` of bytes in memory (e.g. Polygraphy's base64 ``array`` field)."""
    return read_npy(io.BytesIO(data), len(data), path, entry)

