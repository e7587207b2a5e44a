"""FAKE for tests: a stand-in "compiled QNN graph" file format and its reference execution.

This is NOT a Qualcomm format. Real QNN context binaries (``.bin``) and DLCs (``.dlc``) are
opaque; the fake ``qai_appbuilder`` package and the fake ``snpe-net-run``/``snpe-dlc-info`` in this
folder read these JSON files instead, so that onnxwrapper's foreign backends can be tested on any
host. Outputs are computed with ONNX Runtime (CPU) on a companion ONNX model, converted to and from
the declared *native* IO (quantized types, other dtypes, transposed layouts, sanitized names,
another tensor order), exactly like a converter-produced graph would expose them.

File layout (UTF-8 JSON)::

    {"format": "onnxwrapper-FAKE-qnn-artifact", "kind": "context_binary" | "dlc",
     "graphs": [{"name": "main", "onnx": "model.onnx",        # path relative to the artifact
                 "fail": false,                               # every inference fails (returns [])
                 "inputs":  [TENSOR, ...],                    # native order
                 "outputs": [TENSOR, ...]}]}
    TENSOR = {"name": native name, "onnx": ONNX tensor name, "shape": native dims,
              "dtype": qai_appbuilder type name ("float32", "uint8", "ufp8", "ufp16", "float16", ...),
              "perm": null | axes (native = onnx.transpose(perm)),
              "scale": float, "offset": int}                 # quantized: real = scale * (q + offset)
"""

from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

FORMAT = "onnxwrapper-FAKE-qnn-artifact"
_STORAGE = {"float32": "f4", "float16": "f2", "float64": "f8", "int8": "i1", "int16": "i2", "int32": "i4",
            "int64": "i8", "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8", "bool_": "?",
            "ufp8": "u1", "ufp16": "u2", "ufp32": "u4", "sfp8": "i1", "sfp16": "i2", "sfp32": "i4"}
_QUANTIZED = {"ufp8", "ufp16", "ufp32", "sfp8", "sfp16", "sfp32"}
_DLC_NAMES = {"float32": "Float_32", "float16": "Float_16", "float64": "Float_64", "int8": "Int_8",
              "int16": "Int_16", "int32": "Int_32", "int64": "Int_64", "uint8": "uInt_8", "uint16": "uInt_16",
              "uint32": "uInt_32", "uint64": "uInt_64", "bool_": "Bool_8", "ufp8": "uFxp_8", "ufp16": "uFxp_16",
              "ufp32": "uFxp_32", "sfp8": "Fxp_8", "sfp16": "Fxp_16", "sfp32": "Fxp_32"}


class NotAFakeArtifact(ValueError):
    """The file is not a fake artifact (the real runtimes would fail to deserialize it)."""


def tensor(name: str, shape: Sequence[int], dtype: str = "float32", *, onnx: str | None = None,
           perm: Sequence[int] | None = None, scale: float | None = None, offset: int | None = None) -> dict:
    """One TENSOR entry (see the module docstring); ``onnx`` defaults to ``name``."""
    if dtype in _QUANTIZED and (scale is None or offset is None):
        raise ValueError("quantized fake tensors need scale and offset")
    return {"name": name, "onnx": onnx or name, "shape": list(shape), "dtype": dtype,
            "perm": list(perm) if perm is not None else None, "scale": scale, "offset": offset}


def graph(name: str, onnx_path: str, inputs: list, outputs: list, *, fail: bool = False) -> dict:
    """One graph entry; ``onnx_path`` is stored relative to the artifact when written."""
    return {"name": name, "onnx": onnx_path, "inputs": inputs, "outputs": outputs, "fail": fail}


def write_artifact(path, graphs: list, kind: str | None = None) -> str:
    """Write a fake artifact; ``kind`` defaults to ``dlc`` for ``*.dlc`` else ``context_binary``."""
    path = os.fspath(path)
    kind = kind or ("dlc" if path.endswith(".dlc") else "context_binary")
    base = os.path.dirname(os.path.abspath(path))
    stored = []
    for g in graphs:
        g = dict(g)
        g["onnx"] = os.path.relpath(os.path.abspath(g["onnx"]), base)
        stored.append(g)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"format": FORMAT, "kind": kind, "graphs": stored}, f, indent=1)
    return path


