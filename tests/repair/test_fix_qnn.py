"""``aipc fix`` on the QNN HTP simulator (FP16): failing generated models repaired to PASS and verified.

* FP16 overflows — a decomposed LayerNorm (sum of squares), a MatMul feeding a LayerNormalization,
  a MatMul chain and a naive softmax — are each repaired by an exact rewrite; the script, run again
  with the recipe, passes at both levels.
* A Conv1d the HTP computes wrong (kernel 5, dilation 3, length 16: a real kernel bug) is repaired
  by running that one node on the CPU — the partition shows one CPU node — and, separately, by the
  kernel-avoiding rewrites in their order (``dilated_conv`` fails verification, ``conv_taps`` passes).
"""

from __future__ import annotations

import json

import pytest

from onnxwrapper.repair.fix import fix
from tests import repair_models
from tests.test_diff_support import aipc_diff, child_env, write_script  # noqa: F401

pytestmark = [pytest.mark.qnn, pytest.mark.slow]

OVERFLOW_SCRIPT = """
    import numpy as np
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {"ln_sumsq.onnx": rng.standard_normal((4, 256)) * 400 + 100, "mm_ln.onnx": rng.standard_normal((8, 64)) * 10,
             "mm_chain.onnx": rng.standard_normal((8, 64)) * 20, "softmax.onnx": rng.standard_normal((8, 64)) * 3 + 8}
    for name, x in feeds.items():
        y = ort.InferenceSession(name).run(None, {"x": x.astype(np.float32)})[0]
        print(name, "argmax", y.argmax(-1).tolist())
"""

CONV_SCRIPT = """
    import numpy as np
    import onnxruntime as ort

    x = np.random.default_rng(1).standard_normal((1, 4, 16)).astype(np.float32)
    y = ort.InferenceSession("dilated.onnx").run(None, {"x": x})[0]
    print("argmax", y.argmax(-1).tolist())
"""


@pytest.fixture(autouse=True)
def _need_qnn():
    import onnxwrapper

    info = {b.name: b for b in onnxwrapper.get_available_backends()}
    if "qnn" not in info or not info["qnn"].available:
        pytest.skip("needs the qnn backend: onnxruntime-qnn (pip install -e '.[qnn]') with its HTP simulator (x86-64) "
                    "or a Snapdragon NPU")


def _failing_diff(tmp_path, child_env, script_text: str, **builds):
    """Write each model ``<name>.onnx`` from its builder and the script, run ``aipc diff --backends
    cpu,qnn`` on it (it must fail: exit 1) and return the diff folder."""
    for name, build in builds.items():
        (tmp_path / f"{name}.onnx").write_bytes(build())
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,qnn", "--dir", d, "--no-html", write_script(tmp_path, script_text)], tmp_path,
                     child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return d


def test_fp16_overflows_are_repaired_by_exact_rewrites(tmp_path, child_env):
    d = _failing_diff(tmp_path, child_env, OVERFLOW_SCRIPT, ln_sumsq=repair_models.layernorm_sum_of_squares,
                      mm_ln=repair_models.matmul_layernorm, mm_chain=repair_models.matmul_chain,
                      softmax=repair_models.naive_softmax)
    failing = {o["model"].rsplit("-", 1)[0] for o in json.loads((d / "report.json").read_text())["outputs"]
               if not o["passed"]}
    assert failing == {"ln_sumsq", "mm_ln", "mm_chain", "softmax"}

    result = fix(d, localize=False, cwd=tmp_path, confirm=True)  # the recorded script, its sha256 checked
    assert result.exit_status == 0, result.text()
    by_model = {m.model.rsplit("-", 1)[0]: m for m in result.models}
    expected = {"ln_sumsq": {"rescale"}, "mm_ln": {"rescale"}, "mm_chain": {"rescale"}, "softmax": {"softmax_stable"}}
    for name, m in by_model.items():
        assert m.baseline.status == "fail", (name, result.text())
        assert m.chosen is m.trials[0] and m.chosen.kind == "exact" and m.chosen.status == "pass", (name, result.text())
        assert {r.rewrite for r in m.recipe.rewrites} == expected[name]
        assert not m.recipe.cpu_subgraphs and m.chosen.cpu_nodes == []
        assert m.chosen.worst["snr_db"] > m.chosen.bar_db > 27 > m.baseline.worst["snr_db"]
    ln_rescale = by_model["mm_ln"].recipe.rewrites[0]
    assert ln_rescale.node == "proj" and ln_rescale.params["log2"] < 0  # folded into W, cancelled by LayerNormalization
    book = json.loads(open(result.recipe_path).read())
    assert len(book["models"]) == 4 and all(r["verified"]["worst_snr_db"] > 27 for r in book["models"].values())
    rescaled = [r for r in book["models"].values() if any(w["rewrite"] == "rescale" for w in r["rewrites"])]
    assert rescaled and all(r["checks"]["peaks"] for r in rescaled)  # checkable where it is applied
    # the script again, on the NPU with the recipe: tensors within tolerance, the same printed argmaxes
    assert result.confirmation.passed, result.confirmation.verdict_line()
    assert "REPAIRED" in result.text() and "exact" in result.text()


