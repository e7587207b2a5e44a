"""Tolerances: what "within tolerance" means, as threshold objects separate from the metrics.

A :class:`Tolerance` is a set of thresholds; each threshold has ``passed(pair)``, ``describe()``
and ``required(pair)`` (the "minimum tolerance that would have passed" hint). Semantics of the
absolute/relative check follow Polygraphy's ``simple`` comparison (``comparator/compare.py``):

* ``elementwise``: fails iff **some element** has ``|y − r| > atol`` **and** ``|y − r|/|r| > rtol``.
* ``max`` / ``mean`` / ``median`` / ``quantile``: fails iff ``stat(|y − r|) > atol`` **and**
  ``stat(|y − r|/|r|) > rtol`` (passing either tolerance is enough).
* ``none``: no absolute/relative check (statistical thresholds only).

Further thresholds are optional lower bounds on cosine similarity, SNR, PSNR and top-1 agreement,
and — always on unless ``allow_nonfinite`` — "no NaN/Inf where the reference has a different
value". Shape and dtype mismatches are failures of their own kind, checked before any of these
(see :mod:`onnxwrapper.diff._judge._compare`).

Precision-aware defaults (:data:`PRESETS`; derivation and sources in docs/diff.md, "Default
tolerances"): one rule for every output — recurrent states, class scores, probabilities,
embeddings, masks — that is relative to the output's own scale: **SNR ≥ a bar per precision**
(equivalently, relative RMS error ``‖y − r‖/‖r‖ ≤`` :func:`error_budget`), plus "no NaN/Inf
mismatch". The budget is ``√2·64·u + 2⁻¹³``: the roundings (unit roundoff ``u``) of 64 operations
adding up in the same direction — the worst case along a 64-operation path — for each of two
independent sources, the rounded weights and the rounded activations (added in quadrature), plus
an implementation term for kernels that differ by more than rounding (approximated
transcendental functions, fused operators; 10× the largest FP32 difference measured between ONNX
Runtime's fused and unfused graphs on five real apps, 98 dB). FP16: 27.1 dB (cosine ≥ 0.999, the
common FP16 bar); FP32: 77.9 dB. Quantized models keep the common 20 dB bar (Polygraphy's ``snr``
default). A user's own atol/rtol (``--atol``, ``--tol``) replaces
the default SNR rule for the outputs it applies to (Polygraphy semantics above).
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field, replace

import numpy as np

from onnxwrapper._registry import default_registry
from onnxwrapper.diff._judge._metrics import PSNR, SNR, ArrayPair, CosineSimilarity, TopKAgreement

__all__ = ["CHECK_MODES", "Threshold", "AbsRelThreshold", "LowerBound", "NonFiniteThreshold", "Tolerance",
           "PRESETS", "UNIT_ROUNDOFF", "ROUNDINGS", "ROUNDING_SOURCES", "IMPLEMENTATION_ERROR", "QUANTIZED_SNR_DB", "error_budget",
           "snr_bar_db", "Tolerances", "parse_tol_override", "precision_for", "as_tolerances"]

CHECK_MODES = ("elementwise", "max", "mean", "median", "quantile", "none")


class Threshold:
    """A pass rule on one compared output. Subclasses implement the three methods."""

    name = ""

    def passed(self, pair: ArrayPair) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def required(self, pair: ArrayPair) -> str:
        """The least strict setting of this threshold that ``pair`` would have passed."""
        return ""


@dataclass(frozen=True)
class AbsRelThreshold(Threshold):
    """Polygraphy's atol/rtol rule (see module docstring). ``quantile`` is used by ``check="quantile"``."""

    atol: float
    rtol: float
    check: str = "elementwise"
    quantile: float = 0.99
    name = "abs_rel"

    def _stats(self, pair: ArrayPair) -> tuple[float, float]:
        return (pair.stat(pair.absdiff, self.check, self.quantile), pair.stat(pair.reldiff, self.check, self.quantile))

    def passed(self, pair: ArrayPair) -> bool:
        if self.check == "none":
            return True
        if self.check == "elementwise":
            return not bool(np.any((pair.absdiff > self.atol) & (pair.reldiff > self.rtol)))
        a, r = self._stats(pair)
        return not (a > self.atol and r > self.rtol)

    def describe(self) -> str:
        if self.check == "none":
            return "no abs/rel check"
        what = f"p{self.quantile * 100:g}" if self.check == "quantile" else self.check
        return f"{what} |Δ| ≤ {self.atol:g} or rel ≤ {self.rtol:g}"

    def min_tolerances(self, pair: ArrayPair) -> tuple[float, float, float, float]:
        """``(atol alone, rtol alone, atol keeping rtol, rtol keeping atol)`` that would pass."""
        if self.check == "elementwise":
            absd, reld = pair.absdiff, pair.reldiff
            atol_alone = float(absd.max()) if absd.size else 0.0
            rtol_alone = float(reld.max()) if reld.size else 0.0
            over_r = absd[reld > self.rtol]
            over_a = reld[absd > self.atol]
            return (atol_alone, rtol_alone, float(over_r.max()) if over_r.size else 0.0,
                    float(over_a.max()) if over_a.size else 0.0)
        a, r = self._stats(pair)
        return a, r, a, r

    def required(self, pair: ArrayPair) -> str:
        if self.check == "none":
            return ""
        atol_alone, rtol_alone, atol_k, rtol_k = self.min_tolerances(pair)
        return (f"{self.check}: atol ≥ {atol_alone:.3g} OR rtol ≥ {rtol_alone:.3g} "
                f"(with rtol={self.rtol:g}: atol ≥ {atol_k:.3g}; with atol={self.atol:g}: rtol ≥ {rtol_k:.3g})")


