"""Backend ``qai`` against the FAKE qai_appbuilder (tests/fakes/qai_appbuilder), and its
unavailability on hosts that are not Windows on Snapdragon.

The fake enforces qai_appbuilder 2.51's signatures and native quirks (no per-input size check,
``[]`` on failure, 1-D mislabelled outputs, non-overwriting model map), so these tests check the
backend's marshalling, dtype modes, ordering, graph selection and error paths — not the NPU.
"""

from __future__ import annotations

import os
import pathlib
import sys

import numpy as np
import pytest
from onnxruntime.capi import onnxruntime_pybind11_state as C

import onnxwrapper as ow
from onnxwrapper._registry import default_registry
from onnxwrapper.errors import ArtifactError, BackendCapabilityError, BackendConfigConflictError, BackendError

FAKES = pathlib.Path(__file__).parent / "fakes"
sys.path.insert(0, str(FAKES))  # fake_qnn_graph / foreign_cases (the fake package itself only via fixture)
import fake_qnn_graph as fq  # noqa: E402
import foreign_cases as cases  # noqa: E402
from fake_backends import FakeQaiBackend, plugged_in  # noqa: E402

sys.path.remove(str(FAKES))


def _drop_fake_modules() -> None:
    for name in [m for m in sys.modules if m == "qai_appbuilder" or m.startswith("qai_appbuilder.")]:
        del sys.modules[name]


@pytest.fixture
def fake(monkeypatch):
    """The FAKE qai_appbuilder importable and its backend plugin installed as ``qai`` (entry point);
    probe cache and fake state reset around the test."""
    _drop_fake_modules()
    monkeypatch.syspath_prepend(str(FAKES))
    plugin = plugged_in(qai="fake_backends:FakeQaiBackend")
    plugin.__enter__()
    import qai_appbuilder

    qai_appbuilder._fake.reset()
    opened: list = []
    qai_appbuilder.opened = opened
    yield qai_appbuilder
    for sess in opened:
        sess.close()
    from onnxwrapper.backends import qai

    assert qai._PERF.users == 0 and qai._PERF.active is None, "a test leaked a perf-profile holder"
    plugin.__exit__(None, None, None)
    _drop_fake_modules()


def open_qai(fake, model, **options):
    sess = ow.InferenceSession(model, backend="qai", backend_options=options or None)
    fake.opened.append(sess)
    return sess


X = np.random.default_rng(1).random((1, 3, 8, 8), dtype=np.float32)


# -- availability ------------------------------------------------------------------------------
def test_linux_without_fake_says_windows_on_snapdragon(monkeypatch, mul_1_path):
    from onnxwrapper.backends import qai

    if qai._host_supported():
        pytest.skip("this host could run qai_appbuilder")
    _drop_fake_modules()
    default_registry().unregister("qai")
    with pytest.raises(ow.BackendUnavailableError) as info:
        ow.InferenceSession(str(mul_1_path), backend="qai")
    msg = str(info.value)
    assert "needs Windows on Snapdragon (win_arm64) with qai-appbuilder ≥ 2.51" in msg
    assert "pip install 'onnxwrapper[qai]'" in msg
    assert isinstance(info.value, RuntimeError) and info.value.backend == "qai"
    default_registry().unregister("qai")


def test_fake_is_a_plugin_bound_through_the_sdk_seam(monkeypatch):
    from onnxwrapper.backends import qai

    _drop_fake_modules()
    monkeypatch.syspath_prepend(str(FAKES))
    if not qai._host_supported():  # the production class never reaches for the importable fake here
        av = qai.QaiBackend.probe()
        assert not av.available and "needs Windows on Snapdragon" in av.reason
    av = FakeQaiBackend.probe()
    assert av.available and av.simulated and not av.real_npu and "FAKE" in av.reason
    with plugged_in(qai="fake_backends:FakeQaiBackend"):
        assert default_registry().get("qai") is FakeQaiBackend
    assert default_registry().get("qai") is qai.QaiBackend
    _drop_fake_modules()


