"""Patch ``maxpool3d``: 3-D ``MaxPool`` (``kernel_shape`` of length 3) → 2-D ``MaxPool`` composition.

Why: the QNN EP supports 1-D/2-D pooling only; a 3-D ``MaxPool`` stays on the CPU EP (measured
with onnxruntime-qnn 2.7.0). LPRNet, for one, exports ``nn.MaxPool3d``.

Rewrite (max is separable over axes, and every pooling attribute acts per axis):

1. ``Reshape [N, C, D, H, W] → [N, C·D, H, W]``; ``MaxPool`` with the H/W parts of ``kernel_shape``,
   ``strides``, ``pads``, ``dilations`` (+ ``auto_pad``, ``ceil_mode``) → ``[N, C·D, H', W']``.
2. ``Reshape → [N, C, D, H'·W']``; ``MaxPool`` with kernel ``[kd, 1]``, strides ``[sd, 1]``, pads
   ``[d_begin, 0, d_end, 0]``, dilations ``[dd, 1]`` → ``[N, C, D', H'·W']``.
3. ``Reshape → [N, C, D', H', W']``.

A step whose kernel, stride and dilation are all 1 without padding is skipped (e.g. LPRNet's
``kernel (1, 3, 3), stride (1, 1, 1)`` needs only step 1). Results are bit-identical (max is
exact), except for windows holding nothing but ``-inf``: onnxruntime's MaxPool kernels answer
those with ``-inf`` or ``-FLT_MAX`` depending on the kernel path (measured on 1.31, 2-D and 3-D
alike), so either value may appear before and after the rewrite.
Requirements: rank-5 input with static C, D, H, W (N may be dynamic), a float or 8-bit
type, and no ``Indices`` output in use (its flat indices have no 2-D equivalent).
"""

from __future__ import annotations

import numpy as np
import onnx

from onnxwrapper.patches._base import GraphView, NodeBuilder, Patch, PatchRecord, attr, node_label

__all__ = ["MaxPool3dTo2d", "pool_out_size"]

_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT8,
          onnx.TensorProto.UINT8}


