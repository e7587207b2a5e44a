"""The JSON report: one document per diff, schema ``onnxwrapper-diff-report`` version 2.

Version 2 (this one) adds the app level (``state``, ``levels``, ``verdict_line``, ``app``), per-run
``cause``, NaN/Inf counts of the inputs (``nonfinite_feeds``), the localization's ``cause`` and
numbers sessions from 1 in creation order (as ``aipc -v`` and the other reports).

The schema is specified in docs/diff.md ("JSON report"). The document is strict JSON: non-finite
floats are written as the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (e.g. an SNR of identical
outputs is ``"inf"``); tuples become lists.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os

from onnxwrapper.diff._capture import tool_versions

__all__ = ["SCHEMA", "SCHEMA_VERSION", "to_document", "write_json", "sanitize"]

SCHEMA = "onnxwrapper-diff-report"
SCHEMA_VERSION = 2


def sanitize(value):
    """Recursively make ``value`` strict-JSON friendly (see module docstring)."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize(v) for v in value]
    if hasattr(value, "to_dict"):
        return sanitize(value.to_dict())
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if hasattr(value, "item"):  # numpy scalar
        return sanitize(value.item())
    return str(value)


def to_document(result) -> dict:
    """The report document of a :class:`~onnxwrapper.diff.DiffResult` (a plain, JSON-safe dict)."""
    doc = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tool": tool_versions(),
        "verdict": result.verdict,
        "state": result.state,
        "levels": _levels(result),
        "verdict_line": result.verdict_line(),
        "exit_status": result.exit_status,
        "mode": result.mode,
        "reference": result.reference,
        "backends": list(result.backends),
        "script": result.script,
        "directory": result.directory,
        "tolerances": result.tolerances.to_dict() if result.tolerances is not None else None,
        "runs": {label: r.to_dict() for label, r in result.runs.items()},
        "compared_calls": result.compared_calls,
        "outputs": [s.to_dict() for s in result.outputs],
        "failures": [c.to_dict() for c in result.failures],
        "divergences": {k: list(v) for k, v in result.divergences.items()},
        "localizations": [loc.to_dict() for loc in result.localizations],
        "app": {label: a.to_dict() for label, a in result.app.items()},
        "nonfinite_feeds": list(result.nonfinite_feeds),
        "inputs_differ": {k: [list(x) for x in v] for k, v in result.inputs_differ.items() if v},
        "notes": list(result.notes),
    }
    if result.timings:
        doc["timings"] = dict(result.timings)
    return sanitize(doc)


def _levels(result) -> dict:
    """``{"tensor": pass|mismatch|incomplete, "app": identical|differs|not_compared}``."""
    tensor = "incomplete" if result.backend_failed else "mismatch" if result.tensor_mismatch else "pass"
    states = {a.status for a in result.app.values()}
    app = "differs" if "differs" in states else "identical" if "identical" in states else "not_compared"
    return {"tensor": tensor, "app": app}


def write_json(result, path) -> str:
    """Write :func:`to_document` to ``path`` (UTF-8, indented); returns the path."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(to_document(result), f, indent=1, ensure_ascii=False, allow_nan=False)
    os.replace(tmp, path)
    return path
