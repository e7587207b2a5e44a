"""W8A8 as shipped: opset upgrades for the quantizer, the fragile-tensor policy (LayerNorm variance,
Softmax denominators) and the non-finite accounting of the three-way check."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime
import pytest

from onnxwrapper.toolkit import OpsetConversionError, quantize_qdq, three_way_check
from onnxwrapper.toolkit._fragile import find_fragile_chains
from tests import models
from tests.conftest import qnn_available, run_python
from tests.toolkit.test_quantize import feeds

ROOT = pathlib.Path(__file__).parents[2]
skip_without_qnn = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")


def ln_feeds(n=4, seed=0, tokens=16, channels=32):
    """Half of the rows with std 0.3, half with std 30: the 8-bit scale of the squares (≈ 900·k/255)
    rounds every square of the small rows, hence their variance, to 0."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = (0.3 * rng.standard_normal((1, tokens, channels))).astype(np.float32)
        x[0, tokens // 2:] *= 100.0
        out.append({"X": x})
    return out


def opset(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


# -- opset upgrades --------------------------------------------------------------------------------
def test_opset11_per_channel_w8a8_upgrades_in_memory(tmp_path):
    model = tmp_path / "cnn11.onnx"
    model.write_bytes(models.smallconv(batch=1, opset=11))
    before = model.read_bytes()
    out = tmp_path / "out" / "q.onnx"
    result = quantize_qdq(model, out, feeds(), precision="w8a8")
    (upgrade,) = result.opset_upgrades
    assert (upgrade.from_version, upgrade.to_version, upgrade.by) == (11, 13, "onnxwrapper")
    assert "axis" in upgrade.reasons[0] and upgrade.describe().startswith("opset 11 → 13: per-channel")
    qdq = onnx.load(out)
    assert opset(qdq) == 13
    assert any(a.name == "axis" for n in qdq.graph.node if n.op_type == "DequantizeLinear" for a in n.attribute)
    y = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, feeds(1)[0])[0]
    assert y.shape == (1, 2, 8, 8) and np.isfinite(y).all()
    # converted in memory: the user's model is unchanged and nothing was written next to it
    assert model.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["cnn11.onnx", "out"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["q.onnx"]


def test_upgrades_only_when_the_quantizer_needs_them(tmp_path):
    model = tmp_path / "cnn11.onnx"
    model.write_bytes(models.smallconv(batch=1, opset=11))
    result = quantize_qdq(model, tmp_path / "pt.onnx", feeds(), precision="w8a8", per_channel=False)
    assert result.opset_upgrades == () and opset(onnx.load(tmp_path / "pt.onnx")) == 11
    result = quantize_qdq(model, tmp_path / "w16.onnx", feeds(), precision="w8a16")
    assert [(u.from_version, u.to_version) for u in result.opset_upgrades] == [(11, 13), (13, 21)]
    assert "16-bit activations" in result.opset_upgrades[1].reasons[0]


def test_unconvertible_model_is_a_typed_error(tmp_path):
    """onnx's version converter has no adapter for MeanVarianceNormalization-8: the error names the
    conversion, why it is needed and what to do."""
    from onnx import TensorProto as T
    from onnx import helper as h

    w = onnx.numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    g = h.make_graph([h.make_node("MeanVarianceNormalization", ["X"], ["n"]), h.make_node("Conv", ["n", "w"], ["Y"])],
                     "mvn8", [h.make_tensor_value_info("X", T.FLOAT, [1, 3, 8, 8])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [1, 4, 8, 8])], [w])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 8)], ir_version=models.IR_VERSION)
    with pytest.raises(OpsetConversionError, match="from opset 8.*MeanVarianceNormalization.*axis.*--per-tensor") as e:
        quantize_qdq(model, tmp_path / "q.onnx", feeds(), precision="w8a8")
    assert (e.value.from_version, e.value.to_version) == (8, 13) and isinstance(e.value, ValueError)
    assert not (tmp_path / "q.onnx").exists()


# -- fragile tensors -------------------------------------------------------------------------------
def test_find_fragile_chains():
    load = onnx.load_model_from_string
    (ln,) = find_fragile_chains(load(models.layernorm_decomposed("div")))
    assert ln.kind == "layernorm" and [t for t, _ in ln.tensors] == ["square", "variance", "variance_eps", "std"]
    (rc,) = find_fragile_chains(load(models.layernorm_decomposed("reciprocal")))
    assert rc.tensors[-1] == ("reciprocal", "reciprocal")
    (sm,) = find_fragile_chains(load(models.softmax_decomposed()))
    assert sm.kind == "softmax" and sm.tensors == (("denominator", "softmax denominator"),)
    assert find_fragile_chains(load(models.smallconv())) == []


