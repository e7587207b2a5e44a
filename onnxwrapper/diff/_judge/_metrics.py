"""Accuracy metrics between a backend's tensor ``y`` and the reference tensor ``r``, as functors.

Every metric is an object with ``name``, ``unit``, ``higher_is_better`` and ``__call__(y, r) ->
float``; :class:`ArrayPair` holds the shared intermediate arrays so that computing all metrics of
one output costs one pass. Definitions (r = reference, y = backend output, flattened, computed in
float64; sources: Polygraphy `comparator/compare.py`, ONNX Runtime `qdq_loss_debug`, qai-hub-models `compare.py`):

* absolute error ``|y − r|``; max / mean / median / p-quantile of it.
* relative error ``|y − r| / |r|`` with zeros of ``r`` replaced by 2.22e-16, relative **to the
  reference** (Polygraphy ``comparator/compare.py``); unstable near 0 by construction.
* cosine similarity ``⟨y, r⟩ / (‖y‖‖r‖)``: both norms 0 → 1, one norm 0 → 0 (Polygraphy).
* SNR (dB) ``10·log10(Σr² / Σ(y − r)²)`` — the same number as SQNR ``20·log10(‖r‖/‖y − r‖)``
  (ORT ``qdq_loss_debug``, QAIRT ``sqnr``, Polygraphy ``snr``); +inf when y == r.
* PSNR (dB) ``20·log10(max|r| / RMSE)``: the peak is taken from the **reference** (AI Hub's
  choice; Polygraphy takes the first runner's max); +inf when y == r.
* NaN / ±Inf counts of each side; ``nonfinite_mismatch`` counts positions where exactly one side is
  finite, or both are non-finite but differ (NaN vs Inf, +Inf vs −Inf). Positions where both sides
  hold the same non-finite value count as equal (error 0); other non-finite positions are left out of
  every error statistic above and are reported through ``nonfinite_mismatch`` instead.
* scaled max error ``max|y − r| / max|r|``: the largest error as a fraction of the output's own
  peak (scale-relative; ``inf`` when the reference is all zeros and the backend is not).
* FP16 saturation: elements where the backend holds ``|y| ≥ 65504`` (the largest IEEE 754 binary16
  value; the QNN HTP simulator saturates at 131008) while the reference is finite and within that
  range — the signature of an FP16 overflow.
* mismatched elements of integer and bool outputs (``y != r``), for masks, indices and counts.
* top-k agreement, only for outputs that hold class scores (see :func:`looks_like_class_scores`):
  top-1 = fraction of rows whose argmax agrees; top-5 = mean overlap of the top-5 index sets (AI
  Hub ``top5``).
"""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from onnxwrapper.diff._judge._class_scores import looks_like_class_scores, looks_like_probabilities

__all__ = [
    "REL_EPSILON", "ArrayPair", "Metric", "MaxAbsError", "MeanAbsError", "MedianAbsError", "QuantileAbsError",
    "MaxRelError", "ScaledMaxError", "CosineSimilarity", "SNR", "PSNR", "NanCount", "InfCount",
    "NonFiniteMismatch", "Fp16Saturated", "MismatchedElements", "TopKAgreement", "looks_like_class_scores",
    "looks_like_probabilities", "DEFAULT_METRICS", "compute_metrics", "FP16_MAX",
]

#: replaces zeros of |r| in the relative error (float64 machine epsilon, as Polygraphy).
REL_EPSILON = 2.22e-16
#: largest finite IEEE 754 binary16 value.
FP16_MAX = 65504.0


