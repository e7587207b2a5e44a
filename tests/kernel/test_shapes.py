"""onnxwrapper.kernel.model._shapes: in-memory static specialization of dynamic / partially fixed models."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

from onnxwrapper.kernel.model._shapes import dynamic_inputs, input_dims, is_static, shapes_note, specialize
from tests import models


def _proto(data: bytes) -> onnx.ModelProto:
    return onnx.load_from_string(data)


def _two_inputs_shared_dim() -> onnx.ModelProto:
    """``Z = A + B``; A float["N", 4], B float["N", None] — one shared symbolic dim, one unnamed dim."""
    g = h.make_graph([h.make_node("Add", ["A", "B"], ["Z"])], "shared",
                     [h.make_tensor_value_info("A", T.FLOAT, ["N", 4]),
                      h.make_tensor_value_info("B", T.FLOAT, ["N", None])],
                     [h.make_tensor_value_info("Z", T.FLOAT, ["N", 4])])
    return _proto(models.make_model(g))


def test_input_dims_kinds():
    m = _proto(models.smallconv(batch="N", hw=("H", None)))
    assert input_dims(m) == {"X": ["N", 3, "H", None]}
    assert dynamic_inputs(m) == {"X": ["N", 3, "H", None]}
    assert not is_static(m)
    assert is_static(_proto(models.smallconv(batch=1)))
    assert input_dims(_proto(models.mul_1())) == {"X": [3, 2]}  # initializer W is not an input


def test_specialize_named_and_unnamed_dims_runs_like_original():
    original = _proto(models.smallconv(batch="N", hw=("H", None)))
    before = original.SerializeToString()
    spec = specialize(original, {"X": (2, 3, 8, 12)})
    assert original.SerializeToString() == before  # the original is never modified
    assert input_dims(spec) == {"X": [2, 3, 8, 12]}
    out_dims = [d.dim_value or d.dim_param for d in spec.graph.output[0].type.tensor_type.shape.dim]
    assert out_dims[:3] == [2, 2, 8]  # named dims fixed graph-wide
    x = np.random.default_rng(0).random((2, 3, 8, 12), np.float32)
    ref = onnxruntime.InferenceSession(original.SerializeToString()).run(None, {"X": x})[0]
    got = onnxruntime.InferenceSession(spec.SerializeToString()).run(None, {"X": x})[0]
    np.testing.assert_array_equal(ref, got)
    assert onnxruntime.InferenceSession(spec.SerializeToString()).get_inputs()[0].shape == [2, 3, 8, 12]


def test_specialize_shared_dim_across_inputs():
    m = _two_inputs_shared_dim()
    spec = specialize(m, {"A": (5, 4), "B": (5, 4)})
    assert input_dims(spec) == {"A": [5, 4], "B": [5, 4]}
    assert [d.dim_value for d in spec.graph.output[0].type.tensor_type.shape.dim] == [5, 4]


def test_one_dim_param_with_two_sizes_becomes_independent_dims():
    """paddle2onnx-style ``[None, 3, "?", "?"]`` fed 48×192 (rapidocr's cls model): ORT accepts it."""
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "pp",
                     [h.make_tensor_value_info("x", T.FLOAT, [None, 3, "?", "?"])],
                     [h.make_tensor_value_info("y", T.FLOAT, [None, 3, "?", "?"])])
    m = _proto(models.make_model(g))
    spec = specialize(m, {"x": (3, 3, 48, 192)})
    assert input_dims(spec) == {"x": [3, 3, 48, 192]}
    assert all(not d.dim_param for d in spec.graph.output[0].type.tensor_type.shape.dim)
    x = np.random.default_rng(0).standard_normal((3, 3, 48, 192)).astype(np.float32)
    out = onnxruntime.InferenceSession(spec.SerializeToString())
    assert out.get_outputs()[0].shape == [3, 3, 48, 192]
    np.testing.assert_array_equal(out.run(None, {"x": x})[0], np.maximum(x, 0))
    # two inputs sharing "N" with different sizes: also independent (ORT fails later, inside the op)
    assert input_dims(specialize(_two_inputs_shared_dim(), {"A": (5, 4), "B": (6, 4)})) == {"A": [5, 4], "B": [6, 4]}


@pytest.mark.parametrize("shapes, match", [
    ({"X": (2, 4, 8, 8)}, "Can't replace existing fixed size"),  # channel dim is fixed to 3
    ({"X": (2, 3, 8)}, "Rank mismatch"),
    ({"X": (0, 3, 8, 8)}, "every dim must be positive"),
    ({"nope": (1,)}, "Invalid input name: nope"),
])
def test_specialize_errors(shapes, match):
    with pytest.raises(InvalidArgument, match=match):
        specialize(_proto(models.smallconv(batch="N", hw=("H", "W"))), shapes)


def test_static_inputs_may_be_given():
    m = _proto(models.smallconv(batch=1))
    assert input_dims(specialize(m, {"X": (1, 3, 8, 8)})) == {"X": [1, 3, 8, 8]}


def test_shapes_note():
    assert shapes_note({"b": (2,), "a": (1, 3)}) == "a=1x3, b=2"
    assert shapes_note({"s": ()}) == "s=scalar"
