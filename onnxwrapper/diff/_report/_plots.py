"""Plots of the HTML report, rendered with matplotlib's object API (no pyplot, no global state:
the user's matplotlib backend and rcParams are left alone) into base64 PNG data URIs.

Needs matplotlib (``pip install 'onnxwrapper[report]'``); :func:`available` says whether it is there.
"""

from __future__ import annotations

import base64
import io
import math
import threading

import numpy as np

__all__ = ["available", "error_histogram", "scatter_reference_backend", "error_per_call", "prewarm"]

_MAX_SCATTER = 20000
_DPI = 90


def available() -> bool:
    """True when matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401  (optional: the 'report' extra; the check is the import)
    except ImportError:
        return False
    return True


def prewarm() -> threading.Thread:
    """Import matplotlib's Agg canvas and ``Figure`` in a daemon thread, and return the thread.

    ``aipc diff`` calls it before it waits for its backend runs: the import (≈ 0.5 s measured on a
    2-core x86-64 host) then overlaps the runs instead of delaying the HTML report after them.
    Without matplotlib the thread does nothing. Nothing else changes: the first plot imports the
    same modules (already loaded then)."""
    def load() -> None:
        try:
            _canvas_classes()
        except ImportError:
            pass
    thread = threading.Thread(target=load, name="aipc-report-prewarm", daemon=True)
    thread.start()
    return thread


def _canvas_classes():
    # matplotlib is optional (the 'report' extra) and slow to import: imported on first use
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    return FigureCanvasAgg, Figure


def _figure(w: float = 4.6, h: float = 3.2):
    FigureCanvasAgg, Figure = _canvas_classes()
    fig = Figure(figsize=(w, h), dpi=_DPI)
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def error_histogram(y: np.ndarray, r: np.ndarray, title: str = "", failed: bool = True) -> str:
    """Histogram of ``|y − r|`` (finite elements, log-spaced bins; exact zeros counted apart).

    Returns:
        A ``data:image/png;base64,…`` URI.
    """
    d = np.abs(y.astype(np.float64).ravel() - r.astype(np.float64).ravel())
    d = d[np.isfinite(d)]
    zeros = int(np.count_nonzero(d == 0))
    d = d[d > 0]
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    if d.size:
        lo, hi = math.log10(d.min()), math.log10(d.max())
        bins = np.logspace(lo, hi if hi > lo else lo + 1, 40)
        ax.hist(d, bins=bins, color="#c0392b" if failed else "#5d6d7e")
        ax.set_xscale("log")
        from matplotlib.ticker import LogLocator, NullFormatter  # optional dependency: see _figure

        ax.xaxis.set_major_locator(LogLocator(base=10, numticks=6))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("|backend − reference|")
    ax.set_ylabel("elements")
    ax.set_title(f"{title}  ({zeros} exact)" if title else f"abs error ({zeros} exact)", fontsize=9)
    return _png(fig)


def scatter_reference_backend(y: np.ndarray, r: np.ndarray, title: str = "") -> str:
    """Scatter of backend value against reference value (≤ 20 000 evenly strided points) with y = x."""
    yf, rf = y.astype(np.float64).ravel(), r.astype(np.float64).ravel()
    step = max(1, yf.size // _MAX_SCATTER)
    yf, rf = yf[::step], rf[::step]
    ok = np.isfinite(yf) & np.isfinite(rf)
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    size = 14 if ok.sum() < 1000 else 3
    ax.scatter(rf[ok], yf[ok], s=size, alpha=0.6, color="#2c3e50", linewidths=0)
    if ok.any():
        lo, hi = float(min(rf[ok].min(), yf[ok].min())), float(max(rf[ok].max(), yf[ok].max()))
        ax.plot([lo, hi], [lo, hi], color="#27ae60", linewidth=1)
    bad = int(np.count_nonzero(~ok))
    ax.set_xlabel("reference")
    ax.set_ylabel("backend")
    ax.set_title((title + "  " if title else "") + (f"({bad} non-finite not shown)" if bad else ""), fontsize=9)
    return _png(fig)


def error_per_call(per_call: list, title: str = "", bar: float | None = None) -> str:
    """SNR (dB) per call, in call order, with the bar as a dashed line; failing calls in red
    (identical outputs, +inf dB, are drawn at the top). ``per_call`` rows:
    ``(session, index, max_abs_error, cosine, passed, snr_db)``."""
    fig = _figure(6.0, 3.0)
    ax = fig.add_subplot(1, 1, 1)
    xs = np.arange(len(per_call))
    snr = np.array([p[5] if len(p) > 5 and p[5] is not None else np.nan for p in per_call], dtype=float)
    passed = np.array([bool(p[4]) for p in per_call])
    finite = snr[np.isfinite(snr)]
    top = float(finite.max()) + 5.0 if finite.size else (bar or 0.0) + 20.0
    if bar is not None:
        top = max(top, bar + 10.0)
    shown = np.where(np.isposinf(snr), top, snr)
    ax.plot(xs, shown, color="#7f8c8d", linewidth=0.8)
    ax.scatter(xs[passed], shown[passed], s=10, color="#27ae60", label="pass")
    ax.scatter(xs[~passed], shown[~passed], s=14, color="#c0392b", label="fail")
    if bar is not None:
        ax.axhline(bar, color="#c0392b", linewidth=0.8, linestyle="--", label=f"bar {bar:.1f} dB")
    from matplotlib.ticker import MaxNLocator  # optional dependency: see _figure

    if len(per_call) <= 12:
        ax.set_xticks(list(range(len(per_call))))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(-0.5, max(len(per_call) - 0.5, 0.5))
    ax.set_xlabel("call (in order)")
    ax.set_ylabel("SNR dB")
    ax.set_title(title or "SNR per call", fontsize=9)
    ax.legend(loc="lower left", fontsize=7)
    return _png(fig)
