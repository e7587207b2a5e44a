"""The canary models of ``aipc doctor``: tiny generated graphs that exercise what real apps need of the
HTP (convolution, matrix product, LayerNorm, softmax, LSTM) and the HTP kernel bugs we measured.

Every canary is built with ``onnx.helper`` (IR version 9, opset 17), with fixed weights and a fixed
feed (seeded), so two hosts compile and run the same bytes. A *known-bug* canary reproduces an
HTP kernel bug measured on the onnxruntime-qnn 2.7.0 HTP simulator (QNN SDK 2.51, FP16,
``soc_model=60``): its result is reported as "known HTP kernel bug reproduced / not reproduced"
and never decides whether the NPU is usable.

* ``dilated_conv1d_len8`` / ``_len16``: a dilated Conv1d (kernel 5, dilation 3, pads 6) is wrong
  at sequence lengths 8/16/24/32 and right at 12/14/17/18/20/36 (cosine 0.95–0.97 where wrong).
* ``conv7tap_len8`` / ``_len16`` / ``_len24``: an undilated Conv1d with 7 or more taps at those
  lengths.
* ``pow2_negzero``: ``Pow(x, 2)`` fed ``-0.0`` (and ordinary values around it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

__all__ = ["CANARIES", "Canary", "canary_names"]

_IR_VERSION = 9
_OPSET = 17


@dataclass(frozen=True)
class Canary:
    """One canary model.

    Attributes:
        name: short name (``aipc doctor --canary NAME``). what: one line for the report.
        build: ``build() -> (model bytes, {input name: float32 array})``.
        known_bug: the HTP kernel bug it reproduces (one line), or ``""`` for a capability canary.
    """

    name: str
    what: str
    build: Callable[[], tuple[bytes, dict]]
    known_bug: str = ""


def _model(nodes, inputs, outputs, initializers, name: str) -> bytes:
    graph = h.make_graph(nodes, name, inputs, outputs, initializers)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", _OPSET)], ir_version=_IR_VERSION,
                         producer_name="aipc-doctor")
    return model.SerializeToString()


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _conv1d(length: int, kernel: int, dilation: int, pad: int, seed: int) -> tuple[bytes, dict]:
    rng = _rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((8, 8, kernel)) * 0.2).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "b")
    out_len = length + 2 * pad - dilation * (kernel - 1)
    node = h.make_node("Conv", ["x", "w", "b"], ["y"], dilations=[dilation], pads=[pad, pad], kernel_shape=[kernel])
    data = _model([node], [h.make_tensor_value_info("x", T.FLOAT, [1, 8, length])],
                  [h.make_tensor_value_info("y", T.FLOAT, [1, 8, out_len])], [w, b], f"conv1d_k{kernel}_d{dilation}")
    return data, {"x": rng.standard_normal((1, 8, length)).astype(np.float32)}


def _conv2d() -> tuple[bytes, dict]:
    rng = _rng(1)
    w = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "b")
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])]
    data = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 16, 16])],
                  [h.make_tensor_value_info("y", T.FLOAT, [1, 8, 16, 16])], [w, b], "conv")
    return data, {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}


def _matmul() -> tuple[bytes, dict]:
    rng = _rng(2)
    w = numpy_helper.from_array((rng.standard_normal((64, 32)) * 0.1).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(32) * 0.1).astype(np.float32), "b")
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Add", ["m", "b"], ["y"])]
    data = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [4, 64])],
                  [h.make_tensor_value_info("y", T.FLOAT, [4, 32])], [w, b], "matmul")
    return data, {"x": rng.standard_normal((4, 64)).astype(np.float32)}


def _layernorm() -> tuple[bytes, dict]:
    rng = _rng(3)
    scale = numpy_helper.from_array((1 + rng.standard_normal(64) * 0.1).astype(np.float32), "scale")
    bias = numpy_helper.from_array((rng.standard_normal(64) * 0.1).astype(np.float32), "bias")
    node = h.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1, epsilon=1e-5)
    data = _model([node], [h.make_tensor_value_info("x", T.FLOAT, [1, 16, 64])],
                  [h.make_tensor_value_info("y", T.FLOAT, [1, 16, 64])], [scale, bias], "layernorm")
    return data, {"x": (rng.standard_normal((1, 16, 64)) * 3 + 1).astype(np.float32)}


def _softmax() -> tuple[bytes, dict]:
    rng = _rng(4)
    node = h.make_node("Softmax", ["x"], ["y"], axis=-1)
    data = _model([node], [h.make_tensor_value_info("x", T.FLOAT, [4, 100])],
                  [h.make_tensor_value_info("y", T.FLOAT, [4, 100])], [], "softmax")
    return data, {"x": (rng.standard_normal((4, 100)) * 4).astype(np.float32)}


def _lstm() -> tuple[bytes, dict]:
    rng = _rng(5)
    seq, inp, hidden = 8, 16, 32
    w = numpy_helper.from_array((rng.standard_normal((1, 4 * hidden, inp)) * 0.2).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.standard_normal((1, 4 * hidden, hidden)) * 0.2).astype(np.float32), "R")
    b = numpy_helper.from_array((rng.standard_normal((1, 8 * hidden)) * 0.1).astype(np.float32), "B")
    node = h.make_node("LSTM", ["x", "W", "R", "B"], ["y", "y_h"], hidden_size=hidden)
    data = _model([node], [h.make_tensor_value_info("x", T.FLOAT, [seq, 1, inp])],
                  [h.make_tensor_value_info("y", T.FLOAT, [seq, 1, 1, hidden]),
                   h.make_tensor_value_info("y_h", T.FLOAT, [1, 1, hidden])], [w, r, b], "lstm")
    return data, {"x": rng.standard_normal((seq, 1, inp)).astype(np.float32)}


def _pow2_negzero() -> tuple[bytes, dict]:
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    node = h.make_node("Pow", ["x", "two"], ["y"])
    data = _model([node], [h.make_tensor_value_info("x", T.FLOAT, [1, 8])],
                  [h.make_tensor_value_info("y", T.FLOAT, [1, 8])], [two], "pow2")
    x = np.array([[-0.0, 0.0, -0.0, 1.5, -2.0, -0.0, 0.25, -0.0]], dtype=np.float32)
    return data, {"x": x}


_DILATED = "HTP dilated Conv1d (kernel 5, dilation 3) wrong at lengths 8/16/24/32"
_TAPS = "HTP undilated Conv1d with >= 7 taps wrong at lengths 8/16/24"
_POW = "HTP Pow(x, 2) wrong at x = -0"

#: every canary, in report order
CANARIES: tuple[Canary, ...] = (
    Canary("conv", "Conv 3x3 + Relu, 1x3x16x16", _conv2d),
    Canary("matmul", "MatMul + Add, 4x64 @ 64x32", _matmul),
    Canary("layernorm", "LayerNormalization over 64", _layernorm),
    Canary("softmax", "Softmax over 100", _softmax),
    Canary("lstm", "LSTM, 8 steps, hidden 32", _lstm),
    Canary("dilated_conv1d_len8", "Conv1d k5 d3 p6, length 8", lambda: _conv1d(8, 5, 3, 6, 10), _DILATED),
    Canary("dilated_conv1d_len16", "Conv1d k5 d3 p6, length 16", lambda: _conv1d(16, 5, 3, 6, 11), _DILATED),
    Canary("conv7tap_len8", "Conv1d k7 p3, length 8", lambda: _conv1d(8, 7, 1, 3, 12), _TAPS),
    Canary("conv7tap_len16", "Conv1d k7 p3, length 16", lambda: _conv1d(16, 7, 1, 3, 13), _TAPS),
    Canary("conv7tap_len24", "Conv1d k7 p3, length 24", lambda: _conv1d(24, 7, 1, 3, 14), _TAPS),
    Canary("pow2_negzero", "Pow(x, 2) at x = -0", _pow2_negzero, _POW),
)


def canary_names() -> list[str]:
    """Names of :data:`CANARIES`, in report order."""
    return [c.name for c in CANARIES]


def _check_onnx(data: bytes) -> None:  # used by the tests of this module through CANARIES
    onnx.checker.check_model(onnx.load_from_string(data))
