"""The console table of a :class:`~onnxwrapper.diff.DiffResult` (plain text, optional ANSI colour).

One line per backend × model × output with the worst call's metrics and the verdict; under each
failing line the failed thresholds and the "would have passed with" hint; then run statuses (a
one-line cause for every run that did not end normally), the app-level comparison (the diff of
differing lines and the model call that explains it), call-sequence divergences, localization,
notes, and the verdict line with the exit status. Sessions are numbered from 1 in creation order,
as ``aipc -v`` and the JSON and HTML reports number them. Every line goes through
:func:`~onnxwrapper.diff._report._console_text.console_safe` (control characters escaped, long lines cut),
so nothing a script prints can hide or rewrite the verdict line.
"""

from __future__ import annotations

import math

from onnxwrapper.diff._report._console_text import console_safe
from onnxwrapper.diff._runs import timing_lines

__all__ = ["underflow_text", "render_table", "fmt", "fmt_metric"]

_GREEN, _RED, _YELLOW, _BOLD, _RESET = "\033[32m", "\033[31m", "\033[33m", "\033[1m", "\033[0m"
_MAX_DIFF_LINES = 20


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


def fmt_metric(name: str, value) -> str:
    """A metric formatted by its kind: cosine with 6 decimals (0.999802 stays visible next to a
    0.9995 bar), dB with 1, agreements with 3, counts as integers, errors with 3 digits."""
    if name == "cosine_similarity":
        return fmt(value, "cos")
    if name.endswith("_db"):
        return fmt(value, "db")
    if name.endswith("_agreement"):
        return fmt(value, "frac")
    if name.startswith(("nan_", "inf_")) or name in ("nonfinite_mismatch", "fp16_saturated", "mismatched_elements"):
        return fmt(value, "int")
    return fmt(value)


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


class _Painted(str):
    """A line already made console-safe and coloured (its escape sequences are ours)."""


def _paint(text: str, colour: str, color: bool) -> str:
    return _Painted(f"{colour}{console_safe(text)}{_RESET}") if color else text


