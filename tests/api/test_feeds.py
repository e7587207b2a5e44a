"""``onnxwrapper.kernel.session._feeds.validate_feed`` raises exactly what onnxruntime raises (class and message).

Foreign backends (qai_appbuilder, SNPE) and QNN shape specialization validate feeds with it
before any native call, so each case is compared against a real onnxruntime session.
"""

from __future__ import annotations

import numpy as np
import onnx.helper as h
import onnxruntime
import pytest
from onnx import TensorProto as T

from onnxwrapper.kernel.session._feeds import feed_signature, numpy_to_ort_type, ort_type_to_numpy, validate_feed
from tests import models


def _two_input_model() -> bytes:
    g = h.make_graph([h.make_node("Add", ["X", "Z"], ["Y"])], "two",
                     [h.make_tensor_value_info("X", T.FLOAT, ["N", 2]), h.make_tensor_value_info("Z", T.FLOAT, [3, 2])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [3, 2])])
    return models.make_model(g)


x = np.ones((3, 2), np.float32)
CASES = {
    "ok": (None, {"X": x, "Z": x}),
    "ok_lists": (["Y"], {"X": x.tolist(), "Z": [[1, 2], [3, 4], [5, 6]]}),
    "missing": (None, {"X": x}),
    "unknown": (None, {"X": x, "Z": x, "Q": x}),
    "dtype": (None, {"X": x.astype(np.float64), "Z": x}),
    "int_dtype": (None, {"X": x, "Z": x.astype(np.int32)}),
    "string_array": (None, {"X": np.array([["a", "b"]] * 3), "Z": x}),
    "rank": (None, {"X": x[0], "Z": x}),
    "dims": (None, {"X": x, "Z": np.ones((2, 2), np.float32)}),
    "two_errors": (None, {"X": x[0], "Z": x.astype(np.float64)}),
    "scalar": (None, {"X": np.float32(1), "Z": x}),
    "py_scalar": (None, {"X": 1, "Z": x}),
    "zero_d": (None, {"X": np.array(1.0, np.float32), "Z": x}),
    "tuple": (None, {"X": ((1.0, 2.0),), "Z": x}),
    "bad_list": (None, {"X": [["a", "b"]], "Z": x}),
    "bad_output": (["nope"], {"X": x, "Z": x}),
    "bad_output_type": ([1], {"X": x, "Z": x}),
    "str_output": ("Y", {"X": x, "Z": x}),
    "list_feed": (None, [x, x]),
}


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - we compare whatever is raised
        return (type(exc), str(exc).split("\n")[0][:120])


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_feed_matches_onnxruntime(case):
    sess = onnxruntime.InferenceSession(_two_input_model())
    names, feed = CASES[case]
    ours = _outcome(lambda: validate_feed(sess.get_inputs(), feed, names, sess.get_outputs()))
    theirs = _outcome(lambda: sess.run(names, feed))
    if theirs[0] == "ok":
        assert ours[0] == "ok", ours
        for name, arr in ours[1].items():
            assert arr.dtype == np.float32 and arr.shape in ((3, 2),), name
    else:
        assert ours == theirs


def test_list_cast_dtypes_match_onnxruntime():
    for elem, values in [(T.INT64, [[1.7, -2], [3, 4]]), (T.UINT8, [[1, 2], [3, 255]]), (T.BOOL, [[1, 0], [0, 1]]),
                         (T.FLOAT16, [[0.1, 2], [3, 4]]), (T.STRING, [["a", "b"], ["c", "d"]])]:
        sess = onnxruntime.InferenceSession(models.identity(elem))
        ours = validate_feed(sess.get_inputs(), {"X": values})["X"]
        theirs = sess.run(None, {"X": values})[0]
        assert ours.dtype == theirs.dtype or (elem == T.STRING and ours.dtype == object)
        assert ours.tolist() == theirs.tolist()


def test_type_mapping_round_trip():
    for dt in (np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
               np.int64, np.uint64, np.bool_):
        assert ort_type_to_numpy(numpy_to_ort_type(np.dtype(dt))) == np.dtype(dt)
    assert numpy_to_ort_type(np.dtype("<U3")) == "tensor(string)"
    assert ort_type_to_numpy("seq(tensor(float))") is None


def test_feed_signature_is_order_independent():
    a = {"X": np.zeros((1, 3)), "Z": np.zeros(2, np.float32)}
    b = {"Z": np.zeros(2, np.float32), "X": np.zeros((1, 3))}
    assert feed_signature(a) == feed_signature(b)
    assert feed_signature(a) != feed_signature({"X": np.zeros((2, 3)), "Z": np.zeros(2, np.float32)})


def test_node_args_report_dims_as_onnxruntime_does():
    """paddle2onnx writes ``dim_value: -1`` for unknown dims; ORT reports ``None`` (and 0 as 0)."""
    from onnx import load_from_string

    from onnxwrapper.kernel import node_args_from_onnx

    g = h.make_graph([h.make_node("Identity", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [-1, 0, "?", 2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [-1, 0, "?", 2])])
    data = models.make_model(g)
    inputs, outputs = node_args_from_onnx(load_from_string(data))
    theirs = onnxruntime.InferenceSession(data)
    assert [a.shape for a in inputs] == [i.shape for i in theirs.get_inputs()] == [[None, 0, "?", 2]]
    assert [a.shape for a in outputs] == [o.shape for o in theirs.get_outputs()]