def test_probe_does_not_swap_onnxruntime(fake):
    import onnxruntime

    assert sys.modules["onnxruntime"] is onnxruntime and onnxruntime.InferenceSession is not None


# -- fidelity ----------------------------------------------------------------------------------
@pytest.mark.parametrize("form", ["str", "path", "bytes", "artifact"])
def test_constructor_forms(fake, tmp_path, form):
    onnx_path, bin_path = cases.conv(tmp_path)
    arg = {"str": onnx_path, "path": pathlib.Path(onnx_path), "bytes": pathlib.Path(onnx_path).read_bytes(),
           "artifact": bin_path}[form]
    sess = open_qai(fake, arg, **({"artifact": bin_path} if form == "bytes" else {}))
    np.testing.assert_array_equal(sess.run(None, {"X": X})[0], cases.reference(onnx_path, {"X": X})[0])
    assert sess.get_providers() == ["QNNContextBinary(qai_appbuilder:HTP,FAKE)"]
    assert isinstance(sess, ow.InferenceSession) and sess.backend_name == "qai"


def test_metadata_from_onnx_and_output_order(fake, tmp_path):
    import onnxruntime

    onnx_path, _ = cases.mixed(tmp_path)
    sess = open_qai(fake, onnx_path)
    ref = onnxruntime.InferenceSession(onnx_path)
    for ours, theirs in ((sess.get_inputs(), ref.get_inputs()), (sess.get_outputs(), ref.get_outputs())):
        assert [(a.name, a.type, a.shape) for a in ours] == [(b.name, b.type, b.shape) for b in theirs]
    meta, ref_meta = sess.get_modelmeta(), ref.get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "graph_description", "version",
                  "custom_metadata_map"):
        assert getattr(meta, field) == getattr(ref_meta, field)
    feed = cases.rng_feed()
    for names in (None, [], ["neg", "sum:0"], ("prod.out",)):
        got = sess.run(names, feed)
        want = ref.run(names, feed)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape and g.flags["C_CONTIGUOUS"]
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("case", [
    ({}, None), ({"Z": X}, None), ({"X": X, "Z": X}, None), ({"X": X.astype(np.float64)}, None),
    ({"X": X[0]}, None), ({"X": np.zeros((1, 3, 4, 4), np.float32)}, None), ({"X": 1.0}, None),
    ({"X": X}, ["nope"]), ({"X": X}, "Y")], ids=["empty", "wrong-name", "extra-name", "dtype", "rank", "dims",
                                                  "scalar", "bad-output", "output-str"])
def test_every_bad_input_raises_what_ort_raises(fake, tmp_path, case):
    import onnxruntime

    feed, names = case
    onnx_path, _ = cases.conv(tmp_path)
    sess = open_qai(fake, onnx_path)
    with pytest.raises(Exception) as theirs:
        onnxruntime.InferenceSession(onnx_path).run(names, feed)
    with pytest.raises(type(theirs.value)) as ours:
        sess.run(names, feed)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value).splitlines()[0] == str(theirs.value).splitlines()[0]
    assert not fake._fake.named("native.inference")


def test_lists_are_cast_like_ort(fake, tmp_path):
    onnx_path, _ = cases.conv(tmp_path)
    out = open_qai(fake, onnx_path).run(None, {"X": X.astype(np.float64).tolist()})[0]
    np.testing.assert_array_equal(out, cases.reference(onnx_path, {"X": X})[0])


def test_ort_only_methods_raise_capability_errors(fake, tmp_path):
    onnx_path, _ = cases.conv(tmp_path)
    sess = open_qai(fake, onnx_path)
    for call in (sess.io_binding, lambda: sess.run_with_ort_values(None, {}), lambda: sess.set_providers(["x"]),
                 sess.end_profiling):
        with pytest.raises(BackendCapabilityError):
            call()


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


