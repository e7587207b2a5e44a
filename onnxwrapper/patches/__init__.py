"""Operator patches: in-memory, semantics-preserving ONNX rewrites of nodes a backend rejects.

Registered patches (``list_patches()``; one module each, see their docstrings for the exact
rewrite, limits and numerics):

* ``mod`` — ``Mod`` → Div/Mul/Sub (integers exact, both ``fmod`` semantics; floats via
  ``a - b·sign(q)·floor(|q|)``);
* ``einsum`` — ``Einsum`` (1–2 operands) → Transpose/Reshape/MatMul (+ReduceSum);
* ``maxpool3d`` — 3-D ``MaxPool`` → 2-D ``MaxPool`` over (H, W) then D, with Reshapes.

Contract of a patch: ``matches(node, model) -> bool`` and ``apply(model, node) -> PatchRecord``
(rewrites the in-memory model in place, keeping the node's output names). The function backends
use is :func:`apply_patches` (copies the model, applies every applicable patch, optionally only to
given nodes, returns the model and the records); :func:`patch_offloaded` takes a partition's
off-target nodes directly. Nothing here reads beyond the given model or
writes files: patched models live in memory only (reproducible surgery, no hand-edited files).

Example::

    from onnxwrapper.patches import apply_patches
    patched, records = apply_patches("model.onnx", only_for={"/head/Einsum"})
    for r in records:
        print(r.summary)
"""

from __future__ import annotations

from onnxwrapper.patches._base import GraphView, Patch, PatchError, PatchRecord
from onnxwrapper.patches._registry import (
    PatchMatch,
    apply_patches,
    find_patches,
    get_patch,
    list_patches,
    load_model_proto,
    name_unnamed_nodes,
    patch_offloaded,
)

__all__ = [
    "GraphView",
    "Patch",
    "PatchError",
    "PatchMatch",
    "PatchRecord",
    "apply_patches",
    "find_patches",
    "get_patch",
    "list_patches",
    "load_model_proto",
    "name_unnamed_nodes",
    "patch_offloaded",
]
