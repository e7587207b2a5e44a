"""Tiny ONNX models of the qnn robustness probe, built with ``onnx.helper`` (IR version 9, opset 17, so every ORT
1.2x accepts them; each compiles on the HTP simulator in well under a second)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

IR = 9


# -- models --------------------------------------------------------------------------------------
def model(nodes, inputs, outputs, inits=(), name="g", opset=17, ir=IR) -> bytes:
    """Serialize a graph; ``inputs``/``outputs`` are ``(name, elem type, shape)`` triples."""
    g = h.make_graph(
        nodes,
        name,
        [h.make_tensor_value_info(*i) for i in inputs],
        [h.make_tensor_value_info(*o) for o in outputs],
        list(inits),
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=ir).SerializeToString()


def conv(batch=1, hw=(8, 8), seed=0, scale=1.0) -> bytes:
    """Conv(3→4, 3×3) → Relu → Conv(4→2, 1×1); X float[batch,3,H,W] → Y float[batch,2,H,W] (dims may be str)."""
    rng = np.random.default_rng(seed)
    inits = [
        nh.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3 * scale).astype(np.float32), "w1"),
        nh.from_array((rng.standard_normal((2, 4, 1, 1)) * 0.3).astype(np.float32), "w2"),
    ]
    nodes = [
        h.make_node("Conv", ["X", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c1"], ["r1"]),
        h.make_node("Conv", ["r1", "w2"], ["Y"]),
    ]
    return model(nodes, [("X", T.FLOAT, [batch, 3, *hw])], [("Y", T.FLOAT, [batch, 2, *hw])], inits, "conv")


def mul(w=((1, 2), (3, 4), (5, 6)), dims=(3, 2)) -> bytes:
    """``Y = X * W``; X float[3,2] (or ``dims``), W initializer."""
    return model(
        [h.make_node("Mul", ["X", "W"], ["Y"])],
        [("X", T.FLOAT, list(dims))],
        [("Y", T.FLOAT, list(dims))],
        [nh.from_array(np.asarray(w, np.float32), "W")],
        "mul",
    )


def unary(op="Relu", dims=("N", "M"), elem=T.FLOAT, **attrs) -> bytes:
    """One elementwise node ``Y = op(X)``."""
    return model(
        [h.make_node(op, ["X"], ["Y"], **attrs)], [("X", elem, list(dims))], [("Y", elem, list(dims))], name=op.lower()
    )


def gather_embedding() -> bytes:
    """``Y = Gather(table[8,16], ids)``; ids int64[1,4] (the op the simulator's fp32 mode cannot finalize)."""
    table = nh.from_array(np.arange(128, dtype=np.float32).reshape(8, 16) / 128, "table")
    return model(
        [h.make_node("Gather", ["table", "ids"], ["Y"])],
        [("ids", T.INT64, [1, 4])],
        [("Y", T.FLOAT, [1, 4, 16])],
        [table],
        "gather",
    )


def conv_det_relu() -> bytes:
    """Conv → Reshape → Det (no QNN kernel) → Relu: a partially offloaded model. X float[1,1,2,2] → Y float[1]."""
    inits = [
        nh.from_array(np.full((1, 1, 1, 1), 0.5, np.float32), "w"),
        nh.from_array(np.array([1, 2, 2], np.int64), "s"),
    ]
    nodes = [
        h.make_node("Conv", ["X", "w"], ["c"]),
        h.make_node("Reshape", ["c", "s"], ["r"]),
        h.make_node("Det", ["r"], ["d"]),
        h.make_node("Relu", ["d"], ["Y"]),
    ]
    return model(nodes, [("X", T.FLOAT, [1, 1, 2, 2])], [("Y", T.FLOAT, [1])], inits, "partial")


def _c(name, array):
    return h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(array), name + "_v"))


