"""Raw QNN context binaries (issue 7): read with libQnnSystem, wrapped in EPContext models, run
through ORT's QNN EP (the HTP simulator on x86-64) — with binaries compiled here by ORT's QNN EP
(``ep.context_enable=1``, embed mode 0).

The first test drives raw ORT sessions without a ``soc_model`` (FP32 simulation), so it runs in a
fresh interpreter (``run_python``: the QNN configuration is process-global). The others open
``.bin`` files as the model path of ``onnxwrapper.InferenceSession(..., backend="qnn")`` in this
process, on the default configuration, with binaries written by ``compile_model``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import qnn_available, run_python

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]

_SCRIPT = r"""
import json, os, shutil, sys
import numpy as np, onnx, onnxruntime as ort, onnxruntime_qnn as oq
from tests import models
from onnxwrapper.backends.qnn.binary import _binary as qb
from onnxwrapper.backends.qnn.binary._wrap import wrap_raw_binary

work, cache = sys.argv[1], sys.argv[2]
os.chdir(work)
ort.register_execution_provider_library(oq.get_ep_name(), oq.get_library_path())
devs = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]

def options(ctx_path=None):
    so = ort.SessionOptions()
    so.add_provider_for_devices(devs, {"backend_type": "htp"})
    if not ctx_path:  # compiling the Det model needs the CPU EP; running a wrapper must not
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    else:
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_embed_mode", "0")
        so.add_session_config_entry("ep.context_file_path", ctx_path)
    return so

report = {}
# 1. a one-graph binary compiled here; the raw .bin next to a fresh copy of the model
open("conv.onnx", "wb").write(models.smallconv(batch=1))
ort.InferenceSession("conv.onnx", options("conv_ctx.onnx"))
os.makedirs("user", exist_ok=True)
shutil.copy("conv.onnx", "user/model.onnx")
shutil.copy("conv_ctx_qnn.bin", "user/model.htp.bin")
x = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)
via_epcontext = ort.InferenceSession("conv_ctx.onnx", options()).run(None, {"X": x})[0]
import onnxwrapper as ow
from onnxwrapper.backends.qnn.artifacts._artifacts import register_artifact_resolver, resolve_raw_context_binary
undo = register_artifact_resolver(resolve_raw_context_binary)
try:
    sess = ow.InferenceSession("user/model.onnx", backend="qnn", backend_options={"cache_dir": cache})
    via_raw = sess.run(None, {"X": x})[0]
finally:
    undo()
report["bit_exact"] = bool(np.array_equal(via_raw, via_epcontext))
report["providers"] = sess.get_providers()
report["user_files"] = sorted(os.listdir("user"))
info = qb.read_binary_info("user/model.htp.bin")
report["conv_info"] = [[g.name, [[t.name, list(t.shape), t.dtype] for t in g.inputs],
                        [[t.name, list(t.shape), t.dtype] for t in g.outputs]] for g in info.graphs]

# 2. a two-graph binary (Det is not a QNN op: two QNN partitions in one context)
open("cdr.onnx", "wb").write(models.conv_det_relu())
ort.InferenceSession("cdr.onnx", options("cdr_ctx.onnx"))
info = qb.read_binary_info("cdr_ctx_qnn.bin")
report["cdr_graphs"] = [g.name for g in info.graphs]
feeds = [{"X": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)}, {"d": np.array([-2.5], np.float32)}]
results = []
for index, feed in enumerate(feeds):
    ctx, graph = wrap_raw_binary("cdr_ctx_qnn.bin", graph=index, cache_dir=cache)
    s = ort.InferenceSession(ctx, options())
    results.append([o.tolist() for o in s.run(None, {graph.inputs[0].name: list(feed.values())[0]})])
