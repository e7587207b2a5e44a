"""Feed validation with onnxruntime's exact errors, for backends that are not ONNX Runtime.

ORT checks a ``run`` call in this order (measured on onnxruntime 1.31.1; the project's API tests
assert every case against onnxruntime itself):

1. ``input_feed`` must be a mapping (``AttributeError: 'list' object has no attribute 'keys'``);
   ``output_names`` must be ``None`` or a sequence of ``str`` (``TypeError: run(): incompatible
   function arguments. …``).
2. Required (non-optional) model inputs missing from the feed → builtin ``ValueError``
   ``Required inputs (['X']) are missing from input feed (['Z']).``
3. Each fed value is converted: Python/numpy scalars → ``RuntimeError: Unable to handle object of
   type <class 'float'>``; tuples → ``RuntimeError: Input must be a list of dictionaries or a
   single numpy array for input 'X'.``; lists are cast to the declared element type
   (``numpy.array(value, dtype=declared)``; failure → ``RuntimeError: Could not create tensor from
   given input list``); ``OrtValue`` → its numpy view.
4. Unknown feed names → ``InvalidArgument`` ``Invalid input name: Z``.
5. Per model input, last declared input first: element type (``Unexpected input data type.
   Actual: (tensor(double)) , expected: (tensor(float))``), rank (``Invalid rank for input: X Got:
   3 Expected: 4 Please fix either the inputs/outputs or the model.``), fixed dims (``Got invalid
   dimensions for input: X for the following indices\\n index: 2 Got: 16 Expected: 32\\n Please fix
   either the inputs/outputs or the model.``). Symbolic (``str``) and unknown (``None``) dims match
   any size.
6. Unknown output names → ``InvalidArgument`` ``Invalid output name:nope``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from onnxruntime.capi import onnxruntime_pybind11_state as C

__all__ = ["validate_feed", "validate_ort_values", "check_input", "feed_signature", "ort_type_to_numpy",
           "numpy_to_ort_type", "check_output_names"]

_PREFIX = "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "

_ORT_TO_NP = {
    "float": np.float32, "double": np.float64, "float16": np.float16,
    "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16,
    "int32": np.int32, "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64,
    "bool": np.bool_, "string": np.object_,
}
_NP_TO_ORT = {np.dtype(v).str[1:] if k != "string" else "O": k for k, v in _ORT_TO_NP.items()}


def ort_type_to_numpy(ort_type: str) -> np.dtype | None:
    """``"tensor(float)"`` → ``numpy.float32``; ``None`` for non-tensor or unsupported types
    (e.g. ``bfloat16`` without ml_dtypes, sequences, maps)."""
    if not ort_type.startswith("tensor(") and not ort_type.startswith("optional(tensor("):
        return None
    elem = ort_type.rsplit("(", 1)[1].rstrip(")")
    if elem == "bfloat16":
        try:
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)
        except ImportError:
            return None
    dt = _ORT_TO_NP.get(elem)
    return np.dtype(dt) if dt is not None else None


def numpy_to_ort_type(dtype: np.dtype) -> str:
    """``numpy.float64`` → ``"tensor(double)"``; str/bytes/object arrays are ``tensor(string)``."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OUS":
        return "tensor(string)"
    if dtype.name == "bfloat16":
        return "tensor(bfloat16)"
    key = dtype.str[1:]
    return f"tensor({_NP_TO_ORT.get(key, dtype.name)})"


def _convert(name: str, value: Any, declared: np.dtype | None) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, list):
        try:
            if declared is None:
                return np.array(value)
            if declared == np.object_:
                return np.array(value, dtype=object)
            return np.array(value, dtype=declared)
        except (ValueError, TypeError, OverflowError) as exc:
            raise RuntimeError("Could not create tensor from given input list") from exc
    if isinstance(value, tuple):
        raise RuntimeError(f"Input must be a list of dictionaries or a single numpy array for input '{name}'.")
    numpy_method = getattr(value, "numpy", None)
    if callable(numpy_method) and hasattr(value, "_get_c_value"):  # onnxruntime.OrtValue
        return numpy_method()
    raise RuntimeError(f"Unable to handle object of type {type(value)}")


def check_output_names(output_names, outputs_meta) -> list[str]:
    """Return the requested output names (all outputs for ``None``/``[]``).

    Raises:
        TypeError: ``output_names`` is a ``str`` or contains non-strings (as ORT's binding).
        onnxruntime InvalidArgument: ``Invalid output name:<name>``.
    """
    all_names = [o.name for o in outputs_meta]
    if not output_names:
        return all_names
    if isinstance(output_names, (str, bytes)) or not all(isinstance(n, str) for n in output_names):
        raise TypeError("run(): incompatible function arguments. The following argument types are supported:\n"
                        "    1. (self, arg0: collections.abc.Sequence[str], arg1: collections.abc.Mapping[str, object], "
                        "arg2: RunOptions) -> list\n")
    known = set(all_names)
    for n in output_names:
        if n not in known:
            raise C.InvalidArgument(f"{_PREFIX}Invalid output name:{n}")
    return list(output_names)


