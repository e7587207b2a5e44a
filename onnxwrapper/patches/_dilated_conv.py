"""Rewrite ``dilated_conv``: a dilated ``Conv`` → the equivalent undilated ``Conv`` with a zero-expanded kernel.

Why (measured with onnxruntime-qnn 2.7.0 on the HTP simulator, FP16): the QNN HTP computes a
dilated Conv1d (kernel 5, dilation 3, pads 6) wrong at sequence lengths 8, 16, 24 and 32 (cosine
0.70–0.97) and right at 12, 14, 17, 18, 20 and 36. The same convolution written without dilation
runs through another kernel.

Rewrite: a kernel ``W`` of spatial size ``k`` per axis with dilation ``d`` becomes ``W'`` of size
``(k − 1)·d + 1`` with ``W'[…, i·d] = W[…, i]`` and zeros in between; ``dilations`` become 1 and
``kernel_shape`` the new size. The effective receptive field is the same, so ``pads``,
``strides``, ``group``, ``auto_pad`` and the bias stay as they are.

Exactness: **exact in exact arithmetic**. In floating point the inserted taps add ``0·x = 0``
exactly, so a kernel that accumulates the taps in the same order returns bit-identical results;
one that blocks or orders the larger kernel differently sums the same products in another order:
``|Δ| ≤ γₙ·Σ|w·x|`` (Higham's ``γₙ = n·u/(1 − n·u)``, ``n`` = taps per output). Non-finite inputs
differ: an Inf or NaN that the dilated kernel skipped meets a zero tap (``0·Inf = NaN``).
Cost: the kernel holds ``d^r`` times more taps (``r`` = dilated axes), i.e. that many more
multiply-adds.

Requirements: the weight is a constant (initializer or ``Constant``) with a known shape; some
dilation is > 1. Applied only when a repair recipe names it (not automatic).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from onnxwrapper.patches._base import (GraphView, NodeBuilder, Patch, PatchRecord, attr, constant_input, constant_value,
                                       node_label)

__all__ = ["DilatedConvToDense", "expand_kernel"]


def expand_kernel(weight: np.ndarray, dilations) -> np.ndarray:
    """``weight`` ``[M, C/group, k1, k2, …]`` with zeros inserted: spatial axis ``a`` grows to
    ``(k_a − 1)·d_a + 1`` and ``out[…, i·d_a, …] = weight[…, i, …]``."""
    dil = [int(d) for d in dilations]
    spatial = weight.shape[2:]
    size = [(k - 1) * d + 1 for k, d in zip(spatial, dil)]
    out = np.zeros(weight.shape[:2] + tuple(size), dtype=weight.dtype)
    out[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in dil)] = weight
    return out


class DilatedConvToDense(Patch):
    """A ``Conv`` with dilations > 1 → the same ``Conv`` undilated, with a zero-expanded kernel."""

    name = "dilated_conv"
    op_type = "Conv"
    description = "dilated Conv -> undilated Conv with a zero-expanded kernel (avoids the HTP's dilated kernel)"
    exactness = ("exact in exact arithmetic; in floating point the same products, possibly summed in another "
                 "order (|delta| <= gamma_n * sum|w*x|); Inf/NaN inputs skipped by the dilation give NaN")
    automatic = False

    def targets(self, node: onnx.NodeProto) -> bool:
        """``Conv`` nodes with some dilation > 1."""
        return super().targets(node) and any(int(d) > 1 for d in (attr(node, "dilations", None) or ()))

    def _reject_reason(self, node: onnx.NodeProto, view: GraphView) -> str | None:
        weight, reason = constant_input(view, node, 1, "weight")
        if reason:
            return reason
        dil = attr(node, "dilations", None) or ()
        if weight.ndim != len(dil) + 2:
            return f"the weight has rank {weight.ndim}, expected {len(dil) + 2} for {len(dil)} dilations"
        kernel = attr(node, "kernel_shape", None)
        if kernel is not None and list(kernel) != list(weight.shape[2:]):
            return f"kernel_shape {list(kernel)} disagrees with the weight's shape {list(weight.shape)}"
        return None

    def _apply(self, view: GraphView, node: onnx.NodeProto, index: int) -> PatchRecord:
        weight = constant_value(view, node.input[1])
        dil = [int(d) for d in attr(node, "dilations")]
        dense = expand_kernel(weight, dil)
        b = NodeBuilder(view, node_label(node))
        w_name = b.const("dense_kernel", dense, dense.dtype)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
                 if a.name not in ("dilations", "kernel_shape")}
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
        attrs["kernel_shape"] = list(dense.shape[2:])
        attrs["dilations"] = [1] * len(dil)
        inputs = [node.input[0], w_name] + list(node.input[2:])
        b.op("Conv", inputs, output=node.output[0], hint="undilated", **attrs)
        return b.record(self.name, node, index,
                        f"Conv(kernel={list(weight.shape[2:])}, dilations={dil}) -> Conv(kernel="
                        f"{list(dense.shape[2:])}, dilations={[1] * len(dil)}), zero-expanded kernel")
