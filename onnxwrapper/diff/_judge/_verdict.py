"""The verdict in words: which level failed, by how much, and which tensors explain an app difference.

:func:`verdict_line` is the last line of the console report and the ``verdict_line`` of the JSON
report; :func:`explain_app_difference` names, for a backend whose app output differs, the first
model call whose tensors explain it:

1. the first call (reference order) with an output beyond tolerance;
2. else the first call fed other inputs than on the reference — an earlier model's slightly
   different output changed what a later model saw (a pipeline);
3. else the output closest to failing (lowest SNR): no tensor is beyond tolerance, so small
   differences decide the app's result (a threshold or an argmax in the script).
"""

from __future__ import annotations

import math

__all__ = ["verdict_line", "explain_app_difference", "worst_failure_text"]


def _db(value) -> str:
    if not isinstance(value, (int, float)) or math.isnan(value):
        return "-"
    return f"{value:.1f} dB" if math.isfinite(value) else ("inf dB" if value > 0 else "-inf dB")


def worst_failure_text(summary) -> str:
    """``"qnn model/output: SNR 6.8 dB < 27.1 dB (cosine 0.889169, session 1 call 0)"``-style text."""
    w = summary.worst
    where = f"{summary.backend} {summary.model}/{summary.output}"
    if w is None:
        return where
    m = w.metrics
    bar = getattr(summary.tolerance, "min_snr_db", None)
    what = f"SNR {_db(m.get('snr_db'))}" + (f" < {bar:.1f} dB" if bar is not None else "")
    if w.kind in ("missing", "shape", "dtype"):
        what = w.detail or w.kind
    elif w.kind == "nonfinite":
        what = f"{int(m.get('nonfinite_mismatch', 0))} NaN/Inf where the reference is finite"
    elif bar is None and w.failed:
        what = w.failed[0]
    extra = []
    if "cosine_similarity" in m:
        extra.append(f"cosine {m['cosine_similarity']:.6f}")
    if m.get("fp16_saturated"):
        extra.append(f"{int(m['fp16_saturated'])} value(s) saturated at the FP16 limit")
    extra.append(f"session {w.session} call {w.index}")
    return f"{where}: {what} ({', '.join(extra)})"


def explain_app_difference(result, label: str) -> str:
    """The first model call whose tensors explain ``label``'s app-level difference (module docstring)."""
    fails = sorted((c for c in result.failures if c.backend == label), key=lambda c: c.ref_seq)
    if fails:
        c = fails[0]
        summary = next((s for s in result.outputs if s.backend == label and s.model == c.model
                        and s.output == c.output), None)
        text = worst_failure_text(summary) if summary is not None else f"{c.model}/{c.output}"
        return (f"first call beyond tolerance: {c.model} session {c.session} call {c.index}, output "
                f"'{c.output}' — worst call of that output: {text}")
    differ = result.inputs_differ.get(label) or []
    if differ:
        s, i = differ[0]
        return (f"no output is beyond tolerance, but session {s} call {i} was fed other inputs than on the "
                f"reference: an earlier model's slightly different output changed what a later one saw")
    mine = [s for s in result.outputs if s.backend == label and s.worst is not None]
    if mine:
        low = min(mine, key=lambda s: s.worst.metrics.get("snr_db", math.inf))
        return (f"no output is beyond tolerance; the closest: {low.model}/{low.output} SNR "
                f"{_db(low.worst.metrics.get('snr_db'))} (session {low.worst.session} call {low.worst.index}) — "
                f"small differences decide the script's result (a threshold or an argmax in its own code)")
    return "no tensor was compared for this backend"


def verdict_line(result) -> str:
    """``verdict: PASS — …`` / ``MISMATCH (tensors|app output|both) — …`` / ``INCOMPLETE — …``,
    ending with the exit status."""
    state = result.state
    status = f"(exit status {result.exit_status})"
    if state == "incomplete":
        bad = result.incomplete_runs
        if bad:
            causes = "; ".join(f"{r.label or r.backend}: {r.status}"
                               + (f" ({r.signal})" if r.signal and r.signal not in (r.cause or "") else "")
                               + (f" — {r.cause}" if r.cause else "") for r in bad[:3])
        else:
            causes = "nothing was compared"
        return f"verdict: INCOMPLETE — {causes} {status}"
    failing = [s for s in result.outputs if not s.passed]
    diverged = [label for label, items in result.divergences.items() if items]
    tensor = ""
    if failing:
        worst = min(failing, key=lambda s: s.worst.metrics.get("snr_db", math.inf) if s.worst else -math.inf)
        tensor = f"{len(failing)} of {len(result.outputs)} output(s) beyond tolerance, worst {worst_failure_text(worst)}"
    elif diverged:
        tensor = f"call sequence diverges on {', '.join(diverged)}"
    differs = [a for a in result.app.values() if a.status == "differs"]
    app = "; ".join(f"{a.backend}: " + ", ".join(f"{i.what} differs" + (f" ({i.detail})" if i.detail else "")
                                                 for i in a.items if not i.identical) for a in differs)
    compared = [a for a in result.app.values() if a.status != "not_compared"]
    if not result.app:
        model_run = (result.script or {}).get("mode") == "model"
        app_state = "a model run: no app level" if model_run else "app output not compared"
    elif not compared:
        reason = next(iter(result.app.values())).reason
        app_state = "app output not compared" + (f" ({reason})" if reason else "")
    else:
        app_state = "app output identical" + (" where compared" if len(compared) < len(result.app) else "")
    if state == "pass":
        return f"verdict: PASS — tensors within tolerance, {app_state} {status}"
    if state == "tensor_mismatch":
        return f"verdict: MISMATCH (tensors) — {app_state}, but {tensor} {status}"
    if state == "app_mismatch":
        return f"verdict: MISMATCH (app output) — {app}; tensors within tolerance {status}"
    return f"verdict: MISMATCH (app output and tensors) — {app}; {tensor} {status}"
