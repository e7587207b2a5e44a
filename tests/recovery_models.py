"""Generated models for the QNN recovery ladder's tests and benchmarks (IR version 9, opset 17).

* :func:`long_row` — an fp32 intermediate with a 2²¹-element row: the simulator cannot finalize it
  in fp32 (``QNN_COMMON_ERROR_MEM_ALLOC 1002`` after ~1 s, measured) and can with ``vtcm_mb=8``.
* :func:`gelu_net` — Conv1d → Erf GELU → Conv1d: the QNN EP fuses the GELU, which the simulator's
  fp32 mode cannot finalize (measured), while each piece alone compiles.
* :func:`padded_gelu_net` — the same behind a ``Pad`` whose pads are computed from ``Constant`` nodes.
* :func:`unet1d` — a stand-in of a real EEG app's 1-D conv U-Net (Conv1d, Erf GELU, strided Conv1d
  down, ConvTranspose up, skip Concats; inputs ``a [n, 1, L]`` + ``b [n, 15, L]``).
* batch-mixing models (:data:`MIXING`) and per-sample ones (:data:`PER_SAMPLE`) for the batch split.
* :func:`growing_decoder` — ``x [1, T, D]`` through two MatMuls and a Softmax: a new shape per step.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.models import make_model


def long_row(rows: int = 2048, row: int = 1 << 21) -> bytes:
    """``y = Reshape(Relu(Reshape(x, [1, row])), [1, rows, row/rows])``; x float[1, rows, row/rows]."""
    cols = row // rows
    shape = h.make_tensor("flat", T.INT64, [2], [1, row])
    back = h.make_tensor("back", T.INT64, [3], [1, rows, cols])
    nodes = [h.make_node("Reshape", ["x", "flat"], ["f"], name="flatten"), h.make_node("Relu", ["f"], ["r"], name="relu"),
             h.make_node("Reshape", ["r", "back"], ["y"], name="unflatten")]
    g = h.make_graph(nodes, "long_row", [h.make_tensor_value_info("x", T.FLOAT, [1, rows, cols])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, rows, cols])], [shape, back])
    return make_model(g)


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, value, prefix: str = "w") -> str:
        name = self.name(prefix)
        self.inits.append(nh.from_array(np.asarray(value, np.float32), name))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int = 7, stride: int = 1) -> str:
        w = self.const(self.rng.standard_normal((cout, cin, k)) / np.sqrt(cin * k))
        b = self.const(self.rng.standard_normal(cout) * 0.05, "b")
        y, pad = self.name("conv"), ((k - 1) // 2 if stride == 1 else 0)
        self.nodes.append(h.make_node("Conv", [x, w, b], [y], kernel_shape=[k], pads=[pad, pad], strides=[stride],
                                      name=y))
        return y

    def gelu(self, x: str) -> str:
        """``x · ½ · (1 + erf(x / √2))`` as five nodes (what PyTorch exports)."""
        s, one, half = self.const(1 / np.sqrt(2), "s"), self.const(1.0, "one"), self.const(0.5, "half")
        a, e, p, m, y = (self.name(n) for n in ("scale", "erf", "add", "mul", "gelu"))
        self.nodes += [h.make_node("Mul", [x, s], [a], name=a), h.make_node("Erf", [a], [e], name=e),
                       h.make_node("Add", [e, one], [p], name=p), h.make_node("Mul", [x, p], [m], name=m),
                       h.make_node("Mul", [m, half], [y], name=y)]
        return y


def gelu_net(batch="N", length: int = 64, channels: int = 4, seed: int = 0) -> bytes:
    """Conv1d(c→c, k7) → Erf GELU → Conv1d(c→c, k1); x float[batch, c, length] → y float[batch, c, length]."""
    b = _Builder(seed)
    y = b.conv(b.gelu(b.conv("x", channels, channels)), channels, channels, k=1)
    g = h.make_graph(b.nodes, "gelu_net", [h.make_tensor_value_info("x", T.FLOAT, [batch, channels, length])],
                     [h.make_tensor_value_info(y, T.FLOAT, [batch, channels, length])], b.inits)
    return make_model(g)


def padded_gelu_net(length: int = 64, channels: int = 4, seed: int = 0) -> bytes:
    """silero-vad's STFT padding in small, then :func:`gelu_net`: the pads of a ``Pad`` computed from
    ``Constant`` nodes through a ``Transpose``, ``Reshape`` and ``Cast`` (values onnxruntime folds when
    it compiles), the GELU's scalars as ``Constant`` nodes too; x float[1, c, length] → y float[1, c,
    length + 4]. fp32 makes the QNN EP fuse the GELU, which the simulator cannot finalize: a graph split."""
    b = _Builder(seed)

    def constant(name: str, value) -> str:
        b.nodes.append(h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(value), name + "_value"),
                                   name=name))
        return name

    raw = constant("pads_by_axis", np.array([[0, 0], [0, 0], [2, 2]], np.int32))
    b.nodes += [h.make_node("Transpose", [raw], ["pads_t"], perm=[1, 0], name="pads_transpose"),
                h.make_node("Reshape", ["pads_t", constant("flat", np.array([-1], np.int64))], ["pads_flat"],
                            name="pads_reshape"),
                h.make_node("Cast", ["pads_flat"], ["pads"], to=T.INT64, name="pads_cast"),
                h.make_node("Pad", ["x", "pads"], ["padded"], mode="constant", name="pad")]
    c = b.conv("padded", channels, channels)
    s, one, half = (constant(n, np.float32(v)) for n, v in (("s", 1 / np.sqrt(2)), ("one", 1.0), ("half", 0.5)))
    b.nodes += [h.make_node("Mul", [c, s], ["scaled"], name="scale"), h.make_node("Erf", ["scaled"], ["erf"], name="erf"),
                h.make_node("Add", ["erf", one], ["added"], name="add"), h.make_node("Mul", [c, "added"], ["m"], name="mul"),
                h.make_node("Mul", ["m", half], ["gelu"], name="gelu")]
    y = b.conv("gelu", channels, channels, k=1)
    g = h.make_graph(b.nodes, "padded_gelu_net", [h.make_tensor_value_info("x", T.FLOAT, [1, channels, length])],
                     [h.make_tensor_value_info(y, T.FLOAT, [1, channels, length + 4])], b.inits)
    return make_model(g)


def unet1d(n="n", length="L", chans=(16, 32, 64, 128), k: int = 7, down: int = 5, seed: int = 0) -> bytes:
    """The 1-D conv U-Net stand-in (module docstring): ``a [n, 1, L]``, ``b [n, 15, L]`` → ``prob [n, 1, L]``
    (Sigmoid). ``L`` must be a multiple of ``down ** (len(chans) - 1)``; 96 nodes with the defaults."""
    b = _Builder(seed)

    def block(x: str, cin: int, cout: int) -> str:
        return b.gelu(b.conv(b.gelu(b.conv(x, cin, cout, k)), cout, cout, k))

    x = b.name("cat")
    b.nodes.append(h.make_node("Concat", ["a", "b"], [x], axis=1, name=x))
    skips, cin = [], 16
    for i, ch in enumerate(chans):
        x, cin = block(x, cin, ch), ch
        if i < len(chans) - 1:
            skips.append((x, ch))
            x = b.conv(x, ch, ch, k=down, stride=down)
    for skip, ch in reversed(skips):
        w = b.const(b.rng.standard_normal((cin, ch, down)) / np.sqrt(cin * down))
        up, cat = b.name("up"), b.name("cat")
        b.nodes += [h.make_node("ConvTranspose", [x, w], [up], kernel_shape=[down], strides=[down], name=up),
                    h.make_node("Concat", [up, skip], [cat], axis=1, name=cat)]
        x, cin = block(cat, 2 * ch, ch), ch
    b.nodes.append(h.make_node("Sigmoid", [b.conv(x, cin, 1, k=1)], ["prob"], name="sigmoid"))
    g = h.make_graph(b.nodes, "unet1d", [h.make_tensor_value_info("a", T.FLOAT, [n, 1, length]),
                                         h.make_tensor_value_info("b", T.FLOAT, [n, 15, length])],
                     [h.make_tensor_value_info("prob", T.FLOAT, [n, 1, length])], b.inits)
    return make_model(g)


def _one(nodes, inits, inputs, outputs) -> bytes:
    g = h.make_graph(nodes, "m", [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in inputs],
                     [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in outputs], inits)
    return make_model(g)


def _w(name: str, shape, seed: int = 0):
    return nh.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.3, name)


def _bn_stats():
    return [nh.from_array(np.full(4, v, np.float32), n) for n, v in (("sc", 1.0), ("bi", 0.1), ("mu", 0.2),
                                                                     ("var", 1.5))]


#: models whose samples interact along the batch axis: name -> (model bytes, what the proof names)
MIXING = {
    "batchnorm-training": (_one([h.make_node("BatchNormalization", ["x", "sc", "bi", "mu", "var"], ["y", "rm", "rv"],
                                             training_mode=1, name="bn")], _bn_stats(), [("x", ["N", 4, 6])],
                                [("y", ["N", 4, 6])]), "training form"),
    "reduce-over-batch": (_one([h.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1, name="mean"),
                                h.make_node("Sub", ["x", "m"], ["y"], name="center")], [], [("x", ["N", 4, 6])],
                               [("y", ["N", 4, 6])]), "reduces over the batch axis"),
    "attention-across-batch": (_one([h.make_node("Transpose", ["x"], ["xt"], perm=[1, 0], name="t"),
                                     h.make_node("MatMul", ["x", "xt"], ["s"], name="scores"),
                                     h.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
                                     h.make_node("MatMul", ["p", "x"], ["y"], name="mix")], [],
                                    [("x", ["N", 8])], [("y", ["N", 8])]), "attention across the batch"),
    "reshape-merging-batch": (_one([h.make_node("Reshape", ["x", "flat"], ["f"], name="merge"),
                                    h.make_node("Softmax", ["f"], ["s"], axis=-1, name="softmax"),
                                    h.make_node("Reshape", ["s", "back"], ["y"], name="split")],
                                   [nh.from_array(np.array([1, -1], np.int64), "flat"),
                                    nh.from_array(np.array([-1, 8], np.int64), "back")],
                                   [("x", ["N", 8])], [("y", ["N", 8])]), "merges the batch"),
}

#: per-sample models (batch dim "N"): name -> model bytes
PER_SAMPLE = {
    "mlp-softmax": _one([h.make_node("MatMul", ["x", "W"], ["t"], name="mm"), h.make_node("Relu", ["t"], ["r"]),
                         h.make_node("Softmax", ["r"], ["y"], axis=-1, name="softmax")], [_w("W", (8, 8))],
                        [("x", ["N", 8])], [("y", ["N", 8])]),
    "batchnorm-inference": _one([h.make_node("BatchNormalization", ["x", "sc", "bi", "mu", "var"], ["y"], name="bn")],
                                _bn_stats(), [("x", ["N", 4, 6])], [("y", ["N", 4, 6])]),
    "reshape-keeping-batch": _one([h.make_node("Reshape", ["x", "s"], ["r"]), h.make_node("ReduceSum", ["r", "ax"], ["y"])],
                                  [nh.from_array(np.array([-1, 2, 4], np.int64), "s"),
                                   nh.from_array(np.array([2], np.int64), "ax")],
                                  [("x", ["N", 8])], [("y", ["N", 2, 1])]),
    "layernorm-transpose": _one([h.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
                                 h.make_node("LayerNormalization", ["t", "g", "be"], ["y"], axis=-1)],
                                [nh.from_array(np.ones(4, np.float32), "g"), nh.from_array(np.zeros(4, np.float32), "be")],
                                [("x", ["N", 4, 6])], [("y", ["N", 6, 4])]),
}


def growing_decoder(dim: int = 256, seed: int = 0) -> bytes:
    """``y = Softmax(x·W1) · W2``; x float[1, "T", dim] → y float[1, "T", dim] (a new shape per step)."""
    nodes = [h.make_node("MatMul", ["x", "w1"], ["a"], name="q"), h.make_node("Softmax", ["a"], ["p"], axis=-1),
             h.make_node("MatMul", ["p", "w2"], ["y"], name="out")]
    return _one(nodes, [_w("w1", (dim, dim), seed), _w("w2", (dim, dim), seed + 1)], [("x", [1, "T", dim])],
                [("y", [1, "T", dim])])
