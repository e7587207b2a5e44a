"""Why no candidate repaired a model, and what precision would (``aipc fix``'s notes).

When every candidate failed and the error left is rounding that accumulates — a recurrent state
(``LSTM``/``GRU``/``RNN``/``Scan``/``Loop``) carried over many steps, or a localization that named
``accumulation`` — no local rewrite removes it: each node is accurate alone. What would is more
significant bits. A rounding-limited SNR grows by 20·log10(2) ≈ 6.02 dB per significant bit (the
unit roundoff halves; Higham, *Accuracy and Stability of Numerical Algorithms*, §2.1): FP16 carries
11 bits, FP32 24, so FP32 arithmetic gives about 13 × 6.02 = 78.3 dB more SNR than FP16 on the
same computation. The note states the deficit, the bits it needs, and what the target's own higher
precision did (the ``precision`` trial), so the user knows whether to run that part elsewhere.
"""

from __future__ import annotations

import math

import onnx

__all__ = ["DB_PER_BIT", "clamp_notes", "why_not_repaired"]

#: SNR gained per significant bit of a rounding-limited computation: 20·log10(2)
DB_PER_BIT = 20 * math.log10(2)
_BITS = {"fp16": 11, "bf16": 8, "fp32": 24}
_RECURRENT = {"LSTM", "GRU", "RNN", "Scan", "Loop"}


def why_not_repaired(model: onnx.ModelProto, localization: dict | None, baseline, trials) -> list:
    """Notes for a model no candidate repaired (empty when the cause is not accumulated rounding).

    Args:
        model: the model. localization: its localization (report JSON object) or ``None``.
        baseline / trials: the unrepaired :class:`~onnxwrapper.repair.fix._verify.Trial` and the
            candidates' trials.
    """
    recurrent = sorted({n.op_type for n in model.graph.node if n.op_type in _RECURRENT})
    cause = (localization or {}).get("cause")
    if not recurrent and cause != "accumulation":
        return []
    ran = [t for t in trials if t.worst and isinstance(t.worst.get("snr_db"), (int, float))]
    if not ran:
        return []
    best = max(ran, key=lambda t: (t.outputs_passed, t.worst["snr_db"]))
    snr, bar = float(best.worst["snr_db"]), float(best.bar_db or (baseline.bar_db if baseline else 27.07) or 27.07)
    deficit = bar - snr
    if deficit <= 0 or not math.isfinite(deficit):
        return []
    bits = math.ceil(deficit / DB_PER_BIT)
    where = f"the recurrent state ({', '.join(recurrent)})" if recurrent else "the graph (no single node breaks)"
    notes = [f"why no candidate passed: the best, {best.title}, leaves '{best.worst.get('output')}' at {snr:.1f} dB, "
             f"{deficit:.1f} dB below the bar ({bar:.1f} dB). What is left is FP16 rounding accumulating through "
             f"{where}: every node is accurate alone, so no rewrite of one node removes it."]
    fp32 = snr + (_BITS["fp32"] - _BITS["fp16"]) * DB_PER_BIT
    notes.append(f"what precision would: {bits} more significant bit(s) than FP16's 11 ({DB_PER_BIT:.2f} dB per bit "
                 f"of a rounding-limited SNR) — FP32 arithmetic (24 bits) for the state and the layers feeding it "
                 f"would reach about {fp32:.0f} dB; bfloat16 (8 bits) would not.")
    precision = [t for t in trials if t.kind == "precision"]
    for t in precision:
        notes.append(f"this target's higher precision ({t.title}): {t.status}" + (f" — {t.message}" if t.message else ""))
    cpu = [t for t in trials if t.kind == "cpu" and "recurrent" in t.title]
    for t in cpu:
        worst = (t.worst or {}).get("snr_db")
        shown = f"{worst:.1f} dB" if isinstance(worst, (int, float)) else "—"
        notes.append(f"{t.title}: {t.status}, worst {shown} — the FP16 error entering the state from the NPU part "
                     f"before it is what remains" if t.status == "fail" else f"{t.title}: {t.status}")
    return notes


def clamp_notes(baseline, trials) -> list:
    """A note for each failed ``known`` (``clamp_fp16``) trial whose outputs came out — or whose FP16
    emulation on the CPU came out, for one not verified — as the unrepaired model's (worst SNR within
    0.1 dB): the backend's FP16 arithmetic saturates values beyond its range
    itself, which is all a clamp does (measured on the QNN HTP simulator: a MatMul whose reference
    output reaches 4.2e5 returns 65536; logits beyond FP16's range, saturated or clamped, tie alike
    in a ``Softmax``), so a model that needs those values needs them computed in range or elsewhere."""
    before = (baseline.worst or {}).get("snr_db") if baseline is not None else None
    if not isinstance(before, (int, float)) or not math.isfinite(before):
        return []
    notes = []
    for t in trials:
        after = (t.worst or {}).get("snr_db")
        how = "worst"
        if t.status == "skipped" and t.emulated:
            after, how = min(t.emulated.values()), "emulated in FP16 on the CPU"
        if t.kind == "known" and t.status in ("fail", "skipped") and isinstance(after, (int, float)) \
                and abs(after - before) < 0.1:
            notes.append(f"{t.title}: {how} {after:.1f} dB, as unrepaired ({before:.1f} dB) — the backend's FP16 "
                         f"arithmetic already saturates values beyond its range, which is what the clamp does; the "
                         f"overflowing values themselves are needed (computed in range, on the CPU, or at a higher "
                         f"precision)")
    return notes
