"""Patch ``mod``: ONNX ``Mod`` → ``Div``/``Mul``/``Sub`` compositions.

Why (measured with onnxruntime-qnn 2.7.0, HTP simulator): the QNN EP leaves float ``Mod``
(``fmod=1``) and integer ``Mod`` with ``fmod=1`` on the CPU EP; integer ``Mod`` with ``fmod=0`` is
taken, but an int32 one fails to finalize in fp32 simulation (``QNN_COMMON_ERROR_MEM_ALLOC``).
Div + Mul + Sub (no ``Floor``) is also what models converted with the QNN converter need, which
rejects ``Floor``.

Semantics (ONNX ``Mod`` spec, onnxruntime's CPU kernel is the reference):

* ``fmod=1`` (C ``fmod``, required for floats): ``r = a - b * trunc(a / b)``, sign of ``a``.
* ``fmod=0`` (integers only, Python ``%``): the sign of the result follows the divisor ``b``:
  ``t = a - b * (a / b)`` with truncating integer division, then ``r = t + b`` where ``t != 0``
  and ``sign(t) != sign(b)``.

Rewrites:

* integers, ``fmod=1`` or unsigned: ``Div → Mul → Sub`` (integer ``Div`` truncates; exact).
* signed integers, ``fmod=0``: ``r = crem(crem(a, b) + b, b)`` with ``crem(x, y) = x - (x / y) * y``,
  i.e. Div/Mul/Sub, Add, Div/Mul/Sub (no ``Sign``: the QNN EP rejects integer ``Sign``, measured).
  Exact while ``|b| < 2**(bits - 2)`` (``crem + b`` must not overflow); int8/int16 are computed
  in int32 (``Cast`` around) so they are exact for every value.
* floats: ``Div → Abs → Floor → Sign → Mul → Mul → Sub`` (``trunc(q) = sign(q) * floor(|q|)``;
  ``Floor`` is accepted by the QNN EP, measured). NaN/inf behave as C ``fmod`` except
  ``fmod(finite, ±inf)`` which gives NaN instead of the dividend. ``float16`` is computed in
  float32 (``Cast`` around), ``double`` in double.

Numerical limit (floats only): ``b * trunc(a/b)`` is rounded, so the result may differ from the
exact ``fmod`` by about one ulp of ``a`` (≤ 1e-6 for ``|a| ≤ 8`` in float32), and by ``±b`` when
``a/b`` is within one rounding step of an integer (e.g. ``fmod(0.3f, 0.1f)``). Integer results
are exact — more exact than onnxruntime 1.31's own kernel for int64 with ``fmod=1``, which goes
through ``double`` (wrong beyond 2**53, measured). Division by zero: integers are undefined in
ONNX (and crash ORT's kernel alike).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper

from onnxwrapper.patches._base import GraphView, NodeBuilder, Patch, PatchRecord, attr, node_label

__all__ = ["ModToArithmetic"]

_SIGNED = {T.INT8, T.INT16, T.INT32, T.INT64}
_UNSIGNED = {T.UINT8, T.UINT16, T.UINT32, T.UINT64}
_FLOATS = {T.FLOAT, T.DOUBLE, T.FLOAT16}


class ModToArithmetic(Patch):
    """``Mod(a, b)`` → Div/Mul/Sub (+ Floor-based truncation for floats, + sign fix for ``fmod=0``)."""

    name = "mod"
    op_type = "Mod"
    description = ("Mod -> Div/Mul/Sub (integers, exact; fmod=0 sign fix), "
                   "floats -> a - b*sign(q)*floor(|q|), q = a/b")
    exactness = ("integers bit-exact (fmod=0 for |b| < 2^(bits-2)); floats within ~1 ulp of a, and off by "
                 "±b when a/b is within one rounding step of an integer")

    def _reject_reason(self, node: onnx.NodeProto, view: GraphView) -> str | None:
        if len(node.input) != 2 or len(node.output) != 1:
            return "expected Mod with 2 inputs and 1 output"
        et = view.elem_type(node.input[0]) or view.elem_type(node.output[0])
        if et is None:
            return "the element type of its inputs is unknown (add shapes/types or run shape inference)"
        fmod = int(attr(node, "fmod", 0))
        if et in _FLOATS:
            if fmod != 1:
                return "invalid model: floating-point Mod requires fmod=1 (ONNX spec)"
            return None
        if et in _SIGNED or et in _UNSIGNED:
            return None
        return f"element type {helper.tensor_dtype_to_string(et)} is not supported by the rewrite"

    def _apply(self, view: GraphView, node: onnx.NodeProto, index: int) -> PatchRecord:
        a, b = node.input
        out = node.output[0]
        et = view.elem_type(a) or view.elem_type(out)
        fmod = int(attr(node, "fmod", 0))
        nb = NodeBuilder(view, node_label(node))
        kind = helper.tensor_dtype_to_string(et).replace("TensorProto.", "").lower()
        if et in _FLOATS:
            if et == T.FLOAT16:
                a = nb.op("Cast", [a], hint="a_f32", to=T.FLOAT)
                b = nb.op("Cast", [b], hint="b_f32", to=T.FLOAT)
            q = nb.op("Div", [a, b], hint="quotient")
            mag = nb.op("Abs", [q], hint="abs_quotient")
            fl = nb.op("Floor", [mag], hint="floor_abs_quotient")
            sg = nb.op("Sign", [q], hint="sign_quotient")
            tq = nb.op("Mul", [sg, fl], hint="trunc_quotient")
            prod = nb.op("Mul", [b, tq], hint="b_times_trunc")
            if et == T.FLOAT16:
                r = nb.op("Sub", [a, prod], hint="remainder_f32")
                nb.op("Cast", [r], output=out, hint="remainder", to=T.FLOAT16)
            else:
                nb.op("Sub", [a, prod], output=out, hint="remainder")
        else:
            python_sign = et in _SIGNED and fmod == 0
            widen = python_sign and et in (T.INT8, T.INT16)
            if widen:  # t + b below must not overflow the narrow type
                a = nb.op("Cast", [a], hint="a_i32", to=T.INT32)
                b = nb.op("Cast", [b], hint="b_i32", to=T.INT32)
            t = self._c_remainder(nb, a, b, None if python_sign else out, "remainder")
            if python_sign:
                # r = crem(crem(a, b) + b, b): moves a remainder whose sign differs from b's by one b
                u = nb.op("Add", [t, b], hint="remainder_plus_b")
                if widen:
                    r = self._c_remainder(nb, u, b, None, "remainder_i32")
                    nb.op("Cast", [r], output=out, hint="remainder", to=et)
                else:
                    self._c_remainder(nb, u, b, out, "remainder")
        ops = ", ".join(n.op_type for n in nb.nodes)
        summary = f"Mod(fmod={fmod}, {kind}) -> {ops}"
        return nb.record(self.name, node, index, summary)

    @staticmethod
    def _c_remainder(nb: NodeBuilder, a: str, b: str, output: str | None, hint: str) -> str:
        """``a - (a / b) * b`` with truncating integer division (C ``%``): Div, Mul, Sub."""
        q = nb.op("Div", [a, b], hint=f"{hint}_quotient")
        prod = nb.op("Mul", [q, b], hint=f"{hint}_quotient_times_b")
        return nb.op("Sub", [a, prod], output=output, hint=hint)


def reference_mod(a: np.ndarray, b: np.ndarray, fmod: int) -> np.ndarray:
    """numpy reference of ONNX ``Mod`` (for documentation and tests): ``np.fmod`` when ``fmod=1``,
    else ``np.mod`` (Python semantics, integers only)."""
    return np.fmod(a, b) if fmod else np.mod(a, b)
