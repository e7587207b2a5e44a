"""compile_model() and precompiled artifacts next to the model (default QNN configuration)."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import onnx
import onnxruntime
import pytest

import onnxwrapper
from onnxwrapper.backends.qnn import CompileResult, compile_model
from onnxwrapper.backends.qnn.artifacts._artifacts import ResolvedArtifact, register_artifact_resolver
from onnxwrapper.errors import ArtifactError, BackendOptionError
from onnxwrapper.kernel.session._partition import PartialOffloadWarning
from tests import models
from tests.conftest import qnn_available

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNXWRAPPER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _origin(session) -> str:
    return session._ow_backend_session.artifacts[0].origin


def test_compile_model_writes_epcontext_and_binary(tmp_path):
    model = _write(tmp_path, "conv.onnx", models.smallconv(batch=1))
    result = compile_model(model, tmp_path / "out" / "conv_ctx.onnx")
    assert isinstance(result, CompileResult)
    assert result.ctx_path == str(tmp_path / "out" / "conv_ctx.onnx")
    assert result.bin_path == str(tmp_path / "out" / "conv_ctx_qnn.bin")
    assert result.ctx_bytes == os.path.getsize(result.ctx_path) and result.bin_bytes > 1000
    assert result.partition.fully_offloaded and result.seconds > 0
    assert result.ep_options["soc_model"] == "60" and result.versions["qnn_sdk"]
    assert sorted(os.listdir(tmp_path / "out")) == ["conv_ctx.onnx", "conv_ctx_qnn.bin"]  # no temp leftovers
    ctx = onnx.load(result.ctx_path)
    assert [n.op_type for n in ctx.graph.node] == ["EPContext"]
    props = {p.key: p.value for p in ctx.metadata_props}
    record = json.loads(props.pop("onnxwrapper.provenance"))  # the provenance record travels with the ctx model
    assert ctx.producer_name == "onnxwrapper-tests" and props == {"license": "MIT", "author": "tests"}
    assert record["source_name"] == "conv.onnx" and record["qnn"]["soc_model"] == "60" and record["shapes"] is None
    assert record["source_sha256"] == onnxwrapper.kernel.ModelSource(model, None).content_hash()
    with pytest.raises(ArtifactError, match="exists already"):
        compile_model(model, result.ctx_path)
    assert compile_model(model, result.ctx_path, overwrite=True).ctx_path == result.ctx_path


def test_compile_model_dynamic_needs_shapes(tmp_path):
    model = onnx.load_from_string(models.smallconv(batch="N", hw=("H", "W")))
    with pytest.raises(BackendOptionError, match="input_shapes"):
        compile_model(model, tmp_path / "d_ctx.onnx")
    result = compile_model(model, tmp_path / "d_ctx.onnx", input_shapes={"X": [2, 3, 4, 6]})
    assert result.input_shapes == {"X": (2, 3, 4, 6)}
    inputs = onnx.load(result.ctx_path).graph.input
    assert [d.dim_value for d in inputs[0].type.tensor_type.shape.dim] == [2, 3, 4, 6]


def test_epcontext_next_to_the_model_wins_over_the_cache(tmp_path, _cache):
    model = _write(tmp_path, "net.onnx", models.smallconv(batch=1))
    compile_model(model, tmp_path / "net_ctx.onnx")
    session = onnxwrapper.InferenceSession(model, backend="qnn")
    assert _origin(session) == "precompiled"
    assert not os.path.exists(_cache / "entries")  # nothing compiled into the cache
    assert session._ow_backend_session.partition().source == "artifact"
    assert session.get_providers() == ["QNNExecutionProvider", "CPUExecutionProvider"]
    assert session.get_partition().providers == ["QNNExecutionProvider"]
    assert session.get_modelmeta().custom_metadata_map == {"license": "MIT", "author": "tests"}
    x = np.ones((1, 3, 8, 8), np.float32)
    np.testing.assert_allclose(session.run(None, {"X": x})[0],
                               onnxruntime.InferenceSession(model).run(None, {"X": x})[0], atol=1e-2)


def test_an_epcontext_model_can_be_opened_directly(tmp_path, _cache):
    model = _write(tmp_path, "direct.onnx", models.conv_det_relu())
    with pytest.warns(PartialOffloadWarning):
        result = compile_model(model, tmp_path / "out" / "direct_ctx.onnx")
    with pytest.warns(PartialOffloadWarning):
        session = onnxwrapper.InferenceSession(result.ctx_path, backend="qnn")
    assert _origin(session) == "precompiled" and not os.path.exists(_cache / "entries")
    report = session._ow_backend_session.partition()
    assert report.source == "artifact" and {n.op_type for n in report.nodes} == {"EPContext", "Det"}
    assert session.get_providers() == ["QNNExecutionProvider", "CPUExecutionProvider"]
    x = np.array([[[[1.0, 2.0], [3.0, 5.0]]]], np.float32)
    ref = onnxruntime.InferenceSession(model).run(None, {"X": x})[0]
    np.testing.assert_allclose(session.run(None, {"X": x})[0], ref, atol=1e-2)


def test_epcontext_without_provenance_is_ignored_with_a_warning(tmp_path, caplog):
    """An EPContext written by plain ORT next to the model has no record of its source: it is not used
    (a warning says why), the model is compiled, and the answer is the model's."""
    from onnxwrapper.backends.qnn.platform._runtime import ensure_registered

    model = _write(tmp_path, "raw.onnx", models.smallconv(batch=1))
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("ep.context_enable", "1")
    so.add_session_config_entry("ep.context_file_path", str(tmp_path / "raw_ctx.onnx"))
    so.add_provider_for_devices(ensure_registered(), {"backend_type": "htp", "soc_model": "60", "htp_arch": "73"})
    onnxruntime.InferenceSession(model, so)
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.qnn"):
        session = onnxwrapper.InferenceSession(model, backend="qnn")
    assert _origin(session) == "compiled"
    assert "raw_ctx.onnx is not used: it has no onnxwrapper provenance record" in caplog.text
    meta = session.get_modelmeta()
    assert (meta.producer_name, meta.version, meta.custom_metadata_map) == ("onnxwrapper-tests", 7,
                                                                            {"license": "MIT", "author": "tests"})