def if_lstm(hidden: int = 4, seed: int = 0, static: bool = False, stride8k: int = 4) -> bytes:
    """silero-vad's op16 model in miniature: rank-0 int64 ``sr`` picks a branch (16 kHz: Conv stride 8; 8 kHz:
    stride 4), each branch pads with shape-computed pads, squeezes the time axis when it is 1 (an ``If`` whose
    branches have ranks 2 and 3), re-adds a batch axis when the rank is not 2 (another ``If``) and runs an LSTM
    on ``state``. Inputs ``input`` float[batch, samples], ``state`` float[2, batch, hidden], ``sr`` int64[];
    outputs ``output`` float[batch, 1], ``stateN`` float[2, batch, hidden]. Valid feeds: 8 samples at 16000,
    4 samples at 8000 (the other branch is then shape-invalid, as silero's 8 kHz branch is for 576 samples).
    ``static``: input float[1, 8], state float[2, 1, hidden] (only ``sr`` then selects the path); use
    ``stride8k=8`` with it, else plain ORT itself cannot load the model (the 8 kHz branch is statically invalid)."""
    H, rng = hidden, np.random.default_rng(seed)

    def vi(name, shape):
        return h.make_tensor_value_info(name, T.FLOAT, shape)

    def branch(p, stride):
        inits = [
            nh.from_array((rng.standard_normal(s) * k).astype(np.float32), p + n)
            for n, s, k in (
                ("conv_w", (H, 1, stride), 0.5),
                ("W", (1, 4 * H, H), 0.3),
                ("R", (1, 4 * H, H), 0.3),
                ("B", (1, 8 * H), 0.1),
                ("wout", (H, 1), 0.5),
            )
        ]
        sq = h.make_graph(
            [_c(p + "ax2", np.array([2], np.int64)), h.make_node("Squeeze", [p + "relu", p + "ax2"], [p + "sq"])],
            p + "squeeze",
            [],
            [vi(p + "sq", [p + "b", H])],
        )
        keep = h.make_graph(
            [h.make_node("Identity", [p + "relu"], [p + "id"])], p + "keep", [], [vi(p + "id", [p + "b", H, p + "t"])]
        )
        unb = h.make_graph(
            [_c(p + "ax0", np.array([0], np.int64)), h.make_node("Unsqueeze", [p + "y", p + "ax0"], [p + "yb"])],
            p + "batch",
            [],
            [vi(p + "yb", None)],
        )
        bat = h.make_graph([h.make_node("Identity", [p + "y"], [p + "yi"])], p + "batched", [], [vi(p + "yi", None)])
        nodes = [
            _c(p + "ax1", np.array([1], np.int64)),
            h.make_node("Unsqueeze", ["input", p + "ax1"], [p + "x3"]),
            h.make_node("Shape", [p + "x3"], [p + "x3s"]),
            _c(p + "z3", np.zeros(3, np.int64)),
            h.make_node("Mul", [p + "x3s", p + "z3"], [p + "pt"]),
            h.make_node("Concat", [p + "z3", p + "pt"], [p + "pads"], axis=0),
            h.make_node("Pad", [p + "x3", p + "pads"], [p + "x3p"]),
            h.make_node("Conv", [p + "x3p", p + "conv_w"], [p + "conv"], strides=[stride]),
            h.make_node("Relu", [p + "conv"], [p + "relu"]),
            h.make_node("Shape", [p + "relu"], [p + "shape"]),
            _c(p + "i2", np.array(2, np.int64)),
            _c(p + "one", np.array(1, np.int64)),
            h.make_node("Gather", [p + "shape", p + "i2"], [p + "t"]),
            h.make_node("Equal", [p + "t", p + "one"], [p + "t1"]),
            h.make_node("If", [p + "t1"], [p + "y"], then_branch=sq, else_branch=keep),
            h.make_node("Shape", [p + "y"], [p + "ys"]),
            h.make_node("Size", [p + "ys"], [p + "rank"]),
            _c(p + "two", np.array(2, np.int64)),
            h.make_node("Equal", [p + "rank", p + "two"], [p + "is2"]),
            h.make_node("Not", [p + "is2"], [p + "not2"]),
            h.make_node("If", [p + "not2"], [p + "z"], then_branch=unb, else_branch=bat),
            _c(p + "a0", np.array([0], np.int64)),
            h.make_node("Unsqueeze", [p + "z", p + "a0"], [p + "X"]),
            _c(p + "s0", np.array(0, np.int64)),
            _c(p + "s1", np.array(1, np.int64)),
            h.make_node("Gather", ["state", p + "s0"], [p + "h0r"]),
            h.make_node("Gather", ["state", p + "s1"], [p + "c0r"]),
            h.make_node("Unsqueeze", [p + "h0r", p + "a0"], [p + "h0"]),
            h.make_node("Unsqueeze", [p + "c0r", p + "a0"], [p + "c0"]),
            h.make_node(
                "LSTM",
                [p + "X", p + "W", p + "R", p + "B", "", p + "h0", p + "c0"],
                [p + "Y", p + "Yh", p + "Yc"],
                hidden_size=H,
            ),
            h.make_node("Squeeze", [p + "Yh", p + "a0"], [p + "hs"]),
            h.make_node("MatMul", [p + "hs", p + "wout"], [p + "lg"]),
            h.make_node("Sigmoid", [p + "lg"], [p + "out"]),
            h.make_node("Concat", [p + "Yh", p + "Yc"], [p + "stn"], axis=0),
        ]
        return h.make_graph(
            nodes, p + "branch", [], [vi(p + "out", [None, 1]), vi(p + "stn", [None, None, None])], inits
        )

    nodes = [
        _c("k16", np.array(16000, np.int64)),
        h.make_node("Equal", ["sr", "k16"], ["is16"]),
        h.make_node("If", ["is16"], ["o", "s"], then_branch=branch("a_", 8), else_branch=branch("b_", stride8k)),
        h.make_node("Identity", ["o"], ["output"]),
        h.make_node("Identity", ["s"], ["stateN"]),
    ]
    b, n = (1, 8) if static else ("batch", "samples")
    return model(
        nodes,
        [("input", T.FLOAT, [b, n]), ("state", T.FLOAT, [2, b, H]), ("sr", T.INT64, [])],
        [("output", T.FLOAT, [b, 1]), ("stateN", T.FLOAT, [2, b, H])],
        name="if_lstm",
    )


