"""Raw QNN context binaries: what they hold (:func:`read_binary_info`, read through
libQnnSystem), and one graph of a binary as an EPContext model ORT's QNN EP can load
(:func:`wrap_raw_binary`).
"""

from __future__ import annotations

from typing import Any as _Any

from onnxwrapper.backends.qnn.binary._binary import BinaryInfo, GraphInfo, TensorInfo, read_binary_info

__all__ = [
    "BinaryInfo",
    "GraphInfo",
    "TensorInfo",
    "read_binary_info",
    "wrap_raw_binary",
]


def __getattr__(name: str) -> _Any:
    """:func:`wrap_raw_binary`, imported on first use: it builds ONNX models (onnx, ~50 ms to import);
    reading a binary needs none of it."""
    if name == "wrap_raw_binary":
        from onnxwrapper.backends.qnn.binary._wrap import wrap_raw_binary

        globals()[name] = wrap_raw_binary
        return wrap_raw_binary
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