# -- sessions, names, perf profile, graphs -----------------------------------------------------
def test_unique_model_names_avoid_the_native_map_collision(fake, tmp_path):
    a, b = tmp_path / "text_encoder", tmp_path / "unet"
    a.mkdir(), b.mkdir()
    pa, _ = cases.conv(a, "model.htp.bin", seed=0, stem="model")
    pb, _ = cases.conv(b, "model.htp.bin", seed=1, stem="model")
    sa, sb = open_qai(fake, pa), open_qai(fake, pb)
    np.testing.assert_array_equal(sb.run(None, {"X": X})[0], cases.reference(pb, {"X": X})[0])
    np.testing.assert_array_equal(sa.run(None, {"X": X})[0], cases.reference(pa, {"X": X})[0])
    names = [i["model_name"] for i in fake._fake.named("QNNContext.__init__")]
    assert len(set(names)) == 2
    # what a shared name would have done: the second load silently serves the first model
    fake.QNNContext("model", os.path.join(a, "model.htp.bin"))
    fake.QNNContext("model", os.path.join(b, "model.htp.bin"))
    assert fake.appbuilder._models["model"].path.startswith(str(a))


def test_config_keywords_and_perf_profile_once_per_session(fake, tmp_path):
    onnx_path, _ = cases.conv(tmp_path)
    so = ow.SessionOptions()
    so.log_severity_level = 0
    s1 = ow.InferenceSession(onnx_path, so, backend="qai")
    s2 = open_qai(fake, onnx_path)
    for _ in range(3):
        s1.run(None, {"X": X})
    assert fake._fake.named("QNNConfig.Config")[0] == {"runtime": "Htp", "log_level": 4, "profiling_level": 0,
                                                       "log_path": "None"}
    assert [c["perf_profile"] for c in fake._fake.named("PerfProfile.SetPerfProfileGlobal")] == ["burst"]
    assert {c["perf_profile"] for c in fake._fake.named("native.inference")} == {"default"}
    with pytest.raises(BackendConfigConflictError):
        open_qai(fake, onnx_path, perf_profile="high_performance")
    s1.close()
    assert not fake._fake.named("PerfProfile.RelPerfProfileGlobal")
    s2.close()
    assert len(fake._fake.named("PerfProfile.RelPerfProfileGlobal")) == 1
    with pytest.raises(BackendError, match="closed"):
        s1.run(None, {"X": X})


@pytest.mark.parametrize("runtime,expected", [("cpu", "Cpu"), ("gpu", "Gpu")])
def test_runtime_option(fake, tmp_path, runtime, expected):
    cases.conv(tmp_path)  # an HTP binary is not a candidate for another runtime
    onnx_path, _ = cases.conv(tmp_path, f"conv.{runtime}.bin")
    sess = open_qai(fake, onnx_path, runtime=runtime, perf_profile="default")
    assert fake._fake.named("QNNConfig.Config")[0]["runtime"] == expected
    assert sess.get_providers() == [f"QNNContextBinary(qai_appbuilder:{runtime.upper()},FAKE)"]
    assert not fake._fake.named("PerfProfile.SetPerfProfileGlobal")


def test_graph_selection(fake, tmp_path, monkeypatch):
    conv_path, mixed_path, two = cases.two_graphs(tmp_path)
    feed = cases.rng_feed()
    s1 = open_qai(fake, mixed_path, artifact=two, graph=1)
    for g, w in zip(s1.run(None, feed), cases.reference(mixed_path, feed)):
        np.testing.assert_array_equal(g, w)
    assert {c["graph_index"] for c in fake._fake.named("native.inference")} == {1}
    s0 = open_qai(fake, conv_path, artifact=two, graph="g_conv")
    np.testing.assert_array_equal(s0.run(None, {"X": X})[0], cases.reference(conv_path, {"X": X})[0])
    with pytest.raises(ArtifactError, match="graph"):  # graph 0 does not match mixed.onnx
        open_qai(fake, mixed_path, artifact=two)
    with pytest.raises(ArtifactError, match="select other graphs by index"):
        open_qai(fake, mixed_path, artifact=two, graph="g_mixed")
    from onnxwrapper.backends import qai

    monkeypatch.setattr(qai, "_graph_names", lambda path: ["g_conv", "g_mixed"])  # the part-1 binary reader
    s2 = open_qai(fake, mixed_path, artifact=two, graph="g_mixed")
    assert s2.get_provider_options()[s2.get_providers()[0]]["graph_index"] == "1"