def test_stale_or_unrelated_artifacts_are_ignored_never_used_nor_blocking(tmp_path, caplog):
    """A ctx compiled before the model was retrained (same IO) is not run silently, an unrelated
    ctx or garbage under m's name does not block m; each is ignored with a warning naming the reason."""
    x = np.random.default_rng(5).random((1, 3, 8, 8), np.float32)
    model = _write(tmp_path, "m.onnx", models.smallconv(batch=1, seed=1))
    compile_model(model, tmp_path / "m_ctx.onnx")
    _write(tmp_path, "m.onnx", models.smallconv(batch=1, seed=2))  # retrained: same inputs and outputs
    reference = onnxruntime.InferenceSession(model).run(None, {"X": x})[0]
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.qnn"):
        session = onnxwrapper.InferenceSession(model, backend="qnn")
    assert _origin(session) == "compiled" and "compiled from another version of m.onnx" in caplog.text
    np.testing.assert_allclose(session.run(None, {"X": x})[0], reference, atol=2e-2)
    other = _write(tmp_path, "other.onnx", models.add_mul_add())
    compile_model(other, tmp_path / "m_ctx.onnx", overwrite=True)  # an artifact of another model under m's name
    assert _origin(onnxwrapper.InferenceSession(model, backend="qnn")) == "cache"
    (tmp_path / "m_ctx.onnx").write_bytes(os.urandom(300))
    (tmp_path / "m.htp.bin").write_bytes(os.urandom(4096))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.qnn"):
        session = onnxwrapper.InferenceSession(model, backend="qnn")
    np.testing.assert_allclose(session.run(None, {"X": x})[0], reference, atol=2e-2)
    assert "m_ctx.onnx is not a readable ONNX model" in caplog.text and "m.htp.bin" in caplog.text
    # verified again once it is regenerated for this model
    compile_model(model, tmp_path / "m_ctx.onnx", overwrite=True)
    assert _origin(onnxwrapper.InferenceSession(model, backend="qnn")) == "precompiled"


def test_external_data_named_like_a_context_binary_is_the_models_own(tmp_path, caplog):
    """The model's own external data file ``m.bin`` is not a neighbour artifact (nothing to warn about)."""
    path = tmp_path / "m.onnx"
    onnx.save(onnx.load_from_string(models.smallconv(batch=1)), str(path), save_as_external_data=True,
              location="m.bin", size_threshold=0)
    x = np.ones((1, 3, 8, 8), np.float32)
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.qnn"):
        session = onnxwrapper.InferenceSession(str(path), backend="qnn")
    assert caplog.text == ""
    np.testing.assert_allclose(session.run(None, {"X": x})[0],
                               onnxruntime.InferenceSession(str(path)).run(None, {"X": x})[0], atol=2e-2)


