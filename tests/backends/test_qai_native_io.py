"""Backend ``qai`` against the FAKE qai_appbuilder (tests/fakes/qai_appbuilder): the marshalling of
native data.

qai_appbuilder 2.51 takes and returns raw buffers: no per-input size check, 2-byte outputs
labelled float16, ``[]`` on failure. These tests check that the backend passes native dtypes
bit-exactly (int64 narrowed to int32 with a range check, quantized I/O in float mode), checks sizes
and layouts itself before the native call, and reinterprets outputs rather than casting them.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnxruntime.capi import onnxruntime_pybind11_state as C

import onnxwrapper as ow
from onnxwrapper.errors import ArtifactError
from tests.fake_foreign import cases, fake_qai_appbuilder, fq, open_qai

X = np.random.default_rng(1).random((1, 3, 8, 8), dtype=np.float32)


@pytest.fixture
def fake(monkeypatch):
    """The FAKE qai_appbuilder behind the ``qai`` plugin (:func:`tests.fake_foreign.fake_qai_appbuilder`)."""
    with fake_qai_appbuilder(monkeypatch) as module:
        yield module


# -- native data types -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "float16"])
def test_native_io_types_roundtrip_bit_exact(fake, tmp_path, dtype):
    onnx_path, _ = cases.dtype_identity(tmp_path, dtype)
    sess = open_qai(fake, onnx_path)
    info = np.iinfo(dtype) if dtype != "float16" else None
    x = (np.arange(48).reshape(1, 3, 4, 4) * (1 if info is None else info.max // 47)).astype(dtype)
    y = sess.run(None, {"X": x})[0]
    assert y.dtype == np.dtype(dtype) and y.shape == x.shape
    np.testing.assert_array_equal(y, x)
    (init,) = fake._fake.named("QNNContext.__init__")
    assert init["input_data_type"] == init["output_data_type"] == "native"  # never a blanket float32 cast
    assert fake._fake.named("native.inference")[0]["input_nbytes"] == [x.nbytes]


def test_int64_is_narrowed_to_int32_with_range_check(fake, tmp_path):
    onnx_path, _ = cases.int64_add(tmp_path)
    sess = open_qai(fake, onnx_path)
    ids = np.array([[0, 5, -7, 2**31 - 2]], np.int64)
    out = sess.run(None, {"ids": ids})[0]
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, ids + 1)
    with pytest.raises(C.InvalidArgument, match="int32 range"):
        sess.run(None, {"ids": np.array([[2**40, 0, 0, 0]], np.int64)})


def test_quantized_native_io_uses_float_mode(fake, tmp_path):
    onnx_path, bin_path = cases.quantized_conv(tmp_path)
    sess = open_qai(fake, onnx_path)
    y = sess.run(None, {"X": X})[0]
    ref = cases.reference(onnx_path, {"X": X})[0]
    assert y.dtype == np.float32 and np.abs(y - ref).max() < 0.05  # 8-bit input quantization error
    inits = fake._fake.named("QNNContext.__init__")
    assert [(i["input_data_type"], i["output_data_type"]) for i in inits] == [("native", "native"), ("float", "float")]
    assert sess.get_provider_options()[sess.get_providers()[0]]["input_data_type"] == "float"
    with pytest.raises(ArtifactError, match="native mode fails for 'X'"):
        open_qai(fake, onnx_path, input_mode="native")


def test_artifact_alone_reports_the_compiled_io(fake, tmp_path):
    _, bin_path = cases.quantized_conv(tmp_path)
    (tmp_path / "alone").mkdir()  # no q.onnx next to it: the compiled graph's own IO is reported
    alone = fq.write_artifact(tmp_path / "alone" / "q.bin", fq.load_artifact(bin_path)["graphs"])
    sess = open_qai(fake, alone)
    assert [(i.name, i.type, i.shape) for i in sess.get_inputs()] == [("X", "tensor(float)", [1, 3, 8, 8])]
    assert sess.run(None, {"X": X})[0].shape == (1, 2, 8, 8)


# -- validation before the native call ---------------------------------------------------------
def test_compiled_dims_are_checked_before_the_native_call(fake, tmp_path):
    onnx_path, _ = cases.conv(tmp_path, batch="N")
    sess = open_qai(fake, onnx_path)
    assert sess.get_inputs()[0].shape == ["N", 3, 8, 8]  # ONNX truth
    with pytest.raises(C.InvalidArgument, match="index: 0 Got: 2 Expected: 1") as info:
        sess.run(None, {"X": np.zeros((2, 3, 8, 8), np.float32)})
    assert "specialized to [1, 3, 8, 8]" in str(info.value)
    assert not fake._fake.named("native.inference")  # the native layer would have read a wrong length


def test_fake_reproduces_the_missing_native_size_check(fake, tmp_path):
    _, bin_path = cases.dtype_identity(tmp_path, "uint8")
    fake.QNNConfig.Config(runtime=fake.Runtime.HTP)
    ctx = fake.QNNContext("raw", bin_path, input_data_type=fake.DataType.NATIVE, output_data_type=fake.DataType.NATIVE)
    short = ctx.Inference([np.ones(10, np.uint8)])[0]  # 48 expected: over-read, no error
    assert short.size == 48 and (short.reshape(-1)[:10] == 1).all() and (short.reshape(-1)[10:] == 0xA5).all()
    long = ctx.Inference([np.arange(100, dtype=np.uint8)])[0]  # silently truncated
    np.testing.assert_array_equal(long.reshape(-1), np.arange(48, dtype=np.uint8))
    assert ctx.Inference([]) == []  # wrong input count: the failure is silent
    with pytest.raises(ValueError, match="backend library does not exist"):
        fake.QNNConfig.Config("C:/libs")  # the pre-2.51 positional libs path


def test_native_outputs_are_reinterpreted_not_cast(fake, tmp_path):
    _, bin_path = cases.dtype_identity(tmp_path, "uint16")
    fake.QNNConfig.Config(runtime=fake.Runtime.HTP)
    ctx = fake.QNNContext("u16", bin_path, input_data_type="native", output_data_type="native")
    raw = ctx.Inference([np.full((1, 3, 4, 4), 65535, np.uint16)])[0]
    assert raw.dtype == np.float16  # the native layer labels 2-byte data float16
    onnx_path, _ = cases.dtype_identity(tmp_path, "uint16")
    out = open_qai(fake, onnx_path).run(None, {"X": np.full((1, 3, 4, 4), 65535, np.uint16)})[0]
    assert out.dtype == np.uint16 and (out == 65535).all()


def test_layout_mismatch_is_an_error_not_a_guess(fake, tmp_path):
    onnx_path, bin_path = cases.conv(tmp_path, layout="nhwc")
    with pytest.raises(ArtifactError, match="different layout") as info:
        open_qai(fake, onnx_path)
    assert "[1, 3, 8, 8]" in str(info.value) and "[1, 8, 8, 3]" in str(info.value)
    assert [r["model_name"] for r in fake._fake.named("native.destroy")]  # context released again
    # the way out the message offers: the compiled graph's own (NHWC) IO, stated, not guessed
    sess = open_qai(fake, bin_path, onnx=False)
    assert sess.get_inputs()[0].shape == [1, 8, 8, 3]
    y = sess.run(None, {"X": X.transpose(0, 2, 3, 1).copy()})[0]
    np.testing.assert_array_equal(y, cases.reference(onnx_path, {"X": X})[0])


def test_native_failure_raises(fake, tmp_path):
    onnx_path, _ = cases.conv(tmp_path)
    sess = open_qai(fake, onnx_path)
    fake._fake.fail_next_inference()
    with pytest.raises(ow.OnnxwrapperError, match="returned no outputs") as info:
        sess.run(None, {"X": X})
    assert isinstance(info.value, C.EPFail) and info.value.backend == "qai"
    np.testing.assert_array_equal(sess.run(None, {"X": X})[0], cases.reference(onnx_path, {"X": X})[0])