def pool_out_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int,
                  ceil_mode: int, auto_pad: str) -> int:
    """Output length of one pooled axis (ONNX ``MaxPool`` formulas, incl. ``auto_pad``)."""
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return -(-size // stride)
    eff = dilation * (kernel - 1) + 1
    if auto_pad == "VALID":
        return (size - eff) // stride + 1 if not ceil_mode else -(-(size - eff + 1) // stride)
    span = size + pad_begin + pad_end - eff
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= size + pad_begin:  # the last window must start inside input/left pad
            out -= 1
        return out
    return span // stride + 1


class MaxPool3dTo2d(Patch):
    """3-D ``MaxPool`` → Reshape / 2-D ``MaxPool`` (H, W) / Reshape / 2-D ``MaxPool`` (D) / Reshape."""

    name = "maxpool3d"
    op_type = "MaxPool"
    description = "MaxPool with a 3-D kernel -> 2-D MaxPool over (H, W) then over D, with Reshapes"
    exactness = ("bit-exact (max is exact); a window holding only -inf may give -inf or -FLT_MAX, as ORT's own "
                 "MaxPool kernels do")

    def targets(self, node: onnx.NodeProto) -> bool:
        """3-D MaxPool nodes only (``kernel_shape`` with 3 entries)."""
        return super().targets(node) and len(attr(node, "kernel_shape", None) or ()) == 3

    def _reject_reason(self, node: onnx.NodeProto, view: GraphView) -> str | None:
        if len(node.output) > 1 and node.output[1]:
            if view.consumers(node.output[1]) or view.is_graph_output(node.output[1]):
                return "its Indices output is used; flat 3-D indices have no 2-D equivalent"
        et = view.elem_type(node.input[0])
        if et is not None and et not in _TYPES:
            return f"element type {onnx.helper.tensor_dtype_to_string(et)} is not a MaxPool type (float or 8-bit)"
        shape = view.shape(node.input[0])
        if shape is None or len(shape) != 5:
            return "the input's rank is unknown or not 5 (run shape inference or fix shapes)"
        if any(not isinstance(d, int) for d in shape[1:]):
            return (f"the input's C, D, H, W dims must be static, got {shape}; make them static first "
                    f"(e.g. aipc compile --shape/--dim)")
        return None

    def _apply(self, view: GraphView, node: onnx.NodeProto, index: int) -> PatchRecord:
        x, y = node.input[0], node.output[0]
        n, c, d, h, w = view.shape(x)  # type: ignore[misc]
        kd, kh, kw = (int(v) for v in attr(node, "kernel_shape"))
        sd, sh, sw = (int(v) for v in attr(node, "strides", [1, 1, 1]))
        dd, dh, dw = (int(v) for v in attr(node, "dilations", [1, 1, 1]))
        pads = [int(v) for v in attr(node, "pads", [0] * 6)]
        auto_pad = str(attr(node, "auto_pad", "NOTSET"))
        ceil_mode = int(attr(node, "ceil_mode", 0))
        pd0, ph0, pw0, pd1, ph1, pw1 = pads
        common = {"ceil_mode": ceil_mode} if ceil_mode else {}
        if auto_pad != "NOTSET":
            common["auto_pad"] = auto_pad

        def pooled(k, s, dil, p0, p1, size):
            return pool_out_size(size, k, s, p0, p1, dil, ceil_mode, auto_pad)

        hw_step = (kh, kw, sh, sw, dh, dw) != (1,) * 6 or any((ph0, pw0, ph1, pw1)) or \
            (auto_pad != "NOTSET" and (sh, sw) != (1, 1))
        d_step = (kd, sd, dd) != (1, 1, 1) or any((pd0, pd1)) or (auto_pad != "NOTSET" and sd != 1)
        h2 = pooled(kh, sh, dh, ph0, ph1, h) if hw_step else h
        w2 = pooled(kw, sw, dw, pw0, pw1, w) if hw_step else w
        d2 = pooled(kd, sd, dd, pd0, pd1, d) if d_step else d
        inferred = view.shape(y)  # onnx shape inference is the reference when it knows the dims
        if inferred is not None and len(inferred) == 5 and all(isinstance(v, int) for v in inferred[2:]):
            d2, h2, w2 = inferred[2:]

        nb = NodeBuilder(view, node_label(node))
        t = x
        if hw_step:
            s = nb.const("shape_ncd_h_w", [0, c * d, h, w], np.int64)
            t = nb.op("Reshape", [t, s], hint="merge_cd")
            attrs = dict(common, kernel_shape=[kh, kw], strides=[sh, sw], dilations=[dh, dw])
            if auto_pad == "NOTSET":
                attrs["pads"] = [ph0, pw0, ph1, pw1]
            t = nb.op("MaxPool", [t], hint="maxpool_hw", **attrs)
        if d_step:
            s = nb.const("shape_n_c_d_hw", [0, c, d, h2 * w2], np.int64)
            t = nb.op("Reshape", [t, s], hint="split_cd")
            attrs = dict(common, kernel_shape=[kd, 1], strides=[sd, 1], dilations=[dd, 1])
            if auto_pad == "NOTSET":
                attrs["pads"] = [pd0, 0, pd1, 0]
            t = nb.op("MaxPool", [t], hint="maxpool_d", **attrs)
        s = nb.const("shape_out", [0, c, d2, h2, w2], np.int64)
        nb.op("Reshape", [t, s], output=y, hint="restore_5d")
        ops = ", ".join(n.op_type for n in nb.nodes)
        batch = n if n is not None else "?"
        summary = f"MaxPool(kernel={[kd, kh, kw]}, strides={[sd, sh, sw]}) on [{batch},{c},{d},{h},{w}] -> {ops}"
        return nb.record(self.name, node, index, summary)
