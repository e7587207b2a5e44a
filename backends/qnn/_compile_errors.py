"""Compile failures that deserve a clearer, typed error than ORT's: fp32 simulation the HTP cannot finalize.

``precision="fp32"`` (the simulator's fp32 mode, ``soc_model=30``) has no finalizable HTP kernels for
several common ops. The compile then fails with ORT's ``EPFail … Failed to finalize QNN graph …
QNN_COMMON_ERROR_MEM_ALLOC 1002`` whatever the options (tried: ``vtcm_mb`` 2/8,
``htp_graph_finalization_optimization_mode=3``, ``enable_htp_spill_fill_buffer=1``, ``htp_arch``
68–81, no ``soc_model``, ``enable_htp_monolithic_lstm=1``; ``enable_htp_graph_splitting=1`` crashes).
Measured on onnxruntime-qnn 2.7.0 (QNN SDK 2.51) by bisecting five real app models and with
single-op models (each of these compiles in FP16):

============================================  =========================================================
fails in fp32 (each alone)                     where seen
============================================  =========================================================
``Gather`` (by ids or by constant indices)     transformer embeddings (MiniLM)
``LSTM``, ``GRU``                              silero-vad, GRU seq2seq
``HardSigmoid``                                MobileNetV3-style CNNs (OCR recognizer)
depthwise ``Conv`` with stride (2, 1) + bias   OCR direction classifier
``Pad`` (reflect) → ``Conv`` (long 1-D kernel)  STFT front ends (silero-vad)
``ReduceSum`` → ``Mul`` (decomposed LayerNorm)  byte CNN (magika)
a tensor row > 2²⁰ float elements              any (4 MiB VTCM budget)
============================================  =========================================================

Fine in fp32 (measured): Relu, Add, Mul, MatMul, Conv (regular, 1×1, grouped, depthwise stride 1,
dilated 1-D), ConvTranspose, Sigmoid, Tanh, Softmax, LayerNormalization, Transpose, Reshape,
Concat, Slice, Erf, Div, Sqrt, Pow, Clip, pooling, BatchNormalization, Resize, Expand, Neg,
HardSwish, Exp, LeakyRelu, PRelu.

:func:`compile_failure` maps that failure of an fp32 compile to
:class:`~onnxwrapper.errors.BackendCapabilityError` naming the model's ops from the table and what
to do instead (``precision='fp16'``, or ``backend='cpu'`` as the fp32 reference).
"""

from __future__ import annotations

from collections import Counter

from onnxwrapper.errors import BackendCapabilityError

__all__ = ["FP32_UNSUPPORTED_OPS", "UNWRITABLE_MARKERS", "fp32_suspects", "compile_failure", "epcontext_unwritable"]

#: op types the simulator's fp32 mode cannot finalize (measured; see the module docstring)
FP32_UNSUPPORTED_OPS = ("Gather", "LSTM", "GRU", "HardSigmoid")
_MEM_ALLOC = "QNN_COMMON_ERROR_MEM_ALLOC"


def _attr_ints(node, name: str) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == name), [])


def fp32_suspects(model) -> list[str]:
    """The ops and patterns of ``model``'s main graph that the fp32 simulation is known not to finalize,
    e.g. ``["Gather ×3", "LSTM ×1", "depthwise Conv with stride (2, 1) ×2"]``."""
    found: Counter = Counter()
    producers = {o: n for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type in FP32_UNSUPPORTED_OPS:
            found[node.op_type] += 1
        elif node.op_type == "Conv":
            group = next((a.i for a in node.attribute if a.name == "group"), 1)
            strides = _attr_ints(node, "strides")
            if group > 1 and len(strides) == 2 and strides[0] != strides[1]:
                found[f"depthwise Conv with stride ({strides[0]}, {strides[1]})"] += 1
            source = producers.get(node.input[0]) if node.input else None
            if source is not None and source.op_type == "Pad":
                found["Pad → Conv"] += 1
        elif node.op_type == "Mul" and any(producers.get(i) is not None and producers[i].op_type == "ReduceSum"
                                           for i in node.input):
            found["ReduceSum → Mul"] += 1
    return [f"{name} ×{count}" for name, count in sorted(found.items())]


#: ORT's errors when it cannot write an EPContext model around an ``If`` that stays (measured, onnxruntime
#: 1.32 + onnxruntime-qnn 2.7.0: branch initializers, or branch values hoisted to the outer scope)
UNWRITABLE_MARKERS = ("references an ORT in-memory address marker", "Nodes in a graph must be topologically sorted")


def epcontext_unwritable(exc: BaseException) -> bool:
    """True when ``exc`` is ORT failing to *write* the EPContext model of a graph with control flow
    left in it (its If branches hold initializers), while a just-in-time session of it runs."""
    return any(text in str(exc) for text in UNWRITABLE_MARKERS)


def compile_failure(exc: BaseException, settings, proto, label: str) -> BaseException | None:
    """The typed error to raise instead of ``exc`` (a failed compile of ``proto``), or ``None`` to keep it.

    Only an fp32 compile that fails with ``QNN_COMMON_ERROR_MEM_ALLOC`` is mapped (chain the new
    error to ``exc``).
    """
    if getattr(settings, "precision", None) != "fp32" or _MEM_ALLOC not in str(exc):
        return None
    suspects = fp32_suspects(proto)
    have = (f"This model has {', '.join(suspects)}." if suspects else
            "None of the ops known to fail are in this model's main graph, so it is probably a tensor whose "
            "innermost dimension exceeds the 4 MiB VTCM budget (2^20 float32 elements).")
    return BackendCapabilityError(
        f"The QNN HTP simulator's fp32 mode cannot finalize the graph of {label or 'the model'} "
        f"(QNN_COMMON_ERROR_MEM_ALLOC 1002): it has no fp32 kernels for some ops (measured: Gather, LSTM, GRU, "
        f"HardSigmoid, depthwise Conv with stride (2, 1), Pad → long 1-D Conv, a decomposed LayerNorm's "
        f"ReduceSum → Mul). {have} Use precision='fp16' (the device's numerics), or backend='cpu' as the fp32 "
        f"reference.", backend="qnn")