def if_feeds(samples=8, sr=16000, hidden=4, seed=1) -> dict:
    """A valid feed of :func:`if_lstm` (8 samples at 16 kHz or 4 at 8 kHz)."""
    rng = np.random.default_rng(seed)
    return {
        "input": rng.standard_normal((1, samples)).astype(np.float32),
        "state": (rng.standard_normal((2, 1, hidden)) * 0.3).astype(np.float32),
        "sr": np.array(sr, np.int64),
    }


def loop(static=False) -> bytes:
    """MatMul → Relu → ``Loop`` (trip count ``M`` int64[]: acc = 0.5·acc + r) → Add. x float[batch|2, 4] → y."""
    w = nh.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16 - 0.4, "w")
    body = h.make_graph(
        [
            _c("half", np.array(0.5, np.float32)),
            h.make_node("Mul", ["acc_in", "half"], ["acc_h"]),
            h.make_node("Add", ["acc_h", "r"], ["acc_out"]),
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            h.make_tensor_value_info("i", T.INT64, []),
            h.make_tensor_value_info("cond_in", T.BOOL, []),
            h.make_tensor_value_info("acc_in", T.FLOAT, None),
        ],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("acc_out", T.FLOAT, None)],
    )
    dims = [2, 4] if static else ["batch", 4]
    nodes = [
        h.make_node("MatMul", ["x", "w"], ["a"]),
        h.make_node("Relu", ["a"], ["r"]),
        h.make_node("Loop", ["M", "", "r"], ["acc"], body=body),
        h.make_node("Add", ["acc", "b"], ["y"]),
    ]
    return model(
        nodes,
        [("x", T.FLOAT, dims), ("M", T.INT64, [])],
        [("y", T.FLOAT, dims)],
        [w, nh.from_array(np.full(4, 0.25, np.float32), "b")],
        "loop",
    )


def scan(static=False) -> bytes:
    """MatMul → ``Scan`` (running sum over axis 0) → Relu. x float[seq|5, 4] → total float[4], y float[seq, 4]."""
    w = nh.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 16 - 0.4, "w")
    body = h.make_graph(
        [h.make_node("Add", ["s_in", "x_t"], ["s_out"]), h.make_node("Identity", ["s_out"], ["y_t"])],
        "sb",
        [h.make_tensor_value_info("s_in", T.FLOAT, [4]), h.make_tensor_value_info("x_t", T.FLOAT, [4])],
        [h.make_tensor_value_info("s_out", T.FLOAT, [4]), h.make_tensor_value_info("y_t", T.FLOAT, [4])],
    )
    dims = [5, 4] if static else ["seq", 4]
    nodes = [
        h.make_node("MatMul", ["x", "w"], ["a"]),
        h.make_node("Scan", ["zero", "a"], ["total", "ys"], body=body, num_scan_inputs=1),
        h.make_node("Relu", ["ys"], ["y"]),
    ]
    return model(
        nodes,
        [("x", T.FLOAT, dims)],
        [("total", T.FLOAT, [4]), ("y", T.FLOAT, dims)],
        [w, nh.from_array(np.zeros(4, np.float32), "zero")],
        "scan",
    )