# -- artifacts -------------------------------------------------------------------------------
def test_missing_artifact_lists_what_was_tried(fake, tmp_path):
    onnx_path, _ = cases.conv(tmp_path, artifact="elsewhere.bin")
    with pytest.raises(ArtifactError, match="No compiled artifact") as info:
        open_qai(fake, onnx_path)
    assert "conv.htp.bin" in str(info.value) and str(info.value).index("conv.htp.bin") < str(info.value).index("conv.bin")


def test_converter_weight_file_is_not_taken_for_a_binary(fake, tmp_path):
    onnx_path, _ = cases.conv(tmp_path, artifact="conv.bin")
    (tmp_path / "conv.cpp").write_text("// qnn-onnx-converter output\n")
    with pytest.raises(ArtifactError, match="converter weight file"):
        open_qai(fake, onnx_path)
    (tmp_path / "conv.cpp").unlink()
    assert open_qai(fake, onnx_path).run(None, {"X": X})[0].shape == (1, 2, 8, 8)


def test_bad_model_arguments_raise_like_ort(fake, tmp_path):
    _, bin_path = cases.conv(tmp_path)
    with pytest.raises(C.NoSuchFile):
        open_qai(fake, str(tmp_path / "nope.onnx"))
    (tmp_path / "bad.onnx").write_bytes(b"garbage")
    with pytest.raises(C.InvalidProtobuf):
        open_qai(fake, str(tmp_path / "bad.onnx"), artifact=bin_path)
    with pytest.raises(ArtifactError, match="bytes needs"):
        open_qai(fake, (tmp_path / "conv.onnx").read_bytes())
    with pytest.raises(ArtifactError, match="not an existing"):
        open_qai(fake, str(tmp_path / "conv.onnx"), artifact=str(tmp_path / "conv.onnx"))
    with pytest.raises(ow.BackendOptionError, match="Did you mean 'artifact'"):
        open_qai(fake, str(tmp_path / "conv.onnx"), artifcat=bin_path)


def test_output_without_declared_shape_is_inferred_like_ort(fake, tmp_path):
    import onnxruntime
    from onnx import TensorProto as T
    from onnx import helper as h

    from tests import models

    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "noshape", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    onnx_path = tmp_path / "noshape.onnx"
    onnx_path.write_bytes(models.make_model(g))
    fq.write_artifact(tmp_path / "noshape.htp.bin", [fq.graph("g", str(onnx_path), [fq.tensor("x", [1, 4])],
                                                              [fq.tensor("y", [1, 4])])])
    sess = open_qai(fake, str(onnx_path))
    assert sess.get_outputs()[0].shape == onnxruntime.InferenceSession(str(onnx_path)).get_outputs()[0].shape == [1, 4]
    x = np.array([[-1, 2, -3, 4]], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))


def test_renamed_tensors_need_an_explicit_name_map(fake, tmp_path):
    onnx_path, _ = cases.mixed(tmp_path, "unused.bin")
    spec = fq.load_artifact(tmp_path / "unused.bin")["graphs"][0]
    renames = {"a.in": "t0", "b/in": "t1", "sum:0": "o0", "prod.out": "o1", "neg": "o2"}
    for t in spec["inputs"] + spec["outputs"]:
        t["name"] = renames[t["onnx"]]
    fq.write_artifact(tmp_path / "mixed.htp.bin", [spec])
    with pytest.raises(ArtifactError, match="has no counterpart") as info:
        open_qai(fake, onnx_path)
    assert "name_map" in str(info.value)
    sess = open_qai(fake, onnx_path, name_map=renames)
    feed = cases.rng_feed(5)
    for got, want in zip(sess.run(None, feed), cases.reference(onnx_path, feed)):
        np.testing.assert_array_equal(got, want)
