"""API fidelity: the same assertions against ``onnxruntime`` and ``onnxwrapper`` (cpu backend).

Every test takes the ``rt`` fixture (the module under test) and asserts ORT's documented or
measured behaviour, so a divergence in onnxwrapper fails here. ``test_divergence_is_caught``
shows that a session raising a different exception class fails these assertions.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import threading

import numpy as np
import pytest
from onnx import TensorProto as T
from onnxruntime.capi import onnxruntime_pybind11_state as C

from tests import models

X = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float32)
Y_EXPECTED = X * X


def expect_error(fn, cls, prefix: str):
    """Assert ``fn()`` raises exactly ``cls`` (or a subclass) with a message starting with ``prefix``."""
    with pytest.raises(cls) as info:
        fn()
    assert str(info.value).startswith(prefix), str(info.value)
    return info.value


# -- constructor forms ------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["str", "path", "bytes"])
def test_constructor_forms(rt, mul_1_path, form):
    arg = {"str": str(mul_1_path), "path": pathlib.Path(mul_1_path), "bytes": mul_1_path.read_bytes()}[form]
    sess = rt.InferenceSession(arg)
    np.testing.assert_array_equal(sess.run(None, {"X": X})[0], Y_EXPECTED)
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_isinstance_and_options(rt, mul_1_path):
    import onnxruntime

    so = rt.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.add_session_config_entry("session.use_env_allocators", "0")
    sess = rt.InferenceSession(str(mul_1_path), so, providers=["CPUExecutionProvider"])
    assert isinstance(sess, onnxruntime.InferenceSession)
    got = sess.get_session_options()
    assert got.intra_op_num_threads == 1
    assert got.graph_optimization_level == rt.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert got.get_session_config_entry("session.use_env_allocators") == "0"
    assert sess.get_provider_options() == {"CPUExecutionProvider": {}}


def test_provider_tuples_and_provider_options(rt, mul_1_path):
    s1 = rt.InferenceSession(str(mul_1_path), providers=[("CPUExecutionProvider", {"foo": 1})])
    s2 = rt.InferenceSession(str(mul_1_path), providers=["CPUExecutionProvider"], provider_options=[{}])
    for s in (s1, s2):
        assert s.get_providers() == ["CPUExecutionProvider"]
        np.testing.assert_array_equal(s.run(None, {"X": X})[0], Y_EXPECTED)


# -- run variants -----------------------------------------------------------------------------
def test_run_output_names_forms(rt, mul_1_path):
    sess = rt.InferenceSession(str(mul_1_path))
    for names in (None, [], ["Y"], ("Y",)):
        out = sess.run(names, {"X": X})
        assert isinstance(out, list) and len(out) == 1
        assert out[0].dtype == np.float32 and out[0].flags["C_CONTIGUOUS"]
        np.testing.assert_array_equal(out[0], Y_EXPECTED)


def test_run_feeds_lists_noncontiguous_ortvalue(rt, mul_1_path):
    sess = rt.InferenceSession(str(mul_1_path))
    np.testing.assert_array_equal(sess.run(None, {"X": X.tolist()})[0], Y_EXPECTED)
    np.testing.assert_array_equal(sess.run(None, {"X": [[1, 2], [3, 4], [5, 6]]})[0], Y_EXPECTED)
    wide = np.zeros((3, 4), np.float32)
    wide[:, ::2] = X
    view = wide[:, ::2]
    assert not view.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(sess.run(None, {"X": view})[0], Y_EXPECTED)
    fortran = np.asfortranarray(X)
    np.testing.assert_array_equal(sess.run(None, {"X": fortran})[0], Y_EXPECTED)
    value = rt.OrtValue.ortvalue_from_numpy(X)
    np.testing.assert_array_equal(sess.run(None, {"X": value})[0], Y_EXPECTED)


def test_list_cast_to_declared_dtype(rt):
    sess = rt.InferenceSession(models.identity(T.INT64))
    out = sess.run(None, {"X": [[1.5, 2], [3, 4]]})[0]
    assert out.dtype == np.int64 and out.tolist() == [[1, 2], [3, 4]]
    sess8 = rt.InferenceSession(models.identity(T.UINT8))
    expect_error(lambda: sess8.run(None, {"X": [[1, 2], [3, 400]]}), RuntimeError,
                 "Could not create tensor from given input list")


def test_run_with_ort_values_and_iobinding(rt, mul_1_path):
    sess = rt.InferenceSession(str(mul_1_path))
    value = rt.OrtValue.ortvalue_from_numpy(X)
    outs = sess.run_with_ort_values(["Y"], {"X": value})
    assert isinstance(outs[0], rt.OrtValue)
    np.testing.assert_array_equal(outs[0].numpy(), Y_EXPECTED)
    expect_error(lambda: sess.run_with_ort_values(["Y"], {"X": X}), AttributeError,
                 "'numpy.ndarray' object has no attribute '_get_c_value'")
    binding = sess.io_binding()
    binding.bind_cpu_input("X", X)
    binding.bind_output("Y")
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], Y_EXPECTED)
    out_value = rt.OrtValue.ortvalue_from_numpy(np.zeros((3, 2), np.float32))
    binding2 = sess.io_binding()
    binding2.bind_ortvalue_input("X", value)
    binding2.bind_ortvalue_output("Y", out_value)
    sess.run_with_iobinding(binding2)
    np.testing.assert_array_equal(out_value.numpy(), Y_EXPECTED)


def test_run_async(rt, mul_1_path):
    sess = rt.InferenceSession(str(mul_1_path))
    done = threading.Event()
    seen = {}

    def callback(results, user_data, err):
        seen.update(results=results, user_data=user_data, err=err)
        done.set()

    sess.run_async(["Y"], {"X": X}, callback, "payload")
    assert done.wait(10)
    assert seen["err"] == "" and seen["user_data"] == "payload"
    np.testing.assert_array_equal(seen["results"][0], Y_EXPECTED)


def test_concurrent_run_one_session(rt, mul_1_path):
    sess = rt.InferenceSession(str(mul_1_path))
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):
            x = rng.standard_normal((3, 2)).astype(np.float32)
            y = sess.run(None, {"X": x})[0]
            if not np.array_equal(y, x * X):
                errors.append(seed)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# -- metadata ---------------------------------------------------------------------------------
def test_inputs_outputs_metadata(rt):
    sess = rt.InferenceSession(models.smallconv(batch="N", hw=("H", 8)))
    (inp,), (out,) = sess.get_inputs(), sess.get_outputs()
    assert (inp.name, inp.type, inp.shape) == ("X", "tensor(float)", ["N", 3, "H", 8])
    assert (out.name, out.type, out.shape) == ("Y", "tensor(float)", ["N", 2, "H", 8])
    assert str(inp) == "NodeArg(name='X', type='tensor(float)', shape=['N', 3, 'H', 8])"
    sym = rt.InferenceSession(models.matmul_symbolic())
    assert sym.get_inputs()[0].shape == ["None", 2] and sym.get_outputs()[0].shape == ["None", 1]
    land = rt.InferenceSession(models.logicaland())
    assert [i.name for i in land.get_inputs()] == ["input1:0", "input:0"]
    assert [i.type for i in land.get_inputs()] == ["tensor(bool)", "tensor(bool)"]


def test_overridable_initializers(rt):
    import onnx.helper as h

    c = h.make_tensor("C", T.FLOAT, [2, 2], [1, 1, 1, 1])
    g = h.make_graph([h.make_node("Add", ["X", "C"], ["Y"])], "ov",
                     [h.make_tensor_value_info("X", T.FLOAT, [2, 2]), h.make_tensor_value_info("C", T.FLOAT, [2, 2])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [2, 2])], [c])
    sess = rt.InferenceSession(models.make_model(g))
    assert [i.name for i in sess.get_inputs()] == ["X"]
    (ov,) = sess.get_overridable_initializers()
    assert (ov.name, ov.shape, ov.type) == ("C", [2, 2], "tensor(float)")
    x = np.zeros((2, 2), np.float32)
    assert sess.run(None, {"X": x})[0].tolist() == [[1, 1], [1, 1]]
    assert sess.run(None, {"X": x, "C": x + 5})[0].tolist() == [[5, 5], [5, 5]]


def test_modelmeta(rt):
    meta = rt.InferenceSession(models.smallconv()).get_modelmeta()
    assert meta.producer_name == "onnxwrapper-tests"
    assert meta.graph_name == "smallconv"
    assert meta.domain == "ai.onnxwrapper.tests"
    assert meta.description == "small conv test model"
    assert meta.graph_description == "graph doc"
    assert meta.version == 7
    assert meta.custom_metadata_map == {"license": "MIT", "author": "tests"}


def test_strings_and_bools(rt):
    sess = rt.InferenceSession(models.identity(T.STRING))
    out = sess.run(None, {"X": np.array([["a", "b"], ["c", "d"]], dtype=object)})[0]
    assert out.dtype == object and out.tolist() == [["a", "b"], ["c", "d"]]
    land = rt.InferenceSession(models.logicaland())
    a = np.array([[True, False], [True, True]])
    res = land.run(None, {"input:0": a, "input1:0": ~a})[0]
    assert res.dtype == np.bool_ and not res.any()


# -- providers, fallback, profiling -----------------------------------------------------------
def test_unknown_provider_falls_back_like_ort(rt, mul_1_path):
    out = io.StringIO()
    with pytest.warns(UserWarning, match="not in available provider names"), contextlib.redirect_stdout(out):
        sess = rt.InferenceSession(str(mul_1_path), providers=["FooExecutionProvider"])
    assert "Falling back to ['CPUExecutionProvider'] and retrying." in out.getvalue()
    assert sess.get_providers() == ["CPUExecutionProvider"]
    with pytest.warns(UserWarning):
        expect_error(lambda: rt.InferenceSession(str(mul_1_path), providers=["FooExecutionProvider"],
                                                 enable_fallback=0),
                     RuntimeError, "Unknown Provider Type: FooExecutionProvider")


def test_set_providers_and_fallback_toggles(rt, mul_1_path):
    sess = rt.InferenceSession(str(mul_1_path))
    sess.set_providers(["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    with pytest.warns(UserWarning, match="'InvalidProvider' is not in available provider names"):
        expect_error(lambda: sess.set_providers(["InvalidProvider"]), RuntimeError, "Unknown Provider Type: InvalidProvider")
    sess2 = rt.InferenceSession(str(mul_1_path))
    sess2.disable_fallback()
    assert sess2._enable_fallback is False
    sess2.enable_fallback()
    assert sess2._enable_fallback is True


def test_profiling(rt, mul_1_path, tmp_path):
    so = rt.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = rt.InferenceSession(str(mul_1_path), so)
    assert sess.get_profiling_start_time_ns() > 0
    sess.run(None, {"X": X})
    path = sess.end_profiling()
    assert pathlib.Path(path).exists() and path.endswith(".json")
    assert rt.InferenceSession(str(mul_1_path)).get_profiling_start_time_ns() == 0


def test_module_level_functions(rt):
    assert "CPUExecutionProvider" in rt.get_available_providers()
    assert rt.get_all_providers()[-1] == "CPUExecutionProvider"
    assert rt.get_device() == "CPU"
    assert "Build Info" in rt.get_build_info()
    assert rt.get_version_string()
    rt.set_seed(1)
    rt.set_default_logger_severity(3)
    rt.set_default_logger_verbosity(0)
    rt.disable_telemetry_events()
    rt.enable_telemetry_events()
    assert any(d.ep_name == "CPUExecutionProvider" for d in rt.get_ep_devices())


# -- bad input: same class, same message prefix ------------------------------------------------
PREFIX = "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "


@pytest.mark.parametrize("case", ["unknown_input", "missing_input", "extra_input", "wrong_dtype", "wrong_rank",
                                  "wrong_dim", "unknown_output", "scalar", "list_feed", "str_output_names", "tuple_value"])
def test_bad_run_input(rt, case):
    sess = rt.InferenceSession(models.smallconv(batch=1, hw=(8, 8)))
    good = np.zeros((1, 3, 8, 8), np.float32)
    cases = {
        "unknown_input": (lambda: sess.run(None, {"Z": good}), ValueError,
                          "Required inputs (['X']) are missing from input feed (['Z'])."),
        "missing_input": (lambda: sess.run(None, {}), ValueError, "Required inputs (['X']) are missing from input feed ([])."),
        "extra_input": (lambda: sess.run(None, {"X": good, "Z": good}), C.InvalidArgument, PREFIX + "Invalid input name: Z"),
        "wrong_dtype": (lambda: sess.run(None, {"X": good.astype(np.float64)}), C.InvalidArgument,
                        PREFIX + "Unexpected input data type. Actual: (tensor(double)) , expected: (tensor(float))"),
        "wrong_rank": (lambda: sess.run(None, {"X": good[0]}), C.InvalidArgument,
                       PREFIX + "Invalid rank for input: X Got: 3 Expected: 4 Please fix either the inputs/outputs or the model."),
        "wrong_dim": (lambda: sess.run(None, {"X": np.zeros((2, 3, 4, 8), np.float32)}), C.InvalidArgument,
                      PREFIX + "Got invalid dimensions for input: X for the following indices\n index: 0 Got: 2 Expected: 1\n"
                               " index: 2 Got: 4 Expected: 8\n Please fix either the inputs/outputs or the model."),
        "unknown_output": (lambda: sess.run(["nope"], {"X": good}), C.InvalidArgument, PREFIX + "Invalid output name:nope"),
        "scalar": (lambda: sess.run(None, {"X": 1.0}), RuntimeError, "Unable to handle object of type <class 'float'>"),
        "list_feed": (lambda: sess.run(None, [good]), AttributeError, "'list' object has no attribute 'keys'"),
        "str_output_names": (lambda: sess.run("Y", {"X": good}), TypeError, "run(): incompatible function arguments."),
        "tuple_value": (lambda: sess.run(None, {"X": ((1.0,),)}), RuntimeError,
                        "Input must be a list of dictionaries or a single numpy array for input 'X'."),
    }
    fn, cls, prefix = cases[case]
    err = expect_error(fn, cls, prefix)
    assert type(err) is cls


@pytest.mark.parametrize("case", ["missing_file", "directory", "garbage_file", "corrupt_bytes", "truncated_bytes",
                                  "empty_bytes", "bad_type", "bad_graph"])
def test_bad_model(rt, tmp_path, case):
    good = models.mul_1()
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\xffnot a model" * 10)
    import onnx.helper as h

    bad_graph = models.make_model(h.make_graph([h.make_node("Add", ["X"], ["Y"])], "bad",
                                               [h.make_tensor_value_info("X", T.FLOAT, [1])],
                                               [h.make_tensor_value_info("Y", T.FLOAT, [1])]))
    missing = str(tmp_path / "nope.onnx")
    cases = {
        "missing_file": (missing, C.NoSuchFile,
                         f"[ONNXRuntimeError] : 3 : NO_SUCHFILE : Load model from {missing} failed:Load model {missing} failed. File doesn't exist"),
        "directory": (str(tmp_path), C.InvalidProtobuf, f"[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from {tmp_path} failed:Protobuf parsing failed."),
        "garbage_file": (str(garbage), C.InvalidProtobuf, "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from"),
        "corrupt_bytes": (b"\x08\x09garbage" + good[40:], C.InvalidProtobuf,
                          "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Failed to load model because protobuf parsing failed."),
        "truncated_bytes": (good[: len(good) // 2], C.InvalidProtobuf,
                            "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Failed to load model because protobuf parsing failed."),
        "empty_bytes": (b"", C.InvalidArgument, PREFIX + "No graph was found in the protobuf."),
        "bad_type": (123, TypeError, "Unable to load from type '<class 'int'>'"),
        "bad_graph": (bad_graph, C.InvalidGraph, "[ONNXRuntimeError] : 10 : INVALID_GRAPH : This is an invalid model."),
    }
    arg, cls, prefix = cases[case]
    err = expect_error(lambda: rt.InferenceSession(arg), cls, prefix)
    assert type(err) is cls


def test_divergence_is_caught(mul_1_path):
    """A session diverging from ORT (other class, or other message) fails the shared assertions."""
    import onnxwrapper

    class Divergent(onnxwrapper.InferenceSession):
        def run(self, output_names, input_feed, run_options=None):
            if output_names == ["other_class"]:
                raise ValueError(PREFIX + "Invalid output name:other_class")
            if output_names == ["other_message"]:
                raise C.InvalidArgument(PREFIX + "bad output other_message")
            return super().run(output_names, input_feed, run_options)

    sess = Divergent(str(mul_1_path))
    with pytest.raises(ValueError):  # escapes pytest.raises(InvalidArgument): the test would error
        expect_error(lambda: sess.run(["other_class"], {"X": X}), C.InvalidArgument,
                     PREFIX + "Invalid output name:other_class")
    with pytest.raises(AssertionError):
        expect_error(lambda: sess.run(["other_message"], {"X": X}), C.InvalidArgument,
                     PREFIX + "Invalid output name:other_message")
