"""``aipc fix`` without an NPU: choosing exact rewrites from the reference's value ranges, the candidate
order, the report, the CLI's usage errors, and a backend that cannot apply recipes (the test-only
``perturb`` plugin). The QNN runs are in test_fix_qnn.py."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

from onnxwrapper import diff
from onnxwrapper.diff._fix import tolerances_from_dict
from onnxwrapper.diff._fix_candidates import candidates_for, node_groups
from onnxwrapper.diff._fix_ranges import reference_ranges
from onnxwrapper.diff._fix_rescale import TARGET, exact_overflow_rewrites
from onnxwrapper.diff._fix_verify import Trial
from onnxwrapper.repair import ModelRecipe, apply_recipe
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
    assert [(c.kind, c.title) for c in cands] == [("kernel", "pow_square at 'pow'"), ("cpu", "'pow' on the CPU"),
                                                  ("precision", "precision fp32 for the whole model")]
    assert "within FP16's range everywhere" in notes[0]
    assert cands[0].exactness.startswith("pow_square: bit-exact")
    only_cpu, _ = candidates_for(model, loc, [{"x": x}], "fp16", remedies=("cpu",))
    assert [c.kind for c in only_cpu] == ["cpu"]
    # an overflow: exact first, then the out-of-range region on the CPU (every exact rewrite kept)
    chain = onnx.load_model_from_string(repair_models.matmul_chain())
    cands, _ = candidates_for(chain, None, feeds("chain"), "fp16")
    assert [c.kind for c in cands] == ["exact", "cpu"]
    assert cands[1].cpu_subgraphs == (("mm1", "bias1", "relu", "mm2"),)  # mm2 reads the out-of-range relu


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
    result = diff.FixResult(directory="d")
    assert result.exit_status == 3 and "nothing to repair" in result.text()
    from onnxwrapper.diff._fix_report import ModelFix

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