def validate_feed(inputs_meta: Sequence, input_feed: Mapping, output_names=None,
                  outputs_meta: Sequence | None = None) -> dict[str, np.ndarray]:
    """Validate ``input_feed`` against ONNX model metadata as ``InferenceSession.run`` would.

    Args:
        inputs_meta: model inputs (objects with ``.name``, ``.type`` ORT type string and ``.shape``
            list of int | str | None), in model order — e.g. ``session.get_inputs()``.
        input_feed: ``{name: numpy.ndarray | list | OrtValue}``.
        output_names: requested output names, or ``None``.
        outputs_meta: model outputs; when given, ``output_names`` are checked too.

    Returns:
        ``{name: numpy.ndarray}`` in feed order; arrays are the caller's objects (not copied, possibly
        non-contiguous), lists are converted to the declared dtype.

    Raises:
        Exactly what onnxruntime raises for the same call (see the module docstring).
    """
    feed_names = list(input_feed.keys())
    if output_names is not None and (isinstance(output_names, (str, bytes)) or
                                     not all(isinstance(n, str) for n in output_names)):
        check_output_names(output_names, outputs_meta or [])
    missing = [i.name for i in inputs_meta if i.name not in input_feed and not i.type.startswith("optional")]
    if missing:
        raise ValueError(f"Required inputs ({missing}) are missing from input feed ({feed_names}).")
    meta = {i.name: i for i in inputs_meta}
    arrays: dict[str, np.ndarray] = {}
    for name, value in input_feed.items():
        declared = ort_type_to_numpy(meta[name].type) if name in meta else None
        arrays[name] = _convert(name, value, declared)
    for name in feed_names:
        if name not in meta:
            raise C.InvalidArgument(f"{_PREFIX}Invalid input name: {name}")
    for inp in reversed(list(inputs_meta)):
        if inp.name not in arrays:
            continue
        check_input(inp.name, inp.type, inp.shape, arrays[inp.name])
    if outputs_meta is not None:
        check_output_names(output_names, outputs_meta)
    return arrays


def validate_ort_values(inputs_meta: Sequence, input_dict_ort_values: Mapping, output_names=None,
                        outputs_meta: Sequence | None = None) -> dict[str, np.ndarray]:
    """:func:`validate_feed` for ``run_with_ort_values``: ``{name: OrtValue}`` checked by element
    type and shape without copying the data.

    Returns:
        ``{name: read-only zero-stride numpy view}`` with each value's dtype and shape (for shape
        decisions, not data).

    Raises:
        ORT's ``AttributeError`` for a value that is not an ``OrtValue``; otherwise as :func:`validate_feed`.
    """
    views = {}
    for name, value in input_dict_ort_values.items():
        value._get_c_value()  # ORT's AttributeError for anything but an OrtValue
        dtype = ort_type_to_numpy(value.data_type()) or np.dtype(np.float32)
        views[name] = np.broadcast_to(np.zeros((), dtype=dtype), tuple(value.shape()))
    return validate_feed(inputs_meta, views, output_names, outputs_meta)


def check_input(name: str, ort_type: str, shape, arr: np.ndarray, *, note: str = "") -> None:
    """Check one input array against a declared ORT type and shape, with ORT's messages.

    Args:
        name: input name. ort_type: ``"tensor(float)"`` (``optional(...)`` accepted).
        shape: declared dims (int = fixed, ``str``/``None`` = any) or ``None`` for unknown rank.
        arr: the array. note: text appended to a dims error (e.g. what the dims are fixed by).

    Raises:
        onnxruntime ``InvalidArgument``: element type, rank or a fixed dim differs.
    """
    expected_type = ort_type[len("optional("):-1] if ort_type.startswith("optional(") else ort_type
    actual_type = numpy_to_ort_type(arr.dtype)
    if actual_type != expected_type:
        raise C.InvalidArgument(
            f"{_PREFIX}Unexpected input data type. Actual: ({actual_type}) , expected: ({expected_type})")
    if shape is None:
        return
    if arr.ndim != len(shape):
        raise C.InvalidArgument(
            f"{_PREFIX}Invalid rank for input: {name} Got: {arr.ndim} Expected: {len(shape)} "
            f"Please fix either the inputs/outputs or the model.")
    bad = [(i, got, exp) for i, (got, exp) in enumerate(zip(arr.shape, shape)) if isinstance(exp, int) and got != exp]
    if bad:
        lines = "".join(f" index: {i} Got: {got} Expected: {exp}\n" for i, got, exp in bad)
        raise C.InvalidArgument(
            f"{_PREFIX}Got invalid dimensions for input: {name} for the following indices\n{lines}"
            f" Please fix either the inputs/outputs or the model.{note}")


def feed_signature(feed: Mapping[str, np.ndarray]) -> tuple:
    """Hashable ``((name, shape, dtype str), …)`` sorted by name — the key of a shape specialization."""
    return tuple(sorted((n, tuple(int(d) for d in a.shape), np.dtype(a.dtype).str) for n, a in feed.items()))
