"""Small file helpers of diff: sizes, atomic writes, fast .npz, JSON-safe values, fresh names."""

from __future__ import annotations

import json
import os
import re
import threading
import zipfile
from typing import Mapping, Sequence

import numpy as np
from numpy.lib import format as npformat

__all__ = ["parse_size", "write_npz", "jsonable", "atomic_write", "fmt_bytes", "unused_stem"]


def parse_size(text: str | int) -> int:
    """``"500M"``/``"2G"``/``"1.5GiB"``/``"1000"`` → bytes (powers of 1024 for K/M/G/T).

    Raises:
        ValueError: not a non-negative size.
    """
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?[bB])?\s*", str(text))
        if not m:
            raise ValueError(f"not a size: {text!r} (expected e.g. 500M, 2G, 1000000)")
        value = int(float(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper()))
    if value < 0:
        raise ValueError(f"size must be >= 0, got {text!r}")
    return value


def write_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` as an uncompressed ``.npz`` that ``numpy.load`` reads (never pickled).

    Same file layout as ``numpy.savez`` — a ZIP (stored, Zip64) of ``<key>.npy`` members — but each
    array's buffer is written in one call instead of copied chunk by chunk, which halves the cost
    for large tensors (16 MB: 18 ms instead of 35 ms measured here).
    """
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, arr in arrays.items():
            arr = arr if arr.flags.c_contiguous else arr.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
            with zf.open(f"{key}.npy", "w", force_zip64=True) as member:
                if arr.dtype.hasobject or arr.dtype.itemsize == 0 or arr.dtype.kind == "V":
                    npformat.write_array(member, arr, allow_pickle=False)
                    continue
                header = npformat.header_data_from_array_1_0(arr)
                try:
                    npformat.write_array_header_1_0(member, header)
                except ValueError:  # header too long for format 1.0
                    npformat.write_array_header_2_0(member, header)
                member.write(memoryview(arr.reshape(-1)).cast("B"))


def jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        if isinstance(value, Mapping):
            return {str(k): jsonable(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [jsonable(v) for v in value]
        return str(value)


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file of this process and thread and a rename,
    so a reader sees the old file or the whole new one."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def unused_stem(base: str, suffixes: Sequence[str] = ("",)) -> str:
    """``base``, else ``base-2``, ``base-3``, …: the first stem for which no ``stem + suffix`` exists
    (a dangling symbolic link counts: nothing is written through one)."""
    stem, n = base, 1
    while any(os.path.lexists(stem + suffix) for suffix in suffixes):
        n += 1
        stem = f"{base}-{n}"
    return stem
