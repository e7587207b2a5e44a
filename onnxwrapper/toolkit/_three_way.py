"""The three-way accuracy check of a quantized (or float) compile, with non-finite accounting.

:func:`three_way_check` runs the same feeds through (1) the float model on the CPU EP, (2) the QDQ
model on the CPU EP (fake-quant simulation: ORT's reference for QDQ) and (3) the QDQ model — or its
compiled EPContext — on the QNN backend, and reports per output, for *quantization* (1 vs 2),
*backend* (2 vs 3) and *total* (1 vs 3): cosine similarity, SNR, max |Δ| (the
:mod:`onnxwrapper.diff.metrics` functors, over all samples concatenated, over the elements finite in
both runs — or equal non-finite) and the NaN/Inf counts of both sides.

Non-finite accounting (:mod:`onnxwrapper.toolkit._nonfinite`): each run's outputs are counted, and
the two CPU runs are scanned tensor by tensor, so a QDQ reference that divides by a value quantized
to 0 is caught even when its next ``QuantizeLinear`` saturated the Inf to a finite output. When the
CPU QDQ reference produced NaN/Inf that the float model does not have, the report says so and flags
the quantization and backend legs as *not measurable* (they compare against a broken reference);
the total leg still is. The QNN run exposes only its outputs. The QNN leg uses the backend's
process-global configuration: run the check in a process whose QNN configuration is the one
compiled for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime

import onnxwrapper
from onnxwrapper.diff import metrics as m

from onnxwrapper.toolkit._nonfinite import TensorNonFinite, introduced, scan_run

__all__ = ["Agreement", "OutputAccuracy", "RunNonFinite", "AccuracyReport", "three_way_check"]

RUN_LABELS = {"float_cpu": "fp CPU", "qdq_cpu": "QDQ CPU", "qnn": "QNN"}


@dataclass(frozen=True)
class Agreement:
    """Agreement of ``y`` with a reference ``r`` over all samples of one output.

    Attributes:
        cosine: cosine similarity (1 = same direction). snr_db: ``10·log10(Σr²/Σ(y−r)²)`` (inf
        when equal). max_abs: max ``|y − r|``. min_sample_cosine: worst per-sample cosine. All over
        the elements finite in both (or equal non-finite), as :mod:`onnxwrapper.diff.metrics`.
        nan / inf: NaN and ±Inf elements of ``y``; ref_nan / ref_inf: of ``r``.
        nonfinite_mismatch: positions finite on one side only (or different non-finite values).
        compared: elements entering cosine/SNR/max |Δ| (0: the numbers above mean nothing).
    """

    cosine: float
    snr_db: float
    max_abs: float
    min_sample_cosine: float
    nan: int = 0
    inf: int = 0
    ref_nan: int = 0
    ref_inf: int = 0
    nonfinite_mismatch: int = 0
    compared: int = -1

    def to_dict(self) -> dict:
        """A JSON-safe dict of the metrics (the ``--json`` output)."""
        return {"cosine": self.cosine, "snr_db": self.snr_db, "max_abs": self.max_abs,
                "min_sample_cosine": self.min_sample_cosine, "nan": self.nan, "inf": self.inf,
                "ref_nan": self.ref_nan, "ref_inf": self.ref_inf, "nonfinite_mismatch": self.nonfinite_mismatch,
                "compared": self.compared}


@dataclass(frozen=True)
class OutputAccuracy:
    """One output: ``quantization`` (float CPU vs QDQ CPU), ``backend`` (QDQ CPU vs QDQ QNN),
    ``total`` (float CPU vs QDQ QNN). Without a QDQ model (FP16/FP32 compiles) ``quantization`` is
    ``None`` and ``backend`` = ``total`` = float CPU vs QNN; without a QNN leg both are ``None``."""

    output: str
    quantization: Agreement | None
    backend: Agreement | None
    total: Agreement | None

    def to_dict(self) -> dict:
        """A JSON-safe dict: the output's name and its three agreements (``None`` where not measured)."""
        return {"output": self.output, "quantization": self.quantization.to_dict() if self.quantization else None,
                "backend": self.backend.to_dict() if self.backend else None,
                "total": self.total.to_dict() if self.total else None}