class ArrayPair:
    """Backend array ``y`` and reference array ``r`` of the same shape, with cached statistics.

    Args:
        y: backend output, any real numeric dtype (bool is compared as 0/1).
        r: reference output, same shape as ``y``.
        class_scores: whether the output holds class scores (top-k agreement is computed only
            then); ``None`` = decide from the values (:func:`looks_like_probabilities`).

    Raises:
        ValueError: shapes differ (a shape mismatch is reported before metrics are computed).
    """

    def __init__(self, y, r, class_scores: bool | None = None) -> None:
        y, r = np.asarray(y), np.asarray(r)
        if y.shape != r.shape:
            raise ValueError(f"shape mismatch: {y.shape} vs reference {r.shape}")
        self.shape = r.shape
        self.class_scores = class_scores
        self.y = y.astype(np.float64, copy=False).ravel()
        self.r = r.astype(np.float64, copy=False).ravel()
        self.y_orig = y
        self.r_orig = r

    @cached_property
    def _finite(self) -> tuple[np.ndarray, np.ndarray]:
        return np.isfinite(self.y), np.isfinite(self.r)

    @cached_property
    def comparable(self) -> np.ndarray | slice:
        """Index of elements entering the error statistics (both finite, or same non-finite)."""
        fy, fr = self._finite
        if fy.all() and fr.all():
            return slice(None)
        same = (~fy & ~fr) & ((self.y == self.r) | (np.isnan(self.y) & np.isnan(self.r)))
        return (fy & fr) | same

    @cached_property
    def nonfinite_mismatch(self) -> int:
        """Count of positions whose finiteness or non-finite value differs between the sides."""
        if isinstance(self.comparable, slice):
            return 0
        return int(self.r.size - np.count_nonzero(self.comparable))

    @cached_property
    def absdiff(self) -> np.ndarray:
        """``|y − r|`` over comparable elements (same non-finite values give 0), float64, 1-D."""
        y, r = self.y[self.comparable], self.r[self.comparable]
        with np.errstate(invalid="ignore"):
            d = np.abs(y - r)
        d[~np.isfinite(d)] = 0.0  # only same non-finite pairs reach here
        return d

    @cached_property
    def absref(self) -> np.ndarray:
        """``|r|`` over comparable elements, non-finite replaced by 0 (pairs with absdiff 0)."""
        a = np.abs(self.r[self.comparable])
        a[~np.isfinite(a)] = 0.0
        return a

    @cached_property
    def reldiff(self) -> np.ndarray:
        """``|y − r| / |r|`` with |r| == 0 replaced by :data:`REL_EPSILON`, float64, 1-D."""
        return self.absdiff / np.where(self.absref == 0, REL_EPSILON, self.absref)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(self.r.size)

    def yc(self) -> np.ndarray:
        """``y`` over comparable elements with same non-finite pairs zeroed (for norms)."""
        v = self.y[self.comparable].copy()
        v[~np.isfinite(v)] = 0.0
        return v

    def rc(self) -> np.ndarray:
        """``r`` over comparable elements with same non-finite pairs zeroed (for norms)."""
        v = self.r[self.comparable].copy()
        v[~np.isfinite(v)] = 0.0
        return v

    def stat(self, values: np.ndarray, stat: str, quantile: float = 0.99) -> float:
        """``max``/``mean``/``median``/``quantile`` of ``values``; 0.0 for an empty array."""
        if values.size == 0:
            return 0.0
        if stat == "max":
            return float(values.max())
        if stat == "mean":
            return float(values.mean())
        if stat == "median":
            return float(np.median(values))
        if stat == "quantile":
            return float(np.quantile(values, quantile))
        raise ValueError(f"unknown statistic {stat!r}")


class Metric:
    """A metric functor. ``metric(y, r)`` or ``metric.compute(pair)`` returns a float.

    Attributes:
        name: key in result dicts and reports. unit: ``""``, ``"dB"`` or ``"fraction"``.
        higher_is_better: direction used by reports to pick the worst call.
    """

    name = ""
    unit = ""
    higher_is_better = False

    def __call__(self, y, r) -> float:
        return self.compute(ArrayPair(y, r))

    def compute(self, pair: ArrayPair) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class MaxAbsError(Metric):
    """Largest ``|y − r|``."""

    name = "max_abs_error"

    def compute(self, pair: ArrayPair) -> float:
        return pair.stat(pair.absdiff, "max")


class MeanAbsError(Metric):
    """Mean of ``|y − r|``."""

    name = "mean_abs_error"

    def compute(self, pair: ArrayPair) -> float:
        return pair.stat(pair.absdiff, "mean")


