"""Rewrite ``conv_taps``: a 1-D ``Conv`` → a sum of one-tap convolutions on shifted slices (kernel-avoiding).

Why (measured with onnxruntime-qnn 2.7.0 on the HTP simulator, FP16, soc_model 60, 4→4 channels):
the QNN HTP computes a Conv1d whose receptive field spans 7 or more input positions wrong at
sequence lengths 8, 16 and 24 (SNR 1–5 dB; right at 17: 68 dB): kernel 5 with dilation 3 and pads
6 (the case found in silero-style VAD models), and undilated kernels 7, 9, 11, 13 alike, while
kernels 3 and 5 are right. So rewriting the dilation away (``dilated_conv``) does not avoid it;
convolving tap by tap does (measured: 65–68 dB at 8, 16, 24, 17).

Rewrite: ``xp = Pad(x, pads)`` (zeros, the Conv's own ``pads``); for each tap ``i`` of the kernel
``x_i = Slice(xp, start = i·d, end = i·d − (span − 1) (to the end when 0), step = stride)``
(``span = (k − 1)·d + 1``) and ``y_i = Conv(x_i, W[:, :, i:i+1])`` (kernel 1, same ``group``;
the bias on ``y_0`` only); ``y = Sum(y_0, …, y_{k−1})``. The slice bounds are relative to the
padded length, so dynamic sequence lengths work.

Exactness: **exact in exact arithmetic**; in floating point the same products, summed tap by tap
instead of in the kernel's order: ``|Δ| ≤ γₙ·Σ|w·x|`` (``γₙ = n·u/(1 − n·u)``, ``n = k·C/group``
terms per output). Non-finite inputs behave as in the original (no product is added or dropped).
Cost: ``k`` convolutions of kernel 1 and ``k`` slices instead of one convolution.

Requirements: a rank-3 input (one spatial axis), a constant weight, ``auto_pad`` ``NOTSET`` or
``VALID``. Applied only when a repair recipe names it (not automatic).
"""

from __future__ import annotations

import numpy as np
import onnx

from onnxwrapper.patches._base import (GraphView, NodeBuilder, Patch, PatchRecord, attr, constant_input, constant_value,
                                       node_label)

__all__ = ["ConvToTaps"]

_INT64_MAX = np.iinfo(np.int64).max


class ConvToTaps(Patch):
    """A 1-D ``Conv`` → ``Pad``, one ``Slice`` + kernel-1 ``Conv`` per tap, ``Sum``."""

    name = "conv_taps"
    op_type = "Conv"
    description = "1-D Conv -> Pad + per-tap Slice and kernel-1 Conv + Sum (avoids the HTP's wide Conv1d kernel)"
    exactness = ("exact in exact arithmetic; in floating point the same products summed tap by tap "
                 "(|delta| <= gamma_n * sum|w*x|)")
    automatic = False

    def _reject_reason(self, node: onnx.NodeProto, view: GraphView) -> str | None:
        weight, reason = constant_input(view, node, 1, "weight")
        if reason:
            return reason
        if weight.ndim != 3:
            return f"only 1-D convolutions (weight of rank 3) are rewritten; this weight has rank {weight.ndim}"
        if str(attr(node, "auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
            return "auto_pad SAME_* is not handled (give explicit pads)"
        if weight.shape[2] < 2:
            return "the kernel has one tap already"
        return None

    def _apply(self, view: GraphView, node: onnx.NodeProto, index: int) -> PatchRecord:
        weight = constant_value(view, node.input[1])
        k = int(weight.shape[2])
        d = int((attr(node, "dilations", None) or [1])[0])
        s = int((attr(node, "strides", None) or [1])[0])
        pads = [0, 0] if str(attr(node, "auto_pad", "NOTSET")) == "VALID" else [int(p) for p in
                                                                               (attr(node, "pads", None) or [0, 0])]
        group = int(attr(node, "group", 1))
        span = (k - 1) * d + 1
        b = NodeBuilder(view, node_label(node))
        x = node.input[0]
        if any(pads):
            x = b.op("Pad", [x, b.const("pads", [0, 0, pads[0], 0, 0, pads[1]], np.int64)], hint="pad")
        axes = b.const("axis", [2], np.int64)
        steps = b.const("step", [s], np.int64)
        terms = []
        for i in range(k):
            end = i * d - (span - 1)
            xi = b.op("Slice", [x, b.const(f"start{i}", [i * d], np.int64),
                                b.const(f"end{i}", [end if end else _INT64_MAX], np.int64), axes, steps],
                      hint=f"tap{i}_slice")
            inputs = [xi, b.const(f"w{i}", weight[:, :, i:i + 1], weight.dtype)]
            if i == 0 and len(node.input) > 2 and node.input[2]:
                inputs.append(node.input[2])
            terms.append(b.op("Conv", inputs, hint=f"tap{i}_conv", kernel_shape=[1], group=group))
        b.op("Sum", terms, output=node.output[0], hint="sum_taps")
        return b.record(self.name, node, index,
                        f"Conv1d(kernel={k}, dilation={d}, pads={pads}, stride={s}) -> Pad + {k} x (Slice, kernel-1 "
                        f"Conv) + Sum")
