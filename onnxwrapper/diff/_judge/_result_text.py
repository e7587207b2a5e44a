"""Readable ``repr()`` of the diff result objects (:mod:`onnxwrapper.diff._judge._result`), for a REPL or a
debugger: one line each (a :class:`~onnxwrapper.diff.DiffResult` adds one line per output and per
run), the numbers a person looks for first — verdict, SNR against the bar, cosine, which call."""

from __future__ import annotations

import math

__all__ = ["repr_call", "repr_output", "repr_app", "repr_localization", "repr_diff_result"]


def _db(value) -> str:
    if not isinstance(value, (int, float)) or math.isnan(value):
        return "-"
    return f"{value:.1f} dB" if math.isfinite(value) else "inf dB"


def _cos(value) -> str:
    return f"{value:.6f}" if isinstance(value, (int, float)) else "-"


def repr_call(c) -> str:
    m = c.metrics or {}
    what = c.kind if c.kind == "pass" else f"FAIL:{c.kind}"
    return (f"<CallComparison {c.backend} {c.model}/{c.output} session {c.session} call {c.index}: {what}, "
            f"SNR {_db(m.get('snr_db'))}, cosine {_cos(m.get('cosine_similarity'))}>")


def repr_output(s) -> str:
    m = s.worst.metrics if s.worst is not None else {}
    bar = getattr(s.tolerance, "min_snr_db", None)
    what = "pass" if s.passed else f"FAIL:{s.kind} ({s.failed_calls}/{s.calls} calls)"
    return (f"<OutputSummary {s.backend} {s.model}/{s.output}: {what}, worst SNR {_db(m.get('snr_db'))}"
            + (f" (bar {bar:.1f} dB)" if isinstance(bar, (int, float)) else "")
            + f", cosine {_cos(m.get('cosine_similarity'))}, {s.calls} call(s)>")


def repr_app(a) -> str:
    why = f" ({a.reason})" if a.reason else ""
    differing = [i.what for i in a.items if not i.identical]
    return f"<AppComparison {a.backend} vs {a.reference}: {a.status}{why}" + (
        f" — {', '.join(differing)} differ" if differing else "") + ">"


def repr_localization(loc) -> str:
    node = (loc.culprit or loc.first or {}).get("node")
    text = loc.cause or ("failed: " + loc.error if loc.error else "incomplete")
    return (f"<Localization {loc.backend} {loc.model} session {loc.call[0]} call {loc.call[1]}: {text}"
            + (f" at '{node}'" if node else "") + f", {loc.rounds} round(s)>")


def repr_diff_result(result) -> str:
    head = (f"<DiffResult {result.verdict} (exit status {result.exit_status}, {result.state}); reference "
            f"{result.reference}, compared {', '.join(result.backends) or '-'}; mode {result.mode}; "
            f"{len(result.outputs)} output(s), {result.compared_calls} call(s) compared")
    lines = [head] + [f"  {repr_output(s)}" for s in result.outputs[:20]]
    if len(result.outputs) > 20:
        lines.append(f"  … {len(result.outputs) - 20} more output(s)")
    lines += [f"  {r!r}" for r in result.runs.values()]
    lines.append(f"  {result.verdict_line()}>")
    return "\n".join(lines)