report["cdr_results"] = results
print("REPORT" + json.dumps(report))
"""


def test_raw_binaries_through_libqnnsystem_and_the_qnn_ep(tmp_path):
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    import os

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = run_python(_SCRIPT, str(work), str(cache), env={"PYTHONPATH": repo}, timeout=600)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT")]
    assert line, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(line[0][len("REPORT"):])
    assert report["bit_exact"], report
    assert report["providers"][0] == "QNNExecutionProvider"
    assert report["user_files"] == ["model.htp.bin", "model.onnx"]  # nothing written next to the model
    (name, ins, outs), = report["conv_info"]
    assert ins == [["X", [1, 3, 8, 8], "float32"]] and outs == [["Y", [1, 2, 8, 8], "float32"]]
    assert len(report["cdr_graphs"]) == 2
    conv_out, relu_out = report["cdr_results"]
    np.testing.assert_allclose(conv_out, [[[[0.0, 0.5], [1.0, 1.5]]]], atol=1e-3)  # Conv 1x1 (w 0.5) → [1, 2, 2]
    assert relu_out == [[0.0]]


def test_unreadable_binary_is_an_artifact_error(tmp_path):
    from onnxwrapper.backends.qnn.binary import _binary as qb
    from onnxwrapper.errors import ArtifactError

    bad = tmp_path / "model.bin"
    bad.write_bytes(b"\x00" * 64 + b"not a context binary")
    with pytest.raises(ArtifactError, match="not a QNN context binary"):
        qb.read_binary_info(bad)


# -- raw binaries as the model path of backend "qnn" (in-process, default QNN configuration) --------
@pytest.fixture
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNXWRAPPER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _unique(data: bytes) -> bytes:
    """The same model with a unique doc string: its own cache key and warn-once identity."""
    import uuid

    import onnx

    model = onnx.load_from_string(data)
    model.doc_string = uuid.uuid4().hex
    return model.SerializeToString()


def _renamed(data: bytes, names: dict):
    """The model with graph input/output tensors renamed (``{old: new}``)."""
    import onnx

    model = onnx.load_from_string(data)
    for node in model.graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    for value in list(model.graph.input) + list(model.graph.output):
        value.name = names.get(value.name, value.name)
    return model


def test_raw_binary_as_model_path_matches_the_epcontext_bit_for_bit(tmp_path, _cache):
    import shutil

    import onnxwrapper
    from onnxwrapper.backends.qnn import compile_model
    from tests import models

    model = tmp_path / "conv.onnx"
    model.write_bytes(models.smallconv(batch=1))
    result = compile_model(model, tmp_path / "out" / "conv_ctx.onnx")
    x = np.random.default_rng(3).random((1, 3, 8, 8), dtype=np.float32)
    reference = onnxwrapper.InferenceSession(result.ctx_path, backend="qnn").run(None, {"X": x})[0]
    bare = onnxwrapper.InferenceSession(result.bin_path, backend="qnn")  # no companion: the binary's own IO
    assert [(i.name, i.type, i.shape) for i in bare.get_inputs()] == [("X", "tensor(float)", [1, 3, 8, 8])]
    assert bare.get_partition().providers == ["QNNExecutionProvider"] and bare.get_partition().source == "artifact"
    assert bare._ow_backend_session.artifacts[0].origin == "precompiled"
    np.testing.assert_array_equal(bare.run(None, {"X": x})[0], reference)
    # companion by option, then by name (<stem>.onnx next to <stem>.htp.bin): the model's metadata
    by_option = onnxwrapper.InferenceSession(result.bin_path, backend="qnn", backend_options={"onnx": str(model)})
    shutil.copy(result.bin_path, tmp_path / "conv.htp.bin")
    by_name = onnxwrapper.InferenceSession(str(tmp_path / "conv.htp.bin"), backend="qnn")
    for session in (by_option, by_name):
        assert session.get_modelmeta().custom_metadata_map == {"license": "MIT", "author": "tests"}
        np.testing.assert_array_equal(session.run(None, {"X": x})[0], reference)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "conv.htp.bin", "conv.onnx", "out"]


def test_sanitized_qnn_names_are_mapped_back_to_the_onnx_names(tmp_path, _cache):
    """Converter/AI Hub binaries carry QAIRT-sanitized names (``image:0`` → ``image_0``); a binary
    compiled here from a model with such names stands in for one, the companion has the originals."""
    import onnx

    import onnxwrapper
    from onnxwrapper.backends.qnn import compile_model
    from tests import models

    sanitized = _renamed(models.smallconv(batch=1), {"X": "image_0", "Y": "_head_Conv_output_0"})
    compile_model(sanitized, tmp_path / "net_ctx.onnx")
    onnx.save(_renamed(models.smallconv(batch=1), {"X": "image:0", "Y": "/head/Conv_output_0"}),
              tmp_path / "net.onnx")  # the companion of net_ctx_qnn.bin
    session = onnxwrapper.InferenceSession(str(tmp_path / "net_ctx_qnn.bin"), backend="qnn")
    assert [i.name for i in session.get_inputs()] == ["image:0"]
    assert [o.name for o in session.get_outputs()] == ["/head/Conv_output_0"]
    x = np.ones((1, 3, 8, 8), np.float32)
    (got,) = session.run(["/head/Conv_output_0"], {"image:0": x})
    plain = onnxwrapper.InferenceSession(str(tmp_path / "net_ctx_qnn.bin"), backend="qnn",
                                         backend_options={"onnx": False})
    assert [i.name for i in plain.get_inputs()] == ["image_0"]
    np.testing.assert_array_equal(plain.run(None, {"image_0": x})[0], got)


def test_two_graph_binary_runs_each_graph_by_name(tmp_path, _cache):
    import warnings

    import onnxwrapper
    from onnxwrapper.kernel.session._partition import PartialOffloadWarning
    from onnxwrapper.backends.qnn.binary import _binary as qb
    from onnxwrapper.backends.qnn import compile_model
    from onnxwrapper.errors import ArtifactError
    from tests import models

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialOffloadWarning)  # Det stays on CPU: two QNN partitions
        result = compile_model(_unique(models.conv_det_relu()), tmp_path / "cdr_ctx.onnx")
    names = [g.name for g in qb.read_binary_info(result.bin_path).graphs]
    assert len(names) == 2
    feeds = [{"X": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)}, {"d": np.array([-2.5], np.float32)}]
    outputs = []
    for name, feed in zip(names, feeds):
        session = onnxwrapper.InferenceSession(result.bin_path, backend="qnn", backend_options={"graph": name})
        assert [i.name for i in session.get_inputs()] == list(feed)
        outputs.append(session.run(None, feed)[0])
    np.testing.assert_allclose(outputs[0], [[[0.0, 0.5], [1.0, 1.5]]], atol=1e-3)  # Conv 1x1, weight 0.5
    assert outputs[1].tolist() == [0.0]  # Relu(-2.5)
    by_index = onnxwrapper.InferenceSession(result.bin_path, backend="qnn", backend_options={"graph": 1})
    assert by_index.run(None, feeds[1])[0].tolist() == [0.0]
    with pytest.raises(ArtifactError, match="holds graphs"):
        onnxwrapper.InferenceSession(result.bin_path, backend="qnn")
    with pytest.raises(ArtifactError, match="holds graphs"):
        onnxwrapper.InferenceSession(result.bin_path, backend="qnn", backend_options={"graph": "nope"})


def test_binary_options_and_errors(tmp_path, _cache):
    import onnxruntime

    import onnxwrapper
    from onnxwrapper.errors import BackendOptionError
    from tests import models

    model = tmp_path / "m.onnx"
    model.write_bytes(models.smallconv(batch=1))
    with pytest.raises(BackendOptionError, match="Option 'onnx'"):
        onnxwrapper.InferenceSession(str(model), backend="qnn", backend_options={"onnx": str(model)})
    with pytest.raises(BackendOptionError, match="Option 'graph' applies to raw QNN context binaries"):
        onnxwrapper.InferenceSession(str(model), backend="qnn", backend_options={"graph": 0})
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.NoSuchFile):
        onnxwrapper.InferenceSession(str(tmp_path / "missing.bin"), backend="qnn")


def test_a_binary_compiled_elsewhere_is_cached_as_a_regular_file_and_reopened_without_warnings(tmp_path, _cache,
                                                                                                 caplog):
    """AI Hub / a raw .bin (issue 34): the wrapper's copy in the cache is a regular file, so the cache,
    which never follows a link, takes the entry as it is on every later open (no "corrupt" rebuild)."""
    import logging
    import os
    import shutil

    import onnxwrapper
    from onnxwrapper.backends.qnn import compile_model
    from tests import models

    result = compile_model(models.smallconv(batch=1), tmp_path / "out" / "conv_ctx.onnx")
    downloaded = tmp_path / "aihub" / "conv.bin"  # a binary compiled elsewhere
    downloaded.parent.mkdir()
    shutil.copy(result.bin_path, downloaded)
    x = np.ones((1, 3, 8, 8), np.float32)
    first = onnxwrapper.InferenceSession(str(downloaded), backend="qnn").run(None, {"X": x})[0]
    cached = [os.path.join(d, n) for d, _s, files in os.walk(_cache) for n in files if n == "conv.bin"]
    assert cached and all(os.path.isfile(p) and not os.path.islink(p) for p in cached)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="onnxwrapper"):
        again = onnxwrapper.InferenceSession(str(downloaded), backend="qnn").run(None, {"X": x})[0]
    assert not [r for r in caplog.records if "corrupt" in r.getMessage()], caplog.text
    np.testing.assert_array_equal(again, first)
