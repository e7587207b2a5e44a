"""Marshalling between the ONNX model's IO and a compiled graph's native IO (foreign backends).

Shared by the ``qai`` (qai_appbuilder) and ``snpe`` (snpe-net-run) backends, so that both map
names, order, dtypes and shapes the same way, in one place:

* **Truth comes from the ONNX model** (names, order, dtypes, shapes reported by ``get_inputs()``),
  the compiled graph (context binary, DLC) is checked against it at ``open()``.
* **Names**: an ONNX tensor matches the native tensor with the same name, else the one with its
  QNN-sanitized name (every character outside ``[A-Za-z0-9_]`` becomes ``_``, a leading digit gets
  a ``_`` prefix — what the QAIRT converters do), else the name given in ``name_map``. No
  positional or fuzzy matching.
* **Shapes**: fixed ONNX dims must equal the compiled dims; symbolic ONNX dims take the compiled
  value (the artifact is a static specialization). Dims that are a permutation of each other are a
  layout difference (NHWC vs NCHW) and an :class:`~onnxwrapper.errors.ArtifactError` at ``open()``:
  never a guessed transpose. Only size-1 dims may differ (pure reshape, same memory order).
* **Dtypes**, chosen per direction (all inputs share one mode, all outputs another, because both
  runtimes set the file/buffer type per direction):

  - ``native``: buffers are handed over byte for byte. Allowed when every tensor's native type
    equals the ONNX dtype (a quantized ``ufp8``/``ufp16`` native type counts as equal to an ONNX
    ``uint8``/``uint16``: the model exposes the quantized integers, as AI Hub "uint8 IO" models
    do), or is ``int32`` for an ONNX ``int64`` (range-checked narrowing on input, widening on output).
  - ``float``: buffers are float32 and the runtime converts to/from the native type with the
    graph's own quantization encodings (scale/offset, never reachable from Python here). Allowed
    when every ONNX dtype is float32, or a type float32 represents exactly (``int8``, ``uint8``,
    ``int16``, ``uint16``, ``float16``, ``bool``) with the same non-quantized native type.

  ``auto`` prefers ``native`` (no conversion cost) and falls back to ``float``; anything else is an
  ArtifactError naming the tensors. Never a blanket float32 cast.
* **Before every native call** each buffer is C-contiguous with exactly the byte length the
  compiled graph reads (the native layers do not check sizes: measured, qai_appbuilder 2.51.40); a feed whose
  dims differ from the compiled ones raises ORT's ``InvalidArgument`` first.
* **Outputs** are reinterpreted from their bytes (qai_appbuilder returns 1-D arrays whose numpy
  dtype is guessed from bytes per element, e.g. ``float16`` for ``uint16`` data), size-checked,
  converted to the ONNX dtype and reshaped to the ONNX shape.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnxruntime.capi import onnxruntime_pybind11_state as C

from onnxwrapper.errors import ArtifactError, BackendRunError, InternalError
from onnxwrapper.kernel import (NodeArgInfo, check_input, modelmeta_from_onnx, node_args_from_onnx, numpy_to_ort_type,
                                ort_type_to_numpy)

__all__ = [
    "NativeType", "NativeTensor", "TensorPlan", "IoPlan",
    "native_type", "sanitize_qnn_name", "plan_io", "onnx_io", "node_args_from_native", "to_native",
    "from_native",
]

_INVALID_ARG = "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "


@dataclass(frozen=True)
class NativeType:
    """A compiled graph's tensor type.

    Attributes:
        name: as the runtime reports it (``"ufp8"``, ``"float32"``, ``"uFxp_8"``, …).
        storage: numpy dtype of one element in memory/raw files.
        quantized: True for fixed-point types whose values mean ``scale * (q + offset)``.
    """

    name: str
    storage: np.dtype
    quantized: bool = False

    @property
    def canonical(self) -> str:
        """The qai_appbuilder-style lower-case name (``"sfp8"`` for snpe-dlc-info's ``Fxp_8``)."""
        key = self.name.strip()
        return _DLC.get(key, key).lower()


_PLAIN = {"float32": "f4", "float": "f4", "fp32": "f4", "float16": "f2", "fp16": "f2", "float64": "f8",
          "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8", "uint8": "u1", "uint16": "u2",
          "uint32": "u4", "uint64": "u8", "bool": "?", "bool_": "?", "bool8": "?"}
_QUANT = {"ufp8": "u1", "ufp16": "u2", "ufp32": "u4", "sfp8": "i1", "sfp16": "i2", "sfp32": "i4"}
#: snpe-dlc-info type names (SNPE 2.x) → qai_appbuilder-style names
_DLC = {"Float_32": "float32", "Float_16": "float16", "Float_64": "float64", "Int_8": "int8",
        "Int_16": "int16", "Int_32": "int32", "Int_64": "int64", "uInt_8": "uint8", "uInt_16": "uint16",
        "uInt_32": "uint32", "uInt_64": "uint64", "uFxp_8": "ufp8", "uFxp_16": "ufp16", "uFxp_32": "ufp32",
        "Fxp_8": "sfp8", "Fxp_16": "sfp16", "Fxp_32": "sfp32", "Bool_8": "bool"}
_FLOAT_EXACT = {np.dtype(t) for t in ("i1", "u1", "i2", "u2", "f2", "?")}


def native_type(name: str, where: str | None = None) -> NativeType:
    """Parse a type name reported by qai_appbuilder (``getInputDataType``) or snpe-dlc-info.

    Raises:
        ArtifactError: unsupported type (4-bit, string, undefined).
    """
    key = _DLC.get(name.strip(), name.strip())
    low = key.lower()
    if low in _PLAIN:
        return NativeType(name, np.dtype(_PLAIN[low]))
    if low in _QUANT:
        return NativeType(name, np.dtype(_QUANT[low]), True)
    raise ArtifactError(f"The compiled graph uses tensor type '{name}', which onnxwrapper cannot exchange "
                        f"(supported: {', '.join(sorted(set(_PLAIN) | set(_QUANT)))}). Recompile the model "
                        f"with 8/16/32-bit IO (e.g. the converter's --preserve_io).", path=where)


@dataclass(frozen=True)
class NativeTensor:
    """One input or output of the compiled graph: ``name``, static ``shape`` (ints), ``type``."""

    name: str
    shape: tuple
    type: NativeType


@dataclass(frozen=True)
class TensorPlan:
    """How one ONNX tensor maps onto the compiled graph.

    Attributes:
        onnx: the ONNX :class:`NodeArgInfo` (name, ORT type, declared shape).
        dtype: numpy dtype of the ONNX tensor.
        native: the matched :class:`NativeTensor`.
        index: position of the native tensor in the runtime's order.
        shape: concrete ONNX-rank shape the feed must have (symbolic dims resolved).
        cast: ``"same"`` or ``"int64:int32"`` (used in native mode).
    """

    onnx: NodeArgInfo
    dtype: np.dtype
    native: NativeTensor
    index: int
    shape: tuple
    cast: str | None


@dataclass(frozen=True)
class IoPlan:
    """The plan for one direction: ``mode`` (``"native"``/``"float"``), ``tensors`` in ONNX order,
    ``native_count`` (tensors the runtime expects/returns)."""

    direction: str
    mode: str
    tensors: tuple
    native_count: int


def sanitize_qnn_name(name: str) -> str:
    """The name QAIRT converters give an ONNX tensor: ``[^A-Za-z0-9_]`` → ``_``, leading digit → ``_`` prefix."""
    out = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return "_" + out if out[:1].isdigit() else out


def _dims(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _resolve_shape(onnx_shape, native_shape: tuple, label: str, where: str | None) -> tuple:
    fixed = [d for d in onnx_shape if isinstance(d, int)]
    if len(onnx_shape) == len(native_shape):
        if all(not isinstance(o, int) or o == n for o, n in zip(onnx_shape, native_shape)):
            return tuple(int(n) for n in native_shape)
        if not Counter(fixed) - Counter(native_shape):  # the same sizes, other positions
            raise ArtifactError(
                f"{label}: the ONNX model declares shape {_dims(onnx_shape)} but the compiled graph expects "
                f"{_dims(native_shape)}: a different layout (e.g. NHWC vs NCHW). onnxwrapper never guesses "
                f"or transposes layouts. Recompile keeping the ONNX IO layout (QAIRT converters: "
                f"--preserve_io), or load the artifact itself as the model with backend_options="
                f"{{'onnx': False}} to work with the compiled graph's own IO.", path=where)
    elif len(fixed) == len(onnx_shape) and [d for d in fixed if d != 1] == [d for d in native_shape if d != 1]:
        return tuple(fixed)  # only size-1 dims differ: same memory order
    raise ArtifactError(f"{label}: the ONNX model declares shape {_dims(onnx_shape)} but the compiled graph "
                        f"has {_dims(native_shape)}. Use an artifact compiled from this ONNX model (with its "
                        f"symbolic dims fixed to the sizes you feed).", path=where)


def _native_cast(dtype: np.dtype, t: NativeType) -> str | None:
    if t.storage == dtype and (not t.quantized or dtype.kind in "iu"):
        return "same"
    if not t.quantized and dtype == np.int64 and t.storage == np.int32:
        return "int64:int32"
    return None


def _float_ok(dtype: np.dtype, t: NativeType, unsupported: frozenset = frozenset()) -> bool:
    if t.canonical in unsupported:
        return False
    if dtype == np.float32:
        return t.storage.kind in "fiub"
    return not t.quantized and t.storage == dtype and dtype in _FLOAT_EXACT


def _match(onnx_args, natives, direction: str, name_map: Mapping[str, str], where) -> list[int]:
    by_name = {t.name: i for i, t in enumerate(natives)}
    indices = []
    for arg in onnx_args:
        tried = [name_map[arg.name]] if arg.name in name_map else [arg.name, sanitize_qnn_name(arg.name)]
        hit = next((by_name[n] for n in tried if n in by_name), None)
        if hit is None:
            raise ArtifactError(
                f"ONNX {direction} '{arg.name}' has no counterpart in the compiled graph (looked for "
                f"{', '.join(repr(n) for n in dict.fromkeys(tried))}; the graph's {direction}s are "
                f"{[t.name for t in natives]}). Check that the artifact was compiled from this model (and, "
                f"for multi-graph binaries, backend_options={{'graph': ...}}), or map names explicitly with "
                f"backend_options={{'name_map': {{'{arg.name}': '<native name>'}}}}.", path=where)
        if hit in indices:
            raise ArtifactError(f"Two ONNX {direction}s map onto the compiled tensor '{natives[hit].name}'; "
                                f"disambiguate with backend_options={{'name_map': {{...}}}}.", path=where)
        indices.append(hit)
    if direction == "input" and len(indices) != len(natives):
        extra = [t.name for i, t in enumerate(natives) if i not in indices]
        raise ArtifactError(f"The compiled graph has inputs the ONNX model does not declare: {extra}. Use the "
                            f"artifact compiled from this model, or map names with 'name_map'.", path=where)
    return indices


def plan_io(onnx_args: Sequence[NodeArgInfo], natives: Sequence[NativeTensor], *, direction: str,
            mode: str = "auto", name_map: Mapping[str, str] | None = None, where: str | None = None,
            unknown_shapes: set | frozenset = frozenset(), float_unsupported: frozenset = frozenset()) -> IoPlan:
    """Match ONNX tensors to native ones and choose the exchange mode (see the module docstring).

    Args:
        onnx_args: the ONNX model's inputs or outputs, in model order.
        natives: the compiled graph's tensors, in runtime order.
        direction: ``"input"`` or ``"output"``.
        mode: ``"auto"``, ``"native"`` or ``"float"``.
        name_map: explicit ``{onnx name: native name}``.
        where: artifact path for error messages.
        unknown_shapes: names whose ONNX shape is unknown (outputs only): the compiled shape is used.
        float_unsupported: canonical native type names (:attr:`NativeType.canonical`) the runtime's
            float conversion cannot handle; float mode is refused for them (e.g. qai_appbuilder
            2.51 has none for ``sfp8``/``sfp16``/``sfp32``/``ufp32``).

    Raises:
        ArtifactError: unmatched names, layout/shape mismatch, or dtypes neither mode can serve.
    """
    indices = _match(onnx_args, natives, direction, dict(name_map or {}), where)
    plans = []
    for arg, idx in zip(onnx_args, indices):
        dtype = ort_type_to_numpy(arg.type)
        label = f"ONNX {direction} '{arg.name}' (compiled tensor '{natives[idx].name}')"
        if dtype is None or dtype == np.object_:
            raise ArtifactError(f"{label} has type {arg.type}, which foreign runtimes cannot exchange.", path=where)
        if arg.name in unknown_shapes and direction == "output":
            shape = tuple(int(d) for d in natives[idx].shape)
        else:
            shape = _resolve_shape(list(arg.shape), tuple(natives[idx].shape), label, where)
        plans.append(TensorPlan(arg, np.dtype(dtype), natives[idx], idx, shape,
                                _native_cast(np.dtype(dtype), natives[idx].type)))
    ok = {"native": all(p.cast is not None for p in plans),
          "float": all(_float_ok(p.dtype, p.native.type, float_unsupported) for p in plans)}
    chosen = mode if mode != "auto" else ("native" if ok["native"] else "float")
    if not ok.get(chosen, False):
        why = {"native": [p for p in plans if p.cast is None],
               "float": [p for p in plans if not _float_ok(p.dtype, p.native.type, float_unsupported)]}
        parts = [f"{m} mode fails for " + ", ".join(f"'{p.onnx.name}' (ONNX {p.onnx.type}, compiled "
                                                  f"{p.native.type.name})" for p in why[m])
                 for m in (("native", "float") if mode == "auto" else (chosen,))]
        blocked = sorted({p.native.type.canonical for p in plans if p.native.type.canonical in float_unsupported})
        note = (f" This runtime has no float conversion for {', '.join(blocked)} tensors: use {direction}_mode="
                f"'native' with the integer storage type as the ONNX dtype (int8/int16/int32 for sfp8/16/32, "
                f"uint32 for ufp32), or recompile with float32, ufp8 or ufp16 IO." if blocked else "")
        raise ArtifactError(
            f"The model's {direction}s cannot be exchanged with the compiled graph: {'; '.join(parts)}. Native "
            f"mode needs identical types (or int64 stored as int32); float mode needs float32 ONNX tensors or "
            f"types float32 represents exactly.{note} Recompile with matching IO types (QAIRT converters: "
            f"--preserve_io) or choose another {direction}_mode.", path=where)
    return IoPlan(direction, chosen, tuple(plans), len(natives))


def onnx_io(model) -> tuple[list[NodeArgInfo], list[NodeArgInfo], object, set]:
    """Inputs, outputs, ModelMetadataInfo of an ``onnx.ModelProto`` as ORT reports them, and the
    names of outputs whose shape stays unknown.

    Output shapes are completed with ONNX shape inference first, as ORT reports inferred output
    shapes; when inference fails (custom ops) the declared shapes are used.
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError):
        inferred = model
    inputs, outputs = node_args_from_onnx(inferred)
    unknown = {v.name for v in inferred.graph.output
               if v.type.WhichOneof("value") == "tensor_type" and not v.type.tensor_type.HasField("shape")}
    return inputs, outputs, modelmeta_from_onnx(model), unknown


def node_args_from_native(natives: Sequence[NativeTensor]) -> list[NodeArgInfo]:
    """Metadata for an artifact loaded without an ONNX companion: the compiled graph's names and
    shapes; quantized types are reported as ``tensor(float)`` (exchanged in float mode)."""
    return [NodeArgInfo(t.name, "tensor(float)" if t.type.quantized else numpy_to_ort_type(t.type.storage),
                        list(t.shape)) for t in natives]


def to_native(plan: TensorPlan, array: np.ndarray, mode: str) -> np.ndarray:
    """The C-contiguous buffer for ``array`` in the compiled graph's shape and exchange dtype.

    Raises:
        InvalidArgument: dtype or dims differ from what the compiled graph accepts (ORT's message).
        InternalError: the byte length still differs (a bug: the native layer would over-read).
    """
    name = plan.onnx.name
    check_input(name, plan.onnx.type, plan.shape, array,
                note=f" (The compiled artifact is specialized to {_dims(plan.shape)}; symbolic dims of the ONNX "
                     f"model are fixed there.)")
    if mode == "float":
        buf = np.ascontiguousarray(array, dtype=np.float32)
    elif plan.cast == "int64:int32":
        info = np.iinfo(np.int32)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise C.InvalidArgument(f"{_INVALID_ARG}Input {name} holds values outside the int32 range; the "
                                    f"compiled graph stores this int64 tensor as int32.")
        buf = np.ascontiguousarray(array, dtype=np.int32)
    else:
        buf = np.ascontiguousarray(array)
    expected = math.prod(plan.native.shape) * buf.dtype.itemsize
    if buf.nbytes != expected:
        raise InternalError(f"input {name}: {buf.nbytes} bytes prepared, the compiled graph reads {expected}")
    return buf.reshape(plan.native.shape)


def from_native(plan: TensorPlan, raw, mode: str, backend: str) -> np.ndarray:
    """Turn a runtime output (any dtype label, 1-D or shaped) into the ONNX dtype and shape.

    Raises:
        BackendRunError: the byte length differs from the compiled graph's output.
    """
    storage = np.dtype(np.float32) if mode == "float" else plan.native.type.storage
    data = np.ascontiguousarray(np.asarray(raw)).reshape(-1).view(np.uint8)
    expected = math.prod(plan.native.shape) * storage.itemsize
    if data.size != expected:
        raise BackendRunError(
            f"[ONNXRuntimeError] : 11 : EP_FAIL : output '{plan.onnx.name}': the runtime returned {data.size} "
            f"bytes, the compiled graph declares {expected} ({_dims(plan.native.shape)} x {storage.name}).",
            backend=backend)
    values = data.view(storage)
    if values.dtype != plan.dtype:
        values = (values != 0) if plan.dtype == np.bool_ else values.astype(plan.dtype)
    return values.reshape(plan.shape)
