"""The three-way accuracy check of a quantized model: float on CPU, QDQ on CPU, QDQ on the QNN HTP,
each compared with the float model's outputs (cosine similarity, SNR, max |Δ|, top-1 agreement;
the metric functors of :mod:`onnxwrapper.diff`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime

import onnxwrapper
from onnxwrapper.diff import metrics as m
from onnxwrapper.toolkit._quantize import CalibrationSet

__all__ = ["AccuracyReport", "Agreement", "OutputAccuracy", "three_way_check"]


@dataclass(frozen=True)
class Agreement:
    """Agreement of ``y`` with a reference ``r`` over all samples of one output.

    Attributes:
        cosine: cosine similarity (1 = same direction). snr_db: ``10·log10(Σr²/Σ(y−r)²)`` (inf
        when equal). max_abs: max ``|y − r|``. min_sample_cosine: worst per-sample cosine.
    """

    cosine: float
    snr_db: float
    max_abs: float
    min_sample_cosine: float

    def to_dict(self) -> dict:
        return {"cosine": self.cosine, "snr_db": self.snr_db, "max_abs": self.max_abs,
                "min_sample_cosine": self.min_sample_cosine}


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
        return {"output": self.output, "quantization": self.quantization.to_dict() if self.quantization else None,
                "backend": self.backend.to_dict() if self.backend else None,
                "total": self.total.to_dict() if self.total else None}


@dataclass
class AccuracyReport:
    """The three-way check of :func:`three_way_check`; ``seconds``: wall time per leg."""

    outputs: list[OutputAccuracy]
    samples: int
    seconds: dict[str, float] = field(default_factory=dict)
    qnn_error: str = ""

    def to_dict(self) -> dict:
        return {"samples": self.samples, "seconds": self.seconds, "qnn_error": self.qnn_error,
                "outputs": [o.to_dict() for o in self.outputs]}

    def format_text(self) -> str:
        """A table: one row per output and comparison, with cosine, SNR (dB) and max |Δ|."""
        quantized = any(o.quantization is not None for o in self.outputs)
        lines = [f"accuracy on {self.samples} sample{'s' if self.samples != 1 else ''} (cosine / SNR dB / max |Δ|):"]

        def cell(a: Agreement | None) -> str:
            return "-" if a is None else f"{a.cosine:.6f} / {a.snr_db:.1f} / {a.max_abs:.3g}"

        if quantized:
            lines.append(f"  {'output':<20} {'quantization (fp CPU→QDQ CPU)':<32} {'backend (QDQ CPU→QNN)':<32} "
                         f"total (fp CPU→QNN)")
            for o in self.outputs:
                lines.append(f"  {o.output:<20} {cell(o.quantization):<32} {cell(o.backend):<32} {cell(o.total)}")
        else:
            lines.append(f"  {'output':<20} backend (fp CPU→QNN)")
            for o in self.outputs:
                lines.append(f"  {o.output:<20} {cell(o.backend)}")
        if self.qnn_error:
            lines.append(f"  QNN leg failed: {self.qnn_error}")
        return "\n".join(lines)


def _agreement(ys: Sequence[np.ndarray], rs: Sequence[np.ndarray]) -> Agreement:
    whole = m.ArrayPair(np.concatenate([np.ravel(y) for y in ys]), np.concatenate([np.ravel(r) for r in rs]))
    per_sample = [m.CosineSimilarity()(y, r) for y, r in zip(ys, rs)]
    return Agreement(m.CosineSimilarity().compute(whole), m.SNR().compute(whole), m.MaxAbsError().compute(whole),
                     min(per_sample))


def _run_all(session, feeds: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> list[list[np.ndarray]]:
    return [session.run(list(names), dict(f)) for f in feeds]


def three_way_check(float_model: Any, qdq_model: Any | None,
                    feeds: CalibrationSet | Sequence[Mapping[str, np.ndarray]], *,
                    qnn_model: Any = None, backend_options: Mapping[str, Any] | None = None,
                    run_qnn: bool = True) -> AccuracyReport:
    """Run ``feeds`` through float-CPU, QDQ-CPU and QDQ-QNN and compare (see module doc).

    Args:
        float_model / qdq_model: path, bytes or ``onnx.ModelProto`` (ModelProtos are serialized);
            ``qdq_model=None`` for a float compile: then only float CPU vs QNN is measured.
        feeds: the samples (usually the calibration set; a held-out set is better when available).
        qnn_model: what the QNN backend loads (e.g. the compiled EPContext model path); defaults
            to ``qdq_model`` (compiled on the fly).
        backend_options: ``backend_options`` of ``onnxwrapper.InferenceSession(backend="qnn")``.
        run_qnn: ``False`` skips the QNN leg (quantization loss only).

    Returns:
        :class:`AccuracyReport`. A failing QNN leg is reported in ``qnn_error`` (the other legs
        still count) instead of raising.
    """

    def src(m):
        return m.SerializeToString() if isinstance(m, onnx.ModelProto) else m

    items = feeds.feeds if isinstance(feeds, CalibrationSet) else [dict(f) for f in feeds]
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    float_sess = onnxruntime.InferenceSession(src(float_model), providers=["CPUExecutionProvider"])
    names = [o.name for o in float_sess.get_outputs()]
    ref = _run_all(float_sess, items, names)
    seconds["float_cpu"] = time.perf_counter() - t
    qdq = None
    if qdq_model is not None:
        t = time.perf_counter()
        qdq = _run_all(onnxruntime.InferenceSession(src(qdq_model), providers=["CPUExecutionProvider"]), items, names)
        seconds["qdq_cpu"] = time.perf_counter() - t
    qnn: list | None = None
    error = ""
    if run_qnn:
        t = time.perf_counter()
        try:
            chosen = qnn_model if qnn_model is not None else (qdq_model if qdq_model is not None else float_model)
            sess = onnxwrapper.InferenceSession(src(chosen),
                                                backend="qnn", backend_options=dict(backend_options or {}))
            qnn = _run_all(sess, items, names)
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
    return AccuracyReport(outputs, len(items), seconds, error)
