"""``aipc fix`` searches what a device runs (no NPU needed here): the FP16 emulation on the CPU, the CPU
regions it finds for FP16 drift, the screen before a compile, recipes' ``targets``, the simulator modes
asked for by name, and the report's search path and reasons."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxwrapper.errors import RecipeError
from onnxwrapper.repair import ModelRecipe, RecipeBook, load_recipes
from onnxwrapper.repair.fix import fix
from onnxwrapper.repair.fix._candidates import candidates_for
from onnxwrapper.repair.fix._emulate import emulated_runs, emulated_snr, fp16_emulation
from onnxwrapper.repair.fix._model_fix import _screened
from onnxwrapper.repair.fix._regions import precision_regions
from onnxwrapper.repair.fix._result import FixResult, ModelFix
from onnxwrapper.repair.fix._verify import Trial
from tests import repair_models


def _feeds(n=3):
    return [repair_models.subnormal_inputs(s) for s in range(n)]


def test_the_emulation_rounds_what_the_npu_reads_and_writes_and_keeps_cpu_nodes_fp32():
    model = onnx.load_model_from_string(repair_models.subnormal_squares())
    feeds = _feeds(1)
    emulated = fp16_emulation(model, cpu_nodes=["square_x"])
    casts = [n for n in emulated.graph.node if n.op_type == "Cast"]
    # x read by the CPU's square_x stays FP32; y (NPU), xx (written on the CPU, read on the NPU) … are rounded
    rounded = {n.input[0] for n in casts if n.attribute[0].i == onnx.TensorProto.FLOAT16}
    assert "x" not in rounded and {"y", "xx", "yy", "ss"} <= rounded
    run = ort.InferenceSession(emulated.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds[0])[0]
    fp32 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds[0])[0]
    assert not np.array_equal(run, fp32)  # the rounding is not optimized away
    reference = emulated_runs(model, feeds, None)
    assert emulated_snr(model, feeds, reference, [])["out"] < 10  # the squares (1e-8) are subnormal in FP16
    every = [n.name for n in model.graph.node]
    assert emulated_snr(model, feeds, reference, every)["out"] == np.inf  # all on the CPU: the reference


def test_precision_regions_find_where_fp16_rounding_starts():
    """The squares ≈ 1e-8 are what FP16 loses (each alone below the bar); their producers and readers on the
    CPU reach the bar in the emulation; the gain and MatMul stay on the NPU."""
    model = onnx.load_model_from_string(repair_models.subnormal_squares())
    regions, notes = precision_regions(model, _feeds(), {"out": 27.07}, recurrent=False)
    first = regions[0]
    assert first.nodes == ("square_x", "square_y", "sum", "magnitude") and first.worst > 27.07 + 6
    assert set(first.sensitive) == {"xx", "yy", "ss"} and "where FP16 rounding starts" in notes[0]


def test_the_recurrent_node_alone_when_the_emulation_says_it_is_enough_and_nothing_for_a_kernel_bug():
    lstm = onnx.load_model_from_string(repair_models.lstm_drift())
    regions, notes = precision_regions(lstm, [{"x": repair_models.lstm_inputs()}], {"hn": 27.07})
    assert [r.nodes for r in regions] == [("lstm",)] and regions[0].worst > 33 and "enough" in notes[0]
    conv = onnx.load_model_from_string(repair_models.dilated_conv1d(16))
    x = np.random.default_rng(1).standard_normal((1, 4, 16)).astype(np.float32)
    regions, notes = precision_regions(conv, [{"x": x}], {"y": 27.07}, recurrent=False)
    assert regions == [] and "not the rounding of its tensors" in notes[0]


def test_candidates_are_device_valid_by_default_and_carry_their_emulation():
    model = onnx.load_model_from_string(repair_models.lstm_drift())
    loc = {"cause": "accumulation", "first": {"node": "lstm", "tensor": "Y"}}
    feeds = [{"x": repair_models.lstm_inputs()}]
    cands, _notes = candidates_for(model, loc, feeds, "fp16", bars={"hn": 27.07})
    assert [c.kind for c in cands] == ["cpu"] and cands[0].cpu_subgraphs == (("lstm",),)
    assert cands[0].emulated["hn"] > 33 and all(c.precision is None for c in cands)
    with_fp32, _ = candidates_for(model, loc, feeds, "fp16", higher_precision="fp32", bars={"hn": 27.07})
    assert with_fp32[-1].precision == "fp32"


def test_the_screen_skips_a_candidate_the_emulation_puts_below_its_bar():
    from onnxwrapper.repair.fix._candidates import Candidate

    low = Candidate("kernel", "pow_square", emulated={"hn": 20.1, "speech_probs": 46.7})
    near = Candidate("cpu", "region", emulated={"hn": 25.0})
    assert "predicts 'hn' at 20.1 dB < bar 27.1 dB" in _screened(low, {"hn": 27.07, "speech_probs": 27.07})
    assert _screened(near, {"hn": 27.07}) == ""  # within the slack: verified on the backend
    assert _screened(Candidate("precision", "fp32", precision="fp32", emulated={"hn": 1.0}), {"hn": 27.07}) == ""


def test_recipes_record_the_targets_they_hold_on(tmp_path):
    sha = "b" * 64
    book = RecipeBook({sha: ModelRecipe(sha, cpu_subgraphs=(("lstm",),)),
                       "c" * 64: ModelRecipe("c" * 64, precision="fp32")})
    doc = json.loads(open(book.save(tmp_path / "r.json")).read())
    assert doc["models"][sha]["targets"] == ["simulator", "device"] and doc["models"]["c" * 64]["targets"] == ["simulator"]
    loaded = load_recipes(tmp_path / "r.json")
    assert loaded.models[sha].device_valid and not loaded.models["c" * 64].device_valid
    old = dict(doc["models"][sha])
    del old["targets"]  # a recipe written before targets existed: derived from its precision
    assert load_recipes({"format": doc["format"], "version": 1, "models": {sha: old}}).models[sha].device_valid
    for bad in (["device", "device"], ["phone"], [], "device"):
        with pytest.raises(RecipeError, match="'targets' must be"):
            load_recipes({"format": doc["format"], "version": 1, "models": {sha: dict(old, targets=bad)}})
    with pytest.raises(RecipeError, match="claims targets simulator, device at precision 'fp32'"):
        load_recipes({"format": doc["format"], "version": 1,
                      "models": {sha: dict(old, precision="fp32", targets=["simulator", "device"])}})


def test_the_report_gives_the_search_path_why_each_rejected_candidate_failed_and_the_targets():
    result = FixResult(directory="d")
    m = ModelFix("qnn", "vad-1", "a" * 64, {"cause": "saturation"}, [(1, 0)])
    m.baseline = Trial("baseline", "x", status="fail", worst={"output": "hn", "snr_db": 6.8}, bar_db=27.07)
    failed = Trial("kernel", "pow_square", status="fail", outputs=3, outputs_passed=1, calls=1, failed_calls=1,
                   worst={"output": "hn", "snr_db": 18.7, "bar_db": 27.07}, bar_db=27.07)
    skipped = Trial("cpu", "the LSTM on the CPU", status="skipped", message="not verified: the FP16 emulation …",
                    emulated={"hn": 20.1})
    chosen = Trial("cpu", "region", ModelRecipe("a" * 64, cpu_subgraphs=(("Pow", "Add"), ("lstm",))), status="pass",
                   worst={"snr_db": 49.1}, bar_db=27.07)
    m.trials, m.chosen, m.recipe = [failed, skipped, chosen], chosen, chosen.recipe
    m.path, m.stages = ["localization: the diff's (reused, not repeated): saturation"], [["baseline replay", 16.2]]
    result.models.append(m)
    text = result.text()
    assert "why not: 'hn' 18.7 dB < bar 27.1 dB; 2 of 3 output(s), 1 of 1 call(s) beyond tolerance" in text
    assert "SKIPPED" in text and "why not: not verified: the FP16 emulation" in text
    assert "recipe holds on: simulator, device" in text and "path: localization: the diff's (reused" in text
    assert "time per stage: baseline replay 16.2 s" in text and "searched: only what a device runs" in text
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["models"][0]["path"] and doc["models"][0]["recipe"]["targets"] == ["simulator", "device"]


def test_simulator_modes_are_asked_for_by_name(tmp_path):
    with pytest.raises(ValueError, match="unknown simulator mode"):
        fix(tmp_path, simulator_modes=("int4",))
    (tmp_path / "diff.json").write_text("{}")
    proc = subprocess.run([sys.executable, "-m", "aipc", "fix", str(tmp_path), "--simulator-modes", "fp64"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 64 and "unknown mode(s) fp64" in proc.stderr


def test_an_if_the_feeds_decide_is_emulated_inlined_and_named_by_its_top_level_node():
    """silero-vad's shape: an ``If`` on ``sr`` whose branch holds the LSTM. The emulation inlines the branch
    ``sr`` selects (as the QNN backend compiles it), so its arithmetic is rounded too, and maps every inlined
    node back to the ``If`` — the only name a recipe can give it; the ``If`` counts as recurrent."""
    from onnxwrapper.patches import name_unnamed_nodes
    from onnxwrapper.repair.fix._emulate import Emulator, flattened
    from onnxwrapper.repair.fix._regions import is_recurrent, upstream_nodes
    from tests import cf_models

    model = onnx.load_model_from_string(cf_models.if_lstm(static=True, stride8k=8))
    name_unnamed_nodes(model)
    feeds = [cf_models.if_feeds(seed=s) for s in range(2)]
    the_if = next(n for n in model.graph.node if n.op_type == "If")
    assert is_recurrent(the_if) and the_if.name in {n.name for n in upstream_nodes(model, ["stateN"])}
    folded, owner, plain = flattened(model, feeds)
    assert "sr" not in plain[0] and not any(n.op_type == "If" for n in folded.graph.node)
    assert {owner[n.name] for n in folded.graph.node if n.op_type == "LSTM"} == {the_if.name}
    emulator = Emulator(model, feeds)
    assert emulator.snr([the_if.name])["stateN"] > emulator.snr([])["stateN"]  # the branch in FP32 on the CPU
    mixed = [cf_models.if_feeds(sr=8000, seed=0)] + feeds  # the calls disagree on sr: nothing is folded
    assert flattened(model, mixed)[1] == {}


def test_app_level_kernel_rewrites_leave_the_nodes_the_recipe_runs_on_the_cpu_alone():
    """silero-vad: the model's recipe put ``/stft/Pow`` on the CPU; an app-level ``pow_square`` there
    replaced nodes the recipe's CPU subgraph names, and the candidate's run failed with
    "puts nodes on the CPU that the model does not have". A node on the CPU has no HTP kernel to avoid."""
    from onnxwrapper.repair.fix._app_level import _kernel_steps

    model = onnx.load_model_from_string(repair_models.pow_square())
    cone = [n.name for n in model.graph.node]
    titles = [title for _kind, title, *_rest in _kernel_steps(model, cone, "y", (), ())]
    assert any(t.startswith("pow_square at the 1 node(s)") for t in titles), titles
    assert not [t for _kind, t, *_rest in _kernel_steps(model, cone, "y", (), (("pow", "sum"),))
                if t.startswith("pow_square")]
