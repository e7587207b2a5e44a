"""Backend ``qai`` against the FAKE qai_appbuilder (tests/fakes/qai_appbuilder): availability, ORT
fidelity, sessions, graphs and artifacts; and its unavailability on hosts that are not Windows on
Snapdragon.

The fake enforces qai_appbuilder 2.51's signatures and native quirks (no per-input size check,
``[]`` on failure, 1-D mislabelled outputs, non-overwriting model map), so these tests check the
backend's behaviour as an ``InferenceSession``, its session and graph handling and its error paths —
not the NPU. The marshalling of native data is in test_qai_native_io.py.
"""

from __future__ import annotations

import os
import pathlib
import sys

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnxruntime.capi import onnxruntime_pybind11_state as C

import onnxwrapper as ow
from onnxwrapper._registry import default_registry
from onnxwrapper.backends import qai
from onnxwrapper.errors import ArtifactError, BackendCapabilityError, BackendConfigConflictError, BackendError
from onnxwrapper.kernel import host_architecture
from tests import models
from tests.fake_foreign import (FAKES, FakeQaiBackend, cases, drop_fake_qai_appbuilder, fake_qai_appbuilder, fq,
                                open_qai, plugged_in)

X = np.random.default_rng(1).random((1, 3, 8, 8), dtype=np.float32)


@pytest.fixture
def fake(monkeypatch):
    """The FAKE qai_appbuilder behind the ``qai`` plugin (:func:`tests.fake_foreign.fake_qai_appbuilder`)."""
    with fake_qai_appbuilder(monkeypatch) as module:
        yield module


# -- availability ------------------------------------------------------------------------------
def test_linux_without_fake_says_windows_on_snapdragon(monkeypatch, mul_1_path):
    if qai._host_supported(host_architecture()):
        pytest.skip("needs a host that cannot run qai_appbuilder: this one is Windows on Snapdragon (ARM64), where the "
                    "refusal checked here does not happen")
    drop_fake_qai_appbuilder()
    default_registry().unregister("qai")
    with pytest.raises(ow.BackendUnavailableError) as info:
        ow.InferenceSession(str(mul_1_path), backend="qai")
    msg = str(info.value)
    assert "needs Windows on Snapdragon (win_arm64) with qai-appbuilder ≥ 2.51" in msg
    assert "pip install 'onnxwrapper[qai]'" in msg
    assert isinstance(info.value, RuntimeError) and info.value.backend == "qai"
    default_registry().unregister("qai")


def test_fake_is_a_plugin_bound_through_the_sdk_seam(monkeypatch):
    drop_fake_qai_appbuilder()
    monkeypatch.syspath_prepend(str(FAKES))
    if not qai._host_supported(host_architecture()):  # the production class never reaches for the importable fake here
        av = qai.QaiBackend.probe()
        assert not av.available and "needs Windows on Snapdragon" in av.reason
    av = FakeQaiBackend.probe()
    assert av.available and av.simulated and not av.real_npu and "FAKE" in av.reason
    with plugged_in(qai="fake_backends:FakeQaiBackend"):
        assert default_registry().get("qai") is FakeQaiBackend
    assert default_registry().get("qai") is qai.QaiBackend
    drop_fake_qai_appbuilder()


def test_probe_does_not_swap_onnxruntime(fake):
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