@dataclass(frozen=True)
class LowerBound(Threshold):
    """``metric(pair) ≥ bound`` for a higher-is-better metric (cosine, SNR, PSNR, top-1)."""

    metric: object
    bound: float

    @property
    def name(self) -> str:
        return f"min_{self.metric.name}"

    def value(self, pair: ArrayPair) -> float:
        """The metric's value on ``pair``."""
        return self.metric.compute(pair)

    def passed(self, pair: ArrayPair) -> bool:
        v = self.value(pair)
        if isinstance(v, float) and math.isnan(v):
            return not self.metric.name.startswith("top")  # top-k not applicable → pass; else NaN fails
        return v >= self.bound

    def describe(self) -> str:
        if self.metric.name == "snr_db":
            return f"SNR ≥ {self.bound:.1f} dB (relative RMS error ≤ {10 ** (-self.bound / 20):.3g})"
        return f"{self.metric.name} ≥ {self.bound:g}"

    def required(self, pair: ArrayPair) -> str:
        if self.metric.name == "snr_db":
            v = self.value(pair)
            return f"SNR ≥ {v:.1f} dB" if math.isfinite(v) else f"SNR ≥ {v}"
        return f"{self.metric.name} ≥ {self.value(pair):.6g}"


@dataclass(frozen=True)
class NonFiniteThreshold(Threshold):
    """No NaN/Inf on the backend side where the reference holds another value."""

    name = "nonfinite"

    def passed(self, pair: ArrayPair) -> bool:
        return pair.nonfinite_mismatch == 0

    def describe(self) -> str:
        return "no NaN/Inf mismatches"

    def required(self, pair: ArrayPair) -> str:
        return f"{pair.nonfinite_mismatch} element(s) NaN/Inf on one side only (allow_nonfinite to ignore)"


@dataclass(frozen=True)
class Tolerance:
    """Pass criteria for one output.

    Args:
        atol: absolute tolerance (same unit as the output). Defaults to 1e-5 (Polygraphy).
        rtol: relative tolerance, relative to the reference. Defaults to 1e-5 (Polygraphy).
        check: one of :data:`CHECK_MODES`. Defaults to ``"elementwise"``.
        quantile: the quantile for ``check="quantile"``, in [0, 1]. Defaults to 0.99.
        min_cosine / min_snr_db / min_psnr_db / min_top1: optional lower bounds (``None`` = off);
            SNR/PSNR in dB, top-1 as a fraction of rows (class-score-like outputs only).
        allow_nonfinite: do not fail on NaN/Inf mismatches. Defaults to False.
        preset: name of the preset this came from (for reports), ``""`` if custom.

    Raises:
        ValueError: unknown check mode, negative tolerance, quantile outside [0, 1].
    """

    atol: float = 1e-5
    rtol: float = 1e-5
    check: str = "elementwise"
    quantile: float = 0.99
    min_cosine: float | None = None
    min_snr_db: float | None = None
    min_psnr_db: float | None = None
    min_top1: float | None = None
    allow_nonfinite: bool = False
    preset: str = ""

    def __post_init__(self) -> None:
        if self.check not in CHECK_MODES:
            raise ValueError(f"check must be one of {', '.join(CHECK_MODES)}, got {self.check!r}")
        if self.atol < 0 or self.rtol < 0:
            raise ValueError(f"atol and rtol must be >= 0, got atol={self.atol}, rtol={self.rtol}")
        if not 0.0 <= self.quantile <= 1.0:
            raise ValueError(f"quantile must be within [0, 1], got {self.quantile}")

    def thresholds(self) -> list[Threshold]:
        """The threshold objects this tolerance checks, in report order."""
        result: list[Threshold] = []
        if not self.allow_nonfinite:
            result.append(NonFiniteThreshold())
        if self.check != "none":
            result.append(AbsRelThreshold(self.atol, self.rtol, self.check, self.quantile))
        for metric, bound in ((CosineSimilarity(), self.min_cosine), (SNR(), self.min_snr_db),
                              (PSNR(), self.min_psnr_db), (TopKAgreement(1), self.min_top1)):
            if bound is not None:
                result.append(LowerBound(metric, float(bound)))
        return result

    def describe(self) -> str:
        """One line, e.g. ``fp16: SNR ≥ 27.1 dB (relative RMS error ≤ 0.0443)``."""
        parts = [t.describe() for t in self.thresholds() if not isinstance(t, NonFiniteThreshold)]
        head = f"{self.preset}: " if self.preset else ""
        return head + ("; ".join(parts) or "no checks")

    def with_(self, **changes) -> "Tolerance":
        """A copy with ``changes`` applied (``preset`` becomes ``"<preset>+custom"``).

        Giving ``atol`` or ``rtol`` to a tolerance without an abs/rel check (the presets) is the
        user's own rule for that output: it turns on the ``elementwise`` check (Polygraphy's
        default) unless ``check`` is given, sets the tolerance not given to 0 (the given one alone
        decides) and drops the preset's SNR bar unless ``min_snr_db`` is given too.
        """
        changes = dict(changes)
        if self.check == "none" and ({"atol", "rtol"} & set(changes)):
            changes.setdefault("check", "elementwise")
            changes.setdefault("atol", 0.0 if math.isinf(self.atol) else self.atol)
            changes.setdefault("rtol", 0.0 if math.isinf(self.rtol) else self.rtol)
            if self.preset and "min_snr_db" not in changes:
                changes["min_snr_db"] = None
        if changes and "preset" not in changes and self.preset and not self.preset.endswith("+custom"):
            changes["preset"] = self.preset + "+custom"
        return replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-friendly dict of the fields."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


