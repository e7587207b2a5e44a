"""Tiny control-flow models (``If``, ``Loop``, ``Scan``) and an embedding ``Gather``, built with onnx.helper
(IR version 9, opset 17), for the QNN backend's control-flow specialization and fp32 tests.

:func:`if_lstm` is silero-vad's op16 model in miniature (its structure, not its weights): a rank-0
int64 ``sr`` selects one of two branches, each with a shape-computed ``Pad``, torch-exported
``squeeze``/``is_batched`` ``If`` nodes and an LSTM whose state the caller feeds back.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.models import make_model


def _const(name, array):
    return h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(array), name + "_v"))


def _vi(name, shape):
    return h.make_tensor_value_info(name, T.FLOAT, shape)


def _branch(p: str, stride: int, hidden: int, rng) -> object:
    """One sampling-rate branch: Pad (pads computed from Shape) → Conv(stride) → Relu → If(squeeze time
    axis when it is 1) → If(add a batch axis unless rank 2) → LSTM on ``state`` → MatMul → Sigmoid."""
    H = hidden
    inits = [nh.from_array((rng.standard_normal(s) * k).astype(np.float32), p + n)
             for n, s, k in (("conv_w", (H, 1, stride), 0.5), ("W", (1, 4 * H, H), 0.3), ("R", (1, 4 * H, H), 0.3),
                             ("B", (1, 8 * H), 0.1), ("wout", (H, 1), 0.5))]
    squeeze = h.make_graph([_const(p + "ax2", np.array([2], np.int64)),
                            h.make_node("Squeeze", [p + "relu", p + "ax2"], [p + "sq"])],
                           p + "squeeze", [], [_vi(p + "sq", [p + "b", H])])
    keep = h.make_graph([h.make_node("Identity", [p + "relu"], [p + "id"])], p + "keep", [],
                        [_vi(p + "id", [p + "b", H, p + "t"])])
    batch = h.make_graph([_const(p + "ax0", np.array([0], np.int64)),
                          h.make_node("Unsqueeze", [p + "y", p + "ax0"], [p + "yb"])], p + "batch", [],
                         [_vi(p + "yb", None)])
    batched = h.make_graph([h.make_node("Identity", [p + "y"], [p + "yi"])], p + "batched", [], [_vi(p + "yi", None)])
    nodes = [
        _const(p + "ax1", np.array([1], np.int64)), h.make_node("Unsqueeze", ["input", p + "ax1"], [p + "x3"]),
        h.make_node("Shape", [p + "x3"], [p + "x3s"]), _const(p + "z3", np.zeros(3, np.int64)),
        h.make_node("Mul", [p + "x3s", p + "z3"], [p + "pt"]),
        h.make_node("Concat", [p + "z3", p + "pt"], [p + "pads"], axis=0),
        h.make_node("Pad", [p + "x3", p + "pads"], [p + "x3p"]),
        h.make_node("Conv", [p + "x3p", p + "conv_w"], [p + "conv"], strides=[stride]),
        h.make_node("Relu", [p + "conv"], [p + "relu"]), h.make_node("Shape", [p + "relu"], [p + "shape"]),
        _const(p + "i2", np.array(2, np.int64)), _const(p + "one", np.array(1, np.int64)),
        h.make_node("Gather", [p + "shape", p + "i2"], [p + "t"]),
        h.make_node("Equal", [p + "t", p + "one"], [p + "t1"]),
        h.make_node("If", [p + "t1"], [p + "y"], then_branch=squeeze, else_branch=keep),
        h.make_node("Shape", [p + "y"], [p + "ys"]), h.make_node("Size", [p + "ys"], [p + "rank"]),
        _const(p + "two", np.array(2, np.int64)), h.make_node("Equal", [p + "rank", p + "two"], [p + "is2"]),
        h.make_node("Not", [p + "is2"], [p + "not2"]),
        h.make_node("If", [p + "not2"], [p + "z"], then_branch=batch, else_branch=batched),
        _const(p + "a0", np.array([0], np.int64)), h.make_node("Unsqueeze", [p + "z", p + "a0"], [p + "X"]),
        _const(p + "s0", np.array(0, np.int64)), _const(p + "s1", np.array(1, np.int64)),
        h.make_node("Gather", ["state", p + "s0"], [p + "h0r"]), h.make_node("Gather", ["state", p + "s1"], [p + "c0r"]),
        h.make_node("Unsqueeze", [p + "h0r", p + "a0"], [p + "h0"]),
        h.make_node("Unsqueeze", [p + "c0r", p + "a0"], [p + "c0"]),
        h.make_node("LSTM", [p + "X", p + "W", p + "R", p + "B", "", p + "h0", p + "c0"], [p + "Y", p + "Yh", p + "Yc"],
                    hidden_size=H),
        h.make_node("Squeeze", [p + "Yh", p + "a0"], [p + "hs"]),
        h.make_node("MatMul", [p + "hs", p + "wout"], [p + "lg"]), h.make_node("Sigmoid", [p + "lg"], [p + "out"]),
        h.make_node("Concat", [p + "Yh", p + "Yc"], [p + "stn"], axis=0),
    ]
    return h.make_graph(nodes, p + "branch", [], [_vi(p + "out", [None, 1]), _vi(p + "stn", [None, None, None])], inits)


def if_lstm(hidden: int = 4, seed: int = 0, static: bool = False, stride8k: int = 4) -> bytes:
    """``If(sr == 16000, 16 kHz branch (Conv stride 8), 8 kHz branch (Conv stride ``stride8k``))``.

    Inputs ``input`` float[batch, samples], ``state`` float[2, batch, hidden], ``sr`` int64[] (rank 0);
    outputs ``output`` float[batch, 1], ``stateN`` float[2, batch, hidden]. Valid feeds: 8 samples at
    16000, 4 samples at 8000 — at each, the *other* branch is shape-invalid (its LSTM would get rank 5),
    as silero-vad's 8 kHz branch is at 576 samples. ``static``: input float[1, 8], state
    float[2, 1, hidden] (then only ``sr`` selects the path; use ``stride8k=8`` so that both branches
    are valid at 8 samples, else ORT itself cannot load it).
    """
    return _if_model(hidden, seed, static, stride8k, data_condition=False)


def if_lstm_on_data(hidden: int = 4, seed: int = 0, static: bool = True) -> bytes:
    """:func:`if_lstm` whose branch is chosen by the data, ``If(ReduceSum(input) > 0, …)`` (no ``sr``
    input; both branches valid at 8 samples): a condition no specialization decides, so the ``If`` stays
    and runs on CPU (ORT cannot write an EPContext model around it: its branches hold initializers)."""
    return _if_model(hidden, seed, static, 8, data_condition=True)


def _if_model(hidden: int, seed: int, static: bool, stride8k: int, *, data_condition: bool) -> bytes:
    rng = np.random.default_rng(seed)
    if data_condition:
        cond = [h.make_node("ReduceSum", ["input"], ["total"], keepdims=0),
                _const("zero", np.array(0, np.float32)), h.make_node("Greater", ["total", "zero"], ["is16"])]
    else:
        cond = [_const("k16", np.array(16000, np.int64)), h.make_node("Equal", ["sr", "k16"], ["is16"])]
    nodes = cond + [h.make_node("If", ["is16"], ["o", "s"], then_branch=_branch("a_", 8, hidden, rng),
                                else_branch=_branch("b_", stride8k, hidden, rng)),
                    h.make_node("Identity", ["o"], ["output"]), h.make_node("Identity", ["s"], ["stateN"])]
    b, n = (1, 8) if static else ("batch", "samples")
    inputs = [_vi("input", [b, n]), _vi("state", [2, b, hidden])]
    if not data_condition:
        inputs.append(h.make_tensor_value_info("sr", T.INT64, []))
    g = h.make_graph(nodes, "if_lstm", inputs, [_vi("output", [b, 1]), _vi("stateN", [2, b, hidden])])
    return make_model(g)


def if_feeds(samples: int = 8, sr: int = 16000, hidden: int = 4, seed: int = 1) -> dict:
    """A valid feed of :func:`if_lstm` (8 samples at 16 kHz or 4 at 8 kHz)."""
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((1, samples)).astype(np.float32),
            "state": (rng.standard_normal((2, 1, hidden)) * 0.3).astype(np.float32), "sr": np.array(sr, np.int64)}


def loop(static: bool = False) -> bytes:
    """MatMul → Relu → ``Loop`` (trip count ``M`` int64[]: acc = 0.5·acc + r) → Add; x float[batch|2, 4] → y."""
    w = nh.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16 - 0.4, "w")
    body = h.make_graph([_const("half", np.array(0.5, np.float32)), h.make_node("Mul", ["acc_in", "half"], ["acc_h"]),
                         h.make_node("Add", ["acc_h", "r"], ["acc_out"]),
                         h.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
                        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                         _vi("acc_in", None)],
                        [h.make_tensor_value_info("cond_out", T.BOOL, []), _vi("acc_out", None)])
    dims = [2, 4] if static else ["batch", 4]
    nodes = [h.make_node("MatMul", ["x", "w"], ["a"]), h.make_node("Relu", ["a"], ["r"]),
             h.make_node("Loop", ["M", "", "r"], ["acc"], body=body), h.make_node("Add", ["acc", "b"], ["y"])]
    g = h.make_graph(nodes, "loop", [_vi("x", dims), h.make_tensor_value_info("M", T.INT64, [])], [_vi("y", dims)],
                     [w, nh.from_array(np.full(4, 0.25, np.float32), "b")])
    return make_model(g)


def scan(static: bool = False) -> bytes:
    """MatMul → ``Scan`` (running sum over axis 0) → Relu; x float[seq|5, 4] → total float[4], y float[seq, 4]."""
    w = nh.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16 - 0.4, "w")
    body = h.make_graph([h.make_node("Add", ["s_in", "x_t"], ["s_out"]), h.make_node("Identity", ["s_out"], ["y_t"])],
                        "sb", [_vi("s_in", [4]), _vi("x_t", [4])], [_vi("s_out", [4]), _vi("y_t", [4])])
    dims = [5, 4] if static else ["seq", 4]
    nodes = [h.make_node("MatMul", ["x", "w"], ["a"]),
             h.make_node("Scan", ["zero", "a"], ["total", "ys"], body=body, num_scan_inputs=1),
             h.make_node("Relu", ["ys"], ["y"])]
    g = h.make_graph(nodes, "scan", [_vi("x", dims)], [_vi("total", [4]), _vi("y", dims)],
                     [w, nh.from_array(np.zeros(4, np.float32), "zero")])
    return make_model(g)


def gather_embedding() -> bytes:
    """``Y = Gather(table[8, 16], ids)``; ids int64[1, 4] → Y float[1, 4, 16] (an op the simulator's fp32
    mode cannot finalize)."""
    table = nh.from_array(np.arange(128, dtype=np.float32).reshape(8, 16) / 128, "table")
    g = h.make_graph([h.make_node("Gather", ["table", "ids"], ["Y"])], "gather",
                     [h.make_tensor_value_info("ids", T.INT64, [1, 4])], [_vi("Y", [1, 4, 16])], [table])
    return make_model(g)
