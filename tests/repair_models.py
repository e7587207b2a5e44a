"""Tiny models that fail on the QNN HTP simulator at FP16, for the repair tests (no tests here).

Each builder returns serialized bytes; the comment says what goes wrong on the HTP (measured with
onnxruntime-qnn 2.7.0, soc_model 60) and what repairs it.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from tests.models import make_model

WIDTH = 64


def _vi(name, shape):
    return h.make_tensor_value_info(name, T.FLOAT, shape)


def layernorm_sum_of_squares() -> bytes:
    """magika's decomposed LayerNorm: ``d = x − mean``, ``ReduceSum(d·d)`` (≈ 4e7 for x of ±400 over
    256 features: beyond FP16), ``/N``, ``+ε``, ``Sqrt``, ``d / std``. SNR −24 dB on the HTP; a
    ``rescale`` of ``d`` (cancelled by the division) repairs it. x, y: float[4, 256]."""
    n = 256
    nodes = [h.make_node("ReduceMean", ["x"], ["mu"], name="mean", axes=[-1]),
             h.make_node("Sub", ["x", "mu"], ["d"], name="center"),
             h.make_node("Mul", ["d", "d"], ["d2"], name="square"),
             h.make_node("ReduceSum", ["d2", "axes"], ["ss"], name="sum_of_squares"),
             h.make_node("Div", ["ss", "n"], ["var"], name="variance"),
             h.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
             h.make_node("Sqrt", ["ve"], ["std"], name="std"),
             h.make_node("Div", ["d", "std"], ["y"], name="normalize")]
    inits = [nh.from_array(np.array([-1], np.int64), "axes"), nh.from_array(np.array(n, np.float32), "n"),
             nh.from_array(np.array(1e-5, np.float32), "eps")]
    return make_model(h.make_graph(nodes, "ln_sumsq", [_vi("x", [4, n])], [_vi("y", [4, n])], inits))


def matmul_layernorm() -> bytes:
    """``LayerNormalization(x @ W + b)`` with ``|x @ W|`` up to ≈ 3e5 for x of ±30 (beyond FP16 before
    the normalization; SNR 11 dB on the HTP): ``rescale`` folded into W and b, cancelled by
    LayerNormalization(ε·2^2k).
    x: float[8, 64], y: float[8, 64]."""
    rng = np.random.default_rng(11)
    nodes = [h.make_node("MatMul", ["x", "w"], ["a"], name="proj"), h.make_node("Add", ["a", "b"], ["ab"], name="bias"),
             h.make_node("LayerNormalization", ["ab", "g", "beta"], ["y"], name="layernorm", epsilon=1e-5)]
    inits = [nh.from_array((rng.standard_normal((WIDTH, WIDTH)) * 1000).astype(np.float32), "w"),
             nh.from_array(rng.standard_normal(WIDTH).astype(np.float32), "b"),
             nh.from_array(rng.standard_normal(WIDTH).astype(np.float32), "g"),
             nh.from_array(rng.standard_normal(WIDTH).astype(np.float32), "beta")]
    return make_model(h.make_graph(nodes, "mm_ln", [_vi("x", [8, WIDTH])], [_vi("y", [8, WIDTH])], inits))


def matmul_chain() -> bytes:
    """``(Relu(x @ W1 + b1)) @ W2``: the first product reaches ≈ 1e5 (beyond FP16), the output
    ≈ 1e3. SNR −31 dB on the HTP; ``rescale`` folded into W1 and b1 and back into W2.
    x: float[8, 64], y: float[8, 64]."""
    rng = np.random.default_rng(12)
    nodes = [h.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"), h.make_node("Add", ["a", "b1"], ["ab"], name="bias1"),
             h.make_node("Relu", ["ab"], ["r"], name="relu"), h.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    inits = [nh.from_array((rng.standard_normal((WIDTH, WIDTH)) * 200).astype(np.float32), "w1"),
             nh.from_array(rng.standard_normal(WIDTH).astype(np.float32), "b1"),
             nh.from_array((rng.standard_normal((WIDTH, WIDTH)) * 0.01).astype(np.float32), "w2")]
    return make_model(h.make_graph(nodes, "mm_chain", [_vi("x", [8, WIDTH])], [_vi("y", [8, WIDTH])], inits))


def naive_softmax() -> bytes:
    """``Exp(x) / ReduceSum(Exp(x))`` with x ≈ 8 ± 3: ``e^x`` exceeds 65504 beyond 11.09. SNR 0 dB on
    the HTP; ``softmax_stable`` (x − max x) repairs it. x, y: float[8, 64]."""
    nodes = [h.make_node("Exp", ["x"], ["e"], name="exp"),
             h.make_node("ReduceSum", ["e", "axes"], ["s"], name="sum", keepdims=1),
             h.make_node("Div", ["e", "s"], ["y"], name="div")]
    return make_model(h.make_graph(nodes, "softmax", [_vi("x", [8, WIDTH])], [_vi("y", [8, WIDTH])],
                                   [nh.from_array(np.array([-1], np.int64), "axes")]))


def dilated_conv1d(length: int = 16) -> bytes:
    """``Relu(x·0.5)`` → Conv1d (4→4 channels, kernel 5, dilation 3, pads 6) → ``+ 1``: the HTP's
    convolution is wrong at lengths 8, 16, 24 (SNR ≈ 3 dB), right at 17. Neither rewriting the
    dilation away (``dilated_conv``) helps — the undilated 13-tap kernel is as wrong — but
    convolving tap by tap (``conv_taps``) or the Conv on the CPU does. x, y: float[1, 4, length]."""
    rng = np.random.default_rng(13)
    nodes = [h.make_node("Mul", ["x", "half"], ["xs"], name="scale"), h.make_node("Relu", ["xs"], ["r"], name="relu"),
             h.make_node("Conv", ["r", "w"], ["c"], name="conv", kernel_shape=[5], dilations=[3], pads=[6, 6]),
             h.make_node("Add", ["c", "one"], ["y"], name="shift")]
    inits = [nh.from_array(np.array(0.5, np.float32), "half"), nh.from_array(np.array(1, np.float32), "one"),
             nh.from_array((rng.standard_normal((4, 4, 5)) * 0.3).astype(np.float32), "w")]
    return make_model(h.make_graph(nodes, "dilated", [_vi("x", [1, 4, length])], [_vi("y", [1, 4, length])], inits))


def pow_square(width: int = 16) -> bytes:
    """``Sqrt(ReduceSum(Pow(x·1, 2)))`` (an STFT-magnitude pattern): the HTP's ``Pow(x, 2)`` returns
    −4 for ``x = −0``, the ``Sqrt`` of the sum then NaN (131008 on the HTP). x: float[4, width], y: float[4, 1]."""
    nodes = [h.make_node("Mul", ["x", "one"], ["a"], name="mul"), h.make_node("Pow", ["a", "two"], ["p"], name="pow"),
             h.make_node("ReduceSum", ["p", "axes"], ["s"], name="sum", keepdims=1),
             h.make_node("Sqrt", ["s"], ["y"], name="sqrt")]
    inits = [nh.from_array(np.array(2, np.float32), "two"), nh.from_array(np.array(1, np.float32), "one"),
             nh.from_array(np.array([-1], np.int64), "axes")]
    return make_model(h.make_graph(nodes, "pow", [_vi("x", [4, width])], [_vi("y", [4, 1])], inits))


def pow_inputs(seed: int = 0, width: int = 16) -> np.ndarray:
    """Small inputs holding −0 in every third column (what trips the HTP's ``Pow``)."""
    x = (np.random.default_rng(seed).standard_normal((4, width)) * 1e-3).astype(np.float32)
    x[:, ::3] = -0.0
    return x
