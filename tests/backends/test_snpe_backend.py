"""Backend ``snpe`` against a FAKE QAIRT SDK (tests/fakes/fake_qairt: fake snpe-net-run and
snpe-dlc-info computing with ONNX Runtime on the companion model of a fake DLC).

Checks the command line, raw-file dtypes, input list, output parsing, ordering and error paths
of the backend — not SNPE itself. Every ``run`` starts the fake tool as a process (~0.5 s).
"""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnxruntime.capi import onnxruntime_pybind11_state as C

import onnxwrapper as ow
from onnxwrapper._registry import default_registry
from onnxwrapper.backends import snpe
from onnxwrapper.errors import ArtifactError
from tests import models
from tests.fake_foreign import FAKES, FakeSnpeBackend, cases, drop_fake_qai_appbuilder, fake_qairt_sdk, fq

X = np.random.default_rng(2).random((1, 3, 8, 8), dtype=np.float32)


@pytest.fixture
def sdk(tmp_path, monkeypatch):
    """A FAKE SDK in QAIRT_SDK_ROOT, run by the FakeSnpeBackend plugin (entry point ``snpe``);
    returns the argv log reader (:func:`tests.fake_foreign.fake_qairt_sdk`)."""
    with fake_qairt_sdk(tmp_path, monkeypatch) as log:
        yield log


def open_snpe(model, **options):
    return ow.InferenceSession(model, backend="snpe", backend_options=options or None)


def test_run_matches_ort_and_command_line(sdk, tmp_path):
    onnx_path, _ = cases.conv(tmp_path, "conv.dlc")
    sess = open_snpe(onnx_path)
    np.testing.assert_array_equal(sess.run(None, {"X": X})[0], cases.reference(onnx_path, {"X": X})[0])
    assert sess.get_providers() == ["SNPE(dsp,FAKE)"]
    (argv,) = sdk()
    assert argv[:2] == ["--container", str(tmp_path / "conv.dlc")]
    assert "--use_dsp" in argv and "--enable_cpu_fallback" not in argv
    assert argv[argv.index("--perf_profile") + 1] == "burst"
    assert "--use_native_input_files" in argv and "--use_native_output_files" in argv


def test_names_order_and_all_outputs_in_one_run(sdk, tmp_path):
    onnx_path, _ = cases.mixed(tmp_path, "mixed.dlc")
    sess = open_snpe(onnx_path, runtime="cpu")
    feed = cases.rng_feed(3)
    for names in (None, ["neg", "sum:0"]):
        for got, want in zip(sess.run(names, feed), cases.reference(onnx_path, feed, names)):
            np.testing.assert_array_equal(got, want)
    assert len(sdk()) == 2  # one snpe-net-run per run(), never one per output
    assert not {"--use_dsp", "--use_gpu", "--use_aip"} & set(sdk()[0])  # CPU is SNPE's default runtime


@pytest.mark.parametrize("dtype", ["uint8", "float16"])
def test_native_raw_files(sdk, tmp_path, dtype):
    onnx_path, _ = cases.dtype_identity(tmp_path, dtype, ".dlc")
    x = (np.arange(48).reshape(1, 3, 4, 4) * 5).astype(dtype)
    y = open_snpe(onnx_path).run(None, {"X": x})[0]
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y, x)
    assert "--use_native_input_files" in sdk()[0]


def test_quantized_dlc_uses_float_raw_files(sdk, tmp_path):
    onnx_path, _ = cases.quantized_conv(tmp_path, "qconv.dlc")
    sess = open_snpe(onnx_path)
    y = sess.run(None, {"X": X})[0]
    assert y.dtype == np.float32 and np.abs(y - cases.reference(onnx_path, {"X": X})[0]).max() < 0.05
    argv = sdk()[0]
    assert "--use_native_input_files" not in argv and "--use_native_output_files" not in argv


def test_bad_inputs_raise_what_ort_raises(sdk, tmp_path):
    onnx_path, _ = cases.conv(tmp_path, "conv.dlc")
    sess, ref = open_snpe(onnx_path), onnxruntime.InferenceSession(onnx_path)
    for feed, names in (({}, None), ({"X": X.astype(np.float64)}, None), ({"X": X[:, :2]}, None), ({"X": X}, ["z"])):
        with pytest.raises(Exception) as theirs:
            ref.run(names, feed)
        with pytest.raises(type(theirs.value)) as ours:
            sess.run(names, feed)
        assert str(ours.value).splitlines()[0] == str(theirs.value).splitlines()[0]
    assert sdk() == []


def test_layout_and_dims_checked_from_dlc_info(sdk, tmp_path):
    onnx_path, _ = cases.conv(tmp_path, "conv.dlc", layout="nhwc")
    with pytest.raises(ArtifactError, match="different layout"):
        open_snpe(onnx_path)
    onnx_path, _ = cases.conv(tmp_path, "conv.dlc", batch="N")
    with pytest.raises(C.InvalidArgument, match="index: 0 Got: 3 Expected: 1"):
        open_snpe(onnx_path).run(None, {"X": np.zeros((3, 3, 8, 8), np.float32)})
    assert sdk() == []


