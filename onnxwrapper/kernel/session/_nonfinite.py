"""NaN / ±Inf in feeds of targets that compute in FP16, where they silently become large finite values.

Measured on the QNN HTP simulator in FP16 (onnxruntime-qnn 2.7.0; raw ORT + QNN EP identical): NaN
and ±Inf *inputs* come out as large finite values — 131008 through a small convolution, 65536.0078
through a lone ``Relu`` (NaN and +Inf; −Inf → 0) — where the CPU EP returns non-finite outputs. The
value depends on the graph, so outputs cannot be checked for it; the inputs can.

* :func:`first_nonfinite` — the first float input holding NaN or ±Inf, with counts.
* :class:`NonFiniteInputCheck` — one session's check: called with each feed until it has warned
  once (:class:`NonFiniteInputWarning`), then it reports that it is done and is not called again;
  :meth:`NonFiniteInputCheck.screen` gives the same check for the feeds of one call key
  (:mod:`onnxwrapper.kernel.session._run_plans`), cheaper: only its float inputs, no type tests.

Cost (numpy 2.4, median of 200): ``numpy.isfinite(x).all()`` takes 1.2 µs for 576 floats, 4 µs for
1×3×48×320, 12 µs for 1×3×224×224 (≈ 0.02–0.035 ms per MiB); arrays above 64 Ki elements are
checked with ``min()``/``max()`` instead (same speed, no temporary array), a broadcast view only
over its distinct elements; counts are computed only for a feed that fails the test.
"""

from __future__ import annotations

import threading
import warnings
from typing import Callable, Mapping

import numpy as np

from onnxwrapper.kernel.session._partition import user_stacklevel

__all__ = ["NonFiniteInputWarning", "NonFiniteInputCheck", "first_nonfinite"]


class NonFiniteInputWarning(UserWarning):
    """A feed holds NaN or ±Inf values and the backend computes in FP16, where they become large finite
    values (e.g. 131008 on the QNN HTP), so outputs differ from the CPU's. Warned once per session."""


def first_nonfinite(feed: Mapping[str, object]) -> tuple[str, int, int, int] | None:
    """The first float ``numpy.ndarray`` of ``feed`` that holds NaN or ±Inf.

    Returns:
        ``(input name, NaN count, +Inf count, -Inf count)``, or ``None`` when every float array is
        finite (other values — lists, OrtValues, integer arrays — are not checked, nor is a ``feed``
        that is not a mapping).
    """
    if type(feed) is not dict and not isinstance(feed, Mapping):  # not a feed: the run raises ORT's error
        return None
    for name, value in feed.items():
        if type(value) is not np.ndarray or value.dtype.kind != "f" or value.size == 0:
            continue
        data = value if 0 not in value.strides else _distinct(value)
        if data.size <= _SMALL:
            if _isfinite(data).all():
                continue
        elif np.isfinite(data.min()) and np.isfinite(data.max()):  # no temporary array: NaN propagates
            continue
        scale = value.size // data.size
        return (name, int(np.isnan(data).sum()) * scale, int(np.isposinf(data).sum()) * scale,
                int(np.isneginf(data).sum()) * scale)
    return None


_SMALL = 1 << 16
_isfinite = np.isfinite


def _distinct(value: np.ndarray) -> np.ndarray:
    """The elements of ``value`` without the repeats of a broadcast view (axes with stride 0)."""
    if 0 not in value.strides:
        return value
    return value[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in value.strides)]


class NonFiniteInputCheck:
    """Warns once (per instance, i.e. per session) when a feed holds NaN or ±Inf.

    Args:
        label: the model's name in the warning. target: what computes in FP16, e.g.
            ``"the QNN HTP in FP16"``. example: the value non-finite inputs become there.
        stacklevel: passed to ``warnings.warn``; ``None`` (default): the user's call
            (:func:`onnxwrapper.kernel.user_stacklevel`).
    """

    def __init__(self, label: str, target: str, example: str, stacklevel: int | None = None) -> None:
        self.label, self.target, self.example, self.stacklevel = label, target, example, stacklevel
        self.done = False
        self._lock = threading.Lock()

    def __call__(self, feed: Mapping[str, object]) -> bool:
        """Check ``feed``; returns True once it has warned (no further call is needed)."""
        if self.done:
            return True
        found = first_nonfinite(feed)
        if found is None:
            return False
        with self._lock:
            if self.done:
                return True
            self.done = True
        name, nan, posinf, neginf = found
        parts = [f"{count} {what}" for count, what in ((nan, "NaN"), (posinf, "+Inf"), (neginf, "-Inf")) if count]
        warnings.warn(f"Input '{name}' of {self.label} holds {' / '.join(parts)} values; {self.target} turns NaN "
                      f"and ±Inf into large finite values (e.g. {self.example}; ONNX Runtime with the same execution "
                      f"provider does the same), so outputs will differ from the CPU's. Warned once per session.",
                      NonFiniteInputWarning,
                      stacklevel=user_stacklevel() if self.stacklevel is None else self.stacklevel)
        return True

    def screen(self, feed: Mapping[str, object]) -> Callable[[Mapping[str, object]], None] | None:
        """This check for feeds with the names, classes, dtypes and shapes of ``feed``, as a run plan
        needs it: ``screen(feed)`` does what ``self(feed)`` does (warns once per session), nothing
        once the check is done, and otherwise tests only the non-empty float arrays of ``feed``, each
        with one dot product against zeros (``numpy.vdot``): IEEE 754 makes ``0 × NaN`` and
        ``0 × ±Inf`` NaN and ``0 × x`` zero for every finite ``x`` (no overflow), so the product is
        0 exactly when the array is finite; anything else takes the full check, which decides.
        Measured (numpy 2.4, x86-64): 0.4–0.6 µs for up to 576 floats against 1.4 µs for
        ``numpy.isfinite(x).all()``, and every NaN/±Inf position of float16/32/64 arrays caught.
        Arrays above 64 Ki elements take the full check (:func:`first_nonfinite`). Returns ``None``
        when ``feed`` holds no float array (nothing can be NaN or ±Inf)."""
        floats = [(name, value) for name, value in feed.items()
                  if type(value) is np.ndarray and value.dtype.kind == "f" and value.size]
        if not floats:
            return None
        if any(value.size > _SMALL for _, value in floats):
            def full(feed):
                if not self.done:
                    self(feed)
            return full
        zeros = []
        for name, value in floats:
            zero = np.zeros(value.size, value.dtype)
            zero.flags.writeable = False
            zeros.append((name, zero))
        vdot = np.vdot
        if len(zeros) == 1:
            ((name, zero),) = zeros

            def one(feed):
                if not self.done and vdot(feed[name], zero):  # NaN or nonzero: not certainly finite
                    self(feed)
            return one

        def several(feed):
            if not self.done:
                for name, zero in zeros:
                    if vdot(feed[name], zero):
                        self(feed)
                        return
        return several
