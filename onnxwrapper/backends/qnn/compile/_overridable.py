"""Overridable initializers (and LoRA adapters) survive the EPContext compile.

An *overridable initializer* is an initializer that is also a graph input (IR version ≥ 4): ORT
lists it in ``get_overridable_initializers()`` and accepts a value for it in the feed, and a LoRA
adapter (``RunOptions.add_active_adapter``) supplies such values per run.

ORT's EPContext writer (measured on onnxruntime 1.32.0 + onnxruntime-qnn 2.7.0) keeps these
initializers in the ctx model but drops them from the graph inputs, so the compiled session has
no overridable initializer and rejects the adapter (``Invalid input name: lora_param_a``), where
ORT + QNN EP, loading the original model, returns the adapted result. Measured, ORT's own ctx
model:

* ``two_params_lora_model.onnx`` (ORT's LoRA test model: ``MatMul(input_x, weight_x)`` on QNN,
  the LoRA ``MatMul`` + ``Gemm`` on CPU): ``lora_param_a``/``lora_param_b`` stay initializers of
  the CPU nodes;
* a ``Mul(X, W)`` model with ``W`` overridable, all on QNN: the ``EPContext`` node has the inputs
  ``[X, W]`` — the QNN graph takes ``W`` as an input, not a constant.

Declaring them as graph inputs again (the original ``ValueInfoProto``: type and symbolic shape)
gives the ctx session ORT + QNN's behaviour in both cases (measured: adapted output
``[154, 176, 198, 220]``; a fed ``W`` changes the result as it does on ORT + QNN).
"""

from __future__ import annotations

__all__ = ["overridable_initializers", "restore_overridable_initializers"]


def overridable_initializers(model) -> list:
    """The graph-input ``ValueInfoProto`` of every overridable initializer of ``model``, in graph-input order."""
    inits = {i.name for i in model.graph.initializer}
    return [value for value in model.graph.input if value.name in inits]


def restore_overridable_initializers(ctx, original) -> list[str]:
    """Re-declare as graph inputs of ``ctx`` (an EPContext ``onnx.ModelProto``, changed in place)
    the overridable initializers of ``original`` that are still initializers of ``ctx``.

    Returns:
        The names re-declared, in the original graph-input order.
    """
    ctx_inits = {i.name for i in ctx.graph.initializer}
    present = {value.name for value in ctx.graph.input}
    restored = []
    for value in overridable_initializers(original):
        if value.name in ctx_inits and value.name not in present:
            ctx.graph.input.append(value)
            restored.append(value.name)
    return restored