@dataclass
class RunNonFinite:
    """NaN/Inf of one run (``"float_cpu"``, ``"qdq_cpu"``, ``"qnn"``).

    Attributes:
        outputs: ``{output: (nan, inf)}`` over all samples.
        scanned: whether the intermediate tensors were counted (CPU runs only).
        intermediate: NaN+Inf elements over all scanned tensors (a value propagating counts again).
        introduced: tensors with more NaN/Inf than the float model's tensor of that name
            (:func:`onnxwrapper.toolkit._nonfinite.introduced`; empty for the float run itself).
    """

    run: str
    outputs: dict[str, tuple[int, int]] = field(default_factory=dict)
    scanned: bool = False
    intermediate: int = 0
    introduced: list[TensorNonFinite] = field(default_factory=list)

    def output_total(self) -> int:
        """NaN plus Inf elements over all outputs and samples of the run."""
        return sum(n + i for n, i in self.outputs.values())

    def origins(self) -> list[TensorNonFinite]:
        """The introduced tensors where NaN/Inf start (all inputs finite)."""
        return [t for t in self.introduced if t.origin] or self.introduced[:1]

    def to_dict(self) -> dict:
        """A JSON-safe dict: output counts, what was scanned and the introduced tensors."""
        return {"run": self.run, "outputs": {k: {"nan": n, "inf": i} for k, (n, i) in self.outputs.items()},
                "scanned": self.scanned, "intermediate": self.intermediate,
                "introduced": [t.to_dict() for t in self.introduced]}


