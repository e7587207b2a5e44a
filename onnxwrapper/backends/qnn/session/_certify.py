"""Certificates of exact padding, from ORT's CPU: a bucket is used only where padding provably changes nothing.

Before a shape bucket (:mod:`onnxwrapper.backends.qnn.model._padding`) serves a call, the model is run on
ORT's CPU EP twice with the call's **own inputs** — as given, and padded — and the padded run's
outputs, cut back, must equal the unpadded ones to the CPU's own precision (:func:`equal_outputs`).

* :func:`discover_rule` finds how one dim group may be padded: for each candidate of
  :data:`~onnxwrapper.backends.qnn.model._padding.RULE_CANDIDATES` (right/zeros, right/edge, left/zeros)
  it pads that group alone by two different amounts, reads from the output shapes how many positions
  each padded position adds to each output axis (a whole, non-negative number, the same for both
  amounts: a strided or pooled axis is refused), and keeps the first candidate whose cut outputs
  equal the unpadded ones at both amounts.
* :func:`certify` checks one bucket (all of the call's padded groups at once) the same way.

"The CPU's own precision": float outputs may differ only by reassociated float32 sums (a matrix
product over more, zero-weighted, terms): at most :data:`RELATIVE_TOLERANCE` of the output's peak
magnitude, NaN and ±Inf in the same places; integer, bool and string outputs bit for bit. A padding
that leaks into real positions (bidirectional attention without a mask, a convolution's border, a
mean over the padded axis) moves outputs by orders of magnitude more (measured on the generated
decoders of the test suite: a causal decoder padded on the right differs by < 1e-6 of its peak, the
same decoder without its causal mask by > 1e-2).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from onnxwrapper.backends.qnn.model import RULE_CANDIDATES, GroupRule, Padding, bucket_size

__all__ = ["RELATIVE_TOLERANCE", "certify", "discover_rule", "equal_outputs"]

#: largest |padded − unpadded| of a float output, as a fraction of its peak |value| (≈ 100 dB SNR)
RELATIVE_TOLERANCE = 1e-5

Run = Callable[[Mapping[str, np.ndarray]], Sequence[np.ndarray]]


def equal_outputs(names: Sequence[str], reference: Sequence, got: Sequence) -> str | None:
    """``None`` when ``got`` equals ``reference`` to the CPU's precision (module docstring), else why not."""
    for name, ref, out in zip(names, reference, got):
        ref, out = np.asarray(ref), np.asarray(out)
        if ref.shape != out.shape:
            return f"output '{name}' has shape {list(out.shape)} where the unpadded run gives {list(ref.shape)}"
        if ref.dtype != out.dtype:
            return f"output '{name}' has dtype {out.dtype} where the unpadded run gives {ref.dtype}"
        if ref.dtype.kind != "f":
            if not np.array_equal(ref, out):
                return f"output '{name}' differs from the unpadded run"
            continue
        finite = np.isfinite(ref)
        if not np.array_equal(finite, np.isfinite(out)) or not np.array_equal(ref[~finite], out[~finite],
                                                                                equal_nan=True):
            return f"output '{name}' has NaN/Inf where the unpadded run has none, or the reverse"
        if not finite.any():
            continue
        peak = float(np.max(np.abs(ref[finite])))
        worst = float(np.max(np.abs(ref[finite].astype(np.float64) - out[finite])))
        if worst > RELATIVE_TOLERANCE * peak:
            return (f"output '{name}' moves by {worst:.3g} ({worst / peak if peak else float('inf'):.2g} of its peak "
                    f"{peak:.3g}; at most {RELATIVE_TOLERANCE:g} is the CPU's own precision)")
    return None


def _coefficients(names: Sequence[str], reference: Sequence, first: Sequence, second: Sequence,
                  amounts: tuple[int, int]) -> dict[str, tuple] | str:
    """Positions added per padded position, per output axis, read from two padded runs (or why not)."""
    found: dict[str, tuple] = {}
    for name, ref, a, b in zip(names, reference, first, second):
        ref_shape, a_shape, b_shape = (tuple(np.shape(x)) for x in (ref, a, b))
        if not (len(ref_shape) == len(a_shape) == len(b_shape)):
            return f"output '{name}' changes rank when the input is padded"
        row = []
        for axis, (r, x, y) in enumerate(zip(ref_shape, a_shape, b_shape)):
            d1, d2 = x - r, y - r
            coefficient, rest = divmod(d1, amounts[0])
            if rest or coefficient < 0 or d2 != coefficient * amounts[1]:
                return (f"output '{name}' axis {axis} does not grow in step with the padding ({r} → {x} for "
                        f"{amounts[0]} padded, → {y} for {amounts[1]}: a strided, pooled or computed size)")
            row.append(int(coefficient))
        found[name] = tuple(row)
    return found


def discover_rule(run: Run, names: Sequence[str], feed: Mapping[str, np.ndarray], reference: Sequence,
                  groups, sizes: Mapping[str, int], group: str) -> GroupRule | str:
    """How ``group`` may be padded (module docstring), or why it may not.

    Args:
        run: ``run(feed) -> outputs`` on ORT's CPU EP, every output, in ``names`` order.
        feed: the call's feed (numpy arrays). reference: ``run(feed)``.
        groups: the model's ``DimGroups``; sizes: the call's group sizes (``groups.solve``).
        group: the group to pad; its size must not be a power of two's bucket already.
    """
    size = sizes[group]
    first = bucket_size(size) - size or 1
    amounts = (first, first + 1)
    reasons = []
    for side, fill in RULE_CANDIDATES:
        probe = GroupRule(side, fill, {})
        try:
            padded = [run(Padding(groups, sizes, dict(sizes, **{group: size + amount}), {group: probe}).pad_feed(feed))
                      for amount in amounts]
        except Exception as exc:  # noqa: BLE001 - a padding ORT refuses is no rule
            reasons.append(f"{side}/{fill}: ORT's CPU run fails padded ({type(exc).__name__}: {str(exc)[:160]})")
            continue
        coefficients = _coefficients(names, reference, padded[0], padded[1], amounts)
        if isinstance(coefficients, str):
            reasons.append(f"{side}/{fill}: {coefficients}")
            continue
        rule = GroupRule(side, fill, coefficients)
        why = None
        for amount, outputs in zip(amounts, padded):
            cut = Padding(groups, sizes, dict(sizes, **{group: size + amount}), {group: rule}).cut_outputs(names,
                                                                                                          outputs)
            why = why or equal_outputs(names, reference, cut)
        if why is None:
            return rule
        reasons.append(f"{side}/{fill}: {why}")
    return "; ".join(reasons)


def certify(run: Run, names: Sequence[str], feed: Mapping[str, np.ndarray], reference: Sequence,
            padding: Padding) -> str | None:
    """``None`` when the call padded by ``padding`` and cut back equals ``reference`` (the unpadded
    run) to the CPU's precision, else why not."""
    try:
        outputs = run(padding.pad_feed(feed))
    except Exception as exc:  # noqa: BLE001 - a padding ORT refuses is not exact
        return f"ORT's CPU run fails padded ({type(exc).__name__}: {str(exc)[:160]})"
    return equal_outputs(names, reference, padding.cut_outputs(names, outputs))
