"""Rendering a diff's result: the console table, the JSON report, the HTML report with its plots.

The renderers take a :class:`~onnxwrapper.diff.DiffResult` as it is (duck-typed, imported from
nowhere), so the result's own methods call them (``DiffResult.table()``, ``to_dict()``,
``write_json()``, ``write_html()``): this stage sits below the judging in the import order although
it is the pipeline's last step. It builds on :mod:`onnxwrapper.diff._capture` (the HTML report reads
the captured arrays for its plots) and :mod:`onnxwrapper.diff._runs` (the timing lines of a model
run). Text that comes from elsewhere goes through :func:`console_safe`; matplotlib is imported
only when a plot is drawn (:func:`prewarm` starts that import early, on a thread).
"""

from __future__ import annotations

from onnxwrapper.diff._report._console import render_table
from onnxwrapper.diff._report._console_text import console_safe
from onnxwrapper.diff._report._html import write_html
from onnxwrapper.diff._report._json import sanitize, to_document, write_json
from onnxwrapper.diff._report._plots import prewarm

__all__ = ["console_safe", "prewarm", "render_table", "sanitize", "to_document", "write_html", "write_json"]
