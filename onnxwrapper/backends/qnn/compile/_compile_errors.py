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
``Erf`` GELU (fused by the QNN EP)               a 1-D conv U-Net (generated stand-in)
a tensor row > 2²⁰ float elements              any (4 MiB VTCM budget)
============================================  =========================================================

Fine in fp32 (measured): Relu, Add, Mul, MatMul, Conv (regular, 1×1, grouped, depthwise stride 1,
dilated 1-D), ConvTranspose, Sigmoid, Tanh, Softmax, LayerNormalization, Transpose, Reshape,
Concat, Slice, Erf, Div, Sqrt, Pow, Clip, pooling, BatchNormalization, Resize, Expand, Neg,
HardSwish, Exp, LeakyRelu, PRelu.

:func:`compile_hint` adds to the typed error of such an fp32 compile the model's ops from the table
and what to do instead (``precision='fp16'``, or ``backend='cpu'`` as the fp32 reference); the
recovery ladder first tries to compile the graph in parts and run what fails on the CPU.

Every other compile failure of the QNN EP is also typed (:func:`qnn_error`, :func:`typed_failure`):
ORT raises ``EPFail`` with QNN's error name and code in the message (``… Failed to finalize QNN
graph. Error: QNN_COMMON_ERROR_MEM_ALLOC: Memory allocation related error., Code: 1002``); the user
gets :class:`~onnxwrapper.errors.CompileFailedError` (also an ``EPFail``) with ``error_name`` and
``error_code``. :func:`recoverable` says which failures the recovery ladder
(:mod:`onnxwrapper.backends.qnn.recovery._recovery`) may work around: QNN's own graph failures, a compile
past its budget, and a compiler that died of ``std::bad_alloc`` (measured: a 2×2³⁰ broadcast
feed). Other deaths of the compiler (a signal without ``bad_alloc``) are raised as they are.
"""

from __future__ import annotations

import re
from collections import Counter

from onnxwrapper.errors import BackendCompileError, CompileBudgetError, CompileFailedError, ContextLoadError

__all__ = ["FP32_UNSUPPORTED_OPS", "UNWRITABLE_MARKERS", "fp32_suspects", "compile_hint", "epcontext_unwritable",
           "qnn_error", "recoverable", "typed_failure", "budget_error", "context_memory_failure",
           "context_load_error", "remember_first_failure", "take_first_failure"]

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
        elif node.op_type == "Erf":
            found["Erf (GELU)"] += 1
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


def compile_hint(settings, proto) -> str:
    """What to say about a failed compile of ``proto`` besides QNN's error: for ``precision="fp32"``
    the ops of the model the simulator's fp32 mode is known not to finalize, and what to do instead;
    ``""`` otherwise."""
    if getattr(settings, "precision", None) != "fp32":
        return ""
    suspects = fp32_suspects(proto)
    have = (f"This model has {', '.join(suspects)}." if suspects else
            "None of the ops known to fail are in this model's main graph, so it is probably a tensor whose "
            "innermost dimension exceeds the 4 MiB VTCM budget (2^20 float32 elements).")
    return (f"The QNN HTP simulator's fp32 mode cannot finalize some graphs: it has no fp32 kernels for some ops "
            f"(measured: Gather, LSTM, GRU, HardSigmoid, depthwise Conv with stride (2, 1), Pad → long 1-D Conv, a "
            f"decomposed LayerNorm's ReduceSum → Mul, an Erf GELU). {have} Use precision='fp16' (the device's "
            f"numerics), or backend='cpu' as the fp32 reference.")


_QNN_NAME = re.compile(r"\b(QNN_[A-Z0-9_]+)")
_QNN_CODE = re.compile(r"Code:\s*(\d+)")
#: texts of the QNN EP's graph failures while compiling (onnxruntime-qnn 2.7.0 qnn_model.cc / qnn_backend_manager.cc)
_GRAPH_FAILURES = ("Failed to finalize QNN graph", "Failed to compose", "Failed to add node", "Failed to create QNN graph",
                   "QNN_GRAPH_ERROR", "QNN_COMMON_ERROR")


#: ORT's session-creation failure when the QNN EP's NHWC layout transform inserted a node the EP then
#: did not take (measured, onnxruntime 1.32 + onnxruntime-qnn 2.7.0, a ConvTranspose whose declared
#: output shape was wrong): a part of the graph the ladder can split off
_LAYOUT_FAILURE = "was inserted using the NHWC format as requested by QNNExecutionProvider, but was not selected"


def qnn_error(exc: BaseException | str) -> tuple[str | None, int | None]:
    """``(QNN error name, code)`` found in an ORT error message, e.g.
    ``("QNN_COMMON_ERROR_MEM_ALLOC", 1002)``; ``(None, None)`` when it names none."""
    text = str(exc)
    name = _QNN_NAME.search(text)
    code = _QNN_CODE.search(text)
    return (name.group(1) if name else None), (int(code.group(1)) if code else None)


def recoverable(exc: BaseException) -> bool:
    """True for a compile failure the recovery ladder may work around (see the module docstring):
    a typed :class:`~onnxwrapper.errors.CompileFailedError` (budget included), ORT's ``EPFail``
    naming a QNN graph failure, ORT's ``Fail`` for a node the QNN EP's layout transform inserted
    and then did not take, or a compiler that died of ``std::bad_alloc``."""
    if isinstance(exc, CompileFailedError):
        return getattr(exc, "budget", None) != "total"  # past the model's total budget: no rung may try more
    if isinstance(exc, BackendCompileError):
        return "bad_alloc" in (exc.stderr or "")
    if type(exc).__name__ == "Fail" and _LAYOUT_FAILURE in str(exc):
        return True
    return type(exc).__name__ == "EPFail" and any(text in str(exc) for text in _GRAPH_FAILURES)


def typed_failure(exc: BaseException, *, label: str, shapes=None, rung: str | None = None,
                  largest: str | None = None, hint: str = "") -> CompileFailedError:
    """The :class:`~onnxwrapper.errors.CompileFailedError` for compile failure ``exc`` of ``label``
    (``exc`` itself when it is one already, with ``rung``/``largest`` filled in). Chain it to ``exc``."""
    if isinstance(exc, CompileFailedError):
        exc.rung = rung or exc.rung
        exc.largest = largest or exc.largest
        extra = (f" Largest tensor: {largest}." if largest else "") + (f" {hint}" if hint else "")
        if extra and extra.strip() not in str(exc):
            exc.args = (str(exc) + extra,)
        return exc
    name, code = qnn_error(exc)
    if isinstance(exc, BackendCompileError):
        name = name or "std::bad_alloc"
    what = f"{name} {code}" if name and code is not None else (name or type(exc).__name__)
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    where = f"{label}" + (f" [{', '.join(f'{k}={tuple(v)}' for k, v in shapes.items())}]" if shapes else "")
    return CompileFailedError(
        f"The QNN HTP compiler could not compile {where} ({what}): {first}"
        + (f" Largest tensor: {largest}." if largest else "")
        + (f" {hint}" if hint else " Try smaller input shapes, another precision or target, or backend='cpu'."),
        backend="qnn", model=label, shapes=dict(shapes) if shapes else None, error_name=name, error_code=code,
        rung=rung, largest=largest, stderr=getattr(exc, "stderr", ""))


def budget_error(label: str, shapes, *, seconds: float, peak_mb, which: str, limit: float,
                 stderr: str = "") -> CompileBudgetError:
    """The :class:`~onnxwrapper.errors.CompileBudgetError` of a compile of ``label`` stopped after
    ``seconds`` (``which``: ``"time"`` or ``"memory"``, ``limit`` in s or MiB; ``"total"``: the model's
    compiles together went past ``limit`` seconds)."""
    where = f"{label}" + (f" [{', '.join(f'{k}={tuple(v)}' for k, v in shapes.items())}]" if shapes else "")
    if which == "total":
        return CompileBudgetError(
            f"Compiling {where} for the QNN HTP went past its total budget ({limit:g} s for the compile and every "
            f"step of the recovery ladder together; {seconds:.0f} s spent). Precompile it once, with a budget of "
            f"your choice: `aipc capture -o cap SCRIPT` then `aipc compile --from-capture cap --compile-budget "
            f"SECONDS`; or raise the backend option compile_budget (aipc --compile-budget).",
            backend="qnn", model=label, shapes=dict(shapes) if shapes else None, seconds=seconds, peak_mb=peak_mb,
            budget="total", error_name="budget:total", stderr=stderr)
    unit = "s" if which == "time" else "MiB"
    option = "compile_timeout" if which == "time" else "compile_memory_mb"
    peak = f", {peak_mb:.0f} MiB resident" if peak_mb else ""
    return CompileBudgetError(
        f"Compiling {where} for the QNN HTP went past its {which} budget ({limit:g} {unit}; stopped after "
        f"{seconds:.1f} s{peak}). The compiler process was ended; your process is unaffected and nothing was "
        f"cached. Raise the backend option {option} (aipc --{option.replace('_', '-')}), or feed smaller shapes.",
        backend="qnn", model=label, shapes=dict(shapes) if shapes else None, seconds=seconds, peak_mb=peak_mb,
        budget=which, error_name=f"budget:{which}", stderr=stderr)


def context_memory_failure(exc: BaseException) -> bool:
    """True when ``exc`` is ORT failing to load a QNN context for memory (measured on the simulator
    with ~2.9 GiB of contexts loaded: ``INVALID_GRAPH : Failed to load from EpContext model.
    contextCreateFromBinary failed. Error: QNN_COMMON_ERROR_MEM_ALLOC``)."""
    if isinstance(exc, ContextLoadError):
        return "MEM_ALLOC" in (exc.error_name or "")
    text = str(exc)
    return "MEM_ALLOC" in text and ("contextCreateFromBinary" in text or "EpContext" in text)


def context_load_error(exc: BaseException, label: str, live_mb: float) -> ContextLoadError:
    """The :class:`~onnxwrapper.errors.ContextLoadError` for ORT's failure ``exc`` to load a context of
    ``label`` while ``live_mb`` MiB of contexts stay loaded. Chain it to ``exc``."""
    name, code = qnn_error(exc)
    return ContextLoadError(
        f"[ONNXRuntimeError] : 11 : EP_FAIL : The QNN HTP could not load the compiled context of {label} "
        f"({name or type(exc).__name__}{f' {code}' if code is not None else ''}), also after releasing the other "
        f"loaded contexts of the session ({live_mb:.0f} MiB stay loaded by other sessions or are not released). "
        f"Lower the backend option context_memory_mb, close other sessions, or use smaller shapes.",
        backend="qnn", error_name=name, error_code=code, live_mb=live_mb)


#: failures of a first compile made elsewhere (the worker's first compile of a plain model), by token
_FIRST_FAILURES: dict = {}


def remember_first_failure(token: tuple, exc: BaseException) -> None:
    """Keep ``exc``, the failure of the compile of a model as given that was tried before the full open
    path (``token``: the model path and the settings), so that the recovery ladder starts from it
    instead of compiling the same graph again (:func:`take_first_failure`)."""
    _FIRST_FAILURES[token] = exc


def take_first_failure(token: tuple) -> BaseException | None:
    """The failure :func:`remember_first_failure` kept for ``token`` (once), or ``None``."""
    return _FIRST_FAILURES.pop(token, None)
