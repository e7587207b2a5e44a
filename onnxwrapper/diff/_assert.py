"""pytest helpers of ``onnxwrapper.diff``: assert that backends agree, or that two arrays are close,
raising :class:`~onnxwrapper.diff.DiffAssertionError` (an ``AssertionError``) with the report.
"""

from __future__ import annotations

from typing import Iterable

from onnxwrapper.diff._api import run
from onnxwrapper.diff._judge import DiffAssertionError, DiffResult, Tolerance, compare_arrays

__all__ = ["assert_backends_agree", "assert_close"]


def assert_backends_agree(target, args: Iterable[str] = (), **kwargs) -> DiffResult:
    """pytest helper: :func:`run` and raise :class:`~onnxwrapper.diff.DiffAssertionError` (an
    ``AssertionError`` whose message is the console table) unless the verdict is PASS.

    Keyword arguments are those of :func:`run`. Returns the result when it passed.
    """
    __tracebackhide__ = True

    result = run(target, args, **kwargs)
    result.assert_passed()
    return result


def assert_close(actual, expected, tolerance: Tolerance | None = None, *, name: str = "output") -> None:
    """pytest helper for one array: raise :class:`~onnxwrapper.diff.DiffAssertionError` with the metrics and
    the "would have passed with" hint unless ``actual`` is within ``tolerance`` of ``expected``.

    Args:
        actual: the backend's array; expected: the reference array.
        tolerance: defaults to ``Tolerance()`` (atol = rtol = 1e-5, elementwise).
    """
    __tracebackhide__ = True
    comp = compare_arrays(actual, expected, tolerance)
    if comp.passed:
        return
    tol = tolerance or Tolerance()
    metrics = ", ".join(f"{k}={v:.4g}" for k, v in comp.metrics.items()
                        if k in ("max_abs_error", "max_rel_error", "cosine_similarity", "snr_db"))
    lines = [f"{name}: {comp.kind} — failed {'; '.join(comp.failed)} (tolerance: {tol.describe()})"]
    if metrics:
        lines.append(f"  {metrics}")
    lines += [f"  would pass with {h}" for h in comp.hints if h]
    raise DiffAssertionError("\n".join(lines), None)
