"""A compile-cache hit is served only when the entry's provenance record matches the session.

The cache key is a digest of everything that determines a compiled model, but a key is only a
folder name: an entry copied or planted under another key (another model's compiled files, the
manifest's key patched) would answer for this model. Every compile therefore stores the provenance
record it stamps into the EPContext model (:mod:`onnxwrapper.backends.qnn.compile._provenance`: the model's
content hash, the compile-shaping QNN EP options, shapes, control values, tool versions, the
context binary's sha256) in the entry's manifest too, and a hit is checked against the record the
session expects (:func:`hit_problem`) — a JSON comparison, no parse of the model. An entry without
a record (written by an older onnxwrapper) is checked against the record inside its EPContext model
instead (:func:`~onnxwrapper.backends.qnn.compile._provenance.verify`, full open path only). On any mismatch
the entry is not used: it is rebuilt, with a WARNING.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from onnxwrapper.backends.qnn.compile._provenance import make_record
from onnxwrapper.backends.qnn.platform import qnn_versions
from onnxwrapper.kernel import __version__

__all__ = ["session_record", "hit_problem", "RECORD_META"]

#: the manifest ``meta`` key holding the provenance record of the compile
RECORD_META = "provenance"
#: record versions that are part of the cache key (onnxwrapper's is not, for unpatched models)
_KEYED_VERSIONS = ("onnxruntime", "onnxruntime_qnn", "qnn_sdk")


def session_record(setup, model_hash: str, shapes=None, values=None) -> dict[str, Any]:
    """The provenance record of a compile of the session's model (``model_hash``) for a specialization.

    Args:
        setup: the session's ``QnnSetup``. model_hash: the model's content hash (+ external data).
        shapes / values: the specialization's shapes and bound control values (``None``: static).
    """
    name = os.path.basename(setup.source.path) if setup.source.path is not None else None
    return make_record(source_sha256=model_hash, source_name=name, qnn_options=setup.settings.compile_options(),
                       shapes=shapes, values=values, versions=dict(qnn_versions(), onnxwrapper=__version__))


def hit_problem(entry, expected: Mapping[str, Any], ctx_name: str) -> str | None:
    """Why the cache ``entry`` must not answer for a session expecting the record ``expected``, or
    ``None``. ``"no record"`` for an entry without one (the caller may check its EPContext model).

    Args:
        entry: a verified :class:`~onnxwrapper.kernel.CacheEntry` (files checked against its manifest).
        expected: :func:`session_record` of the session. ctx_name: the EPContext model's default
            file name in an entry.
    """
    meta = entry.meta if isinstance(entry.meta, Mapping) else {}
    ctx = meta.get("ctx", ctx_name)
    if ctx not in entry.files:
        return f"its EPContext model {ctx!r} is not one of the entry's checked files"
    record = meta.get(RECORD_META)
    if not isinstance(record, Mapping):
        return "no record"
    name = expected.get("source_name") or "the model"
    if record.get("format") != expected.get("format"):
        return f"its provenance record has format {record.get('format')!r}"
    if record.get("source_sha256") != expected.get("source_sha256"):
        return (f"it was compiled from another model than {name} (recorded sha256 "
                f"{str(record.get('source_sha256'))[:12]}…, this one {str(expected.get('source_sha256'))[:12]}…)")
    for field in ("qnn", "shapes", "values"):
        if record.get(field) != expected.get(field):
            return f"it was compiled with other {field} ({record.get(field)}, this session: {expected.get(field)})"
    versions = record.get("versions") if isinstance(record.get("versions"), Mapping) else {}
    wanted = expected.get("versions") or {}
    changed = [k for k in _KEYED_VERSIONS if versions.get(k) != wanted.get(k)]
    if changed:
        return f"it was compiled by other versions ({', '.join(f'{k} {versions.get(k)}' for k in changed)})"
    binary = meta.get("bin")
    if binary is not None and binary not in entry.files:
        return f"its context binary {binary!r} is not one of the entry's checked files"
    return None
