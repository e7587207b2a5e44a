"""Raw QNN context binaries (issue 7 part 1): read with libQnnSystem, wrapped in EPContext models,
run through ORT's QNN EP (the HTP simulator on x86-64) — with binaries compiled here by ORT's
QNN EP (``ep.context_enable=1``, embed mode 0). QNN configuration is process-global, so the
QNN runs happen in a fresh interpreter (``run_python``).
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
from onnxwrapper.backends import _qnn_binary as qb

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
from onnxwrapper.backends._qnn_artifacts import register_artifact_resolver
undo = register_artifact_resolver(qb.resolve_raw_context_binary)
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
    ctx, graph = qb.wrap_raw_binary("cdr_ctx_qnn.bin", graph=index, cache_dir=cache)
    s = ort.InferenceSession(ctx, options())
    results.append([o.tolist() for o in s.run(None, {graph.inputs[0].name: list(feed.values())[0]})])
report["cdr_results"] = results
print("REPORT" + json.dumps(report))
"""


def test_raw_binaries_through_libqnnsystem_and_the_qnn_ep(tmp_path):
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    import os

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    from onnxwrapper.backends import _qnn_binary as qb
    from onnxwrapper.errors import ArtifactError

    bad = tmp_path / "model.bin"
    bad.write_bytes(b"\x00" * 64 + b"not a context binary")
    with pytest.raises(ArtifactError, match="not a QNN context binary"):
        qb.read_binary_info(bad)
