"""Shape specialization binds the call's input shapes only: an output that reuses an input's dim names
but has another size (exported upscalers name their output ``height``/``width`` like the input) keeps
its real shape on the QNN backend, as on ORT's CPU (issue found on a waifu2x upscaler: its declared
output was fixed to the input's 30×30 where it is 32×32, and the QNN EP failed to create the session)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxwrapper
from onnxwrapper.kernel import specialize
from tests.conftest import qnn_available


def _model(nodes, inits, out_channels, out_dims) -> bytes:
    """``x float[1, 4, height, width]`` → ``y float[1, out_channels, *out_dims]`` (names reused)."""
    graph = h.make_graph(nodes, "upscale", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, "height", "width"])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, out_channels, *out_dims])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=9).SerializeToString()


def _w(name, *shape):
    return onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 0.3,
                                        name)


CASES = {
    "ConvTranspose ×2 + 2": _model([h.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2],
                                                kernel_shape=[4, 4], pads=[0, 0, 0, 0])],
                                   [_w("w", 4, 4, 4, 4)], 4, ["height", "width"]),
    "Resize ×2": _model([h.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")],
                        [onnx.numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")], 4,
                        ["height", "width"]),
    "DepthToSpace": _model([h.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)], [], 1, ["height", "width"]),
    "Pad +1 each side": _model([h.make_node("Pad", ["x", "p"], ["y"])],
                               [onnx.numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "p")], 4,
                               ["height", "width"]),
    "Concat with itself": _model([h.make_node("Concat", ["x", "x"], ["y"], axis=2)], [], 4, ["height", "width"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_specialize_never_copies_a_dim_name_onto_an_output_of_another_size(case):
    model = onnx.load_from_string(CASES[case])
    fixed = specialize(model, {"x": (1, 4, 6, 6)})
    real = onnxruntime.InferenceSession(CASES[case]).run(None, {"x": np.ones((1, 4, 6, 6), np.float32)})[0].shape
    declared = [d.dim_value or None for d in fixed.graph.output[0].type.tensor_type.shape.dim]
    assert declared == list(real), (declared, real)
    assert [d.dim_value for d in fixed.graph.input[0].type.tensor_type.shape.dim] == [1, 4, 6, 6]


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
@pytest.mark.parametrize("case", list(CASES))
def test_the_qnn_backend_gives_the_real_output_shape(tmp_path, case):
    data = CASES[case]
    x = np.random.default_rng(1).standard_normal((1, 4, 15, 15)).astype(np.float32)
    ref = onnxruntime.InferenceSession(data).run(None, {"x": x})[0]
    session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": str(tmp_path)})
    got = session.run(None, {"x": x})[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=0.05, rtol=0.02)
    assert session.get_partition().target_nodes >= 1


def test_a_layout_failure_at_session_creation_enters_the_recovery_ladder():
    """ORT's ``Fail`` for a node the QNN EP's NHWC transform inserted and then did not take (the text
    measured on the upscaler) is a compile failure the ladder works around, not the end of the run."""
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail

    from onnxwrapper.backends.qnn.compile import recoverable

    text = ("[ONNXRuntimeError] : 1 : FAIL : Node 'convolution6_token_25' OpType:ConvTranspose with domain:"
            "com.ms.internal.nhwc was inserted using the NHWC format as requested by QNNExecutionProvider, but was "
            "not selected by that EP")
    assert recoverable(Fail(text)) and not recoverable(Fail("[ONNXRuntimeError] : 1 : FAIL : something else"))