class MedianAbsError(Metric):
    """Median of ``|y − r|``."""

    name = "median_abs_error"

    def compute(self, pair: ArrayPair) -> float:
        return pair.stat(pair.absdiff, "median")


class QuantileAbsError(Metric):
    """The ``q``-quantile of ``|y − r|`` (default 0.99, Polygraphy ``--error-quantile``)."""

    def __init__(self, q: float = 0.99) -> None:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within [0, 1], got {q}")
        self.q = q
        self.name = f"p{q * 100:g}_abs_error"

    def compute(self, pair: ArrayPair) -> float:
        return pair.stat(pair.absdiff, "quantile", self.q)


class MaxRelError(Metric):
    """Largest ``|y − r| / |r|`` (zeros of r → 2.22e-16)."""

    name = "max_rel_error"

    def compute(self, pair: ArrayPair) -> float:
        return pair.stat(pair.reldiff, "max")


class ScaledMaxError(Metric):
    """``max|y − r| / max|r|``: the largest error as a fraction of the output's peak (0 when equal;
    ``inf`` when the reference is all zeros and the backend is not)."""

    name = "scaled_max_error"

    def compute(self, pair: ArrayPair) -> float:
        err = pair.stat(pair.absdiff, "max")
        peak = float(pair.absref.max()) if pair.absref.size else 0.0
        if err == 0.0:
            return 0.0
        return err / peak if peak > 0.0 else math.inf


class CosineSimilarity(Metric):
    """``⟨y, r⟩ / (‖y‖‖r‖)`` over comparable elements; both norms 0 → 1.0, one norm 0 → 0.0."""

    name = "cosine_similarity"
    unit = ""
    higher_is_better = True

    def compute(self, pair: ArrayPair) -> float:
        y, r = pair.yc(), pair.rc()
        ny, nr = float(np.linalg.norm(y)), float(np.linalg.norm(r))
        if ny == 0.0 and nr == 0.0:
            return 1.0
        if ny == 0.0 or nr == 0.0:
            return 0.0
        return float(np.clip(np.dot(y / ny, r / nr), -1.0, 1.0))


class SNR(Metric):
    """Signal-to-noise ratio ``10·log10(Σr² / Σ(y − r)²)`` in dB (= SQNR)."""

    name = "snr_db"
    unit = "dB"
    higher_is_better = True

    def compute(self, pair: ArrayPair) -> float:
        noise = float(np.sum(pair.absdiff ** 2))
        signal = float(np.sum(pair.rc() ** 2))
        if noise == 0.0:
            return math.inf
        if signal == 0.0:
            return -math.inf
        return 10.0 * math.log10(signal / noise)


class PSNR(Metric):
    """Peak signal-to-noise ratio ``20·log10(max|r| / RMSE)`` in dB (peak from the reference)."""

    name = "psnr_db"
    unit = "dB"
    higher_is_better = True

    def compute(self, pair: ArrayPair) -> float:
        if pair.absdiff.size == 0:
            return math.inf
        rmse = math.sqrt(float(np.mean(pair.absdiff ** 2)))
        peak = float(pair.absref.max()) if pair.absref.size else 0.0
        if rmse == 0.0:
            return math.inf
        if peak == 0.0:
            return -math.inf
        return 20.0 * math.log10(peak / rmse)


class NanCount(Metric):
    """Number of NaN elements on one side (``side="backend"`` or ``"reference"``)."""

    def __init__(self, side: str = "backend") -> None:
        self.side = side
        self.name = f"nan_{side}"

    def compute(self, pair: ArrayPair) -> float:
        return float(np.count_nonzero(np.isnan(pair.y if self.side == "backend" else pair.r)))


class InfCount(Metric):
    """Number of ±Inf elements on one side (``side="backend"`` or ``"reference"``)."""

    def __init__(self, side: str = "backend") -> None:
        self.side = side
        self.name = f"inf_{side}"

    def compute(self, pair: ArrayPair) -> float:
        return float(np.count_nonzero(np.isinf(pair.y if self.side == "backend" else pair.r)))


