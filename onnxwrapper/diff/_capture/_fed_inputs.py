"""Which matched calls of two captures were fed other inputs (live mode: a script whose later inputs
depend on earlier outputs, or on randomness or time). The judging reports them as divergences; the
run plan replays them on the reference's inputs."""

from __future__ import annotations

import numpy as np

from onnxwrapper.diff._capture._reader import Capture

__all__ = ["diverging_inputs", "fed_other_inputs"]


def diverging_inputs(reference: Capture, cap: Capture) -> list[tuple[int, int]]:
    """Keys ``(session, index)`` of matched calls whose inputs differ (signature or values)."""
    ref_calls, b_calls = reference.calls_by_key(), cap.calls_by_key()
    keys = []
    for key in sorted(set(ref_calls) & set(b_calls)):
        rc, bc = ref_calls[key], b_calls[key]
        if rc.input_signature != bc.input_signature or fed_other_inputs(rc, bc):
            keys.append(key)
    return keys


def fed_other_inputs(rc, bc) -> bool:
    """Whether recorded calls ``rc`` and ``bc`` were fed different inputs: other names, shapes, dtypes or
    values (NaN equals NaN); ``False`` when either call's inputs cannot be read."""
    try:
        ri, bi = rc.inputs(), bc.inputs()
    except (OSError, ValueError, KeyError):
        return False
    if ri.keys() != bi.keys():
        return True
    for k, v in ri.items():
        w = bi[k]
        if v.shape != w.shape or v.dtype != w.dtype:
            return True
        if v.dtype.kind in "fc":
            if not np.array_equal(v, w, equal_nan=True):
                return True
        elif not np.array_equal(v, w):
            return True
    return False