def test_tool_failures_raise(sdk, tmp_path, monkeypatch):
    onnx_path, dlc = cases.conv(tmp_path, "conv.dlc")
    monkeypatch.setenv("FAKE_SNPE_RUNTIMES", "cpu")
    with pytest.raises(C.EPFail, match="exited with code 1.*runtime 'dsp' is not available") as info:
        open_snpe(onnx_path).run(None, {"X": X})
    assert isinstance(info.value, ow.OnnxwrapperError)
    spec = fq.load_artifact(dlc)
    spec["graphs"][0]["fail"] = True
    fq.write_artifact(dlc, spec["graphs"])
    with pytest.raises(C.EPFail, match="Failed to execute"):
        open_snpe(onnx_path, runtime="cpu").run(None, {"X": X})


def test_output_names_with_separators(sdk, tmp_path):
    g = h.make_graph([h.make_node("Relu", ["x"], ["block/out:0"])], "sep", [h.make_tensor_value_info("x", T.FLOAT, [4])],
                     [h.make_tensor_value_info("block/out:0", T.FLOAT, [4])])
    onnx_path = tmp_path / "sep.onnx"
    onnx_path.write_bytes(models.make_model(g))
    fq.write_artifact(tmp_path / "sep.dlc", [fq.graph("sep", str(onnx_path), [fq.tensor("x", [1, 4])],
                                                      [fq.tensor("block/out:0", [1, 4])])])
    x = np.array([-1, 2, -3, 4], np.float32)
    y = open_snpe(str(onnx_path)).run(None, {"x": x})[0]  # ONNX [4] vs native [1, 4]: size-1 dims only
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_missing_sdk_and_missing_dlc(sdk, tmp_path, monkeypatch):
    onnx_path, _ = cases.conv(tmp_path, "other.dlc")
    with pytest.raises(ArtifactError, match="No DLC"):
        open_snpe(onnx_path)
    monkeypatch.delenv("QAIRT_SDK_ROOT")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    default_registry().unregister("snpe")
    default_registry().unregister("qai")
    with pytest.raises(ow.BackendUnavailableError, match="QAIRT_SDK_ROOT"):
        open_snpe(onnx_path)
    default_registry().unregister("qai")


def test_fake_sdk_is_labelled_by_its_plugin_not_detected(sdk, monkeypatch):
    av = FakeSnpeBackend.probe()
    assert av.available and av.simulated and not av.real_npu and "FAKE" in av.reason
    real = snpe.SnpeBackend.probe()  # the production class treats the tree as any SDK: no detection
    assert real.available and "FAKE" not in real.reason


def test_dlc_alone_and_qai_engine(sdk, tmp_path, monkeypatch):
    onnx_path, dlc = cases.mixed(tmp_path, "mixed.dlc")
    feed = cases.rng_feed(4)
    sess = open_snpe(dlc)  # companion mixed.onnx found next to the DLC
    assert [i.name for i in sess.get_inputs()] == ["a.in", "b/in"]
    np.testing.assert_array_equal(sess.run(["prod.out"], feed)[0], cases.reference(onnx_path, feed, ["prod.out"])[0])
    # engine qai_appbuilder: the same DLC through the FAKE qai_appbuilder's QNNContext
    drop_fake_qai_appbuilder()
    monkeypatch.syspath_prepend(str(FAKES))
    default_registry().unregister("qai")
    via_qai = open_snpe(onnx_path, engine="qai_appbuilder")
    assert via_qai.get_providers() == ["QNNDlc(qai_appbuilder:HTP,FAKE)"]
    for got, want in zip(via_qai.run(None, feed), cases.reference(onnx_path, feed)):
        np.testing.assert_array_equal(got, want)
    via_qai.close()
    default_registry().unregister("qai")
    drop_fake_qai_appbuilder()


def test_parse_dlc_info_tables():
    piped = ("DLC info for: m.dlc\n| Input Name | Dimensions | Type | Encoding Info |\n|---|---|---|---|\n"
             "| images | 1,640,640,3 | uFxp_8 | bw 8 |\n| Output Name | Dimensions | Type | Encoding Info |\n"
             "| out0 | 1x84x8400 | Float_32 | - |\nTotal parameters: 7\n")
    ins, outs = snpe.parse_dlc_info(piped, "m.dlc")
    assert [(t.name, t.shape, t.type.name, t.type.quantized) for t in ins] == [("images", (1, 640, 640, 3), "uFxp_8", True)]
    assert outs[0].shape == (1, 84, 8400) and outs[0].type.storage == np.float32
    with pytest.raises(ArtifactError, match="no input/output tensor table"):
        snpe.parse_dlc_info("Total parameters: 0\n", "m.dlc")
