"""Rewrite ``pow_square``: ``Pow(x, 2)`` → ``Mul(x, x)`` (a kernel-avoiding accuracy repair).

Why (measured with onnxruntime-qnn 2.7.0 on the HTP simulator, FP16, soc_model 60): the QNN HTP's
``Pow`` with exponent 2 returns **−4 for x = −0** (and for tiny negative inputs, which FP16 flushes
to −0), where the square is +0. In an STFT magnitude ``Sqrt(Pow(re, 2) + Pow(im, 2))`` the −4
makes the ``Sqrt`` return NaN, which the HTP encodes as 131008: faster-whisper's VAD and
silero-vad's models fail that way. ``Mul(x, x)`` is computed by another kernel, which returns +0.

Exactness: **bit-exact**. ``x·x`` is the correctly rounded square, and ``pow(x, 2)`` is too (IEEE
754 ``pow`` of an exact integer power of 2; onnxruntime's CPU ``Pow`` kernel squares directly for
a scalar exponent 2); signs of zero, ±Inf and NaN agree (``(−0)·(−0) = +0 = pow(−0, 2)``).

Requirements: the exponent is a constant (initializer or ``Constant``) holding one element equal
to 2 whose rank does not exceed the base's (so broadcasting does not change the output shape);
the base is a floating-point tensor. Applied only when a repair recipe names it (not automatic).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T

from onnxwrapper.patches._base import GraphView, NodeBuilder, Patch, PatchRecord, constant_input, node_label

__all__ = ["PowSquareToMul"]

_FLOATS = {T.FLOAT, T.FLOAT16, T.DOUBLE, T.BFLOAT16}


class PowSquareToMul(Patch):
    """``Pow(x, 2)`` → ``Mul(x, x)``: bit-exact, avoids the HTP's ``Pow`` kernel (wrong at −0)."""

    name = "pow_square"
    op_type = "Pow"
    description = "Pow(x, 2) -> Mul(x, x) (the QNN HTP's FP16 Pow returns -4 for x = -0)"
    exactness = "bit-exact (x*x is the correctly rounded square; -0, Inf and NaN agree)"
    automatic = False

    def _reject_reason(self, node: onnx.NodeProto, view: GraphView) -> str | None:
        exponent, reason = constant_input(view, node, 1, "exponent")
        if reason:
            return reason
        if exponent.size != 1 or float(np.asarray(exponent, np.float64).reshape(-1)[0]) != 2.0:
            return f"the exponent is not the single value 2 (got {np.asarray(exponent).reshape(-1)[:4].tolist()})"
        elem = view.elem_type(node.input[0])
        if elem is not None and elem not in _FLOATS:
            return f"the base is not a floating-point tensor (ONNX type {elem})"
        if exponent.ndim:
            shape = view.shape(node.input[0])
            if shape is None or len(shape) < exponent.ndim:
                return (f"the exponent has rank {exponent.ndim} and the base's rank is unknown or smaller: "
                        f"dropping it would change the output shape")
        return None

    def _apply(self, view: GraphView, node: onnx.NodeProto, index: int) -> PatchRecord:
        b = NodeBuilder(view, node_label(node))
        b.op("Mul", [node.input[0], node.input[0]], output=node.output[0], hint="square")
        return b.record(self.name, node, index, "Pow(x, 2) -> Mul(x, x)")