def _rows(result, width: int) -> list:
    rows = []
    for s in result.outputs:
        m = s.worst.metrics if s.worst else {}
        nonfinite = int(m.get("nan_backend", 0) + m.get("inf_backend", 0))
        verdict = "pass" if s.passed else f"FAIL:{s.kind}"
        rows.append([s.backend, _short(s.model, width * 3 // 5), _short(s.output, width * 2 // 5),
                     f"{s.failed_calls}/{s.calls}" if s.failed_calls else str(s.calls),
                     fmt(m.get("max_abs_error")), fmt(m.get("scaled_max_error")),
                     fmt(m.get("cosine_similarity"), "cos"), fmt(m.get("snr_db"), "db"),
                     fmt(m.get("top1_agreement"), "frac"), str(nonfinite) if m else "-",
                     fmt(m.get("fp16_saturated"), "int") if m else "-", verdict])
    return rows


def _output_lines(result, color: bool, width: int) -> list[str]:
    head = ["backend", "model", "output", "calls", "max|Δ|", "|Δ|/peak", "cosine", "SNR dB", "top1", "NaN/Inf",
            "sat", "verdict"]
    rows = _rows(result, width)
    if not rows:
        return ["(no output was compared)"]
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    for s, row in zip(result.outputs, rows):
        text = "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
        lines.append(_paint(text, _GREEN if s.passed else _RED, color) if color else text)
        if s.passed or s.worst is None:
            continue
        w = s.worst
        lines.append(f"    worst call: session {w.session} call {w.index} — failed: {'; '.join(w.failed)}"
                     + (f" ({w.detail})" if w.detail else ""))
        lines.append(f"    tolerance: {s.tolerance.describe()}")
        lines.extend(f"    would have passed with: {hint}" for hint in w.hints if hint)
        if s.min_atol or s.min_rtol:
            lines.append(f"    abs/rel alone, every call (Polygraphy's minimum): atol ≥ {fmt(s.min_atol)} or "
                         f"rtol ≥ {fmt(s.min_rtol)}")
    return lines


def _app_lines(result) -> list[str]:
    if not result.app:
        return []
    first = next(iter(result.app.values()))
    head = f"app output (compared with {first.reference}"
    if first.rtol:
        head += f"; printed numbers within {first.rtol:.3g} relative"
    if first.filter:
        head += f"; lines matching {first.filter!r}"
    lines = [head + "):"]
    for a in result.app.values():
        if a.status == "not_compared":
            lines.append(f"  {a.backend:<10} not compared ({a.reason})")
            continue
        masked = sum(i.masked for i in a.items)
        timings = sum(i.timings for i in a.items)
        if a.status == "identical":
            numeric = [n for i in a.items for n in i.numeric][:3]
            what = ", ".join(i.what for i in a.items)
            extra = (f"; numbers within tolerance: {', '.join(numeric)}" if numeric else "") + \
                    (f"; {timings} timing(s) not judged" if timings else "") + \
                    (f"; {masked} volatile number(s) masked (they differ between two reference runs)" if masked else "")
            lines.append(f"  {a.backend:<10} identical — {what}{extra}")
            continue
        lines.append(f"  {a.backend:<10} DIFFERS — " + "; ".join(
            f"{i.what}: {i.detail or 'differs'}" for i in a.items if not i.identical))
        for item in a.items:
            lines.extend("      " + ln for ln in item.diff[:_MAX_DIFF_LINES])
            if len(item.diff) > _MAX_DIFF_LINES:
                lines.append(f"      … ({len(item.diff) - _MAX_DIFF_LINES} more lines in the HTML report)")
        if a.explanation:
            lines.append(f"      explained by: {a.explanation}")
    return lines


def underflow_text(note: dict) -> str:
    """One line for a localization's FP16 underflow note (``Localization.underflows``)."""
    feeds = ", ".join(f"{f.get('op_type')} '{f.get('node')}'" for f in note.get("feeds") or ())
    return (f"FP16 underflow: '{note.get('tensor')}' ({note.get('op_type')} '{note.get('node')}') holds "
            f"{note.get('below')} of {note.get('size')} reference values below 6.1e-05 (smallest "
            f"{fmt(note.get('smallest'))}; {note.get('zeros')} exact zero(s) not counted), {note.get('lost')} lost "
            f"on the backend; it feeds {feeds}")


def _localization_lines(result) -> list[str]:
    lines = []
    for loc in result.localizations:
        lines.append(f"localization ({loc.backend}, {loc.model}, session {loc.call[0]} call {loc.call[1]}; "
                     f"{loc.method}, {loc.rounds} round(s), {loc.tensors_compared} tensors, bar "
                     f"{fmt(loc.bar_db, 'db')} dB): " + (f"cause: {loc.cause} — " if loc.cause else "")
                     + (loc.message or loc.error))
        if loc.first and loc.culprit and loc.first.get("tensor") != loc.culprit.get("tensor"):
            m = loc.first.get("metrics") or {}
            lines.append(f"    first below the bar: '{loc.first['node']}' ({loc.first['op_type']}) SNR "
                         f"{fmt(m.get('snr_db'), 'db')} dB, cosine {fmt(m.get('cosine_similarity'), 'cos')}")
        if loc.chain:
            mark = {True: " ✓", False: " ✗", None: ""}
            chain = " → ".join(f"{c['node']}({c['op_type']}){mark[c.get('passed')]}" for c in loc.chain[:12])
            lines.append(f"    chain after it: {chain}{' …' if len(loc.chain) > 12 else ''}")
        lines.extend(f"    {underflow_text(u)}" for u in getattr(loc, "underflows", ())[:5])
        lines.extend(f"    note: {n}" for n in loc.notes)
    return lines


def render_table(result, *, color: bool = False, width: int | None = None) -> str:
    """Render ``result`` as the console report (see module docstring).

    Args:
        result: a :class:`~onnxwrapper.diff.DiffResult`.
        color: add ANSI colours (the CLI passes ``sys.stdout.isatty()``).
        width: maximal width of the model and output columns together (default 56 characters).
    """
    width = width or 56
    lines = [f"aipc diff — reference: {result.reference}; compared: {', '.join(result.backends) or '-'}; "
             f"mode: {result.mode}"]
    lines += _output_lines(result, color, width)
    lines += ["", "runs:"]
    for label, r in result.runs.items():
        state = "ok" if r.ok else r.status.upper() + (f" ({r.signal})" if r.signal else "") + \
            (f" (exit {r.returncode})" if r.status == "script_failed" else "")
        role = " (2nd reference run, for volatile output)" if r.rerun_of else ""
        line = f"  {label:<10} {r.backend:<6} {state:<22} {r.seconds:7.1f} s  {r.calls} call(s){role}"
        if r.options:
            line += "  " + ", ".join(f"{k}={v}" for k, v in r.options.items())
        lines.append(_paint(line, _GREEN if r.ok else _YELLOW, color) if color else line)
        if not r.ok and (r.cause or r.message):
            lines.append(f"      cause: {r.cause or r.message.splitlines()[0]}")
        if getattr(r, "retried", ""):
            lines.append("      run again alone: its first attempt failed while another run of the script was going "
                         "(see the note)")
    if result.timings:
        lines += timing_lines(result.timings)
    lines += _app_lines(result)
    for label, items in result.divergences.items():
        lines.extend(f"divergence ({label}): {text}" for text in items)
    lines += _localization_lines(result)
    lines.extend(f"note: {note}" for note in result.notes)
    verdict = result.verdict_line()
    colour = {0: _GREEN, 1: _RED}.get(result.exit_status, _YELLOW)
    lines.append(_Painted(f"{colour}{_BOLD}{console_safe(verdict)}{_RESET}") if color else verdict)
    # names, messages and script output come from elsewhere: no control sequence reaches the terminal
    return "\n".join(line if isinstance(line, _Painted) else console_safe(line) for line in lines)