@dataclass
class AccuracyReport:
    """The three-way check of :func:`three_way_check`.

    Attributes:
        outputs: one :class:`OutputAccuracy` per model output. samples: feeds used.
        seconds: wall time per leg (and ``scan``). qnn_error: the QNN leg's failure, if any.
        nonfinite: ``{run: RunNonFinite}`` for the runs made.
        not_measurable: ``{leg: why}`` for legs whose reference went non-finite where it should not.
        findings: sentences for the reader (which run produced NaN/Inf and what it means).
    """

    outputs: list[OutputAccuracy]
    samples: int
    seconds: dict[str, float] = field(default_factory=dict)
    qnn_error: str = ""
    nonfinite: dict[str, RunNonFinite] = field(default_factory=dict)
    not_measurable: dict[str, str] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"<AccuracyReport {self.samples} sample(s), {len(self.outputs)} output(s)>\n{self.format_text()}"

    def to_dict(self) -> dict:
        """The JSON-safe report (the ``--json`` output of the three-way check)."""
        return {"samples": self.samples, "seconds": self.seconds, "qnn_error": self.qnn_error,
                "outputs": [o.to_dict() for o in self.outputs],
                "nonfinite": {k: v.to_dict() for k, v in self.nonfinite.items()},
                "not_measurable": dict(self.not_measurable), "findings": list(self.findings)}

    def format_text(self) -> str:
        """The table (cosine / SNR dB / max |Δ| per output and leg), the NaN/Inf counts per run and
        output (and in the CPU runs' intermediate tensors), then the findings; ``[!]`` marks a leg
        that is not measurable."""
        quantized = any(o.quantization is not None for o in self.outputs)
        lines = [f"accuracy on {self.samples} sample{'s' if self.samples != 1 else ''} (cosine / SNR dB / max |Δ|, "
                 f"over elements finite in both runs):"]

        def cell(a: Agreement | None, leg: str) -> str:
            if a is None:
                return "-"
            if a.compared == 0:
                return "no finite pairs" + (" [!]" if leg in self.not_measurable else "")
            return f"{a.cosine:.6f} / {a.snr_db:.1f} / {a.max_abs:.3g}" + (" [!]" if leg in self.not_measurable
                                                                             else "")

        if quantized:
            lines.append(f"  {'output':<20} {'quantization (fp CPU→QDQ CPU)':<34} {'backend (QDQ CPU→QNN)':<34} "
                         f"total (fp CPU→QNN)")
            for o in self.outputs:
                lines.append(f"  {o.output:<20} {cell(o.quantization, 'quantization'):<34} "
                             f"{cell(o.backend, 'backend'):<34} {cell(o.total, 'total')}")
        else:
            lines.append(f"  {'output':<20} backend (fp CPU→QNN)")
            for o in self.outputs:
                lines.append(f"  {o.output:<20} {cell(o.backend, 'backend')}")
        runs = [r for r in ("float_cpu", "qdq_cpu", "qnn") if r in self.nonfinite]
        if runs:
            rows = [("NaN/Inf per run", [RUN_LABELS[r] for r in runs])]
            rows += [(o.output, [self._count_cell(r, o.output) for r in runs]) for o in self.outputs]
            if any(self.nonfinite[r].scanned for r in runs):
                rows.append(("(intermediates)", [self._scan_cell(r) for r in runs]))
            widths = [max(len(cells[k]) for _, cells in rows) + 2 for k in range(len(runs))]
            for label, cells in rows:
                lines.append(f"  {label:<20} " + "".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
        if self.qnn_error:
            lines.append(f"  QNN leg failed: {self.qnn_error}")
        if self.not_measurable:
            lines.append(f"  [!] not measurable ({', '.join(self.not_measurable)}): "
                         f"{next(iter(self.not_measurable.values()))}")
        lines += [f"  note: {f}" for f in self.findings]
        return "\n".join(lines)

    def _count_cell(self, run: str, output: str) -> str:
        nan, inf = self.nonfinite[run].outputs.get(output, (0, 0))
        return "0" if nan + inf == 0 else f"{nan:,} NaN, {inf:,} Inf"

    def _scan_cell(self, run: str) -> str:
        r = self.nonfinite[run]
        if not r.scanned:
            return "not visible"
        if r.introduced:
            start = sum(t.nonfinite for t in r.origins())
            return f"{start:,} new in {r.origins()[0].tensor}"
        return f"{r.intermediate:,}" + (" (as in fp CPU)" if r.intermediate and run != "float_cpu" else "")


def _agreement(ys: Sequence[np.ndarray], rs: Sequence[np.ndarray]) -> Agreement:
    whole = m.ArrayPair(np.concatenate([np.ravel(y) for y in ys]), np.concatenate([np.ravel(r) for r in rs]))
    per_sample = [m.CosineSimilarity()(y, r) for y, r in zip(ys, rs)]
    return Agreement(m.CosineSimilarity().compute(whole), m.SNR().compute(whole), m.MaxAbsError().compute(whole),
                     min(per_sample), int(m.NanCount("backend").compute(whole)),
                     int(m.InfCount("backend").compute(whole)), int(m.NanCount("reference").compute(whole)),
                     int(m.InfCount("reference").compute(whole)), int(m.NonFiniteMismatch().compute(whole)),
                     whole.size - int(m.NonFiniteMismatch().compute(whole)))


def _run_all(session, feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> list[list[np.ndarray]]:
    return [session.run(list(names), dict(f)) for f in feeds]


def _output_counts(runs: list[list[np.ndarray]], names: Sequence[str]) -> dict[str, tuple[int, int]]:
    out = {}
    for k, name in enumerate(names):
        arrays = [np.asarray(s[k]) for s in runs]
        floats = [a for a in arrays if a.dtype.kind == "f"]
        out[name] = (sum(int(np.count_nonzero(np.isnan(a))) for a in floats),
                     sum(int(np.count_nonzero(np.isinf(a))) for a in floats))
    return out


def three_way_check(float_model: Any, qdq_model: Any | None, feeds: Any, *, qnn_model: Any = None,
                    backend_options: Mapping[str, Any] | None = None, run_qnn: bool = True,
                    scan_intermediates: bool = True) -> AccuracyReport:
    """Run ``feeds`` through float-CPU, QDQ-CPU and QDQ-QNN, compare and account for NaN/Inf (module doc).

    Args:
        float_model / qdq_model: path, bytes or ``onnx.ModelProto`` (ModelProtos are serialized);
            ``qdq_model=None`` for a float compile: then only float CPU vs QNN is measured.
        feeds: the samples (a :class:`onnxwrapper.toolkit.CalibrationSet` or a list of feed dicts;
            usually the calibration set, a held-out set is better when available).
        qnn_model: what the QNN backend loads (e.g. the compiled EPContext model path); defaults
            to ``qdq_model`` (compiled on the fly).
        backend_options: ``backend_options`` of ``onnxwrapper.InferenceSession(backend="qnn")``.
        run_qnn: ``False`` skips the QNN leg (quantization loss only).
        scan_intermediates: count NaN/Inf in every intermediate tensor of the two CPU runs (one more
            CPU run of each model per sample; only with a QDQ model).

    Returns:
        :class:`AccuracyReport`. A failing QNN leg is reported in ``qnn_error`` (the other legs
        still count) instead of raising.
    """
    def src(model):
        return model.SerializeToString() if isinstance(model, onnx.ModelProto) else model

    items = list(feeds.feeds) if hasattr(feeds, "feeds") else [dict(f) for f in feeds]
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    float_sess = onnxruntime.InferenceSession(src(float_model), providers=["CPUExecutionProvider"])
    names = [o.name for o in float_sess.get_outputs()]
    ref = _run_all(float_sess, items, names)
    seconds["float_cpu"] = time.perf_counter() - t
    runs = {"float_cpu": RunNonFinite("float_cpu", _output_counts(ref, names))}
    qdq = None
    scan_error = ""
    if qdq_model is not None:
        t = time.perf_counter()
        qdq = _run_all(onnxruntime.InferenceSession(src(qdq_model), providers=["CPUExecutionProvider"]), items, names)
        seconds["qdq_cpu"] = time.perf_counter() - t
        runs["qdq_cpu"] = RunNonFinite("qdq_cpu", _output_counts(qdq, names))
        if scan_intermediates and items:
            t = time.perf_counter()
            try:
                float_scan, qdq_scan = scan_run(float_model, items), scan_run(qdq_model, items)
            except Exception as exc:  # noqa: BLE001 - the legs above still count; say what is missing
                scan_error = f"the intermediate-tensor scan failed ({type(exc).__name__}: {exc}): NaN/Inf are " \
                             f"counted at the outputs only"
            else:
                runs["float_cpu"].scanned = runs["qdq_cpu"].scanned = True
                runs["float_cpu"].intermediate = float_scan.nonfinite_total()
                runs["qdq_cpu"].intermediate = qdq_scan.nonfinite_total()
                runs["qdq_cpu"].introduced = introduced(qdq_scan, float_scan)
            seconds["scan"] = time.perf_counter() - t
    qnn: list | None = None
    error = ""
    if run_qnn:
        t = time.perf_counter()
        try:
            chosen = qnn_model if qnn_model is not None else (qdq_model if qdq_model is not None else float_model)
            sess = onnxwrapper.InferenceSession(src(chosen),
                                                backend="qnn", backend_options=dict(backend_options or {}))
            qnn = _run_all(sess, items, names)
            runs["qnn"] = RunNonFinite("qnn", _output_counts(qnn, names))
        except Exception as exc:  # noqa: BLE001 - reported, the CPU legs still inform the user
            error = f"{type(exc).__name__}: {exc}"
        seconds["qnn"] = time.perf_counter() - t
    outputs = []
    for k, name in enumerate(names):
        r = [s[k] for s in ref]
        q = [s[k] for s in qdq] if qdq is not None else None
        n = [s[k] for s in qnn] if qnn is not None else None
        outputs.append(OutputAccuracy(name, _agreement(q, r) if q else None,
                                      _agreement(n, q if q else r) if n else None, _agreement(n, r) if n else None))
    report = AccuracyReport(outputs, len(items), seconds, error, runs)
    _judge(report)
    if scan_error:
        report.findings.append(scan_error)
    return report


def _judge(report: AccuracyReport) -> None:
    """Fill ``findings`` and ``not_measurable``: which run produced NaN/Inf, and which legs it spoils."""
    runs = report.nonfinite
    base, qdq, qnn = runs["float_cpu"], runs.get("qdq_cpu"), runs.get("qnn")
    if base.output_total():
        report.findings.append(f"the float model's own outputs hold {base.output_total():,} NaN/Inf on the CPU "
                               f"(equal non-finite values count as equal in every leg)")
    if qdq is not None:
        extra_out = {k: v for k, v in qdq.outputs.items() if sum(v) > sum(base.outputs.get(k, (0, 0)))}
        if qdq.introduced or extra_out:
            origins = qdq.origins()
            where = (f" in {len(qdq.introduced)} intermediate tensor(s), starting at "
                     + "; ".join(t.describe() for t in origins[:3]) if origins else "")
            produced = sum(t.nonfinite for t in origins) if origins else sum(sum(v) for v in extra_out.values())
            text = f"the CPU QDQ reference produced {produced:,} NaN/Inf{where}"
            if not extra_out:
                text += "; its QuantizeLinear nodes saturated them, so its outputs are finite but wrong"
            else:
                text += f"; its outputs hold {sum(sum(v) for v in extra_out.values()):,} of them"
            if qnn is not None:
                finite = qnn.output_total() <= base.output_total()
                text += "; the QNN run's outputs are finite" if finite else \
                    f"; the QNN run's outputs hold {qnn.output_total():,} NaN/Inf too"
            legs = ["quantization"] + (["backend"] if qnn is not None else [])
            text += (f". The {' and '.join(legs)} leg{'s' if len(legs) > 1 else ''} compare{'' if len(legs) > 1 else 's'}"
                     f" against this broken reference: not a measure of quantization loss"
                     + (" or backend error" if qnn is not None else ""))
            text += " (cosine/SNR are over the finite elements only)" if extra_out else ""
            text += "; the total leg (fp CPU→QNN) measures the compiled model" if qnn is not None else ""
            report.findings.append(text)
            why = "the CPU QDQ reference produced NaN/Inf that the float model does not"
            report.not_measurable.update({leg: why for leg in legs})
    if qnn is not None:
        reference = qdq if qdq is not None else base
        extra = {k: v for k, v in qnn.outputs.items() if sum(v) > sum(reference.outputs.get(k, (0, 0)))}
        if extra:
            listed = ", ".join(f"{k}: {n:,} NaN, {i:,} Inf" for k, (n, i) in extra.items())
            report.findings.append(f"the QNN run produced NaN/Inf its reference does not have ({listed}); cosine/SNR "
                                   f"of the backend and total legs are over the finite elements only")
