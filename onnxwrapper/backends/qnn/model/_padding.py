"""Shape buckets: a growing dimension is served by a few compiled sizes, a call padded up and its outputs cut back.

The QNN EP compiles one static graph per input shape (it refuses dynamic shapes), and a compile
costs the same for every size (measured on the x86-64 simulator: 9–14 s per decoding step of a
real T5 title generator). A generative app calls its decoder with a new length at every step. A
*bucket* serves every size of a dim group (:mod:`onnxwrapper.backends.qnn.model._dim_groups`) up to its
ceiling on the **ladder of powers of two** (1, 2, 4, 8, …; :func:`bucket_size`), so ``n`` steps
cost about ``log2(n)`` compiles instead of ``n``.

A :class:`GroupRule` says how one group is padded and where its padding shows in the outputs, as
certified on ORT's CPU (:mod:`onnxwrapper.backends.qnn.session._certify`):

* ``side`` — ``"right"``: the padding goes after the real positions (a causal dimension: a decoder
  re-run on its whole prefix; a batch proven per-sample), ``"left"``: before them (a KV cache's past,
  whose attention mask covers past + current and is padded with zeros);
* ``fill`` — ``"zeros"`` (ids 0, mask 0, states 0) or ``"edge"`` (copies of the last real position:
  realistic values for a batch);
* ``outputs`` — per output, per axis, how many positions of padding each padded position of the group
  adds there (``0`` or more), cut from the same side.

An axis that holds several groups (``total = past + sequence``) gets the left groups' padding in
front and the right groups' behind. Nothing here decides whether padding is exact: that is the
certificate's job; a group without a rule is never padded.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from onnxwrapper.backends.qnn.model._dim_groups import DimGroups, Linear

__all__ = ["GroupRule", "Padding", "bucket_size", "RULE_CANDIDATES"]

#: the (side, fill) pairs certification tries for a group, in order
RULE_CANDIDATES = (("right", "zeros"), ("right", "edge"), ("left", "zeros"))


def bucket_size(n: int) -> int:
    """The compiled size that serves size ``n`` of a bucketed group: the smallest power of two ≥ ``n``
    (``0`` → ``1``)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


class GroupRule(NamedTuple):
    """How a group is padded (module docstring); an immutable ``NamedTuple``, JSON-ready via :meth:`to_dict`.

    Attributes:
        side: ``"right"`` or ``"left"``. fill: ``"zeros"`` or ``"edge"``.
        outputs: ``{output name: [positions added per padded position, per axis]}``.
    """

    side: str
    fill: str
    outputs: Mapping[str, tuple]

    def to_dict(self) -> dict:
        """JSON-ready: ``{"side", "fill", "outputs": {name: [coefficients]}}`` (kept in the compile cache)."""
        return {"side": self.side, "fill": self.fill, "outputs": {k: list(v) for k, v in self.outputs.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "GroupRule":
        """Inverse of :meth:`to_dict`, checked (a cache entry is untrusted data).

        Raises:
            ValueError / KeyError / TypeError: an unknown side or fill, a negative coefficient, a missing key.
        """
        side, fill = str(data["side"]), str(data["fill"])
        if (side, fill) not in RULE_CANDIDATES:
            raise ValueError(f"unknown padding rule {side}/{fill}")
        outputs = {str(k): tuple(int(c) for c in v) for k, v in dict(data["outputs"]).items()}
        if any(c < 0 for v in outputs.values() for c in v):
            raise ValueError("negative output coefficient")
        return cls(side, fill, outputs)


class Padding:
    """One padded call: the group sizes it has, the ones it is run at, and the rules.

    Args:
        groups: the model's :class:`~onnxwrapper.backends.qnn.model._dim_groups.DimGroups`.
        sizes: ``{group: size}`` of the call. targets: ``{group: size}`` it runs at (≥ ``sizes``).
        rules: ``{group: GroupRule}`` for every group whose target exceeds its size.
    """

    def __init__(self, groups: DimGroups, sizes: Mapping[str, int], targets: Mapping[str, int],
                 rules: Mapping[str, GroupRule]) -> None:
        self.groups, self.sizes, self.targets, self.rules = groups, dict(sizes), dict(targets), dict(rules)
        self.amounts = {g: self.targets[g] - self.sizes[g] for g in self.targets if self.targets[g] != self.sizes[g]}

    @property
    def padded(self) -> tuple:
        """The groups this call pads, sorted."""
        return tuple(sorted(self.amounts))

    def _axis_pads(self, dim) -> tuple[int, int]:
        """``(before, after)`` positions of padding on an input axis of expression ``dim``."""
        if not isinstance(dim, Linear):
            return 0, 0
        before = after = 0
        for group, coefficient in dim.terms:
            amount = self.amounts.get(group, 0) * coefficient
            if self.rules.get(group) is not None and self.rules[group].side == "left":
                before += amount
            else:
                after += amount
        return before, after

    def pad_feed(self, feed: Mapping[str, Any]) -> dict:
        """``feed`` with every dynamic input padded to the targets (other inputs as they are)."""
        padded = {}
        for name, value in feed.items():
            row = self.groups.axes.get(name)
            if row is None or not hasattr(value, "ndim") or value.ndim != len(row):
                padded[name] = value
                continue
            widths = [self._axis_pads(dim) for dim in row]
            if not any(b or a for b, a in widths):
                padded[name] = value
                continue
            padded[name] = _pad(value, widths, [self._fill_of(dim) for dim in row])
        return padded

    def _fill_of(self, dim) -> str:
        if isinstance(dim, Linear):
            for group, _c in dim.terms:
                if group in self.amounts and self.rules[group].fill == "edge":
                    return "edge"
        return "zeros"

    def cut_outputs(self, names: Sequence[str], outputs: Sequence) -> list:
        """The outputs a call of the unpadded sizes gives: each output's padding cut off (contiguous
        copies, as ORT returns fresh arrays); outputs the rules do not name are returned as they are."""
        result = []
        for name, value in zip(names, outputs):
            if not hasattr(value, "ndim"):
                result.append(value)
                continue
            index = []
            changed = False
            for axis in range(value.ndim):
                before = after = 0
                for group, amount in self.amounts.items():
                    coefficients = self.rules[group].outputs.get(name, ())
                    extra = amount * (coefficients[axis] if axis < len(coefficients) else 0)
                    if self.rules[group].side == "left":
                        before += extra
                    else:
                        after += extra
                changed = changed or bool(before or after)
                index.append(slice(before, value.shape[axis] - after))
            result.append(np.ascontiguousarray(value[tuple(index)]) if changed else value)
        return result

    def shapes(self, given: Mapping[str, Sequence[int]]) -> dict[str, tuple]:
        """The padded shapes of the dynamic inputs ``given``."""
        return self.groups.shapes(self.targets, given)


def _pad(value: np.ndarray, widths: Sequence[tuple[int, int]], fills: Sequence[str]) -> np.ndarray:
    """``value`` padded by ``widths`` per axis: zeros, or copies of the edge where the axis's fill is ``edge``."""
    out = value
    for axis, ((before, after), fill) in enumerate(zip(widths, fills)):
        if not (before or after):
            continue
        width = [(0, 0)] * out.ndim
        width[axis] = (before, after)
        if fill == "edge" and out.shape[axis] > 0:
            out = np.pad(out, width, mode="edge")
        else:
            out = np.pad(out, width, mode="constant", constant_values=np.zeros((), out.dtype))
    return out
