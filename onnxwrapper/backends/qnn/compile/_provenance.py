"""Provenance of compiled EPContext models: which model and QNN configuration a ctx model was compiled
from, recorded in the ctx model itself and checked before a precompiled artifact is used.

An EPContext model next to ``m.onnx`` (``m_ctx.onnx``) says nothing about the weights it was compiled
from: interface checks (input/output names and element types) pass for a ctx compiled before the
model was retrained, which then silently runs the old weights (measured: max |Δ| 25 on a 3×2
``Mul``). Every compile onnxwrapper makes therefore stamps a record into the ctx model's
``metadata_props`` under :data:`PROVENANCE_KEY` (in the file, because it must travel with it; ORT
keeps its own ``ep_compatibility_info.*`` there too), as JSON:

``{"format": 1, "source_sha256": sha256 of the model bytes + external data
(:meth:`onnxwrapper.kernel.ModelSource.content_hash`), "source_name": "m.onnx", "shapes": {input:
[dims]} or null, "values": {control input: value} or null, "qnn": the QNN EP options that shape the
context (soc_model, htp_arch, enable_htp_fp16_precision, …), "versions": {onnxruntime,
onnxruntime_qnn, qnn_sdk, onnxwrapper}, "bin_sha256": sha256 of the context binary}``

A precompiled artifact is used only when :func:`verify` finds a record whose source hash, QNN
options, shapes and control values equal the session's and whose context binary still has the
recorded hash (tool versions are not compared: ORT checks binary compatibility itself when
loading). Everything else is ignored with one WARNING and compiled instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import Any, Mapping

__all__ = ["PROVENANCE_KEY", "RECORD_FORMAT", "make_record", "stamp", "read_record", "verify", "file_sha256"]

PROVENANCE_KEY = "onnxwrapper.provenance"
RECORD_FORMAT = 1
_CHUNK = 1 << 20
_hash_memo: dict[tuple, str] = {}
_memo_lock = threading.Lock()


def file_sha256(path: str) -> str:
    """Hex sha256 of a file, memoized per process by (path, size, mtime, inode).

    Raises:
        OSError: the file cannot be read.
    """
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino)
    with _memo_lock:
        if key in _hash_memo:
            return _hash_memo[key]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    with _memo_lock:
        if len(_hash_memo) > 1024:
            _hash_memo.clear()
        _hash_memo[key] = digest.hexdigest()
    return _hash_memo[key]


def _plain(shapes: Mapping[str, Any] | None, convert) -> dict | None:
    return {str(k): convert(v) for k, v in sorted(shapes.items())} if shapes else None


def make_record(*, source_sha256: str, source_name: str | None, qnn_options: Mapping[str, str],
                shapes: Mapping[str, Any] | None = None, values: Mapping[str, Any] | None = None,
                versions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The provenance record of one compile (``bin_sha256`` is added by :func:`stamp`).

    Args:
        source_sha256: content hash of the model as the user gave it (bytes + external data).
        source_name: its file name, or ``None`` for bytes. qnn_options: the QNN EP options that shape
            the context (``QnnSettings.compile_options()``). shapes: specialization shapes of the
            dynamic inputs, ``None`` for a static model. values: bound control-input values, or ``None``.
        versions: tool versions (informative).
    """
    return {"format": RECORD_FORMAT, "source_sha256": source_sha256, "source_name": source_name,
            "shapes": _plain(shapes, lambda v: [int(d) for d in v]), "values": _plain(values, _scalar),
            "qnn": {str(k): str(v) for k, v in sorted(qnn_options.items())}, "versions": dict(versions or {})}


def _scalar(value: Any):
    import numpy as np

    item = np.asarray(value).reshape(-1)[0].item()
    return bool(item) if isinstance(item, bool) else int(item) if isinstance(item, int) else float(item)


def stamp(ctx_proto, record: Mapping[str, Any], bin_path: str | None) -> None:
    """Add ``record`` (+ ``bin_sha256`` of ``bin_path``) to ``ctx_proto.metadata_props`` (in place)."""
    full = dict(record, bin_sha256=file_sha256(bin_path) if bin_path else None)
    for prop in list(ctx_proto.metadata_props):
        if prop.key == PROVENANCE_KEY:
            ctx_proto.metadata_props.remove(prop)
    entry = ctx_proto.metadata_props.add()
    entry.key, entry.value = PROVENANCE_KEY, json.dumps(full, sort_keys=True)


def read_record(ctx_proto) -> dict[str, Any] | None:
    """The provenance record of a ctx model, or ``None`` (no record, or not readable JSON)."""
    for prop in ctx_proto.metadata_props:
        if prop.key == PROVENANCE_KEY:
            try:
                record = json.loads(prop.value)
            except ValueError:
                return None
            return record if isinstance(record, dict) else None
    return None


def _binary_of(ctx_proto, ctx_path: str) -> str | None:
    """The context binary an embed-mode-0 ctx model references (first ``EPContext`` node), or ``None``."""
    for node in ctx_proto.graph.node:
        if node.op_type != "EPContext":
            continue
        attrs = {a.name: a for a in node.attribute}
        if "embed_mode" in attrs and attrs["embed_mode"].i == 1:
            return None
        if "ep_cache_context" in attrs:
            return os.path.join(os.path.dirname(os.path.abspath(ctx_path)), attrs["ep_cache_context"].s.decode())
    return None


def verify(ctx_path: str, ctx_proto, *, source_sha256: str, qnn_options: Mapping[str, str],
           shapes: Mapping[str, Any] | None = None, values: Mapping[str, Any] | None = None) -> str | None:
    """Why the ctx model at ``ctx_path`` (parsed: ``ctx_proto``) must not be used for this session,
    or ``None`` when its record matches.

    Args:
        source_sha256: the model's content hash. qnn_options: the session's compile-shaping QNN EP
            options. shapes / values: the specialization's (``None`` for a static model).

    Returns:
        ``None`` (use it) or a reason for the warning, e.g. ``"it was compiled from another version of
        m.onnx (recorded sha256 1a2b3c4d…, now 5e6f7a8b…)"``.
    """
    record = read_record(ctx_proto)
    if record is None:
        return ("it has no onnxwrapper provenance record (ORT's own output, or written by an older onnxwrapper), "
                "so nothing shows which model and QNN configuration it was compiled from")
    if record.get("format") != RECORD_FORMAT:
        return f"its provenance record has format {record.get('format')!r}, expected {RECORD_FORMAT}"
    recorded = str(record.get("source_sha256"))
    if recorded != source_sha256:
        name = record.get("source_name") or "the model"
        return (f"it was compiled from another version of {name} (recorded sha256 {recorded[:12]}…, now "
                f"{source_sha256[:12]}…)")
    wanted = {str(k): str(v) for k, v in qnn_options.items()}
    if record.get("qnn") != wanted:
        return f"it was compiled for another QNN configuration ({record.get('qnn')}, this session: {wanted})"
    if record.get("shapes") != _plain(shapes, lambda v: [int(d) for d in v]):
        return f"it was compiled for other input shapes ({record.get('shapes')})"
    if record.get("values") != _plain(values, _scalar):
        return f"it was compiled for other control-input values ({record.get('values')})"
    binary = _binary_of(ctx_proto, ctx_path)
    if binary is not None:
        try:
            digest = file_sha256(binary)
        except OSError as exc:
            return f"its context binary {os.path.basename(binary)} cannot be read ({exc.strerror or exc})"
        if digest != record.get("bin_sha256"):
            return f"its context binary {os.path.basename(binary)} is not the one it was compiled with (sha256 differs)"
    return None
