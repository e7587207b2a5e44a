"""Automatic operator patches in the qnn backend (issue 6 §2): a node the QNN EP leaves on CPU is
rewritten by a registered patch and the model recompiled; ``patches`` disables it; ``strict`` is
judged after patching; the partition report lists the patches.

The float ``Mod`` (``fmod=1``) is the measured case: the QNN EP rejects it ("QNN Mod Op only support
fmod == 0 for now", tests/patches/test_patches_qnn.py) and takes the patch's Div/Abs/Floor/Sign/Mul/Sub on
the FP16 target. In-process tests use the default QNN configuration (Snapdragon X Elite, FP16);
the FP32-simulation fallback runs in a fresh interpreter (the configuration is process-global).
"""

from __future__ import annotations

import uuid
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxwrapper
from onnxwrapper.errors import BackendOptionError, PartitionError
from onnxwrapper.kernel.session._partition import NodeAssignment, PartialOffloadWarning, PartitionReport
from tests.conftest import qnn_available, run_python
from tests.models import IR_VERSION

skip_without_qnn = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
#: FP16 emulation of the float Mod rewrite: within ~1 ulp of |a| ≤ 8 (measured ≤ 0.01; test_patches_qnn uses 0.05)
FP16_ATOL = 0.05


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNXWRAPPER_CACHE_DIR", str(tmp_path / "cache"))


def fmod_model(batch=4, only_mod: bool = False) -> onnx.ModelProto:
    """``y = Mod(a, b, fmod=1) * 2`` (float32 [batch, 5]); ``only_mod``: ``y = Mod(a, b)`` alone.
    A unique doc string gives each model a fresh cache key and warn-once identity."""
    nodes = [h.make_node("Mod", ["a", "b"], ["y" if only_mod else "m"], fmod=1, name="mod")]
    inits = []
    if not only_mod:
        nodes.append(h.make_node("Mul", ["m", "two"], ["y"], name="double"))
        inits.append(onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    g = h.make_graph(nodes, "fmod", [h.make_tensor_value_info(n, T.FLOAT, [batch, 5]) for n in ("a", "b")],
                     [h.make_tensor_value_info("y", T.FLOAT, [batch, 5])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=IR_VERSION)
    model.doc_string = uuid.uuid4().hex
    return model


def feeds(batch=4) -> dict:
    """The inputs of tests/patches/test_patches_qnn.py's float Mod case (a in ±8, |b| in [0.5, 3])."""
    rng = np.random.default_rng(0)
    return {"a": rng.uniform(-8, 8, (batch, 5)).astype(np.float32),
            "b": (rng.uniform(0.5, 3, (batch, 5)) * rng.choice([-1, 1], (batch, 5))).astype(np.float32)}


def _save(tmp_path, model, name="fmod.onnx") -> str:
    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


def test_report_patches_round_trip_and_summary():
    record = {"patch": "mod", "node_name": "mod", "op_type": "Mod", "node_index": 0, "summary": "Mod -> Div, …",
              "added_nodes": [["mod/quotient_1", "Div"]], "added_initializers": [], "outputs": ["y"]}
    report = PartitionReport("QNNExecutionProvider", (NodeAssignment("mod/quotient_1", "Div", "",
                                                                     "QNNExecutionProvider"),), ("QNNExecutionProvider",),
                             note="m.onnx").with_patches([record])
    assert report.summary() == "QNNExecutionProvider 1/1 nodes, 1 partition, patched: mod (node mod) [m.onnx]"
    again = PartitionReport.from_dict(report.to_dict())
    assert again == report and again.with_source("cache").patches == report.patches
    assert PartitionReport.from_dict({"target_ep": "QNNExecutionProvider"}).patches == ()  # older dicts


def test_patches_option_is_validated():
    from onnxwrapper.backends.qnn import QnnBackend

    assert QnnBackend.options["patches"].default is True
    assert QnnBackend.validate_options({"patches": ["MOD", "einsum"]})["patches"] == ("einsum", "mod")
    assert QnnBackend.validate_options({"patches": False})["patches"] is False
    with pytest.raises(BackendOptionError, match="unknown patch 'mdo'. Did you mean 'mod'"):
        QnnBackend.validate_options({"patches": ["mdo"]})
    with pytest.raises(BackendOptionError, match="expected True, False or a list of patch names"):
        QnnBackend.validate_options({"patches": "mod"})


@pytest.mark.qnn
@skip_without_qnn
@pytest.mark.parametrize("only_mod", [False, True], ids=["mul-after-mod", "mod-alone"])
def test_float_mod_runs_fully_on_qnn_with_patches(tmp_path, only_mod):
    path = _save(tmp_path, fmod_model(only_mod=only_mod))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PartialOffloadWarning)  # nothing is left on CPU
        qnn = onnxwrapper.InferenceSession(path, backend="qnn")
    report = qnn.get_partition()
    assert report.fully_offloaded and report.providers == ["QNNExecutionProvider"]
    assert [(p["patch"], p["node_name"], p["op_type"]) for p in report.patches] == [("mod", "mod", "Mod")]
    assert "patched: mod (node mod)" in report.summary()
    assert {n.op_type for n in report.nodes} >= {"Div", "Floor", "Sign", "Sub"}
    x = feeds()
    got, ref = qnn.run(None, x)[0], onnxruntime.InferenceSession(path).run(None, x)[0]
    assert got.dtype == np.float32 and np.abs(got - ref).max() <= FP16_ATOL * (1 if only_mod else 2)
    again = onnxwrapper.InferenceSession(path, backend="qnn")  # the patched compile is cached
    assert again._ow_backend_session.artifacts[0].origin == "cache" and again.get_partition().patches == report.patches
    np.testing.assert_array_equal(again.run(None, x)[0], got)


@pytest.mark.qnn
@skip_without_qnn
def test_disabled_patches_leave_mod_on_cpu_and_strict_judges_after_patching(tmp_path):
    path = _save(tmp_path, fmod_model())
    onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"strict": True})  # patched: passes
    for option in (False, ["mod"]):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            off = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"patches": option})
        if option is False:  # warned once per model and configuration
            assert any(issubclass(w.category, PartialOffloadWarning) and "mod (Mod)" in str(w.message)
                       for w in caught)
        report = off.get_partition()
        assert report.cpu_nodes == [("mod", "Mod")] and report.patches == ()
        assert off.get_providers() == ["QNNExecutionProvider", "CPUExecutionProvider"]
        with pytest.raises(PartitionError, match=r"mod \(Mod\)"):
            onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"patches": option, "strict": True})
    # a model whose only node QNN rejects: without patches it runs on CPU, as ORT + QNN EP; strict refuses
    alone = _save(tmp_path, fmod_model(only_mod=True), "alone.onnx")
    with pytest.warns(PartialOffloadWarning, match="took none of the 1 node"):
        on_cpu = onnxwrapper.InferenceSession(alone, backend="qnn", backend_options={"patches": False})
    assert on_cpu.get_partition().target_nodes == 0 and on_cpu.get_partition().cpu_nodes == [("mod", "Mod")]
    with pytest.raises(PartitionError, match="took none"):
        onnxwrapper.InferenceSession(alone, backend="qnn", backend_options={"patches": False, "strict": True})