def test_layernorm_variance_rounding_to_zero_is_reported(tmp_path):
    """Policy off: ORT CPU's QDQ run divides by a standard deviation quantized to 0; its next
    QuantizeLinear saturates the Inf, so the outputs are finite — the check must still say so."""
    model = tmp_path / "ln.onnx"
    model.write_bytes(models.layernorm_decomposed("div"))
    out = tmp_path / "q.onnx"
    result = quantize_qdq(model, out, ln_feeds(), precision="w8a8", keep_fragile=False)
    assert not result.fragile.enabled and "policy off" in result.fragile.describe()
    report = three_way_check(model, out, ln_feeds(3, seed=5), run_qnn=False)
    runs = report.nonfinite
    assert runs["float_cpu"].output_total() == 0 and runs["qdq_cpu"].output_total() == 0  # finite but wrong
    (first, *_) = runs["qdq_cpu"].origins()
    assert (first.tensor, first.op_type) == ("normalized", "Div") and first.nonfinite > 0
    assert "division by zero" in first.cause and "quantized to 0" in first.cause
    assert set(report.not_measurable) == {"quantization"}
    text = report.format_text()
    assert "[!]" in text and "the CPU QDQ reference produced" in text and "not a measure of quantization loss" in text
    data = report.to_dict()
    json.dumps(data)
    assert data["nonfinite"]["qdq_cpu"]["introduced"][0]["tensor"] == "normalized"


@pytest.mark.parametrize("variant", ["div", "reciprocal"])
def test_layernorm_stays_finite_by_default(tmp_path, variant):
    """Default policy: the Div LayerNorm is fused into LayerNormalization (opset 11 → 17); the
    Reciprocal one is not fusable and keeps its five denominator tensors at 16 bits (→ opset 21)."""
    model = tmp_path / "ln.onnx"
    model.write_bytes(models.layernorm_decomposed(variant))
    out = tmp_path / "q.onnx"
    result = quantize_qdq(model, out, ln_feeds(), precision="w8a8")
    qdq = onnx.load(out)
    ops = {n.op_type for n in qdq.graph.node}
    if variant == "div":
        assert result.fragile.fused_layernorms == 1 and not result.fragile.kept and "LayerNormalization" in ops
        assert [u.to_version for u in result.opset_upgrades] == [17] and "Sqrt" not in ops
    else:
        (chain,) = result.fragile.kept
        assert len(chain.tensors) == 5 and "kept at 16 bits" in result.fragile.describe()
        assert [u.to_version for u in result.opset_upgrades] == [17, 21]
        zero_points = {i.name: i.data_type for i in qdq.graph.initializer if i.name.endswith("zero_point")}
        for tensor, _ in chain.tensors:
            assert zero_points[f"{tensor}_zero_point"] == onnx.TensorProto.UINT16, tensor
    report = three_way_check(model, out, ln_feeds(3, seed=5), run_qnn=False)
    assert all(r.scanned and r.intermediate == 0 and r.output_total() == 0 for r in report.nonfinite.values())
    assert not report.nonfinite["qdq_cpu"].introduced and not report.not_measurable and not report.findings


def test_nonfinite_outputs_are_attributed_to_their_run(tmp_path):
    """A float model whose own output is −Inf (Log of 0) calibrates a QDQ output with an infinite
    scale: the float run's −Inf is counted as its own, the QDQ run's NaNs are traced to that scale."""
    from onnx import TensorProto as T
    from onnx import helper as h

    g = h.make_graph([h.make_node("Log", ["X"], ["Y"])], "log", [h.make_tensor_value_info("X", T.FLOAT, [2, 4])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [2, 4])])
    model = tmp_path / "log.onnx"
    model.write_bytes(models.make_model(g, 13))
    x = np.abs(np.random.default_rng(0).standard_normal((2, 4))).astype(np.float32) + 0.5
    x[0, 0] = 0.0
    out = tmp_path / "q.onnx"
    with np.errstate(invalid="ignore"):  # onnxruntime.quantization computes an infinite scale
        quantize_qdq(model, out, [{"X": x}], precision="w8a16", keep_fragile=False)
    report = three_way_check(model, str(out), [{"X": x}], run_qnn=False)
    runs = report.nonfinite
    assert runs["float_cpu"].outputs["Y"] == (0, 1) and runs["qdq_cpu"].outputs["Y"] == (8, 0)
    assert "the float model's own outputs hold 1 NaN/Inf" in report.findings[0]
    (origin,) = runs["qdq_cpu"].origins()
    assert origin.op_type == "DequantizeLinear" and "scale Y_scale is not finite" in origin.cause
    row = report.outputs[0].quantization
    assert (row.ref_inf, row.nan, row.compared) == (1, 8, 0) and "no finite pairs [!]" in report.format_text()


