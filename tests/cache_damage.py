"""Damage done to a compile-cache entry's files, shared by the cache tests (locked and lock-free
lookups must both catch every kind)."""

from __future__ import annotations

import os

__all__ = ["KINDS", "damage_entry"]

#: truncate: cut to 100 bytes; flip: one byte inverted, rewritten, mtime moved 1 s on; same_size:
#: 8 bytes overwritten in place (size kept); delete: the file removed; manifest: unparsable manifest
KINDS = ("truncate", "flip", "same_size", "delete", "manifest")


def damage_entry(entry, kind: str, name: str = "artifact.bin") -> None:
    """Damage ``entry`` (a :class:`~onnxwrapper.kernel.CacheEntry`) the way ``kind`` says (:data:`KINDS`)."""
    target = entry.file(name)
    if kind == "truncate":
        os.truncate(target, 100)
    elif kind == "flip":
        with open(target, "rb") as f:
            data = bytearray(f.read())
        data[10] ^= 0xFF
        with open(target, "wb") as f:
            f.write(bytes(data))
        os.utime(target, ns=(os.stat(target).st_atime_ns, os.stat(target).st_mtime_ns + 10**9))
    elif kind == "same_size":  # overwritten in place, right after it was verified
        with open(target, "r+b") as f:
            f.write(b"\xff" * 8)
    elif kind == "delete":
        os.remove(target)
    elif kind == "manifest":
        with open(os.path.join(entry.path, "manifest.json"), "w") as f:
            f.write("{not json")
    else:
        raise ValueError(f"unknown damage {kind!r}; expected one of {KINDS}")
