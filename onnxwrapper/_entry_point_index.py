"""The registry's persistent index of one entry-point group, so a new process finds its backends
without importing importlib-metadata.

Discovering the ``onnxwrapper.backends`` entry points with importlib-metadata means importing it
and reading every installed distribution's metadata: 15–30 ms of a new process (measured on
x86-64 Linux with 25–60 installed distributions; the rest of ``import onnxwrapper`` is ~20 ms),
paid again by every process that creates a session. :class:`~onnxwrapper._registry.BackendRegistry`
therefore keeps the group's entry points in a small JSON file in the onnxwrapper cache directory
(:func:`onnxwrapper.kernel.default_cache_dir`, ``plugins/``) and uses it while nothing has been
installed or removed since it was written:

* the file name is a digest of the interpreter, the group, ``sys.path`` and the kinds of
  ``sys.meta_path`` finders; the file records the modification time of every ``sys.path`` entry.
  Installing, upgrading or removing a distribution adds or removes a ``*.dist-info`` folder in a
  ``sys.path`` directory, which changes that directory's modification time: the index no longer
  matches and the registry scans again;
* a ``sys.path`` directory that held no distribution metadata (no ``*.dist-info`` or
  ``*.egg-info``) when the index was written — typically the script's own folder, or the working
  directory, which apps write their outputs to — keeps the index valid when its modification time
  moved but it still holds none (one directory listing, only then), so an app that writes next to
  itself does not pay the scan in every process;
* the registry also scans again whenever the index cannot answer — an unknown backend name, an
  entry point that fails to load — so a stale index costs a scan, never a wrong answer;
* only a process's first scan is written, never one made after
  :meth:`~onnxwrapper._registry.BackendRegistry.reload` (a process that changes plugins while it
  runs, such as a test installing doubles, keeps them to itself).

Writes are atomic (``os.replace``); an unwritable cache directory is ignored (the registry then
scans in every process, as without the index). At most :data:`MAX_FILES` index files are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import pkgutil
import sys
from typing import Mapping

from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel import ArtifactCache, default_cache_dir, prune_records, write_private_file

__all__ = ["FORMAT", "MAX_FILES", "IndexLocation", "IndexedEntryPoint", "index_location", "read_index", "write_index"]

FORMAT = 2
MAX_FILES = 32


class IndexedEntryPoint:
    """An entry point read from the index: ``name = value`` (``module:attr``), from distribution ``dist``.

    Attributes:
        name, value, group: as importlib-metadata's ``EntryPoint``. dist: the distribution's name
            (``str``) or ``None``.
    """

    __slots__ = ("name", "value", "group", "dist")

    def __init__(self, name: str, value: str, group: str, dist: str | None) -> None:
        self.name, self.value, self.group, self.dist = name, value, group, dist

    def load(self):
        """Import the object the entry point names (``pkgutil.resolve_name``; extras are ignored,
        as importlib-metadata's ``EntryPoint.load`` ignores them).

        Raises:
            ImportError, AttributeError, ValueError: the module or attribute cannot be found.
        """
        return pkgutil.resolve_name(self.value.split("[", 1)[0].strip())

    def __repr__(self) -> str:
        return f"IndexedEntryPoint(name={self.name!r}, value={self.value!r}, group={self.group!r})"


def _paths() -> list[str]:
    cwd = None
    paths = []
    for entry in sys.path:
        if not entry:
            cwd = cwd or os.getcwd()
            entry = cwd
        paths.append(os.fspath(entry))
    return paths


def _holds_distributions(path: str) -> bool | None:
    """Whether directory ``path`` has distribution metadata entries (``*.dist-info``, ``*.egg-info``:
    what importlib-metadata looks for in a ``sys.path`` directory); ``None`` when it cannot be listed."""
    try:
        with os.scandir(path) as entries:
            return any(entry.name.lower().endswith((".dist-info", ".egg-info")) for entry in entries)
    except (OSError, ValueError):
        return None


def _unchanged(path: str, mtime: int | None, plain: bool) -> bool:
    """The recorded ``sys.path`` entry still lists the same distributions (see the module docstring)."""
    return _mtime(path) == mtime or (plain and _holds_distributions(path) is False)


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except (OSError, ValueError):
        return None


class IndexLocation:
    """Where the index of one group for this process's ``sys.path`` lives; take it *before*
    scanning (importlib-metadata adds its own ``sys.meta_path`` finder when imported).

    Attributes:
        group: the entry-point group. paths: ``sys.path`` (``''`` as the working directory).
        file: the index file.
    """

    __slots__ = ("group", "paths", "file")

    def __init__(self, group: str, paths: list[str], file: str) -> None:
        self.group, self.paths, self.file = group, paths, file


def index_location(group: str) -> IndexLocation:
    """The :class:`IndexLocation` of ``group`` for this process now."""
    paths = _paths()
    finders = [f"{type(f).__module__}.{type(f).__qualname__}" for f in sys.meta_path]
    digest = hashlib.sha256(json.dumps([sys.executable, sys.version, group, paths, finders]).encode()).hexdigest()
    return IndexLocation(group, paths, os.path.join(default_cache_dir(), "plugins", f"entry-points-{digest[:24]}.json"))


def read_index(location: IndexLocation) -> dict[str, IndexedEntryPoint] | None:
    """``{name: entry point}`` of the group from a matching index, or ``None`` (no index, an
    unreadable one, a ``sys.path`` entry changed since it was written, or a cache root other users
    could write: it names what gets imported)."""
    try:
        ArtifactCache(os.path.dirname(os.path.dirname(location.file)))  # checks the root's owner and mode
    except ArtifactError:
        return None
    try:
        with open(location.file, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("format") != FORMAT or doc.get("group") != location.group:
            return None
        recorded = doc["paths"]
        if [p for p, _m, _plain in recorded] != location.paths or not all(_unchanged(*row) for row in recorded):
            return None
        return {str(n): IndexedEntryPoint(str(n), str(v), location.group, d) for n, v, d in doc["entry_points"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_index(location: IndexLocation, entry_points: Mapping[str, object]) -> None:
    """Record ``{name: importlib-metadata EntryPoint}`` of the group at ``location``.

    Reads each distribution's name once (its METADATA). Never raises: an index that cannot be
    written only costs later processes a scan.
    """
    paths = location.paths
    names: dict[int, str | None] = {}
    rows = []
    try:
        for name, ep in sorted(entry_points.items()):
            dist = getattr(ep, "dist", None)
            if id(dist) not in names:
                names[id(dist)] = dist if isinstance(dist, str) or dist is None else getattr(dist, "name", None)
            rows.append([name, ep.value, names[id(dist)]])
        doc = {"format": FORMAT, "group": location.group, "python": sys.version, "executable": sys.executable,
               "paths": [[p, _mtime(p), _holds_distributions(p) is False] for p in paths], "entry_points": rows}
        target = location.file
        write_private_file(target, json.dumps(doc).encode("utf-8"))  # 0700 folder, 0600 file whatever the umask
        prune_records(os.path.dirname(target), ".json", MAX_FILES)
    except Exception:  # noqa: BLE001 - a read-only cache or odd metadata must not break discovery
        return