def test_artifact_resolver_extension_point(tmp_path):
    model = _write(tmp_path, "plug.onnx", models.smallconv(batch=1))
    elsewhere = compile_model(model, tmp_path / "store" / "anything.onnx")
    seen = []

    def resolver(source, settings):
        seen.append((os.path.basename(source.path), settings.soc_model))
        return ResolvedArtifact(elsewhere.ctx_path, "context_binary", "plug.bin", "test resolver")

    undo = register_artifact_resolver(resolver)
    try:
        session = onnxwrapper.InferenceSession(model, backend="qnn")
    finally:
        undo()
    assert seen == [("plug.onnx", 60)] and _origin(session) == "precompiled"
    assert _origin(onnxwrapper.InferenceSession(model, backend="qnn")) == "compiled"


def test_dynamic_model_uses_a_precompiled_specialization_next_to_it(tmp_path, _cache):
    """``aipc compile dyn.onnx --shape X=2,3,8,8 -o dyn_ctx_b2.onnx`` next to the model: a run with
    that feed shape loads it; other shapes are compiled as before."""
    from onnxwrapper.backends.qnn.artifacts._artifacts import register_artifact_resolver

    model = _write(tmp_path, "dyn.onnx", models.smallconv(batch="N"))
    compile_model(model, tmp_path / "dyn_ctx_b2.onnx", input_shapes={"X": (2, 3, 8, 8)})
    session = onnxwrapper.InferenceSession(model, backend="qnn")
    reference = onnxruntime.InferenceSession(model)
    for batch in (2, 1):
        x = np.random.default_rng(batch).random((batch, 3, 8, 8), np.float32)
        np.testing.assert_allclose(session.run(None, {"X": x})[0], reference.run(None, {"X": x})[0], atol=1e-2)
        if batch == 2:
            assert session.get_partition().source == "artifact"
    artifacts = session._ow_backend_session.artifacts
    assert [(a.origin, dict(a.shapes)) for a in artifacts] == [("precompiled", {"X": (2, 3, 8, 8)}),
                                                               ("compiled", {"X": (1, 3, 8, 8)})]
    assert artifacts[0].ctx_path == str(tmp_path / "dyn_ctx_b2.onnx")
    # the extension point: a resolver for specializations gets the feed shapes
    seen = []
    undo = register_artifact_resolver(lambda source, settings, shapes: seen.append(dict(shapes)), for_shapes=True,
                                      index=0)
    try:
        onnxwrapper.InferenceSession(model, backend="qnn").run(None, {"X": np.ones((2, 3, 8, 8), np.float32)})
    finally:
        undo()
    assert seen == [{"X": (2, 3, 8, 8)}]


def test_compile_model_writes_dlcs(tmp_path):
    from onnxwrapper.backends.qnn.settings._settings import resolve_settings

    model = _write(tmp_path, "conv.onnx", models.smallconv(batch=1))
    dlc_dir = tmp_path / "out" / "conv_dlc"
    result = compile_model(model, tmp_path / "out" / "conv_ctx.onnx", dlc_dir=dlc_dir)
    assert result.dlc_paths and all(p.endswith(".dlc") and os.path.getsize(p) > 1000 for p in result.dlc_paths)
    assert sorted(os.listdir(dlc_dir)) == sorted(os.path.basename(p) for p in result.dlc_paths)
    assert sorted(os.listdir(tmp_path / "out")) == ["conv_ctx.onnx", "conv_ctx_qnn.bin", "conv_dlc"]
    with pytest.raises(ArtifactError, match="exists already"):
        compile_model(model, tmp_path / "other_ctx.onnx", dlc_dir=dlc_dir)
    again = compile_model(model, tmp_path / "other_ctx.onnx", dlc_dir=dlc_dir, overwrite=True)
    assert sorted(os.listdir(dlc_dir)) == sorted(os.path.basename(p) for p in again.dlc_paths)
    with pytest.raises(BackendOptionError, match="dlc_dir"):  # the raw DLC keys stay refused as EP options
        resolve_settings(onnxwrapper.backends.qnn.QnnBackend.validate_options(
            {"provider_options": {"dump_qnn_ir_dlc": "1"}}), {}, real_npu=False)
