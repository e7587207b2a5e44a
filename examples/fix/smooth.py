"""A sensor-smoothing app whose NPU answer is wrong: the example of README's `aipc fix` walkthrough.

It smooths 8 sensor channels of 8 samples each with a 7-tap FIR filter — one ONNX ``Conv``
(kernel 7, pads 3), built here with onnx.helper (fixed weights and samples) — and prints, per
channel, the sample where the smoothed signal peaks and the smoothed values. The QNN HTP computes
an undilated Conv1d with 7 or more taps wrong at lengths 8, 16 and 24 (a known HTP kernel bug,
measured on onnxruntime-qnn 2.7.0's simulator at FP16: SNR about 2 dB), so on the NPU the printed
peaks and values differ from the CPU's. ``aipc diff --localize`` finds the Conv, ``aipc fix``
verifies a rewrite that avoids the wrong kernel (``conv_taps``: one tap at a time), and
``python -m aipc --repairs`` runs the app with it. Usage: ``python examples/fix/smooth.py``.
"""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

CHANNELS, SAMPLES, TAPS = 8, 8, 7


def filter_model() -> bytes:
    """``y = Conv(x, w, b)``: a 7-tap FIR filter per output channel over the 8 input channels."""
    rng = np.random.default_rng(12)
    w = numpy_helper.from_array((rng.standard_normal((CHANNELS, CHANNELS, TAPS)) * 0.2).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(CHANNELS) * 0.1).astype(np.float32), "b")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[TAPS], pads=[3, 3], name="fir")
    graph = helper.make_graph([conv], "smooth", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              [1, CHANNELS, SAMPLES])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, CHANNELS, SAMPLES])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return model.SerializeToString()


def main() -> None:
    samples = np.random.default_rng(7).standard_normal((1, CHANNELS, SAMPLES)).astype(np.float32)
    session = ort.InferenceSession(filter_model())
    smoothed = session.run(None, {"x": samples})[0][0]
    for channel, row in enumerate(smoothed):
        print(f"channel {channel}: peak at sample {int(np.argmax(row))}, smoothed", " ".join(f"{v:+.2f}" for v in row))


if __name__ == "__main__":
    onnx.checker.check_model(onnx.load_from_string(filter_model()))
    main()