# -- on the QNN HTP --------------------------------------------------------------------------------
def aipc(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aipc", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))


_CAPTURE = r'''
import sys
import onnxwrapper
from onnxwrapper.diff import start_capture
from tests.toolkit.test_quantize import feeds
with start_capture(sys.argv[2]):
    session = onnxwrapper.InferenceSession(sys.argv[1])
    for feed in feeds(6):
        session.run(None, feed)
'''


@pytest.mark.qnn
@skip_without_qnn
def test_opset11_per_channel_w8a8_compiles_on_qnn(tmp_path):
    model, cap, out = tmp_path / "cnn11.onnx", tmp_path / "cap", tmp_path / "out"
    model.write_bytes(models.smallconv(batch=1, opset=11))
    proc = run_python(_CAPTURE, str(model), str(cap), cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = aipc("compile", model, "-o", out, "--precision", "w8a8", "--calibration", cap, "--json", "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    (upgrade,) = summary["quantization"]["opset_upgrades"]
    assert (upgrade["from"], upgrade["to"]) == (11, 13) and "axis" in upgrade["reasons"][0]
    offloaded = {n["op_type"] for n in summary["compile"]["partition"]["nodes"] if n["ep"] != "QNNExecutionProvider"}
    assert offloaded <= {"QuantizeLinear", "DequantizeLinear"}  # only the graph-I/O (de)quantization
    acc = summary["accuracy"]
    assert acc["qnn_error"] == "" and not acc["not_measurable"]
    assert all(r["outputs"]["Y"] == {"nan": 0, "inf": 0} for r in acc["nonfinite"].values())
    (row,) = acc["outputs"]
    assert row["total"]["cosine"] > 0.99 and row["quantization"]["cosine"] > 0.99
    text = aipc("compile", model, "-o", tmp_path / "again", "--precision", "w8a8", "--calibration", cap,
                "--no-progress", "--no-check")
    assert text.returncode == 0 and "opset 11 → 13 (in memory, by onnxwrapper): per-channel" in text.stdout


_LN_ON_QNN = r'''
import json, sys
from onnxwrapper.toolkit import quantize_qdq, three_way_check
from tests.toolkit.test_quantize_w8a8 import ln_feeds
model, out = sys.argv[1], sys.argv[2]
for keep in (True, False):
    quantize_qdq(model, out, ln_feeds(), precision="w8a8", keep_fragile=keep)
    report = three_way_check(model, out, ln_feeds(3, seed=5))
    print("RESULT" + json.dumps({"keep": keep, **report.to_dict(), "text": report.format_text()}))
'''


@pytest.mark.qnn
@skip_without_qnn
def test_layernorm_three_way_on_qnn(tmp_path):
    """The fused LayerNorm is finite in every run; unfused, the CPU QDQ reference breaks while the QNN
    run's outputs stay finite, and the report says which run produced the NaN/Inf."""
    model = tmp_path / "ln.onnx"
    model.write_bytes(models.layernorm_decomposed("div"))
    proc = run_python(_LN_ON_QNN, str(model), str(tmp_path / "q.onnx"), cwd=str(ROOT))
    results = [json.loads(ln[len("RESULT"):]) for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and len(results) == 2, proc.stderr[-3000:]
    kept, broken = results
    assert kept["qnn_error"] == "" and not kept["not_measurable"] and not kept["findings"]
    assert all(sum(v.values()) == 0 for r in kept["nonfinite"].values() for v in r["outputs"].values())
    assert kept["nonfinite"]["qdq_cpu"]["intermediate"] == 0
    assert broken["qnn_error"] == "" and set(broken["not_measurable"]) == {"quantization", "backend"}
    assert broken["nonfinite"]["qnn"]["outputs"]["Y"] == {"nan": 0, "inf": 0}
    assert broken["nonfinite"]["qdq_cpu"]["introduced"][0]["tensor"] == "normalized"
    assert "the QNN run's outputs are finite" in broken["findings"][0], broken["text"]
