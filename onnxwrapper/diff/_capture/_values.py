"""Values the capture writer records: model identity (key, sha256, the user's model source) and
arrays copied from run calls (OrtValues, lists cast to the declared input type), with their
metadata. Helpers of :mod:`onnxwrapper.diff._capture._writer`; no state besides a hash cache.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading

import numpy as np
import onnxruntime

from onnxwrapper.kernel import __version__ as onnxwrapper_version
from onnxwrapper.kernel import ort_type_to_numpy

__all__ = ["sha256_file", "model_key", "user_model", "declared_types", "tensor_meta", "to_array", "array_meta",
           "tool_versions"]

_hash_cache: dict[tuple, str] = {}
_hash_lock = threading.Lock()


def sha256_file(path: str) -> str:
    """Hex sha256 of the file at ``path``: the model identity a capture records (``sha256`` of a
    model in ``capture.json``). Memoized per process on (absolute path, size, mtime_ns).

    Raises:
        OSError: the file cannot be stat'ed or read.
    """
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    with _hash_lock:
        if key in _hash_cache:
            return _hash_cache[key]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    with _hash_lock:
        _hash_cache[key] = digest.hexdigest()
    return _hash_cache[key]


def model_key(sha256: str, path: str | None) -> str:
    """Deterministic model key: ``<file stem>-<first 12 hex of sha256>`` (``model-…`` for bytes).

    The same model file gets the same key in every backend's capture, which is how calls of
    different runs are matched to models.
    """
    stem = "model"
    if path:
        stem = os.path.basename(path)
        stem = stem[:-5] if stem.lower().endswith(".onnx") else stem
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem)[:48] or "model"
    return f"{stem}-{sha256[:12]}"


def user_model(session) -> tuple[str | None, bytes | None]:
    """The model the *user* gave the session: ``(path, None)`` or ``(None, bytes)``.

    A backend may hand ORT a compiled artifact (EPContext model), so the façade's record of the
    original argument is preferred when present; ORT's ``_model_path``/``_model_bytes`` are the
    fallback.
    """
    for attr in ("_ow_request", "_ow_model_source"):
        obj = getattr(session, attr, None)
        if obj is None:
            continue
        given = getattr(obj, "path_or_bytes", None)
        if given is None and getattr(obj, "path", None) is not None:
            given = obj.path
        if isinstance(given, (str, os.PathLike)):
            return os.fspath(given), None
        if isinstance(given, bytes):
            return None, given
    path = getattr(session, "_model_path", None)
    if path:
        return os.fspath(path), None
    data = getattr(session, "_model_bytes", None)
    return None, data if isinstance(data, bytes) else None


def declared_types(session) -> dict:
    """``{input name: numpy dtype}`` from the session's declared inputs (empty when unknown)."""
    try:
        return {i.name: ort_type_to_numpy(i.type) for i in session.get_inputs()}
    except Exception:  # metadata unavailable: lists are recorded as numpy infers them
        return {}


def tensor_meta(items) -> list[dict]:
    return [{"name": a.name, "type": getattr(a, "type", None),
             "shape": [d if isinstance(d, (int, str)) or d is None else str(d) for d in (a.shape or [])]}
            for a in items]


def to_array(value, declared=None) -> np.ndarray | None:
    """A copy of ``value`` as a numpy array (OrtValue, list, array); ``None`` for non-tensors.

    Python lists are cast to ``declared`` (the input's ONNX dtype), as ONNX Runtime casts them, so
    that the recorded array is what the model received.
    """
    if hasattr(value, "numpy") and hasattr(value, "is_tensor"):
        if not value.is_tensor():
            return None
        value = value.numpy()
    if isinstance(value, (dict, tuple)) or (isinstance(value, list) and value and isinstance(value[0], dict)):
        return None
    if isinstance(value, list) and declared is not None:
        try:
            return np.array(value, dtype=declared)
        except (TypeError, ValueError):
            pass
    arr = np.array(value, copy=True)
    if arr.dtype == object:
        try:
            arr = arr.astype(str)
        except (TypeError, ValueError):
            return None
    return arr


def array_meta(name: str, arr: np.ndarray | None, key: str) -> dict:
    if arr is None:
        return {"name": name, "key": None, "kind": "non-tensor"}
    return {"name": name, "key": key, "dtype": arr.dtype.str if arr.dtype.kind == "U" else str(arr.dtype),
            "shape": list(arr.shape)}


def tool_versions() -> dict:
    """The versions captures and reports record: ``{"onnxwrapper": …, "onnxruntime": …}``."""
    return {"onnxwrapper": onnxwrapper_version, "onnxruntime": onnxruntime.__version__}
