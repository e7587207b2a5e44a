"""Checks for values read from files aipc did not write in this run (docs/security.md).

Tensor files, captures and diff folders travel between machines and people; their JSON is checked
field by field before use, so that a list where an object belongs, ``"abc"`` where a version or a
dimension belongs, a missing key or a path that leaves its folder becomes one
:class:`~onnxwrapper.errors.MalformedFileError` naming the file, the entry and what was expected —
never a ``TypeError`` traceback, a wrong answer or a read of another file.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from onnxwrapper.errors import MalformedFileError
from onnxwrapper.kernel import NotRegularFileError, open_regular, read_regular

__all__ = ["malformed", "need", "need_int", "need_str", "need_list", "need_dict", "optional", "dim",
           "inside", "load_json", "open_untrusted", "MAX_JSON_BYTES"]

#: largest JSON document read (a header, a manifest, a tensor file in JSON): larger is refused
#: before parsing (tensors that large belong in .npz files).
MAX_JSON_BYTES = 1 << 30
_MISSING = object()


def malformed(path, entry: str | None, problem: str, expected: str) -> MalformedFileError:
    """The error for ``entry`` of ``path``: ``"<path>: <entry>: <problem>; expected <expected>."``."""
    where = f"{os.fspath(path)}: {entry}: " if entry else f"{os.fspath(path)}: "
    return MalformedFileError(f"{where}{problem}; expected {expected}.", path=os.fspath(path), entry=entry)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def need(value: Any, types, path, entry: str, expected: str) -> Any:
    """``value`` when it is an instance of ``types`` (``bool`` never counts as a number), else raise.

    Raises:
        MalformedFileError: naming ``path``, ``entry`` and ``expected``.
    """
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in _as_tuple(types)):
        return value
    found = "missing (or null)" if value is None else f"found {type(value).__name__} {_shown(value)}"
    raise malformed(path, entry, found, expected)


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def need_int(value: Any, path, entry: str, low: int = 0, high: int | None = None) -> int:
    """An ``int`` in ``[low, high]`` (JSON integer; ``bool`` refused)."""
    span = f"an integer >= {low}" + (f" and <= {high}" if high is not None else "")
    number = need(value, int, path, entry, span)
    if number < low or (high is not None and number > high):
        raise malformed(path, entry, f"found {_shown(number)}", span)
    return number


def need_str(value: Any, path, entry: str, expected: str = "a string") -> str:
    """A ``str``."""
    return need(value, str, path, entry, expected)


def need_list(value: Any, path, entry: str, expected: str = "a list") -> list:
    """A ``list`` (JSON array)."""
    return need(value, list, path, entry, expected)


def need_dict(value: Any, path, entry: str, expected: str = "an object") -> dict:
    """A ``dict`` (JSON object)."""
    return need(value, dict, path, entry, expected)


def optional(doc: dict, key: str, check: Callable, default: Any = None) -> Any:
    """``check(doc[key])`` when the key is present and not ``null``, else ``default``."""
    value = doc.get(key, _MISSING)
    return default if value is _MISSING or value is None else check(value)


def dim(value: Any, path, entry: str):
    """One recorded dimension: an ``int`` >= 0, a symbolic name (``str``) or ``None``."""
    if value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)
                                                   and value >= 0):
        return value
    raise malformed(path, entry, f"found {_shown(value)}", "a dimension: an integer >= 0, a name or null")


def inside(directory: str, relative: Any, path, entry: str) -> str:
    """The absolute path of ``relative`` when it names a file inside ``directory`` (after resolving
    ``..`` and symbolic links), else raise: a file from elsewhere never makes aipc read another file.

    Raises:
        MalformedFileError: not a string, absolute, or leaving ``directory``.
    """
    name = need_str(relative, path, entry, "a file name relative to the folder")
    if not name or os.path.isabs(name) or "\x00" in name:
        raise malformed(path, entry, f"found {_shown(name)}", "a file name relative to the folder")
    root = os.path.realpath(directory)
    full = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([root, full]) != root:
        raise malformed(path, entry, f"{_shown(name)} leaves the folder {directory}",
                        "a file inside the folder (no '..', no symbolic link out of it)")
    return full


def open_untrusted(path, entry: str | None = None, max_bytes: int | None = None, expected: str = "a regular file"):
    """Open a file of a folder or an argument from elsewhere for reading (binary): a regular file of
    at most ``max_bytes`` (:func:`onnxwrapper.kernel.open_regular`: a FIFO, a device or a folder
    never blocks or streams forever).

    Raises:
        FileNotFoundError: no such file. MalformedFileError: not a regular file, or too large.
    """
    try:
        return open_regular(path, max_bytes)
    except NotRegularFileError as exc:
        raise malformed(path, entry, exc.strerror, expected) from exc


def load_json(path, entry: str | None = None) -> Any:
    """Parse the JSON file at ``path`` (a regular file of at most :data:`MAX_JSON_BYTES`).

    Raises:
        FileNotFoundError: no such file. MalformedFileError: not a regular file (a FIFO, a device,
        a folder), too large, not UTF-8, not JSON, or nested too deeply.
    """
    path = os.fspath(path)
    try:
        data = read_regular(path, MAX_JSON_BYTES)
    except NotRegularFileError as exc:
        raise malformed(path, entry, exc.strerror, f"a JSON document (a regular file of at most "
                                                   f"{MAX_JSON_BYTES >> 20} MiB)") from exc
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise malformed(path, entry, f"not UTF-8 text ({exc.reason} at byte {exc.start})", "a JSON document") from exc
    except json.JSONDecodeError as exc:
        raise malformed(path, entry, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                        "a JSON document") from exc
    except RecursionError as exc:
        raise malformed(path, entry, "nested too deeply", "a JSON document of reasonable depth") from exc
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise malformed(path, entry, f"not readable JSON ({exc})", "a JSON document") from exc
