"""Metric functors and tolerance semantics against hand-computed values (no backend runs)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxwrapper.diff import PRESETS, Tolerance, Tolerances, compare_arrays, parse_tol_override, precision_for
from onnxwrapper.diff import metrics as M

R = np.array([1.0, 2.0, 4.0, 0.0], np.float32)
Y = np.array([1.5, 2.0, 3.0, 0.5], np.float32)
# |Y-R| = [0.5, 0, 1, 0.5]; |R| = [1, 2, 4, 0]


def test_abs_errors():
    assert M.MaxAbsError()(Y, R) == pytest.approx(1.0)
    assert M.MeanAbsError()(Y, R) == pytest.approx(0.5)
    assert M.MedianAbsError()(Y, R) == pytest.approx(0.5)
    assert M.QuantileAbsError(0.5)(Y, R) == pytest.approx(0.5)
    assert M.QuantileAbsError(1.0)(Y, R) == pytest.approx(1.0)


def test_relative_error_is_relative_to_the_reference_with_epsilon_for_zero():
    # rel = [0.5, 0, 0.25, 0.5/2.22e-16]
    assert M.MaxRelError()(Y, R) == pytest.approx(0.5 / M.REL_EPSILON)
    assert M.MaxRelError()(Y[:3], R[:3]) == pytest.approx(0.5)
    # swapping sides changes the denominator: relative to the (new) reference
    assert M.MaxRelError()(R[:3], Y[:3]) == pytest.approx(1 / 3.0)


def test_cosine_snr_psnr_by_hand():
    dot = 1.5 * 1 + 2 * 2 + 3 * 4 + 0
    ny, nr = math.sqrt(1.5 ** 2 + 4 + 9 + 0.25), math.sqrt(1 + 4 + 16)
    assert M.CosineSimilarity()(Y, R) == pytest.approx(dot / (ny * nr))
    noise = 0.25 + 0 + 1 + 0.25
    assert M.SNR()(Y, R) == pytest.approx(10 * math.log10(21 / noise))
    rmse = math.sqrt(noise / 4)
    assert M.PSNR()(Y, R) == pytest.approx(20 * math.log10(4 / rmse))


def test_edge_values_identical_and_zero_norms():
    assert M.SNR()(R, R) == math.inf
    assert M.PSNR()(R, R) == math.inf
    z = np.zeros(3, np.float32)
    assert M.CosineSimilarity()(z, z) == 1.0  # both norms zero (Polygraphy)
    assert M.CosineSimilarity()(np.ones(3, np.float32), z) == 0.0  # one norm zero
    assert M.SNR()(np.ones(3, np.float32), z) == -math.inf


def test_nan_inf_counts_and_mismatch():
    r = np.array([1.0, np.inf, np.nan, 2.0], np.float32)
    y = np.array([1.0, np.inf, np.nan, np.inf], np.float32)
    pair = M.ArrayPair(y, r)
    values = M.compute_metrics(pair)
    assert values["nan_backend"] == 1 and values["inf_backend"] == 2
    assert values["nan_reference"] == 1 and values["inf_reference"] == 1
    assert values["nonfinite_mismatch"] == 1  # only the last element; same inf / both nan are equal
    assert values["max_abs_error"] == 0.0  # the mismatching element is left out of the statistics


def test_topk_agreement_on_class_scores():
    r = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]], np.float32)
    y = np.array([[0.1, 0.6, 0.3], [0.2, 0.3, 0.5]], np.float32)
    assert M.TopKAgreement(1)(y, r) == pytest.approx(0.5)
    assert M.TopKAgreement(2)(y, r) == pytest.approx((2 / 2 + 1 / 2) / 2)  # {1,2}∩{1,2}; {2,1}∩{0,1}
    assert math.isnan(M.TopKAgreement(1)(np.zeros((1, 3, 8, 8), np.float32), np.zeros((1, 3, 8, 8), np.float32)))
    assert M.looks_like_class_scores((6, 40, 6625), np.float32)
    assert not M.looks_like_class_scores((1, 1, 960, 960), np.float32)
    assert not M.looks_like_class_scores((4, 10), np.int64)


def test_elementwise_fails_only_when_both_tolerances_fail():
    r = np.array([100.0, 1e-3], np.float32)
    # element 0: abs 0.01 > atol 1e-3 but rel 1e-4 <= rtol 1e-3  -> ok
    # element 1: abs 1e-4 <= atol                                   -> ok
    y = np.array([100.01, 1.1e-3], np.float32)
    assert compare_arrays(y, r, Tolerance(atol=1e-3, rtol=1e-3)).passed
    y2 = np.array([100.5, 1e-3], np.float32)  # abs 0.5 > atol AND rel 5e-3 > rtol -> fail
    comp = compare_arrays(y2, r, Tolerance(atol=1e-3, rtol=1e-3))
    assert comp.kind == "tolerance"
    assert comp.min_atol == pytest.approx(0.5, rel=1e-4) and comp.min_rtol == pytest.approx(5e-3, rel=1e-3)
    assert any("atol ≥ 0.5" in h for h in comp.hints)


@pytest.mark.parametrize("check,expect_pass", [("max", False), ("mean", False), ("median", True),
                                               ("quantile", False)])
def test_stat_modes(check, expect_pass):
    r = np.ones(10, np.float32)
    y = r.copy()
    y[-1] = 2.0  # one element off by 1.0: max/mean/p99 abs&rel exceed 1e-2, median is 0
    assert compare_arrays(y, r, Tolerance(atol=1e-2, rtol=1e-2, check=check)).passed is expect_pass


def test_shape_dtype_and_nonfinite_are_own_failure_kinds():
    r = np.zeros((2, 3), np.float32)
    assert compare_arrays(np.zeros((3, 2), np.float32), r).kind == "shape"
    assert compare_arrays(np.zeros((2, 3), np.float16), r).kind == "dtype"
    y = r.copy()
    y[0, 0] = np.inf
    assert compare_arrays(y, r).kind == "nonfinite"
    assert compare_arrays(y, r, Tolerance(allow_nonfinite=True)).passed


def test_lower_bounds_and_presets():
    r = np.linspace(1, 2, 100).astype(np.float32)
    y = r * np.float32(1.01)
    assert not compare_arrays(y, r, PRESETS["fp32"]).passed
    comp = compare_arrays(y, r, Tolerance(check="none", min_snr_db=60.0))
    assert comp.kind == "tolerance" and "SNR ≥ 60.0 dB" in comp.failed[0] and comp.hints == ["SNR ≥ 40.0 dB"]
    assert compare_arrays(y, r, PRESETS["quantized"]).passed  # SNR 40 dB ≥ 20 dB
    assert compare_arrays(y, r, PRESETS["fp16"]).passed  # 1 % relative error: within FP16's 4.4 % budget


def test_tolerance_overrides_with_globs():
    tols = Tolerances(overrides=[parse_tol_override("logit*=1e-2:1e-2"),
                                 parse_tol_override("det-*/boxes=0.5:0.1:max")])
    assert tols.for_output("m", "logits", "fp32").atol == 1e-2
    assert tols.for_output("m", "probs", "fp32") == PRESETS["fp32"]
    t = tols.for_output("det-abc", "boxes", "fp16")
    # the user's abs/rel rule replaces the preset's SNR bar for that output
    assert (t.atol, t.rtol, t.check, t.min_snr_db, t.preset) == (0.5, 0.1, "max", None, "fp16+custom")
    assert tols.for_output("det-abc", "scores", "fp16") == PRESETS["fp16"]
    with pytest.raises(ValueError, match="NAME=atol:rtol"):
        parse_tol_override("logits")
    with pytest.raises(ValueError, match="check must be"):
        parse_tol_override("x=1:1:bogus")


def test_precision_for():
    assert precision_for("cpu", {}) == "fp32"
    assert precision_for("qnn", {"precision": "fp16"}) == "fp16"
    assert precision_for("qnn", {"precision": "fp32"}) == "fp32"
    assert precision_for("qnn", {}, {"QuantizeLinear", "Conv"}) == "quantized"


def test_assert_close_message_carries_hint():
    from onnxwrapper.diff import DiffAssertionError, assert_close

    assert_close(R, R)
    with pytest.raises(DiffAssertionError, match="would pass with"):
        assert_close(Y, R, name="probs")