def load_artifact(path) -> dict:
    """Parse a fake artifact (resolving companion paths).

    Raises:
        NotAFakeArtifact: anything else (garbage, a real binary, a converter weight file).
    """
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotAFakeArtifact(f"{path}: not a fake artifact ({exc})") from exc
    if not isinstance(spec, dict) or spec.get("format") != FORMAT:
        raise NotAFakeArtifact(f"{path}: not a fake artifact")
    base = os.path.dirname(os.path.abspath(path))
    for g in spec["graphs"]:
        g["onnx"] = os.path.normpath(os.path.join(base, g["onnx"]))
    return spec


def storage(dtype: str) -> np.dtype:
    """numpy dtype of one element of a native type name."""
    return np.dtype(_STORAGE[dtype])


def is_quantized(dtype: str) -> bool:
    return dtype in _QUANTIZED


def dlc_type_name(dtype: str) -> str:
    """The snpe-dlc-info spelling (``ufp8`` → ``uFxp_8``)."""
    return _DLC_NAMES[dtype]


def quantize(x: np.ndarray, t: dict) -> np.ndarray:
    """float → quantized integers: ``q = round(x / scale) - offset`` clipped to the storage range."""
    info = np.iinfo(storage(t["dtype"]))
    q = np.round(np.asarray(x, np.float64) / t["scale"]) - t["offset"]
    return np.clip(q, info.min, info.max).astype(storage(t["dtype"]))


def dequantize(q: np.ndarray, t: dict) -> np.ndarray:
    """quantized integers → float32: ``scale * (q + offset)``."""
    return (t["scale"] * (q.astype(np.float64) + t["offset"])).astype(np.float32)


def to_float(native: np.ndarray, t: dict) -> np.ndarray:
    """What a runtime's float conversion returns for a native buffer (dequantized or cast)."""
    return dequantize(native, t) if is_quantized(t["dtype"]) else native.astype(np.float32)


def from_float(values: np.ndarray, t: dict) -> np.ndarray:
    """What a runtime's float→native conversion stores (quantized or cast)."""
    return quantize(values, t) if is_quantized(t["dtype"]) else values.astype(storage(t["dtype"]))


_SESSIONS: dict = {}


def _session(onnx_path: str):
    import onnxruntime

    key = (onnx_path, os.path.getmtime(onnx_path))
    if key not in _SESSIONS:
        _SESSIONS[key] = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    return _SESSIONS[key]


def compute(g: dict, native_inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run graph ``g`` on native input arrays (native dtype, any shape with the right size) and
    return native outputs (native dtype and shape), in the graph's native order."""
    sess = _session(g["onnx"])
    onnx_types = {i.name: i.type for i in sess.get_inputs()}
    onnx_shapes = {i.name: i.shape for i in sess.get_inputs()}
    feed = {}
    for t, arr in zip(g["inputs"], native_inputs):
        x = np.asarray(arr).reshape(t["shape"])
        onnx_float = onnx_types[t["onnx"]] in ("tensor(float)", "tensor(float16)", "tensor(double)")
        if is_quantized(t["dtype"]) and onnx_float:  # else the ONNX model takes the quantized integers
            x = dequantize(x, t)
        if t["perm"] is not None:
            x = np.transpose(x, np.argsort(t["perm"]))
        declared = onnx_shapes[t["onnx"]]
        if all(isinstance(d, int) for d in declared) and list(x.shape) != declared:
            x = x.reshape(declared)  # e.g. a converter that added a leading size-1 dim
        feed[t["onnx"]] = x.astype(_ONNX_NP[onnx_types[t["onnx"]]])
    names = [t["onnx"] for t in g["outputs"]]
    results = dict(zip(names, sess.run(names, feed)))
    outs = []
    for t in g["outputs"]:
        y = np.asarray(results[t["onnx"]])
        if t["perm"] is not None:
            y = np.transpose(y, t["perm"])
        quantize_it = is_quantized(t["dtype"]) and y.dtype.kind == "f"
        outs.append(np.ascontiguousarray(quantize(y, t) if quantize_it else
                                         y.astype(storage(t["dtype"]))).reshape(t["shape"]))
    return outs


_ONNX_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
            "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int16)": np.int16,
            "tensor(uint16)": np.uint16, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
            "tensor(bool)": np.bool_, "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64}
