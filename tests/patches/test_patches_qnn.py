"""Each patch turns a node the QNN EP rejects into nodes the QNN EP takes (HTP simulator).

The assignment is read from a raw ONNX Runtime session with the QNN EP and
``session.record_ep_graph_assignment_info=1`` (the ground truth, see DESIGN.md), in a fresh
process per QNN configuration because that configuration is process-global.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import qnn_available, run_python

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]

_SCRIPT = r'''
import json, sys
import numpy as np, onnx, onnxruntime as ort, onnxruntime_qnn as oq
from onnxwrapper.patches import apply_patches
from tests.patches.test_patches_mod import mod_model
from tests.patches.test_patches_einsum import einsum_model
from tests.patches.test_patches_maxpool3d import pool_model

opts = json.loads(sys.argv[1])
ort.register_execution_provider_library(oq.get_ep_name(), oq.get_library_path())
devices = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]

def qnn(model):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(devices, dict(backend_type="htp", **opts))
    try:
        s = ort.InferenceSession(model.SerializeToString(), so)
    except Exception as exc:  # e.g. EP_FAIL at finalize: the backend rejected the graph
        return None, type(exc).__name__ + ": " + str(exc)[:120]
    eps = [(g.ep_name, [n.op_type for n in g.get_nodes()]) for g in s.get_provider_graph_assignment_info()]
    return s, eps

rng = np.random.default_rng(0)
cases = {
    "mod_float": (mod_model(np.float32, 1, (4, 5), (4, 5)),
                  {"a": rng.uniform(-8, 8, (4, 5)).astype(np.float32),
                   "b": (rng.uniform(0.5, 3, (4, 5)) * rng.choice([-1, 1], (4, 5))).astype(np.float32)}),
    "mod_int32_fmod1": (mod_model(np.int32, 1, (4, 5), (4, 5)),
                        {"a": rng.integers(-100, 100, (4, 5)).astype(np.int32),
                         "b": (np.where(rng.random((4, 5)) < .5, -1, 1)
                               * rng.integers(1, 9, (4, 5))).astype(np.int32)}),
    "einsum_bchw_bkc": (einsum_model("bchw,bkc->bkhw", [(1, 8, 4, 5), (1, 6, 8)]),
                        {"x0": rng.standard_normal((1, 8, 4, 5)).astype(np.float32),
                         "x1": rng.standard_normal((1, 6, 8)).astype(np.float32)}),
    "einsum_ji_jk": (einsum_model("ji,jk->ik", [(8, 3), (8, 5)]),
                     {"x0": rng.standard_normal((8, 3)).astype(np.float32),
                      "x1": rng.standard_normal((8, 5)).astype(np.float32)}),
    "maxpool3d_222": (pool_model([1, 4, 6, 8, 8], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
                      {"x": rng.standard_normal((1, 4, 6, 8, 8)).astype(np.float32)}),
    "maxpool3d_lprnet": (pool_model([1, 8, 6, 10, 12], kernel_shape=[1, 3, 3], strides=[2, 1, 2]),
                         {"x": rng.standard_normal((1, 8, 6, 10, 12)).astype(np.float32)}),
}
only = sys.argv[2].split(",") if len(sys.argv) > 2 else list(cases)
result = {}
for name in only:
    model, feeds = cases[name]
    model = onnx.shape_inference.infer_shapes(model)
    cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    _, before = qnn(model)
    patched, records = apply_patches(model)
    s, after = qnn(patched)
    diff = None
    if s is not None:
        diff = float(np.max(np.abs(s.run(None, feeds)[0].astype(np.float64) - cpu)))
    result[name] = {"before": before, "after": after, "diff": diff, "records": len(records)}
print("RESULT" + json.dumps(result))
'''


def _run(opts: dict, names: list[str] | None = None) -> dict:
    args = [json.dumps(opts)] + ([",".join(names)] if names else [])
    proc = run_python(_SCRIPT, *args, timeout=400, cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT"):])


def _on(eps, ep):
    return [op for name, ops in eps for op in ops if name == ep]


def test_patches_move_rejected_nodes_to_qnn_fp16():
    """FP16 target (soc_model 60, Snapdragon X Elite): every original node is on the CPU EP, every
    patched node on the QNN EP, and the QNN result agrees with CPU within FP16 error."""
    result = _run({"soc_model": "60", "enable_htp_fp16_precision": "1"})
    for name, r in result.items():
        assert r["records"] == 1, name
        before, after = r["before"], r["after"]
        assert isinstance(before, list) and _on(before, "CPUExecutionProvider"), (name, before)
        assert isinstance(after, list) and not _on(after, "CPUExecutionProvider"), (name, after)
        assert _on(after, "QNNExecutionProvider"), (name, after)
        tolerance = 0.0 if name.startswith("mod_int") else 0.05
        assert r["diff"] <= tolerance, (name, r["diff"])


def test_integer_mod_fp32_simulation():
    """FP32 simulation (no soc_model): an int32 Mod with fmod=1 stays on CPU; the rewrite runs on
    QNN, exactly (integer Div truncates on the HTP as in ONNX)."""
    result = _run({}, ["mod_int32_fmod1"])
    r = result["mod_int32_fmod1"]
    assert _on(r["before"], "CPUExecutionProvider") == ["Mod"]
    assert not _on(r["after"], "CPUExecutionProvider") and r["diff"] == 0.0