@pytest.mark.qnn
@skip_without_qnn
def test_dynamic_model_specializations_are_patched(tmp_path):
    path = _save(tmp_path, fmod_model(batch="N"))
    qnn = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"strict": True})
    x = feeds(batch=3)
    ref = onnxruntime.InferenceSession(path).run(None, x)[0]
    assert np.abs(qnn.run(None, x)[0] - ref).max() <= 2 * FP16_ATOL
    report = qnn.get_partition()
    assert report.fully_offloaded and [p["patch"] for p in report.patches] == ["mod"]
    assert qnn._ow_backend_session.artifacts[0].shapes == {"a": (3, 5), "b": (3, 5)}


@pytest.mark.qnn
@skip_without_qnn
def test_compile_model_applies_patches(tmp_path):
    from onnxwrapper.backends.qnn import compile_model

    path = _save(tmp_path, fmod_model())
    result = compile_model(path, tmp_path / "out" / "fmod_ctx.onnx")
    assert result.partition.fully_offloaded and [p["patch"] for p in result.patches] == ["mod"]
    assert result.partition.patches == result.patches
    with pytest.warns(PartialOffloadWarning):
        plain = compile_model(path, tmp_path / "plain" / "fmod_ctx.onnx", backend_options={"patches": False})
    assert plain.patches == () and plain.partition.cpu_nodes == [("mod", "Mod")]


_FP32_FALLBACK = r'''
import json, logging, sys
import numpy as np, onnx, onnxruntime
import onnxwrapper
from tests.qnn.test_qnn_patching import feeds, fmod_model

records = []
handler = logging.Handler()
handler.emit = lambda record: records.append((record.levelname, record.getMessage()))
logging.getLogger("onnxwrapper.qnn").addHandler(handler)
logging.getLogger("onnxwrapper.qnn").setLevel(logging.INFO)
path = sys.argv[1]
onnx.save(fmod_model(), path)
out = {}
for attempt in range(2):
    s = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"precision": "fp32"})
    report = s.get_partition()
    x = feeds()
    diff = float(np.abs(s.run(None, x)[0] - onnxruntime.InferenceSession(path).run(None, x)[0]).max())
    out[attempt] = {"cpu": report.cpu_nodes, "patches": list(report.patches), "diff": diff}
out["log"] = records
print("RESULT" + json.dumps(out))
'''


@pytest.mark.qnn
@skip_without_qnn
def test_fp32_simulation_falls_back_to_the_unpatched_model(tmp_path):
    """FP32 simulation cannot finalize the float Mod rewrite (EP_FAIL QNN_COMMON_ERROR_MEM_ALLOC, measured):
    the session runs unpatched with a WARNING, and a second session does not retry the failing compile."""
    import json
    import pathlib

    proc = run_python(_FP32_FALLBACK, str(tmp_path / "fmod.onnx"), env={"ONNXWRAPPER_CACHE_DIR": str(tmp_path / "c")},
                      cwd=str(pathlib.Path(__file__).parents[2]), timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT"):])
    for attempt in ("0", "1"):
        assert out[attempt]["cpu"] == [["mod", "Mod"]] and out[attempt]["patches"] == []
        assert out[attempt]["diff"] < 1e-5  # fp32 simulation + CPU Mod
    warnings_ = [m for level, m in out["log"] if level == "WARNING" and "failed to compile" in m]
    assert len(warnings_) == 1 and "EPFail" in warnings_[0] and "'patches': False" in warnings_[0]
    assert any("failed to compile before" in m for _level, m in out["log"])