class NonFiniteMismatch(Metric):
    """Positions where one side is finite and the other is not, or both differ non-finitely."""

    name = "nonfinite_mismatch"

    def compute(self, pair: ArrayPair) -> float:
        return float(pair.nonfinite_mismatch)


class Fp16Saturated(Metric):
    """Elements where the backend holds ``|y| ≥ 65504`` (FP16's largest value; the QNN HTP
    simulator saturates at 131008) while the reference is finite and ``|r| < 65504``."""

    name = "fp16_saturated"

    def compute(self, pair: ArrayPair) -> float:
        with np.errstate(invalid="ignore"):
            hit = (np.abs(pair.y) >= FP16_MAX) & np.isfinite(pair.r) & (np.abs(pair.r) < FP16_MAX)
        return float(np.count_nonzero(hit))


class MismatchedElements(Metric):
    """Elements that differ (``y != r``); computed for integer and bool outputs only (``nan`` for
    floating outputs, whose differences the error statistics describe)."""

    name = "mismatched_elements"

    def compute(self, pair: ArrayPair) -> float:
        if pair.r_orig.dtype.kind not in "iub":
            return math.nan
        return float(np.count_nonzero(pair.y != pair.r))


class TopKAgreement(Metric):
    """Top-k agreement along the last axis; ``nan`` (not reported) unless the output holds class
    scores (``pair.class_scores``, or probabilities by value when that is ``None``).

    k = 1: fraction of rows whose argmax agrees. k > 1: mean ``|topk(y) ∩ topk(r)| / k``.
    """

    higher_is_better = True
    unit = "fraction"

    def __init__(self, k: int = 1) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = k
        self.name = f"top{k}_agreement"

    def compute(self, pair: ArrayPair) -> float:
        shape = pair.shape
        if not looks_like_class_scores(shape, pair.r_orig.dtype) or shape[-1] < self.k:
            return math.nan
        scores = pair.class_scores if pair.class_scores is not None else looks_like_probabilities(pair.r_orig)
        if not scores:
            return math.nan
        y = np.nan_to_num(pair.y.reshape(-1, shape[-1]), nan=-np.inf)
        r = np.nan_to_num(pair.r.reshape(-1, shape[-1]), nan=-np.inf)
        if y.shape[0] == 0:
            return math.nan
        if self.k == 1:
            return float(np.mean(np.argmax(y, axis=1) == np.argmax(r, axis=1)))
        ty = np.argpartition(-y, self.k - 1, axis=1)[:, : self.k]
        tr = np.argpartition(-r, self.k - 1, axis=1)[:, : self.k]
        overlap = [len(set(a.tolist()) & set(b.tolist())) for a, b in zip(ty, tr)]
        return float(np.mean(overlap) / self.k)


def DEFAULT_METRICS(quantile: float = 0.99) -> list[Metric]:  # noqa: N802 - factory reads as a constant
    """The metrics computed for every compared output, in report order."""
    return [MaxAbsError(), MeanAbsError(), MedianAbsError(), QuantileAbsError(quantile), MaxRelError(),
            ScaledMaxError(), CosineSimilarity(), SNR(), PSNR(), NanCount("backend"), InfCount("backend"),
            NanCount("reference"), InfCount("reference"), NonFiniteMismatch(), Fp16Saturated(),
            MismatchedElements(), TopKAgreement(1), TopKAgreement(5)]


_OPTIONAL = ("top1_agreement", "top5_agreement", "mismatched_elements")


def compute_metrics(pair: ArrayPair, metrics=None) -> dict[str, float]:
    """``{metric.name: value}`` for ``metrics`` (default :func:`DEFAULT_METRICS`); metrics that do
    not apply to this output (top-k on a non-class-score output, mismatched elements of a floating
    output: ``nan``) are left out."""
    out = {}
    for metric in metrics if metrics is not None else DEFAULT_METRICS():
        value = metric.compute(pair)
        if metric.name in _OPTIONAL and isinstance(value, float) and math.isnan(value):
            continue
        out[metric.name] = value
    return out
