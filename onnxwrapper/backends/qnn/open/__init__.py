"""The full path of ``QnnBackend.open`` (:func:`open_session`): every kind of model (ONNX,
EPContext, raw context binary, dynamic shapes, control inputs, a repair recipe), compiled on a
cache miss, and where the session of each shape specialization comes from. The backend imports it
on first use: it pulls in onnx, the operator patches, the repair recipes and the compile workers,
which a session opened from a cache hit (:mod:`onnxwrapper.backends.qnn.artifacts`) never needs.
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.open._open import open_session

__all__ = [
    "open_session",
]
