"""A diff folder's manifest ``diff.json``: written by a run, read back (with ``report.json``) as
untrusted input (docs/security.md).

A run writes the manifest as its runs end (:func:`write_manifest`, :func:`relative_run`), with the
content digest of the script it ran (:func:`script_sha256`), and records privately that this user
wrote it on this machine (:mod:`onnxwrapper.diff._capture._local_record`): a confirmation run of
``aipc fix --confirm`` needs both before it runs the recorded command.

A diff folder may come from another machine ("send me your diff"). :func:`read_manifest` checks
every field ``aipc diff --check`` and ``aipc fix`` use before they use it: the runs (their files
must lie inside the folder), the target (argv strings; it is never run from here — see
:mod:`onnxwrapper.repair.fix._confirm`), and the app-level comparison (a saved ``filter`` with
nested repetition, which could backtrack for hours, is refused). :func:`read_saved_report` does
the same for the tolerances and localizations ``aipc fix`` reads from ``report.json``. Every
problem is a :class:`~onnxwrapper.errors.MalformedFileError` naming the file and the entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

from onnxwrapper.diff._capture._local_record import record_manifest
from onnxwrapper.diff._capture._untrusted import inside, load_json, malformed, need, need_dict, need_list, need_str, optional

try:  # Python >= 3.11 names it re._parser; sre_parse is its deprecated alias
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre_parse

__all__ = ["MANIFEST", "MANIFEST_FORMAT", "check_tolerances", "read_manifest", "read_saved_report", "relative_run",
           "safe_pattern", "script_sha256", "write_manifest"]

#: the manifest's file name in a diff folder, and its ``format``
MANIFEST = "diff.json"
MANIFEST_FORMAT = "onnxwrapper-diff"

_RUN_TYPES = {"backend": str, "label": str, "status": str, "message": str, "cause": str, "signal": str,
              "replay_of": str, "rerun_of": str, "returncode": int, "calls": int, "seconds": (int, float),
              "exception": bool, "options": dict, "files": dict, "retried": str}
_RUN_FILES = ("capture_dir", "stdout", "stderr")
_TOL_FLOATS = ("atol", "rtol", "quantile", "min_cosine", "min_snr_db", "min_psnr_db", "min_top1")
_REPEATS = {_sre_parse.MAX_REPEAT, _sre_parse.MIN_REPEAT, getattr(_sre_parse, "POSSESSIVE_REPEAT", None)} - {None}


def write_manifest(directory: str, doc: dict) -> None:
    """Write ``doc`` as ``directory/diff.json`` (through a temporary file and a rename), and record
    privately that this user wrote it here (:mod:`onnxwrapper.diff._capture._local_record`: what
    ``aipc fix --confirm`` asks before it runs a recorded command)."""
    data = json.dumps(doc, indent=1, default=str).encode("utf-8")
    tmp = os.path.join(directory, MANIFEST + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(directory, MANIFEST))
    record_manifest(directory, data, doc)


def relative_run(run, directory: str) -> dict:
    """``run.to_dict()`` (a :class:`~onnxwrapper.diff.BackendRun`) with its file names relative to
    ``directory``, as ``diff.json`` records them."""
    d = run.to_dict()
    for key in ("capture_dir", "stdout", "stderr"):
        if d.get(key):
            d[key] = os.path.relpath(d[key], directory)
    return d


def script_sha256(path: str, cwd: str | None = None) -> str | None:
    """Hex sha256 of the script file at ``path`` (relative to ``cwd``), ``None`` when unreadable."""
    h = hashlib.sha256()
    try:
        with open(os.path.join(cwd or "", path), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def read_manifest(directory: str, name: str = MANIFEST) -> dict:
    """``directory/diff.json``, checked (module docstring); run file names are kept relative.

    Raises:
        FileNotFoundError: no such file. MalformedFileError: a field of the wrong type, a run file
            outside the folder, a dangerous saved filter.
    """
    path = os.path.join(directory, name)
    doc = need_dict(load_json(path), path, "(document)", "a JSON object (the diff manifest)")
    need_str(doc.get("reference"), path, "reference", "the label of the reference run")
    optional(doc, "mode", lambda v: need_str(v, path, "mode"))
    backends = optional(doc, "backends", lambda v: need_dict(v, path, "backends", "an object {label: backend}"), {})
    for label, backend in backends.items():
        need_str(backend, path, f"backends.{label}", "a backend name")
    for label, run in optional(doc, "runs", lambda v: need_dict(v, path, "runs"), {}).items():
        _check_run(directory, path, f"runs.{label}", run)
    target = optional(doc, "target", lambda v: need_dict(v, path, "target"), {})
    for k, arg in enumerate(optional(target, "argv", lambda v: need_list(v, path, "target.argv"), [])):
        need_str(arg, path, f"target.argv[{k}]")
    for key in ("cwd", "sha256"):
        optional(target, key, lambda v, k=key: need_str(v, path, f"target.{k}"))
    app = optional(doc, "app", lambda v: need_dict(v, path, "app"), {})
    for k, item in enumerate(optional(app, "compare", lambda v: need_list(v, path, "app.compare"), [])):
        need_str(item, path, f"app.compare[{k}]", "'stdout', 'none' or a file name")
    optional(app, "filter", lambda v: safe_pattern(need_str(v, path, "app.filter"), path, "app.filter"))
    optional(app, "rtol", lambda v: need(v, (int, float), path, "app.rtol", "a number"))
    model_run = optional(doc, "model_run", lambda v: need_dict(v, path, "model_run"), {})
    optional(model_run, "timings", lambda v: need_dict(v, path, "model_run.timings"))
    for key in ("mode", "backends", "runs", "target", "app", "model_run"):
        if key in doc and doc[key] is None:  # null as absent: readers use their defaults
            del doc[key]
    return doc


def _check_run(directory: str, path: str, entry: str, run: Any) -> None:
    run = need_dict(run, path, entry, "an object (one backend run)")
    need_str(run.get("backend"), path, f"{entry}.backend", "a backend name")
    for key, types in _RUN_TYPES.items():
        optional(run, key, lambda v, k=key, t=types: need(v, t, path, f"{entry}.{k}", _type_name(t)))
    for key in _RUN_FILES:
        optional(run, key, lambda v, k=key: inside(directory, v, path, f"{entry}.{k}"))
    for name, rel in (run.get("files") or {}).items():
        if rel is not None and run.get("capture_dir"):
            inside(os.path.join(directory, run["capture_dir"]), rel, path, f"{entry}.files.{name}")


def _type_name(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join({str: "a string", int: "an integer", float: "a number", bool: "true or false",
                        dict: "a JSON object"}[t] for t in types)


def safe_pattern(pattern: str, path, entry: str) -> str:
    """``pattern`` when it compiles and has no repetition inside a repetition or a repeated
    alternation (``(a+)+``, ``(a|aa)*``: exponential backtracking on a long line) — the rule for
    regular expressions read from a file; a user's own ``--filter`` is not restricted.

    Raises:
        MalformedFileError: it does not compile, or is dangerous.
    """
    try:
        tree = _sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise malformed(path, entry, f"not a regular expression ({exc})", "a Python regular expression") from exc
    if _nested(tree, 0):
        raise malformed(path, entry, f"{pattern!r} repeats a repetition or an alternation (it can backtrack "
                        f"for hours on one line)", "a pattern without nested repetition; give your own --filter")
    return pattern


def _nested(items, depth: int) -> bool:
    for op, arg in items:
        if op in _REPEATS:
            low, high, sub = arg
            inner = depth + (1 if high > 1 else 0)
            if high > 1 and depth >= 1:
                return True
            if high > 1 and any(o is _sre_parse.BRANCH for o, _ in _flat(sub)):
                return True
            if _nested(sub, inner):
                return True
        elif op is _sre_parse.SUBPATTERN and _nested(arg[-1], depth):
            return True
        elif op is _sre_parse.BRANCH and any(_nested(b, depth) for b in arg[1]):
            return True
        elif op in (_sre_parse.ASSERT, _sre_parse.ASSERT_NOT) and _nested(arg[1], depth):
            return True
    return False


def _flat(items):
    for op, arg in items:
        yield op, arg
        if op is _sre_parse.SUBPATTERN:
            yield from _flat(arg[-1])


def check_tolerances(doc: Any, path, entry: str = "tolerances") -> dict:
    """A saved ``Tolerances.to_dict()`` object with every field of the right type.

    Raises:
        MalformedFileError: another shape, an unknown field, a value of the wrong type.
    """
    doc = need_dict(doc, path, entry)
    optional(doc, "default", lambda v: _check_tolerance(v, path, f"{entry}.default"))
    optional(doc, "changes", lambda v: _check_tolerance(v, path, f"{entry}.changes"))
    for k, item in enumerate(optional(doc, "overrides", lambda v: need_list(v, path, f"{entry}.overrides"), [])):
        item = need_list(item, path, f"{entry}.overrides[{k}]", "[pattern, changes]")
        if len(item) != 2:
            raise malformed(path, f"{entry}.overrides[{k}]", f"{len(item)} items", "[pattern, changes]")
        need_str(item[0], path, f"{entry}.overrides[{k}][0]", "a name pattern")
        _check_tolerance(item[1], path, f"{entry}.overrides[{k}][1]")
    return doc


def _check_tolerance(doc: Any, path, entry: str) -> dict:
    doc = need_dict(doc, path, entry, "an object of tolerance fields")
    for key, value in doc.items():
        if key in _TOL_FLOATS:
            if value is not None:
                need(value, (int, float), path, f"{entry}.{key}", "a number or null")
        elif key in ("check", "preset"):
            need_str(value, path, f"{entry}.{key}")
        elif key == "allow_nonfinite":
            need(value, bool, path, f"{entry}.{key}", "true or false")
        else:
            raise malformed(path, f"{entry}.{key}", "an unknown field", "fields of onnxwrapper.diff.Tolerance")
    return doc


def read_saved_report(directory: str) -> dict:
    """``directory/report.json`` with its ``tolerances`` and ``localizations`` checked; ``{}``
    when there is none.

    Raises:
        MalformedFileError: not JSON, or those entries of the wrong shape.
    """
    path = os.path.join(directory, "report.json")
    try:
        doc = need_dict(load_json(path), path, "(document)", "a JSON object (the diff report)")
    except FileNotFoundError:
        return {}
    optional(doc, "tolerances", lambda v: check_tolerances(v, path))
    for k, loc in enumerate(optional(doc, "localizations", lambda v: need_list(v, path, "localizations"), [])):
        loc = need_dict(loc, path, f"localizations[{k}]")
        for key in ("backend", "model", "cause", "message"):
            optional(loc, key, lambda v, kk=key: need_str(v, path, f"localizations[{k}].{kk}"))
        for key in ("culprit", "first"):
            where = optional(loc, key, lambda v, kk=key: need_dict(v, path, f"localizations[{k}].{kk}"), {})
            for field in ("node", "tensor"):
                optional(where, field, lambda v, kk=key, f=field: need_str(v, path, f"localizations[{k}].{kk}.{f}"))
    return doc