#: unit roundoff of the floating-point precisions (IEEE 754: 2^-(p) for p significand bits
#: incl. the implicit one: binary32 24 bits, binary16 11 bits).
UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "fp16": 2.0 ** -11}
#: roundings whose errors are allowed to add up in the same direction (worst case, no
#: cancellation) along the path from the inputs to an output, per source of rounding.
ROUNDINGS = 64
#: independent sources of rounding (the weights, rounded once; the activations), whose errors add
#: in quadrature: √2 · ROUNDINGS · u.
ROUNDING_SOURCES = 2
#: relative RMS error two correct kernels may differ by beyond rounding (approximated exp/tanh/
#: erf, fused operators): 2^-13 ≈ 1.2e-4, ten times the largest FP32 difference measured between
#: ONNX Runtime CPU's fused and unfused graphs on five real apps (98 dB ≈ 1.3e-5; docs/diff.md).
IMPLEMENTATION_ERROR = 2.0 ** -13
#: SNR bar of quantized (QDQ) models: Polygraphy's ``snr`` default; 25–30 dB is typical of W8A16
#: against a float reference (docs/diff.md).
QUANTIZED_SNR_DB = 20.0


def error_budget(precision: str) -> float:
    """Largest relative RMS error ``‖y − r‖ / ‖r‖`` of a healthy run at ``precision``
    (``"fp32"``, ``"fp16"``, ``"quantized"``): ``√ROUNDING_SOURCES·ROUNDINGS·u +
    IMPLEMENTATION_ERROR`` for the floating-point precisions (fp16 0.0443, fp32 1.27e-4),
    ``10^(-20/20) = 0.1`` for quantized.

    Raises:
        KeyError: unknown precision.
    """
    if precision == "quantized":
        return 10.0 ** (-QUANTIZED_SNR_DB / 20.0)
    return math.sqrt(ROUNDING_SOURCES) * ROUNDINGS * UNIT_ROUNDOFF[precision] + IMPLEMENTATION_ERROR


def snr_bar_db(precision: str) -> float:
    """The default SNR bar in dB: ``20·log10(1 / error_budget(precision))`` (fp16 27.07 dB, fp32
    77.89 dB, quantized 20 dB)."""
    return -20.0 * math.log10(error_budget(precision))


def _preset(name: str) -> Tolerance:
    return Tolerance(atol=math.inf, rtol=math.inf, check="none", min_snr_db=round(snr_bar_db(name), 2), preset=name)


#: precision-aware defaults: SNR ≥ :func:`snr_bar_db` (see the module docstring and docs/diff.md).
PRESETS: dict[str, Tolerance] = {name: _preset(name) for name in ("fp32", "fp16", "quantized")}

_QUANT_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger",
              "ConvInteger", "DynamicQuantizeLinear", "MatMulNBits"}


