"""``aipc fix`` without an NPU: choosing exact rewrites from the reference's value ranges, the candidate
order, the report, the CLI's usage errors, and a backend that cannot apply recipes (the test-only
``perturb`` plugin). The QNN runs are in test_fix_qnn.py."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxwrapper import diff
from onnxwrapper.repair.fix._api import tolerances_from_dict
from onnxwrapper.repair.fix._candidates import candidates_for, node_groups
from onnxwrapper.repair.fix._ranges import reference_ranges
from onnxwrapper.repair.fix._rescale import TARGET, exact_overflow_rewrites
from onnxwrapper.repair.fix._verify import Trial
from onnxwrapper.repair import ModelRecipe, apply_recipe
from onnxwrapper.repair.fix import FixResult
from tests import repair_models
from tests.test_diff_support import aipc_diff, child_env, conv_project  # noqa: F401

FEEDS = {"ln": lambda r: r.standard_normal((4, 256)) * 400 + 100, "mm_ln": lambda r: r.standard_normal((8, 64)) * 10,
         "chain": lambda r: r.standard_normal((8, 64)) * 20, "softmax": lambda r: r.standard_normal((8, 64)) * 3 + 8}
MODELS = {"ln": repair_models.layernorm_sum_of_squares, "mm_ln": repair_models.matmul_layernorm,
          "chain": repair_models.matmul_chain, "softmax": repair_models.naive_softmax}


def feeds(name, n=2):
    rng = np.random.default_rng(0)
    return [{"x": FEEDS[name](rng).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("name,rewrite,node", [("ln", "rescale", "center"), ("mm_ln", "rescale", "proj"),
                                               ("chain", "rescale", "mm1"), ("softmax", "softmax_stable", "exp")])
def test_exact_rewrites_bring_every_overflow_into_range(name, rewrite, node):
    model = onnx.load_model_from_string(MODELS[name]())
    ranges, order = reference_ranges(model, feeds(name))
    assert max(ranges.values()) > 65504  # the reference itself leaves FP16's range
    rewrites, notes, left = exact_overflow_rewrites(model, feeds(name))
    assert [(r.rewrite, r.node) for r in rewrites] == [(rewrite, node)] and left == {}, notes
    repaired = apply_recipe(model, ModelRecipe("a" * 64, rewrites=tuple(rewrites))).proto
    after, _ = reference_ranges(repaired, feeds(name))
    assert max(after.values()) <= TARGET
    if rewrite == "rescale":  # the smallest power of two that fits
        k = -rewrites[0].params["log2"]
        assert k >= 1 and rewrites[0].params.get("pass_through") is None


def test_candidates_come_cheapest_and_most_exact_first():
    model = onnx.load_model_from_string(repair_models.pow_square())
    loc = {"cause": "saturation", "culprit": {"node": "pow", "tensor": "p"}, "first": {"node": "sqrt", "tensor": "y"}}
    x = repair_models.pow_inputs()
    cands, notes = candidates_for(model, loc, [{"x": x}], "fp16", higher_precision="fp32")
    # x ≈ 1e-3: its squares (≈ 1e-6) are subnormal in FP16: the kernel rewrite is also tried with an upscale
    assert [(c.kind, c.title) for c in cands] == [
        ("kernel", "pow_square at 'pow'"), ("kernel", "pow_square at 'pow' and 1 exact upscale(s) of FP16 underflow"),
        ("cpu", "'pow' on the CPU"), ("precision", "precision fp32 for the whole model")]
    upscale = cands[1].rewrites[-1]
    assert upscale.rewrite == "rescale" and upscale.params["log2"] > 0 and upscale.node == "mul"
    assert "within FP16's range everywhere" in notes[0] and "quietest call" in notes[1]
    assert cands[0].exactness.startswith("pow_square: bit-exact")
    only_cpu, _ = candidates_for(model, loc, [{"x": x}], "fp16", remedies=("cpu",))
    assert [c.kind for c in only_cpu] == ["cpu"]
    # an overflow: exact first, then the out-of-range region on the CPU (every exact rewrite kept)
    chain = onnx.load_model_from_string(repair_models.matmul_chain())
    cands, _ = candidates_for(chain, None, feeds("chain"), "fp16")
    assert [c.kind for c in cands] == ["exact", "cpu"]
    assert cands[1].cpu_subgraphs == (("mm1", "bias1", "relu", "mm2"),)  # mm2 reads the out-of-range relu


def test_a_change_two_remedies_arrive_at_is_judged_once():
    """A localized culprit that is the recurrent node itself: 'the recurrent node on the CPU' and
    ''lstm' on the CPU' are one recipe, so it is listed (compiled, replayed) once, with a note."""
    model = onnx.load_model_from_string(repair_models.lstm_drift(steps=16))
    loc = {"cause": "node", "culprit": {"node": "lstm", "tensor": "Y"}}
    cands, notes = candidates_for(model, loc, [{"x": repair_models.lstm_inputs(steps=16)}], "fp16", remedies=("cpu",))
    assert [c.cpu_subgraphs for c in cands] == [(("lstm",),)], [c.title for c in cands]
    assert any("makes the same change as" in n and "judged once" in n for n in notes), notes


def test_node_groups_are_connected_subgraphs():
    chain = onnx.load_model_from_string(repair_models.matmul_chain())
    assert node_groups(chain, ["relu", "mm1", "mm2"]) == (("mm1",), ("relu", "mm2"))


def test_tolerances_survive_the_report_round_trip():
    tol = diff.Tolerances(default=diff.PRESETS["fp16"].with_(min_cosine=0.99), changes={"min_snr_db": 30.0},
                          overrides=[("logits", {"atol": 1e-2})])
    back = tolerances_from_dict(json.loads(json.dumps(tol.to_dict())))
    assert back.for_output("m", "logits", "fp16") == tol.for_output("m", "logits", "fp16")
    assert back.for_output("m", "other", "fp32") == tol.for_output("m", "other", "fp32")
    assert tolerances_from_dict(None).for_output("m", "y", "fp16").min_snr_db == pytest.approx(27.07)


def test_report_text_and_exit_status():
    result = FixResult(directory="d")
    assert result.exit_status == 3 and "nothing to repair" in result.text()
    from onnxwrapper.repair.fix._result import ModelFix

    m = ModelFix("qnn", "pow-123", "a" * 64, {"cause": "node", "culprit": {"node": "pow"}}, [(1, 0)])
    m.baseline = Trial("baseline", "x", status="fail", worst={"snr_db": -150.0}, bar_db=27.07, npu_nodes=4,
                       total_nodes=4, call_seconds=0.01)
    t = Trial("cpu", "'pow' on the CPU", ModelRecipe("a" * 64, cpu_subgraphs=(("pow",),)), status="pass",
              worst={"snr_db": 70.0}, bar_db=27.07, npu_nodes=3, total_nodes=4, cpu_nodes=["pow"], call_seconds=0.02)
    m.trials, m.chosen, m.recipe = [t], t, t.recipe
    result.models.append(m)
    text = result.text()
    assert result.exit_status == 0 and "cause node at 'pow'" in text and "← recipe" in text
    assert "NPU 3/4 nodes (unrepaired 4/4), 20.0 ms/call (2.00× unrepaired)" in text
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["models"][0]["chosen"] == 0 and doc["models"][0]["recipe"]["cpu_subgraphs"] == [["pow"]]


def test_cli_usage_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "aipc", "fix", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 64 and "is not an aipc diff directory" in proc.stderr
    (tmp_path / "diff.json").write_text("{}")
    proc = subprocess.run([sys.executable, "-m", "aipc", "fix", str(tmp_path), "--remedies", "magic"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 64 and "unknown kind(s) magic" in proc.stderr


def test_a_backend_without_a_repairs_option_is_reported_not_repaired(tmp_path, child_env):
    script = conv_project(tmp_path)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,perturb", "--backend-option", "perturb:scale=1e-2", "--dir", d, "--no-html",
                      script], tmp_path, child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    proc = subprocess.run([sys.executable, "-m", "aipc", "fix", "-q", "--no-localize", str(d)], cwd=tmp_path,
                          env=child_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "backend 'perturb' has no 'repairs' option" in proc.stdout and "NOT REPAIRED" in proc.stdout


@pytest.mark.parametrize("build,x,expected", [
    ("t5_rmsnorm_after_ffn", (4, 64), [("/enc/DenseReluDense/wo/MatMul", True)]),
    ("unet_block_instancenorm", (1, 4, 8, 8), [("down/conv0", True), ("res/conv1", None)])])
def test_overflows_through_residual_streams_and_normalizations_get_bit_exact_rescales(build, x, expected):
    """T5's FFN overflow (1.5e5) reaching its final RMSNorm through the residual Add, and a U-Net block
    (1e5 after a SiLU, 1e10 before an InstanceNorm, a skip connection): the rescales found are
    bit-identical to the original on onnxruntime's CPU, and nothing is left beyond FP16's range but
    what saturating ops read."""
    from onnxwrapper.repair.fix._ranges import out_of_range

    data = getattr(repair_models, build)()
    scale = 3.0 if len(x) == 2 else 1.0
    feeds = {"x": (np.random.default_rng(0).standard_normal(x) * scale).astype(np.float32)}
    model = onnx.load_model_from_string(data)
    rewrites, notes, _left = exact_overflow_rewrites(model, [feeds])
    assert [(r.node, r.params.get("join")) for r in rewrites] == expected, notes
    repaired = apply_recipe(model, ModelRecipe("0" * 64, rewrites=tuple(rewrites))).proto
    run = lambda m: ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0]  # noqa: E731
    assert np.array_equal(run(data), run(repaired.SerializeToString()))
    ranges, order = reference_ranges(repaired, [feeds])
    assert [t for t in out_of_range(ranges, order)] == (["c0"] if "unet" in build else [])  # read by Sigmoid only


def test_an_unrepaired_recurrent_model_says_why_and_what_precision_would():
    from onnxwrapper.repair.fix._explain import why_not_repaired

    model = onnx.load_model_from_string(repair_models.lstm_drift())
    base = Trial("baseline", "the model as it is", status="fail", worst={"output": "hn", "snr_db": 6.8}, bar_db=27.07)
    best = Trial("cpu", "the recurrent node(s) lstm on the CPU (FP32 state)", status="fail", outputs=1,
                 worst={"output": "hn", "snr_db": 20.1}, bar_db=27.07)
    fp32 = Trial("precision", "precision fp32 for the whole model", status="error", message="MEM_ALLOC")
    notes = why_not_repaired(model, {"cause": "accumulation"}, base, [best, fp32])
    assert "7.0 dB below the bar" in notes[0] and "recurrent state (LSTM)" in notes[0]
    assert notes[1].startswith("what precision would: 2 more significant bit(s)") and "about 98 dB" in notes[1]
    assert "error — MEM_ALLOC" in notes[2] and "worst 20.1 dB" in notes[3]
    assert why_not_repaired(onnx.load_model_from_string(repair_models.matmul_chain()), None, base, [best]) == []


def test_an_overflow_no_rescale_absorbs_gets_the_known_clamp_candidate():
    """``Softplus(x @ W)`` with ``x @ W`` ≈ 1e5: Softplus neither carries a scale nor saturates, so no exact
    rewrite fits; the ``known`` candidate clamps that tensor to ±64504 (HF transformers' T5 FP16 fix)
    and says which reference values it changes. The clamp leaves values within the limit bit-identical."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    from onnxwrapper.patches import get_patch
    from tests.models import make_model

    w = (np.random.default_rng(4).standard_normal((64, 64)) * 6000).astype(np.float32)
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["a"], name="mm"), h.make_node("Softplus", ["a"], ["y"], name="sp")],
                     "sp", [h.make_tensor_value_info("x", T.FLOAT, [8, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, [8, 64])], [nh.from_array(w, "w")])
    model = onnx.load_model_from_string(make_model(g))
    x = np.random.default_rng(5).standard_normal((8, 64)).astype(np.float32)
    cands, notes = candidates_for(model, None, [{"x": x}], "fp16")
    assert [c.kind for c in cands] == ["known", "cpu"] and "no exact rewrite brings 'a'" in notes[0]
    known = cands[0]
    assert [(r.rewrite, r.node) for r in known.rewrites] == [("clamp_fp16", "mm")] and not known.exactness.startswith("bit")
    assert "changes the reference's values beyond ±64504 of 'a'" in known.notes[0]
    clamped = onnx.load_model_from_string(make_model(g))
    get_patch("clamp_fp16").apply(clamped, clamped.graph.node[0])
    a_ref = x @ w
    y_ref = ort.InferenceSession(make_model(g), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    y = ort.InferenceSession(clamped.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    inside = np.abs(a_ref) < 60000
    assert np.array_equal(y[inside], y_ref[inside]) and np.all(y[~inside] <= 64504.0 + 1)
