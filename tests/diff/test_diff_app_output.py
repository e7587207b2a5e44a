"""Unit tests of the pieces behind the verdicts (no backend runs): printed-output comparison, class-score
recognition, the derived SNR bars, run causes."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxwrapper import diff
from onnxwrapper.diff._judge._app_output import compare_bytes, compare_texts, timing_positions, tokenize, volatile_mask
from onnxwrapper.diff._judge._class_scores import class_score_outputs, looks_like_probabilities
from onnxwrapper.diff._runs._orchestrate import exception_cause
from tests import models


def test_numbers_agree_within_the_budget_text_must_be_identical():
    ref = "'Hello 2024'  score=0.994 box=[[685, 83]]\nlabel zip"
    assert compare_texts("stdout", ref, "'Hello 2024'  score=0.969 box=[[684, 82]]\nlabel zip", rtol=0.0314).identical
    assert not compare_texts("stdout", ref, "'Hello 2024'  score=0.950 box=[[684, 82]]\nlabel zip", rtol=0.0314).identical
    assert not compare_texts("stdout", ref, "'Hello 2025'  score=0.994 box=[[685, 83]]\nlabel zip", rtol=0.5).identical
    item = compare_texts("stdout", ref, "'Hello 2024'  score=0.994 box=[[685, 83]]\nlabel unknown", rtol=0.0314)
    assert not item.identical and item.diff == ["--- reference", "+++ backend", "-label zip", "+label unknown"]
    # one unit of the last printed digit covers the print rounding; rtol 0 is otherwise exact
    assert compare_texts("s", "p=0.994", "p=0.995", rtol=0.0).identical
    assert not compare_texts("s", "p=0.994", "p=0.996", rtol=0.0).identical
    assert not compare_texts("s", "a\nb", "a", rtol=0.1).identical  # a missing line differs
    # --output-filter keeps the lines that matter
    assert compare_texts("s", "label cat\nloaded 12 files", "label cat\nloaded 3 files", rtol=0.0,
                         filter_regex=r"^label").identical


def test_tokens_and_timings():
    assert tokenize("op16 0.80-1.30s v3_3 '7' x=-3e-5")[1] == ["0.80", "1.30", "-3e-5"]
    assert timing_positions("2 segments in 7.44s of audio (0.02s)") == {2}
    assert timing_positions("speech   0.46s -   4.34s") == set()
    assert timing_positions("took 12 ms, 30 fps, elapsed: 3.2 s") == {0, 1, 2}
    item = compare_texts("stdout", "3 segments (0.02s)", "3 segments (1.45s)", rtol=0.0)
    assert item.identical and item.timings == 1
    assert not compare_texts("stdout", "segment 0.46s - 4.34s", "segment 0.46s - 4.90s", rtol=0.0314).identical


def test_volatile_numbers_are_those_that_differ_between_two_reference_runs():
    first, second = "id 8841\nsum 12.5\nlog a\n", "id 1290\nsum 12.5\n"
    mask = volatile_mask(first, second)
    assert mask == {0: {0}, 2: None}
    item = compare_texts("stdout", first, "id 5555\nsum 12.5\n", rtol=0.0, mask=mask)
    assert item.identical and item.masked == 2
    assert not compare_texts("stdout", first, "id 5555\nsum 13.5\n", rtol=0.0, mask=mask).identical


def test_files_compare_as_text_or_bytes_and_a_missing_file_differs():
    assert compare_bytes("file o", b"x 1.00\n", b"x 1.01\n", rtol=0.0314).identical
    assert not compare_bytes("file o", b"\xff\x00", b"\xff\x01", rtol=1.0).identical
    item = compare_bytes("file o", b"x", None, rtol=0.0, labels=("cpu", "qnn"))
    assert not item.identical and item.detail == "not written by qnn"


def _scores_model(kind: str) -> onnx.ModelProto:
    x = h.make_tensor_value_info("X", T.FLOAT, [2, 5])
    w = onnx.numpy_helper.from_array(np.ones((5, 5), np.float32), "W")
    if kind == "softmax":
        nodes, out = [h.make_node("Softmax", ["X"], ["Y"], axis=-1)], "Y"
    elif kind == "decomposed":
        nodes = [h.make_node("Exp", ["X"], ["e"]), h.make_node("ReduceSum", ["e"], ["s"], keepdims=1),
                 h.make_node("Div", ["e", "s"], ["Y"])]
        out = "Y"
    elif kind == "gemm":
        nodes, out = [h.make_node("Gemm", ["X", "W"], ["Y"])], "Y"
    else:  # a hidden state: LayerNormalization
        g = onnx.numpy_helper.from_array(np.ones(5, np.float32), "g")
        return onnx.load_model_from_string(models.make_model(h.make_graph(
            [h.make_node("LayerNormalization", ["X", "g"], ["Y"], axis=-1)], "m", [x],
            [h.make_tensor_value_info("Y", T.FLOAT, [2, 5])], [g])))
    g = h.make_graph(nodes, "m", [x], [h.make_tensor_value_info(out, T.FLOAT, [2, 5])], [w])
    return onnx.load_model_from_string(models.make_model(g))


@pytest.mark.parametrize("kind,expected", [("softmax", True), ("decomposed", True), ("gemm", True),
                                           ("hidden", False)])
def test_class_scores_recognised_from_the_graph(kind, expected):
    assert (class_score_outputs(_scores_model(kind)) == {"Y"}) is expected


def test_top_k_is_reported_for_class_scores_only():
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((1, 8, 384)).astype(np.float32)
    comp = diff.compare_arrays(hidden * 1.001, hidden, diff.PRESETS["fp16"])
    assert "top1_agreement" not in comp.metrics  # not 0.125 on a hidden state
    probs = np.exp(hidden) / np.exp(hidden).sum(-1, keepdims=True)
    assert looks_like_probabilities(probs) and not looks_like_probabilities(hidden)
    assert diff.compare_arrays(probs, probs, diff.PRESETS["fp16"]).metrics["top1_agreement"] == 1.0
    logits = diff.compare_arrays(hidden, hidden, diff.PRESETS["fp16"], class_scores=True)
    assert logits.metrics["top1_agreement"] == 1.0


def test_bars_follow_from_unit_roundoff_and_one_rule_for_every_output():
    assert diff.error_budget("fp16") == pytest.approx(2 ** 0.5 * 64 * 2.0 ** -11 + 2.0 ** -13)
    assert diff.snr_bar_db("fp16") == pytest.approx(27.07, abs=0.01)  # ≈ cosine 0.999, the common FP16 bar
    assert diff.snr_bar_db("fp32") == pytest.approx(77.89, abs=0.01) and diff.snr_bar_db("quantized") == 20.0
    r = np.linspace(-3, 3, 1000).astype(np.float32)
    for scale in (1e-3, 1.0, 1e4):  # scale-relative: the same relative error passes at any magnitude
        assert diff.compare_arrays(r * scale * np.float32(1.04), r * scale, diff.PRESETS["fp16"]).passed
        assert not diff.compare_arrays(r * scale * np.float32(1.05), r * scale, diff.PRESETS["fp16"]).passed
    # a user's atol/rtol is Polygraphy's rule and replaces the bar; --min-snr replaces the bar too
    t = diff.PRESETS["fp16"].with_(atol=1e-3)
    assert (t.check, t.atol, t.rtol, t.min_snr_db) == ("elementwise", 1e-3, 0.0, None)
    assert diff.PRESETS["fp16"].with_(min_snr_db=40.0).check == "none"


def test_saturation_and_mismatched_elements_metrics():
    r = np.array([1.0, 2.0, 70000.0], np.float32)
    y = np.array([131008.0, 2.0, 70000.0], np.float32)
    m = diff.compare_arrays(y, r, diff.PRESETS["fp16"]).metrics
    assert m["fp16_saturated"] == 1 and math.isclose(m["scaled_max_error"], 131007 / 70000, rel_tol=1e-6)
    masks = diff.compare_arrays(np.array([1, 0, 1], np.int64), np.array([1, 1, 1], np.int64), diff.PRESETS["fp16"])
    assert masks.metrics["mismatched_elements"] == 1 and not masks.passed


def test_exception_cause_names_the_script_line():
    stderr = ('Traceback (most recent call last):\n  File "/x/run.py", line 7, in <module>\n    main()\n'
              '  File "/lib/ort.py", line 80, in run\n    raise Fail("x")\nonnxruntime.Fail: [ONNXRuntimeError] bad\n')
    assert exception_cause(stderr, "/y/run.py") == "onnxruntime.Fail: [ONNXRuntimeError] bad (in run.py line 7)"
    assert exception_cause(stderr) == "onnxruntime.Fail: [ONNXRuntimeError] bad (in ort.py line 80)"
    assert exception_cause("just a warning\n") is None
