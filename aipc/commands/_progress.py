"""Progress bars of the commands that run backends (``aipc diff``, the model workflows): tqdm on stderr."""

from __future__ import annotations

import sys

__all__ = ["progress_bars"]


def progress_bars(quiet: bool):
    """``(progress, close)``: a ``progress(stage, done, total)`` callback that draws one tqdm bar per
    kind of stage (runs, compared calls, localization rounds) on stderr, and ``close()`` that
    removes them. ``(None, no-op)`` when ``quiet`` or stderr is not a terminal."""
    if quiet or not sys.stderr.isatty():
        return None, lambda: None
    from tqdm import tqdm  # here, not at the top: only when bars are drawn

    bars: dict = {}

    def progress(stage: str, done: int, total: int) -> None:
        kind = "compare" if stage == "compare" else "localize" if stage.startswith("localize") else "run"
        bar = bars.get(kind)
        if bar is None:
            unit = {"run": "run", "compare": "call", "localize": "round"}[kind]
            bar = bars[kind] = tqdm(total=total or None, desc=kind, unit=unit, leave=False, file=sys.stderr)
        if total and bar.total != total:
            bar.total = total
        bar.set_description_str(stage)
        bar.n = done
        bar.refresh()

    def close() -> None:
        for bar in bars.values():
            bar.close()

    return progress, close