def test_a_wrong_kernel_is_repaired_by_the_node_on_the_cpu_and_by_a_kernel_avoiding_rewrite(tmp_path, child_env):
    (tmp_path / "dilated.onnx").write_bytes(repair_models.dilated_conv1d(16))
    script = write_script(tmp_path, CONV_SCRIPT)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,qnn", "--localize", "--dir", d, "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (loc,) = json.loads((d / "report.json").read_text())["localizations"]
    assert loc["cause"] == "node" and loc["culprit"]["node"] == "conv", loc["message"]

    # the culprit alone on the CPU (aipc fix on the command line): QNN, CPU, QNN behind one session
    cpu_recipe = tmp_path / "cpu.json"
    proc = aipc_fix([d, "--remedies", "cpu", "--output", cpu_recipe, "--no-confirm"], tmp_path, child_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((d / "fix.json").read_text())
    (model,) = report["models"]
    chosen = model["trials"][model["chosen"]]
    assert chosen["kind"] == "cpu" and chosen["status"] == "pass" and chosen["cpu_nodes"] == ["conv"]
    assert (chosen["npu_nodes"], chosen["total_nodes"]) == (3, 4)
    assert model["baseline"]["status"] == "fail" and model["baseline"]["cpu_nodes"] == []
    assert model["recipe"]["cpu_subgraphs"] == [["conv"]] and not model["recipe"]["rewrites"]
    assert "'conv' on the CPU" in proc.stdout and "NPU 3/4 nodes" in proc.stdout
    assert "the diff's own run of the model" in proc.stdout  # the baseline is read from the diff, not replayed

    # kernel-avoiding rewrites in their order: the undilated kernel is as wrong, tap by tap is right
    result = fix(d, remedies=("kernel",), output=tmp_path / "kernel.json", confirm=False)
    (m,) = result.models
    assert [(t.title, t.status) for t in m.trials] == [("dilated_conv at 'conv'", "fail"), ("conv_taps at 'conv'", "pass")]
    assert m.recipe.rewrites[0].rewrite == "conv_taps" and m.chosen.cpu_nodes == []


def aipc_fix(args, cwd, env, timeout: float = 600):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "aipc", "fix", "-q", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


FAMILY_SCRIPT = """
    import numpy as np
    import onnxruntime as ort
    from tests import repair_models

    rng = np.random.default_rng(0)
    feeds = {"t5_ffn.onnx": (rng.standard_normal((4, 64)) * 3).astype(np.float32),
             "unet_block.onnx": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
             "lstm_drift.onnx": repair_models.lstm_inputs(), "ffn_softmax.onnx": repair_models.ffn_inputs()}
    for name, x in feeds.items():
        y = ort.InferenceSession(name).run(None, {"x": x})[0]
        print(name, "argmax", y.reshape(y.shape[0], -1).argmax(-1).tolist())
"""


def test_each_family_gets_a_verified_recipe(tmp_path, child_env):
    """T5's FFN overflow into an RMSNorm (a residual stream: rescale with join), a U-Net block with 1e10
    before an InstanceNorm (two rescales; the SiLU reads saturated values), an LSTM whose state drifts
    (the recurrent node on the CPU), an FFN overflow into a Softmax that no rescale absorbs (T5's clamp
    verified on the simulator and refused — the HTP saturates the logits alike either way — then the
    out-of-range region on the CPU): `aipc fix` finds each recipe, the replays pass, and the script
    run again with the recipe passes at both levels."""
    d = _failing_diff(tmp_path, child_env, FAMILY_SCRIPT, t5_ffn=repair_models.t5_rmsnorm_after_ffn,
                      unet_block=repair_models.unet_block_instancenorm, lstm_drift=repair_models.lstm_drift,
                      ffn_softmax=repair_models.ffn_softmax)
    result = fix(d, localize=False, confirm=True, cwd=tmp_path, env=child_env)
    assert result.exit_status == 0, result.text()
    by_model = {m.model.rsplit("-", 1)[0]: m for m in result.models}
    assert set(by_model) == {"t5_ffn", "unet_block", "lstm_drift", "ffn_softmax"}, result.text()
    t5, unet, lstm, ffn = by_model["t5_ffn"], by_model["unet_block"], by_model["lstm_drift"], by_model["ffn_softmax"]
    for m in (t5, unet, lstm, ffn):
        assert m.baseline.status == "fail" and m.chosen.status == "pass", result.text()
        assert m.chosen.worst["snr_db"] > m.chosen.bar_db > m.baseline.worst["snr_db"]
    assert t5.chosen.kind == "exact" and [(r.rewrite, r.params.get("join")) for r in t5.recipe.rewrites] == [
        ("rescale", True)] and t5.recipe.rewrites[0].node == "/enc/DenseReluDense/wo/MatMul"
    assert unet.chosen.kind == "exact" and [r.node for r in unet.recipe.rewrites] == ["down/conv0", "res/conv1"]
    assert lstm.chosen.kind == "cpu" and lstm.recipe.cpu_subgraphs == (("lstm",),) and lstm.chosen.cpu_nodes == ["lstm"]
    # device-valid by default: no simulator precision searched, every recipe holds on a device
    assert all(m.recipe.device_valid and m.recipe.precision is None for m in (t5, unet, lstm, ffn))
    assert not any(t.kind == "precision" for m in result.models for t in m.trials)
    assert lstm.chosen.emulated["hn"] > lstm.chosen.bar_db  # the FP16 emulation on the CPU chose it
    # no exact rewrite; the known clamp is emulated on the CPU at the unrepaired model's 1.3 dB (the HTP's
    # saturated logits tie the same way clamped ones do) and not compiled; the region on the CPU passes,
    # with its cost in the report
    known, region = ffn.trials
    assert [r.rewrite for r in known.recipe.rewrites] == ["clamp_fp16"] and known.status == "skipped", result.text()
    assert abs(known.emulated["y"] - ffn.baseline.worst["snr_db"]) < 0.1
    assert ffn.chosen is region and region.kind == "cpu" and region.status == "pass", result.text()
    assert ffn.recipe.cpu_subgraphs == (("/ffn/wo/MatMul", "/head/Softmax"),) and not ffn.recipe.rewrites
    assert (region.npu_nodes, region.total_nodes) == (2, 4) and region.call_seconds > 0
    text = result.text()
    assert "known     SKIPPED" in text and "clamp_fp16 changes the reference's values beyond ±64504 of 'logits'" in text
    assert "NPU 2/4 nodes" in text and "no compile spent" in text
    assert "as unrepaired" in text and "already saturates values beyond its range" in text  # why the clamp did not help
    assert result.confirmation.passed, result.confirmation.verdict_line()
    assert "s)" in result.text() and result.seconds > 0  # seconds per candidate and in total


FLIP_SCRIPT = """
    import numpy as np
    import onnxruntime as ort
    from tests import repair_models

    _model, x = repair_models.decision_flip()
    y = ort.InferenceSession("flip.onnx").run(None, {"x": x})[0]
    print("speech" if y[0, 0] > 0 else "silence")
"""


def test_an_app_level_mismatch_whose_tensors_pass_is_repaired_by_the_script(tmp_path, child_env):
    """Every tensor passes (66.8 dB) but the script prints another word: the decision-sensitive output's
    producer on the CPU makes the script agree, judged by the script's own output."""
    (tmp_path / "flip.onnx").write_bytes(repair_models.decision_flip()[0])
    script = write_script(tmp_path, FLIP_SCRIPT)
    d = tmp_path / "d"
    proc = aipc_diff(["--backends", "cpu,qnn", "--dir", d, "--no-html", script], tmp_path, child_env)
    assert proc.returncode == 1 and "MISMATCH (app output)" in proc.stdout, proc.stdout + proc.stderr
    untried = fix(d, cwd=tmp_path, env=child_env)  # judging a candidate runs the script: only one you name
    assert untried.app_untried == ["qnn"] and not untried.models and untried.exit_status == 1, untried.text()
    assert "--confirm-with" in untried.text()
    result = fix(d, confirm=True, cwd=tmp_path, env=child_env)
    assert result.exit_status == 0, result.text()
    (m,) = result.models
    assert m.chosen.kind == "cpu" and m.recipe.cpu_subgraphs == (("score",),)
    assert "app level" in m.notes[0] and any("decision-sensitive output" in p for p in m.path)
    assert result.confirmation.passed


CQT_SCRIPT = """
    import numpy as np
    import onnxruntime as ort

    x = (0.5 * np.sin(2 * np.pi * 0.2 * np.arange(256))).astype(np.float32)[None]
    y = ort.InferenceSession("cqt.onnx").run(None, {"x": x})[0]
    print("notes", np.flatnonzero(y[0] > 0).tolist())
"""


def test_an_fp16_underflow_into_a_log_is_localized_and_its_region_repaired_on_the_cpu(tmp_path, child_env):
    """A constant-Q power spectrum down to 3e-13 and its Log: the HTP reads the quiet bins as zeros
    (the head's SNR 3.8 dB, another note printed). ``--localize`` names the underflow; ``aipc fix``
    tries the upscale there, says why it cannot help (the Log), and the region on the CPU passes."""
    (tmp_path / "cqt.onnx").write_bytes(repair_models.cqt_log())
    d = tmp_path / "d"
    proc = aipc_diff(["--localize", "--backends", "cpu,qnn", "--dir", d, "--no-html", write_script(tmp_path, CQT_SCRIPT)],
                     tmp_path, child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (loc,) = json.loads((d / "report.json").read_text())["localizations"]
    assert loc["cause"] == "underflow" and loc["culprit"]["tensor"] == "power", loc["message"]
    assert "FP16 underflow: 'power'" in proc.stdout and "it feeds Log 'log'" in proc.stdout

    result = fix(d, confirm=False, env=child_env)
    assert result.exit_status == 0, result.text()
    (m,) = result.models
    region = ("cqt_re", "cqt_im", "re_sq", "im_sq", "power", "log")  # the underflow region (found twice, judged once)
    assert m.chosen.kind == "cpu" and m.recipe.cpu_subgraphs == (region,), result.text()
    assert any("no exact upscale helps" in n and "Log 'log'" in n for n in m.notes), m.notes


TWO_MODEL_SCRIPT = """
    import numpy as np
    import onnxruntime as ort
    from tests import repair_models

    x = np.random.default_rng(1).standard_normal((1, 4, 16)).astype(np.float32)
    y = ort.InferenceSession("dilated.onnx").run(None, {"x": x})[0]
    print("conv argmax", y.argmax(-1).tolist())
    _model, x2 = repair_models.decision_flip()
    s = ort.InferenceSession("flip.onnx").run(None, {"x": x2})[0]
    print("speech" if s[0, 0] > 0 else "silence")
"""


def test_an_app_of_two_models_is_repaired_at_app_level_after_the_first_models_kernel_bug(tmp_path, child_env):
    """The first model has a wrong HTP kernel (its tensors fail; conv_taps repairs it, found after the
    backend's localization, deferred because the CPU's measurements see no rounding problem); the
    confirmation then shows the second model's line still differing while every tensor passes: the
    app-level search finds that model (alone on the CPU the script agrees) and its decision-sensitive
    region, judged by the script's own output, and the recipe file holds both models."""
    d = _failing_diff(tmp_path, child_env, TWO_MODEL_SCRIPT, dilated=lambda: repair_models.dilated_conv1d(16),
                      flip=lambda: repair_models.decision_flip()[0])
    result = fix(d, confirm=True, cwd=tmp_path, env=child_env)
    assert result.exit_status == 0, result.text()
    conv, app = result.models
    assert conv.model.startswith("dilated") and [r.rewrite for r in conv.recipe.rewrites] == ["conv_taps"], result.text()
    assert any("deferred" in p for p in conv.path) and conv.recipe.device_valid
    assert app.model.startswith("flip") and app.recipe.cpu_subgraphs == (("score",),), result.text()
    assert "entirely on the CPU: the app output agrees" in app.path[0] and result.confirmation.passed
    book = json.loads(open(result.recipe_path).read())
    assert len(book["models"]) == 2 and all(r["targets"] == ["simulator", "device"] for r in book["models"].values())
