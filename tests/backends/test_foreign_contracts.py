"""The ``qai`` and ``snpe`` backends against rules of their real APIs that the doubles enforce.

Each rule comes from the real tool or library (qai_appbuilder 2.51.40's Python layer and C++ source,
``snpe-net-run --help``); the FAKE qai_appbuilder and FAKE snpe-net-run in ``tests/fakes`` behave
like the real ones there, and each test fails on a backend that breaks the rule:

1. snpe-net-run: ``--use_native_input_files`` / ``--use_native_output_files`` "Must be used with
   --userbuffer_xxx";
2. native output files may be named ``<name>_native.raw`` (qnn-net-run's naming) or ``<name>.raw``;
3. qai_appbuilder FLOAT mode has no conversion for ``sfp8/16/32`` and ``ufp32``: every inference
   returns ``[]`` → refused at session creation;
4. ``RelPerfProfileGlobal`` fails once the last context is destroyed → release the profile first;
5. the ``onnxwrapper[qai]`` extra installs only where a qai-appbuilder 2.51 wheel exists for a host
   the backend supports (Windows ARM64, CPython 3.11–3.13);
6. after a failed load the 2.51 getters return ``[]``/``""`` and log a warning (no exception) →
   the backend says the artifact could not be loaded.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from onnx import TensorProto as T
from packaging.requirements import Requirement

import onnxwrapper as ow
from onnxwrapper.errors import ArtifactError
from tests import models
from tests.fake_foreign import cases, fake_qai_appbuilder, fake_qairt_sdk, fq

REPO = pathlib.Path(__file__).resolve().parents[2]
X = np.random.default_rng(7).random((1, 3, 8, 8), dtype=np.float32)


@pytest.fixture
def qai(monkeypatch):
    """The FAKE qai_appbuilder behind the ``qai`` plugin (:func:`tests.fake_foreign.fake_qai_appbuilder`)."""
    with fake_qai_appbuilder(monkeypatch) as module:
        yield module


@pytest.fixture
def snpe(tmp_path, monkeypatch):
    """The FAKE QAIRT SDK behind the ``snpe`` plugin; returns the argv log reader."""
    with fake_qairt_sdk(tmp_path, monkeypatch) as log:
        yield log


# -- 1. snpe: native files need a userbuffer flag --------------------------------------------------
def test_snpe_native_files_come_with_a_userbuffer_flag(snpe, tmp_path):
    onnx_path, _ = cases.conv(tmp_path, "conv.dlc")
    y = ow.InferenceSession(onnx_path, backend="snpe").run(None, {"X": X})[0]
    np.testing.assert_array_equal(y, cases.reference(onnx_path, {"X": X})[0])
    (argv,) = snpe()
    assert "--use_native_input_files" in argv and "--use_native_output_files" in argv
    assert "--userbuffer_auto" in argv


def test_snpe_float_files_need_no_userbuffer_flag(snpe, tmp_path):
    onnx_path, _ = cases.quantized_conv(tmp_path, "qconv.dlc")
    ow.InferenceSession(onnx_path, backend="snpe").run(None, {"X": X})
    assert not [a for a in snpe()[0] if a.startswith("--userbuffer")]


# -- 2. snpe: <name>_native.raw or <name>.raw -----------------------------------------------------------
@pytest.mark.parametrize("naming", ["native", "plain"])
def test_snpe_reads_both_native_output_namings(snpe, tmp_path, monkeypatch, naming):
    monkeypatch.setenv("FAKE_SNPE_NATIVE_OUTPUT_NAMES", naming)
    onnx_path, _ = cases.dtype_identity(tmp_path, "uint16", ".dlc")
    x = (np.arange(48).reshape(1, 3, 4, 4) * 1000).astype(np.uint16)
    y = ow.InferenceSession(onnx_path, backend="snpe").run(None, {"X": x})[0]
    assert y.dtype == np.uint16
    np.testing.assert_array_equal(y, x)


# -- 3. qai: no float conversion for sfp* / ufp32 --------------------------------------------------------
def _signed_fixed_point(directory, in_type: str, out_type: str):
    onnx_path = directory / "sconv.onnx"
    onnx_path.write_bytes(models.smallconv(batch=1))
    g = fq.graph("sconv", str(onnx_path), [fq.tensor("X", [1, 3, 8, 8], in_type, scale=1 / 127, offset=0)],
                 [fq.tensor("Y", [1, 2, 8, 8], out_type, scale=1e-4, offset=0)])
    fq.write_artifact(directory / "sconv.htp.bin", [g])
    return str(onnx_path)


@pytest.mark.parametrize("in_type,out_type,blocked", [("sfp8", "ufp16", "sfp8"), ("ufp8", "ufp32", "ufp32"),
                                                      ("sfp16", "sfp32", "sfp16")])
def test_qai_refuses_float_mode_without_float_conversion(qai, tmp_path, in_type, out_type, blocked):
    onnx_path = _signed_fixed_point(tmp_path, in_type, out_type)
    with pytest.raises(ArtifactError, match="no float conversion for") as info:
        ow.InferenceSession(onnx_path, backend="qai").close()
    text = str(info.value)
    assert blocked in text and "mode='native'" in text and "recompile with float32, ufp8 or ufp16 IO" in text
    assert not qai._fake.named("native.inference")  # refused at creation, nothing ran


def test_double_returns_nothing_in_float_mode_for_signed_fixed_point(qai, tmp_path):
    _signed_fixed_point(tmp_path, "sfp8", "ufp16")
    qai.QNNConfig.Config(qai.Runtime.HTP)
    ctx = qai.QNNContext("direct", str(tmp_path / "sconv.htp.bin"))  # FLOAT/FLOAT: what the old backend chose
    assert ctx.getInputDataType() == ["sfp8"] and ctx.Inference([X]) == []
    assert qai._fake.logged("Datatype not supported yet!")
    ctx.release()


def test_qai_uses_native_mode_for_signed_fixed_point_integers(qai, tmp_path):
    onnx_path = tmp_path / "q.onnx"
    onnx_path.write_bytes(models.identity(T.INT8, (1, 4)))
    fq.write_artifact(tmp_path / "q.htp.bin", [fq.graph("q", str(onnx_path), [fq.tensor("X", [1, 4], "sfp8", scale=0.1,
                                                                                        offset=0)],
                                                        [fq.tensor("Y", [1, 4], "sfp8", scale=0.1, offset=0)])])
    x = np.array([[-128, -1, 0, 127]], np.int8)
    sess = ow.InferenceSession(str(onnx_path), backend="qai")
    np.testing.assert_array_equal(sess.run(None, {"X": x})[0], x)
    assert sess.get_provider_options()[sess.get_providers()[0]]["input_data_type"] == "native"
    sess.close()


# -- 4. qai: perf profile released before the context -----------------------------------------------------
def test_qai_releases_the_perf_profile_before_the_context(qai, tmp_path):
    onnx_path, _ = cases.conv(tmp_path)
    sess = ow.InferenceSession(onnx_path, backend="qai")
    sess.run(None, {"X": X})
    sess.close()
    order = [name for name, _ in qai._fake.calls if name in ("native.rel_perf_profile", "native.destroy")]
    assert order == ["native.rel_perf_profile", "native.destroy"]
    assert not qai._fake.logged("context released?") and not qai._fake.logged("set perf profile before")


def test_double_fails_a_perf_profile_release_after_the_last_context(qai, tmp_path):
    cases.conv(tmp_path)
    qai.QNNConfig.Config(qai.Runtime.HTP)
    ctx = qai.QNNContext("direct", str(tmp_path / "conv.htp.bin"))
    qai.PerfProfile.SetPerfProfileGlobal(qai.PerfProfile.BURST)
    ctx.release()
    qai.PerfProfile.RelPerfProfileGlobal()
    assert qai._fake.logged("HTP infrastructure is not available (context released?)")


# -- 5. the qai extra resolves only where a wheel exists for a supported host ------------------------------
@pytest.mark.parametrize("platform,machine,python,expected", [
    ("win32", "ARM64", "3.10", False),   # no win_arm64 wheel of qai-appbuilder for Python 3.10
    ("win32", "ARM64", "3.11", True), ("win32", "ARM64", "3.13", True),
    ("win32", "AMD64", "3.12", False),   # an x64 wheel the backend would refuse (win_arm64 only)
    ("linux", "x86_64", "3.12", False)])
def test_qai_extra_marker(platform, machine, python, expected):
    tomllib = pytest.importorskip("tomllib")
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["qai"]
    (requirement,) = [Requirement(r) for r in extra]
    assert requirement.name == "qai-appbuilder" and requirement.marker is not None
    env = {"sys_platform": platform, "platform_machine": machine, "python_version": python,
           "python_full_version": python + ".0"}
    assert requirement.marker.evaluate(env) is expected


# -- 6. qai: a binary that fails to load ------------------------------------------------------------------
def test_double_getters_return_empty_and_warn_after_a_failed_load(qai, tmp_path):
    (tmp_path / "broken.bin").write_bytes(b"\x00not a context binary")
    qai.QNNConfig.Config(qai.Runtime.HTP)
    ctx = qai.QNNContext("broken", str(tmp_path / "broken.bin"))  # no exception, as the real 2.51
    assert ctx.getInputName() == [] and ctx.getOutputShapes() == [] and ctx.getGraphName() == ""
    assert ctx.Inference([X]) == []
    assert qai._fake.logged("getInputName: model not found or released: broken")
    ctx.release()


def test_qai_says_the_artifact_could_not_be_loaded(qai, tmp_path):
    onnx_path, _ = cases.conv(tmp_path, artifact="elsewhere.bin")
    (tmp_path / "conv.htp.bin").write_bytes(b"\x00not a context binary")
    with pytest.raises(ArtifactError, match="qai_appbuilder could not load .*conv.htp.bin") as info:
        ow.InferenceSession(onnx_path, backend="qai")
    assert "does not raise for a binary that fails to load" in str(info.value)
    assert [c["model_name"] for c in qai._fake.named("native.destroy")]  # the context was released


def test_qai_says_a_graph_index_does_not_exist(qai, tmp_path):
    onnx_path, _ = cases.conv(tmp_path)
    with pytest.raises(ArtifactError, match="has no graph 3"):
        ow.InferenceSession(onnx_path, backend="qai", backend_options={"graph": 3})
    assert qai._fake.logged("invalid graphIdx: 3, graphsCount: 1")
