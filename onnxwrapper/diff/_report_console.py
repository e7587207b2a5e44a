"""The console table of a :class:`~onnxwrapper.diff.DiffResult` (plain text, optional ANSI colour).

One line per backend × model × output with the worst call's metrics and the verdict; under each
failing line the failed thresholds and the "would have passed with" hint; then run statuses,
call-sequence divergences, localization and notes, and the final verdict with the exit status.
"""

from __future__ import annotations

import math

__all__ = ["render_table", "fmt"]

_GREEN, _RED, _YELLOW, _BOLD, _RESET = "\033[32m", "\033[31m", "\033[33m", "\033[1m", "\033[0m"


def fmt(value, kind: str = "g") -> str:
    """Compact number: ``-`` for missing, ``inf``/``nan`` spelled out, cosine with 6 decimals."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if kind == "cos":
        return f"{value:.6f}"
    if kind == "db":
        return f"{value:.1f}"
    if kind == "frac":
        return f"{value:.3f}"
    if kind == "int":
        return str(int(value))
    return f"{value:.3g}"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def _paint(text: str, colour: str, color: bool) -> str:
    return f"{colour}{text}{_RESET}" if color else text


def render_table(result, *, color: bool = False, width: int | None = None) -> str:
    """Render ``result`` as the console report (see module docstring).

    Args:
        result: a :class:`~onnxwrapper.diff.DiffResult`.
        color: add ANSI colours (the CLI passes ``sys.stdout.isatty()``).
        width: maximal width of the model and output columns together (default 56 characters).
    """
    width = width or 56
    head = ["backend", "model", "output", "calls", "max|Δ|", "mean|Δ|", "max rel", "cosine", "SNR dB",
            "PSNR dB", "top1", "NaN/Inf", "verdict"]
    rows = []
    for s in result.outputs:
        m = s.worst.metrics if s.worst else {}
        nonfinite = int(m.get("nan_backend", 0) + m.get("inf_backend", 0))
        verdict = "pass" if s.passed else f"FAIL:{s.kind}"
        rows.append([s.backend, _short(s.model, width * 3 // 5), _short(s.output, width * 2 // 5),
                     f"{s.failed_calls}/{s.calls}" if s.failed_calls else str(s.calls),
                     fmt(m.get("max_abs_error")), fmt(m.get("mean_abs_error")), fmt(m.get("max_rel_error")),
                     fmt(m.get("cosine_similarity"), "cos"), fmt(m.get("snr_db"), "db"), fmt(m.get("psnr_db"), "db"),
                     fmt(m.get("top1_agreement"), "frac"), str(nonfinite) if m else "-", verdict])
    lines = [f"aipc diff — reference: {result.reference}; compared: {', '.join(result.backends) or '-'}; "
             f"mode: {result.mode}"]
    if rows:
        widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
        lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        lines.append("  ".join("-" * w for w in widths))
        for s, row in zip(result.outputs, rows):
            text = "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
            lines.append(_paint(text, _GREEN if s.passed else _RED, color) if color else text)
            if not s.passed and s.worst is not None:
                w = s.worst
                lines.append(f"    worst call (lowest SNR): session {w.session} call {w.index} — failed: {'; '.join(w.failed)}"
                             + (f" ({w.detail})" if w.detail else ""))
                lines.append(f"    tolerance: {s.tolerance.describe()}")
                for hint in w.hints:
                    if hint:
                        lines.append(f"    would have passed with: {hint}")
                if s.min_atol or s.min_rtol:
                    lines.append(f"    to pass every call: atol ≥ {fmt(s.min_atol)} or rtol ≥ {fmt(s.min_rtol)}")
    else:
        lines.append("(no output was compared)")
    lines.append("")
    lines.append("runs:")
    for label, r in result.runs.items():
        state = "ok" if r.ok else r.status.upper() + (f" ({r.signal})" if r.signal else "")
        line = f"  {label:<10} {r.backend:<6} {state:<18} {r.seconds:7.1f} s  {r.calls} call(s)"
        if r.options:
            line += "  " + ", ".join(f"{k}={v}" for k, v in r.options.items())
        lines.append(_paint(line, _GREEN if r.ok else _YELLOW, color) if color else line)
        if not r.ok and r.message:
            lines.extend("      " + ln for ln in r.message.splitlines()[:8])
    for label, items in result.divergences.items():
        for text in items:
            lines.append(f"divergence ({label}): {text}")
    for loc in result.localizations:
        lines.append(f"localization ({loc.backend}, {loc.model}, {loc.method}, {loc.rounds} round(s), "
                     f"{loc.tensors_compared} tensors): {loc.message or loc.error}")
        if loc.chain:
            mark = {True: " ✓", False: " ✗", None: ""}
            chain = " → ".join(f"{c['node']}({c['op_type']}){mark[c.get('passed')]}" for c in loc.chain[:12])
            lines.append(f"    chain after it: {chain}{' …' if len(loc.chain) > 12 else ''}")
    for note in result.notes:
        lines.append(f"note: {note}")
    verdict = f"verdict: {result.verdict} (exit status {result.exit_status})"
    colour = {0: _GREEN, 1: _RED}.get(result.exit_status, _YELLOW)
    lines.append(_paint(_BOLD + verdict, colour, color) if color else verdict)
    return "\n".join(lines)
