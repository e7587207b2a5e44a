"""The HTML report: one self-contained file (inline CSS, plots as base64 PNG, no script, no URL).

Sections: verdict line; runs (status, one-line cause, time, options, the script's standard output
per backend — so the texts a script prints on CPU and NPU can be read side by side); the app-level
comparison (the diff of differing lines and the model call that explains it); the summary table;
localization (cause, culprit, first node below the bar, chain); per output the worst call's
metrics, tolerance and hint with three plots (error histogram, reference-vs-backend scatter, SNR
per call over the run); call-sequence divergences; notes. Sessions are numbered as in the console
report, the JSON report and ``aipc -v``. The layout fits a 1400 px wide window: long names wrap,
wide tables scroll inside their box, plots wrap to the next line.
Arrays for the plots are read back from the capture directories; without matplotlib the report is
written without plots and says how to get them.
"""

from __future__ import annotations

import html
import os

from onnxwrapper.diff._capture import read_capture
from onnxwrapper.diff._report import _plots
from onnxwrapper.diff._report._console import fmt, fmt_metric, underflow_text

__all__ = ["render_html", "write_html"]

_MAX_PLOTTED_OUTPUTS = 24
_STDOUT_CHARS = 6000
_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px;color:#222;max-width:1368px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
h3{font-size:15px;margin-bottom:4px;overflow-wrap:anywhere}p,li{overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:12px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left}
td.name{overflow-wrap:anywhere;max-width:260px}td.num{text-align:right;white-space:nowrap}
th{background:#f4f4f4}tr.fail td{background:#fdecea}tr.pass td{background:#eefaf0}
.badge{display:inline-block;padding:4px 12px;border-radius:4px;color:#fff;font-weight:bold}
.PASS{background:#27ae60}.MISMATCH{background:#c0392b}.INCOMPLETE{background:#d68910}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:8px;font-size:12px;overflow:auto;max-height:320px;margin:4px 0}
.plots{display:flex;flex-wrap:wrap;gap:8px}.plots img{max-width:100%;border:1px solid #eee}.muted{color:#777}
.cols{display:flex;gap:16px;flex-wrap:wrap}.cols>div{flex:1 1 400px;min-width:0}.wide{overflow-x:auto;max-width:100%}
.msg{white-space:pre-wrap;font-family:monospace;font-size:11px;max-height:160px;overflow:auto;max-width:520px}
.verdict{font-weight:bold;font-size:15px}.del{color:#a93226}.add{color:#1e8449}
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _read_text(path, limit: int = _STDOUT_CHARS) -> str:
    if not path or not os.path.isfile(path):  # a FIFO in a received folder must not block the report
        return ""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def _calls_by_seq(directory: str, cache: dict) -> dict:
    if directory not in cache:
        cache[directory] = {c.seq: c for c in read_capture(directory).calls}
    return cache[directory]


def _arrays(result, summary, cache: dict):
    """(backend array, reference array) of the summary's worst call, or ``None``."""
    w = summary.worst
    ref_dir = result.capture_dirs.get(result.reference)
    dir_ = result.capture_dirs.get(summary.backend + ("+replay" if w is not None and w.replayed else ""))
    if w is None or w.seq is None or not ref_dir or not dir_:
        return None
    try:
        ref = _calls_by_seq(ref_dir, cache).get(w.ref_seq)
        got = _calls_by_seq(dir_, cache).get(w.seq)
        r, y = ref.outputs().get(summary.output), got.outputs().get(summary.output)
    except Exception:  # a report must render even with a damaged capture
        return None
    if r is None or y is None or r.shape != y.shape or r.dtype.kind not in "fiub":
        return None
    return y, r


def _summary_table(result) -> list[str]:
    out = ["<div class='wide'><table><tr><th>backend</th><th>model</th><th>output</th><th>calls</th><th>max|Δ|</th>"
           "<th>|Δ|/peak</th><th>cosine</th><th>SNR dB</th><th>top-1</th><th>NaN/Inf</th><th>sat</th>"
           "<th>tolerance</th><th>verdict</th></tr>"]
    for s in result.outputs:
        m = s.worst.metrics if s.worst else {}
        nonfinite = int(m.get("nan_backend", 0) + m.get("inf_backend", 0)) if m else "-"
        out.append(
            f"<tr class='{'pass' if s.passed else 'fail'}'><td>{_e(s.backend)}</td><td class='name'>{_e(s.model)}</td>"
            f"<td class='name'>{_e(s.output)}</td><td class='num'>{s.failed_calls}/{s.calls} failed</td>"
            f"<td class='num'>{fmt(m.get('max_abs_error'))}</td><td class='num'>{fmt(m.get('scaled_max_error'))}</td>"
            f"<td class='num'>{fmt(m.get('cosine_similarity'), 'cos')}</td><td class='num'>{fmt(m.get('snr_db'), 'db')}</td>"
            f"<td class='num'>{fmt(m.get('top1_agreement'), 'frac')}</td><td class='num'>{nonfinite}</td>"
            f"<td class='num'>{fmt(m.get('fp16_saturated'), 'int') if m else '-'}</td>"
            f"<td class='name'>{_e(s.tolerance.describe())}</td>"
            f"<td>{'pass' if s.passed else 'FAIL: ' + _e(s.kind)}</td></tr>")
    out.append("</table></div>")
    return out


def _output_section(result, s, plots: bool, cache: dict) -> list[str]:
    w = s.worst
    out = [f"<h3>{_e(s.backend)} · {_e(s.model)} · {_e(s.output)} — "
           f"{'pass' if s.passed else 'FAIL (' + _e(s.kind) + ')'}</h3>"]
    if w is not None:
        out.append(f"<p>worst call ({'failing, ' if not s.passed else ''}lowest SNR): session {w.session}, "
                   f"call {w.index}"
                   f"{' — ' + _e(w.detail) if w.detail else ''}. Tolerance: {_e(s.tolerance.describe())}.</p>")
        if w.failed:
            out.append("<ul>" + "".join(f"<li>failed: {_e(f)}</li>" for f in w.failed)
                       + "".join(f"<li>would have passed with: {_e(h)}</li>" for h in w.hints if h) + "</ul>")
        if w.metrics:
            out.append("<div class='wide'><table><tr>" + "".join(f"<th>{_e(k)}</th>" for k in w.metrics)
                       + "</tr><tr>" + "".join(f"<td class='num'>{fmt_metric(k, v)}</td>" for k, v in w.metrics.items())
                       + "</tr></table></div>")
    if plots:
        imgs = []
        pair = _arrays(result, s, cache)
        if pair is not None:
            y, r = pair
            imgs.append(_plots.error_histogram(y, r, "abs error, worst call", failed=not s.passed))
            imgs.append(_plots.scatter_reference_backend(y, r, "worst call"))
        if len(s.per_call) > 1:
            imgs.append(_plots.error_per_call(s.per_call, f"{s.calls} calls",
                                              bar=getattr(s.tolerance, "min_snr_db", None)))
        out.append("<div class='plots'>" + "".join(f"<img alt='plot' src='{src}'>" for src in imgs) + "</div>")
    return out


def _localization(result) -> list[str]:
    out = ["<h2>Localization</h2>"]
    for loc in result.localizations:
        out.append(f"<h3>{_e(loc.backend)} · {_e(loc.model)} (session {loc.call[0]} call {loc.call[1]}; method "
                   f"{_e(loc.method)}, {loc.rounds} round(s), {loc.tensors_compared} tensors, SNR bar "
                   f"{fmt(loc.bar_db, 'db')} dB)</h3>")
        out.append(f"<p><b>{_e('cause: ' + loc.cause) if loc.cause else ''}</b> {_e(loc.message or loc.error)}</p>")
        rows = ([dict(loc.culprit, role=f"culprit ({loc.cause})")] if loc.culprit else []) + \
               ([dict(loc.first, role="first below the bar")] if loc.first and loc.first != loc.culprit else []) + \
               [dict(c, role="chain") for c in loc.chain[:40]] + [dict(s, role="FP16 range") for s in loc.suspects[:10]]
        if rows:
            out.append("<div class='wide'><table><tr><th>role</th><th>node</th><th>op</th><th>tensor</th><th>SNR dB</th>"
                       "<th>cosine</th><th>|Δ|/peak</th><th>ref max|x|</th><th>sat</th><th>verdict</th></tr>")
            for c in rows:
                m = c.get("metrics") or {}
                verdict = {True: "pass", False: "FAIL", None: "-"}[c.get("passed")]
                out.append(f"<tr class='{'fail' if c.get('passed') is False else ''}'><td>{_e(c['role'])}</td>"
                           f"<td class='name'>{_e(c.get('node'))}</td><td>{_e(c.get('op_type'))}</td>"
                           f"<td class='name'>{_e(c.get('tensor'))}</td><td class='num'>{fmt(m.get('snr_db'), 'db')}</td>"
                           f"<td class='num'>{fmt(m.get('cosine_similarity'), 'cos')}</td>"
                           f"<td class='num'>{fmt(m.get('scaled_max_error'))}</td>"
                           f"<td class='num'>{fmt(c.get('reference_max_abs', c.get('max_abs')))}</td>"
                           f"<td class='num'>{fmt(c.get('saturated'), 'int')}</td><td>{verdict}</td></tr>")
            out.append("</table></div>")
        out.extend(f"<p>{_e(underflow_text(u))}</p>" for u in getattr(loc, "underflows", ())[:20])
        out.extend(f"<p class='muted'>{_e(n)}</p>" for n in loc.notes)
    return out


def _app(result) -> list[str]:
    out = ["<h2>App output</h2>"]
    for a in result.app.values():
        if a.status == "not_compared":
            out.append(f"<p>{_e(a.backend)}: not compared ({_e(a.reason)}).</p>")
            continue
        head = (f"{_e(a.backend)} vs {_e(a.reference)}: <b>{_e(a.status)}</b> (printed numbers within "
                f"{a.rtol:.3g} relative{'; lines matching ' + _e(repr(a.filter)) if a.filter else ''})")
        out.append(f"<p>{head}</p><ul>")
        for i in a.items:
            extra = [i.detail] if i.detail else []
            if i.numeric:
                extra.append("numbers within tolerance: " + ", ".join(i.numeric))
            if i.masked:
                extra.append(f"{i.masked} volatile number(s) masked (they differ between two reference runs)")
            if i.timings:
                extra.append(f"{i.timings} timing(s) not judged")
            out.append(f"<li>{_e(i.what)}: {'identical' if i.identical else 'DIFFERS'}"
                       f"{' — ' + _e('; '.join(extra)) if extra else ''}</li>")
            if i.diff:
                lines = "\n".join(f"<span class='{'del' if ln.startswith('-') else 'add' if ln.startswith('+') else ''}'>"
                                  f"{_e(ln)}</span>" for ln in i.diff)
                out.append(f"<pre>{lines}</pre>")
        out.append("</ul>")
        if a.explanation:
            out.append(f"<p>Explained by: {_e(a.explanation)}</p>")
    return out


def render_html(result, *, plots: bool | None = None) -> str:
    """The report as one HTML string (see module docstring). ``plots=None`` = when matplotlib is there."""
    plots = _plots.available() if plots is None else plots
    script = result.script or {}
    argv = " ".join(script.get("argv") or [])
    out = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
           f"<title>aipc diff — {_e(result.verdict)}</title><style>{_CSS}</style></head><body>",
           f"<h1>aipc diff <span class='badge {_e(result.verdict)}'>{_e(result.verdict)}</span></h1>",
           f"<p class='verdict'>{_e(result.verdict_line())}</p>",
           f"<p>exit status {result.exit_status} · reference <b>{_e(result.reference)}</b> · compared "
           f"{_e(', '.join(result.backends) or '-')} · mode {_e(result.mode)} · {result.compared_calls} call(s) "
           f"compared{(' · ' + ('-m ' if script.get('module') else '') + _e(argv)) if argv else ''}</p>"]
    if not plots:
        out.append("<p class='muted'>Plots need matplotlib: pip install 'onnxwrapper[report]'.</p>")
    out.append("<h2>Runs</h2><div class='wide'><table><tr><th>label</th><th>backend</th><th>options</th><th>status</th>"
               "<th>time</th><th>calls</th><th>message</th></tr>")
    for label, r in result.runs.items():
        state = r.status + (f" ({r.signal})" if r.signal else "") + (" — 2nd reference run" if r.rerun_of else "")
        message = (r.cause + ("\n\n" + r.message if r.message and r.message != r.cause else "")) if r.cause else r.message
        out.append(f"<tr class='{'pass' if r.ok else 'fail'}'><td>{_e(label)}</td><td>{_e(r.backend)}</td>"
                   f"<td class='name'>{_e(', '.join(f'{k}={v}' for k, v in r.options.items()) or '-')}</td>"
                   f"<td>{_e(state)}</td><td class='num'>{r.seconds:.1f}&nbsp;s</td><td class='num'>{r.calls}</td>"
                   f"<td><div class='msg'>{_e(message)}</div></td></tr>")
    out.append("</table></div>")
    replay = result.mode == "replay" or (result.script or {}).get("mode") == "replay"
    outputs = {label: _read_text(r.stdout) for label, r in result.runs.items()
               if not r.replay_of and not r.rerun_of and (not replay or label == result.reference)}
    if any(outputs.values()):
        same = len(set(outputs.values())) == 1
        states = {a.status for a in result.app.values()}
        what = ("replay mode: the script ran on the reference only" if replay
                else "identical on every backend" if same
                else "differs between backends (see App output)" if "differs" in states or not states
                or states == {"not_compared"}
                else "the same result on every backend: differences in timings or numbers within tolerance only")
        out.append(f"<h3>Script output (stdout) — {what}</h3><div class='cols'>")
        for label, text in outputs.items():
            out.append(f"<div><b>{_e(label)}</b><pre>{_e(text) or '(empty)'}</pre></div>")
        out.append("</div>")
    if result.app:
        out.extend(_app(result))
    out.append("<h2>Tensors</h2>")
    out.extend(_summary_table(result) if result.outputs else ["<p>No output was compared.</p>"])
    for label, items in result.divergences.items():
        if items:
            out.append(f"<h2>Divergences ({_e(label)})</h2><ul>" + "".join(f"<li>{_e(t)}</li>" for t in items)
                       + "</ul>")
    if result.localizations:
        out.extend(_localization(result))
    if result.outputs:
        out.append("<h2>Outputs</h2>")
        ordered = sorted(result.outputs, key=lambda s: s.passed)
        cache: dict = {}
        for k, s in enumerate(ordered):
            out.extend(_output_section(result, s, plots and k < _MAX_PLOTTED_OUTPUTS, cache))
    if result.notes:
        out.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in result.notes) + "</ul>")
    out.append("</body></html>")
    return "\n".join(out)


def write_html(result, path, *, plots: bool | None = None) -> str:
    """Write :func:`render_html` to ``path`` (UTF-8); returns the path."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    text = render_html(result, plots=plots)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return path
