"""Rewrite ``clamp_fp16``: clamp a node's output to FP16's range — the known FP16 fix of T5.

Why: T5's feed-forward activations grow beyond IEEE 754 binary16's largest value (65504) in some
layers; no power-of-two scale can absorb an overflow that happens *inside* a non-homogeneous
expression. HF transformers' T5 port clamps the hidden states to ``±(finfo(float16).max − 1000)``
= ±64504 after each layer when it runs in FP16 (``modeling_t5.py``, ``T5Block.forward``: "clamp inf
values to enable fp16 training"); this rewrite does the same in an ONNX graph, at a named node's
output: ``Clip(x, −limit, limit)``.

Exactness: **not exact**. Values the reference computes beyond ±limit become ±limit; values within
are unchanged (bit-exact). The model then computes what its FP16 port computes, not what its
FP32 reference does; ``aipc fix`` offers it only after the exact rewrites and verifies the outputs
against the reference like any candidate, and states the values it changes.

Applied only when a repair recipe names it (not automatic).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from onnxwrapper.patches._base import GraphView, Patch, PatchError, PatchRecord, node_label

__all__ = ["ClampFp16", "HF_T5_LIMIT"]

#: HF transformers' T5 clamp value in FP16: ``torch.finfo(torch.float16).max - 1000``
HF_T5_LIMIT = 64504.0
_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
_NP = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.DOUBLE: np.float64}


class ClampFp16(Patch):
    """``y = node(…)`` → ``y = Clip(node(…), −limit, limit)`` (HF transformers' T5 FP16 clamp)."""

    name = "clamp_fp16"
    op_type = ""
    description = "clamp a node's output to +-64504 (FP16's range minus 1000), as HF transformers' T5 does in FP16"
    exactness = ("not exact: values beyond +-limit become +-limit (the model's own FP16 fix); values within are "
                 "unchanged")
    automatic = False
    parameters = {"limit": "the clamp bound (default 64504 = FP16's largest value minus 1000, as T5's port)",
                  "output": "which output of the node to clamp (default 0)"}

    def __init__(self, **params) -> None:
        super().__init__(**params)
        limit = params.get("limit", HF_T5_LIMIT)
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not math.isfinite(limit) or limit <= 0:
            raise PatchError(f"Patch 'clamp_fp16': limit must be a positive finite number, got {limit!r}.",
                             patch=self.name)
        output = params.get("output", 0)
        if isinstance(output, bool) or not isinstance(output, int) or output < 0:
            raise PatchError(f"Patch 'clamp_fp16': output must be a non-negative integer, got {output!r}.",
                             patch=self.name)
        self.limit, self.output = float(limit), output

    def targets(self, node: onnx.NodeProto) -> bool:
        """Any node with the output to clamp."""
        return len(node.output) > self.output

    def _reject_reason(self, node: onnx.NodeProto, view: GraphView) -> str | None:
        if len(node.output) <= self.output or not node.output[self.output]:
            return f"the node has no output number {self.output}"
        elem = view.elem_type(node.output[self.output])
        if elem is not None and elem not in _FLOATS:
            return "the output to clamp is not a floating-point tensor"
        return None

    def _apply(self, view: GraphView, node: onnx.NodeProto, index: int) -> PatchRecord:
        out = node.output[self.output]
        elem = view.elem_type(out) or onnx.TensorProto.FLOAT
        dtype = _NP.get(elem, np.float32)
        raw = view.unique_name(f"{out}/unclamped")
        lo = view.add_initializer(f"{node_label(node)}/clamp/min", np.asarray(-self.limit, dtype))
        hi = view.add_initializer(f"{node_label(node)}/clamp/max", np.asarray(self.limit, dtype))
        name = view.unique_name(f"{node_label(node)}/clamp_fp16")
        producer = onnx.NodeProto()
        producer.CopyFrom(node)
        producer.output[self.output] = raw
        clip = onnx.helper.make_node("Clip", [raw, lo, hi], [out], name=name)
        view.replace_node(index, [producer, clip])
        view._types = None
        return PatchRecord(patch=self.name, node_name=node.name, op_type=node.op_type, node_index=index,
                           summary=f"'{out}' clamped to +-{self.limit:g}", added_nodes=((name, "Clip"),),
                           added_initializers=(lo, hi), outputs=(out,))