def precision_for(backend: str, backend_options: dict | None, model_ops: set[str] | None = None) -> str:
    """The preset name for comparing ``backend`` against an FP32 reference.

    Rules, first match wins: a model with quantization ops (QDQ, QLinear*, *Integer) →
    ``quantized``; ``backend_options["precision"]`` of ``fp16``/``fp32`` → that; backend ``cpu``
    (or any non-NPU backend) → ``fp32``; an NPU backend without a declared precision → ``fp16``
    (Qualcomm HTP runs FP32 models in FP16 by default: QNN EP ``enable_htp_fp16_precision=1``).
    """
    if model_ops and model_ops & _QUANT_OPS:
        return "quantized"
    precision = str((backend_options or {}).get("precision") or "").lower()
    if precision in ("fp16", "fp32"):
        return precision
    if precision in ("int8", "int16", "w8a8", "w8a16", "quantized"):
        return "quantized"
    try:
        npu = bool(getattr(default_registry().get(backend), "npu", False))
    except Exception:  # unknown backend name: judge it as an NPU would be judged
        npu = backend != "cpu"
    return "fp16" if npu else "fp32"


def parse_tol_override(text: str) -> tuple[str, dict]:
    """Parse ``NAME=atol:rtol[:check]`` (``NAME`` may be a glob, ``model/output`` or ``output``).

    Returns:
        ``(pattern, {"atol": float, "rtol": float[, "check": str]})``.

    Raises:
        ValueError: malformed text (the message shows the expected form).
    """
    if "=" not in text:
        raise ValueError(f"--tol {text!r}: expected NAME=atol:rtol[:check], e.g. 'logits=1e-3:1e-3'")
    name, _, spec = text.rpartition("=")
    parts = spec.split(":")
    if not name or len(parts) not in (2, 3):
        raise ValueError(f"--tol {text!r}: expected NAME=atol:rtol[:check], e.g. 'logits=1e-3:1e-3'")
    try:
        values = {"atol": float(parts[0]), "rtol": float(parts[1])}
    except ValueError as exc:
        raise ValueError(f"--tol {text!r}: atol and rtol must be numbers") from exc
    if len(parts) == 3:
        if parts[2] not in CHECK_MODES:
            raise ValueError(f"--tol {text!r}: check must be one of {', '.join(CHECK_MODES)}")
        values["check"] = parts[2]
    return name, values


@dataclass
class Tolerances:
    """Which :class:`Tolerance` applies to which output.

    Args:
        default: the tolerance for every output, or ``None`` = precision-aware (:data:`PRESETS`
            chosen per backend by :func:`precision_for`).
        overrides: ``[(glob, changes)]`` applied in order (later wins) to outputs whose name, or
            ``"<model key>/<name>"``, matches ``glob`` (:mod:`fnmatch`, case-sensitive); ``changes``
            is a dict of :class:`Tolerance` fields or a full :class:`Tolerance`.
        changes: field changes applied to the default of every output before overrides (e.g. the
            CLI's ``--min-cosine``).
    """

    default: Tolerance | None = None
    overrides: list = field(default_factory=list)
    changes: dict = field(default_factory=dict)

    def base_for(self, precision: str) -> Tolerance:
        """The default for ``precision`` with :attr:`changes` applied."""
        base = self.default if self.default is not None else PRESETS[precision]
        return base.with_(**self.changes) if self.changes else base

    def for_output(self, model: str, output: str, precision: str = "fp32") -> Tolerance:
        """The tolerance for ``output`` of ``model`` when the backend runs at ``precision``."""
        tol = self.base_for(precision)
        for pattern, changes in self.overrides:
            if fnmatch.fnmatchcase(output, pattern) or fnmatch.fnmatchcase(f"{model}/{output}", pattern):
                tol = changes if isinstance(changes, Tolerance) else tol.with_(**changes)
        return tol

    def to_dict(self) -> dict:
        """A JSON-safe dict: the default tolerance, the changes and the per-pattern overrides."""
        return {"default": self.default.to_dict() if self.default else None,
                "changes": dict(self.changes),
                "overrides": [[p, c.to_dict() if isinstance(c, Tolerance) else dict(c)] for p, c in self.overrides]}


def as_tolerances(tolerances) -> Tolerances:
    """``None``, a :class:`Tolerance` or :class:`Tolerances` → :class:`Tolerances` (``None``: the
    precision-aware defaults; a :class:`Tolerance`: the default for every output).

    Raises:
        TypeError: anything else.
    """
    if tolerances is None:
        return Tolerances()
    if isinstance(tolerances, Tolerance):
        return Tolerances(default=tolerances)
    if isinstance(tolerances, Tolerances):
        return tolerances
    raise TypeError(f"tolerances must be a Tolerance or Tolerances, got {type(tolerances).__name__}")
