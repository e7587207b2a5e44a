"""Plots of the HTML report, rendered with matplotlib's object API (no pyplot, no global state:
the user's matplotlib backend and rcParams are left alone) into base64 PNG data URIs.

Needs matplotlib (``pip install 'onnxwrapper[report]'``); :func:`available` says whether it is there.
"""

from __future__ import annotations

import base64
import io
import math

import numpy as np

__all__ = ["available", "error_histogram", "scatter_reference_backend", "error_per_call"]

_MAX_SCATTER = 20000
_DPI = 90


def available() -> bool:
    """True when matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(w: float = 4.6, h: float = 3.2):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

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
        from matplotlib.ticker import LogLocator, NullFormatter

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


def error_per_call(per_call: list, title: str = "") -> str:
    """Max absolute error (log scale) and cosine similarity per call, in call order; failing calls
    in red. ``per_call`` rows: ``(session, index, max_abs_error, cosine, passed)``."""
    fig = _figure(6.0, 3.0)
    ax = fig.add_subplot(1, 1, 1)
    xs = np.arange(len(per_call))
    err = np.array([p[2] if p[2] is not None else np.nan for p in per_call], dtype=float)
    cos = np.array([p[3] if p[3] is not None else np.nan for p in per_call], dtype=float)
    passed = np.array([bool(p[4]) for p in per_call])
    pos = np.where(err > 0, err, np.nan)
    ax.plot(xs, pos, color="#7f8c8d", linewidth=0.8)
    ax.scatter(xs[passed], pos[passed], s=10, color="#27ae60", label="pass")
    ax.scatter(xs[~passed], pos[~passed], s=14, color="#c0392b", label="fail")
    if np.isfinite(pos).any():
        ax.set_yscale("log")
    from matplotlib.ticker import MaxNLocator

    if len(per_call) <= 12:
        ax.set_xticks(list(range(len(per_call))))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(-0.5, max(len(per_call) - 0.5, 0.5))
    ax.set_xlabel("call (in order)")
    ax.set_ylabel("max |Δ|")
    ax2 = ax.twinx()
    ax2.plot(xs, cos, color="#2980b9", linewidth=0.8, linestyle="--", marker="x", markersize=4)
    ax2.set_ylabel("cosine", color="#2980b9")
    ax2.ticklabel_format(axis="y", useOffset=False, style="plain")
    finite = cos[np.isfinite(cos)]
    if finite.size:
        low = float(min(finite.min(), 0.999))
        ax2.set_ylim(low - (1.0 - low) * 0.05, 1.0 + (1.0 - low) * 0.05)
    ax.set_title(title or "error per call", fontsize=9)
    ax.legend(loc="upper left", fontsize=7)
    return _png(fig)
