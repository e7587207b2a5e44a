"""Patch ``einsum``: ONNX ``Einsum`` → ``Transpose``/``Reshape``/``MatMul`` (+ ``ReduceSum``).

Why: the QNN EP maps only four Einsum equation shapes to MatMul (same-rank ``…ij,…jk->…ik``, same-rank
``…id,…jd->…ij``, ``bhwc,hkc->bhwk`` and a 4-D transpose-all form; source: onnxruntime's QNN
``einsum_op_builder.cc``); anything else, e.g. YOLO-World's ``bchw,bkc->bkhw``
or a transposed left operand ``ji,jk->ik``, stays on the CPU EP.

Supported equations (explicit ``->`` or implicit output; letters ``a-zA-Z``; ``...`` when the
operands' ranks are known):

* two operands: every letter is classified as *batch* (both operands and output), *m* (left
  operand and output), *n* (right operand and output), *k* (both operands, summed) or *reduce*
  (one operand only, summed: a ``ReduceSum`` first). The operands are transposed to
  ``[batch, m, k]`` and ``[batch, k, n]``, groups of several letters are merged by ``Reshape``, one
  ``MatMul`` contracts ``k`` (batch dims broadcast as in numpy), and a ``Reshape``/``Transpose``
  restores the output order. Of the two operand orders (``A·B`` or ``Bᵀ·Aᵀ`` layout) the one with
  fewer ``Transpose`` nodes is used.
* one operand: ``ReduceSum`` over dropped letters, then ``Transpose`` (``Identity`` if nothing).

Rejected with a reason: three or more operands (split into pairwise Einsums), a letter repeated
inside one operand (diagonals/traces), ``...`` with unknown ranks, and merged letter groups with
more than one unknown dimension per ``Reshape`` (fix shapes first: ``aipc compile --shape/--dim``).
Batch dimensions may be dynamic (``Reshape`` copies them with 0).

Numerics: ORT's own Einsum kernel also reduces to MatMul; results agree to float32 rounding of the
same sums (measured ≤ 1e-6 relative on the tests' equations).
"""

from __future__ import annotations

from itertools import product
from typing import Sequence

import numpy as np
import onnx

from onnxwrapper.patches._base import GraphView, NodeBuilder, Patch, PatchRecord, attr, node_label

__all__ = ["EinsumToMatMul", "parse_equation"]

_ELLIPSIS_LETTERS = "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ"  # stand-ins for '...' dims, never valid ONNX letters


def parse_equation(equation: str, ranks: Sequence[int | None]) -> tuple[list[str], str]:
    """Split an Einsum equation into per-operand letter strings and the output letters.

    Args:
        equation: the ``equation`` attribute, e.g. ``"bij,bjk->bik"`` or ``"ij,jk"`` (implicit).
        ranks: rank of each operand (``None`` if unknown; needed only when ``...`` occurs).

    Returns:
        ``(terms, output)`` with ``...`` expanded to placeholder letters, right-aligned as in numpy
        broadcasting.

    Raises:
        ValueError: malformed equation, operand-count/rank mismatch, repeated letter in one term,
            or ``...`` with an unknown rank.
    """
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->", 1)
        explicit = True
    else:
        lhs, out, explicit = eq, "", False
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"equation has {len(terms)} operand terms but the node has {len(ranks)} inputs")
    ell_rank = 0
    expanded: list[str] = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            if rank is None:
                raise ValueError("'...' needs operands of known rank (run shape inference or fix shapes)")
            n = rank - (len(term) - 3)
            if n < 0:
                raise ValueError(f"term '{term}' has more letters than its operand's rank {rank}")
            ell_rank = max(ell_rank, n)
            term = term.replace("...", _ELLIPSIS_LETTERS[len(_ELLIPSIS_LETTERS) - n:] if n else "")
        elif rank is not None and len(term) != rank:
            raise ValueError(f"term '{term}' has {len(term)} letters but its operand has rank {rank}")
        if any(not (c.isalpha()) for c in term):
            raise ValueError(f"term '{term}' has characters other than letters")
        if len(set(term)) != len(term):
            raise ValueError(f"term '{term}' repeats a letter (diagonal/trace): not supported")
        expanded.append(term)
    ell = _ELLIPSIS_LETTERS[len(_ELLIPSIS_LETTERS) - ell_rank:] if ell_rank else ""
    if explicit:
        if "..." in out:
            out = out.replace("...", ell)
    else:
        counts: dict[str, int] = {}
        for term in expanded:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    if len(set(out)) != len(out):
        raise ValueError(f"output '{out}' repeats a letter")
    missing = [c for c in out if not any(c in t for t in expanded)]
    if missing:
        raise ValueError(f"output letters {missing} do not occur in any operand")
    return expanded, out


def _perm(src: str, dst: str) -> list[int]:
    return [src.index(c) for c in dst]


def _is_identity(perm: Sequence[int]) -> bool:
    return list(perm) == list(range(len(perm)))


class _Plan:
    """Letter groups of a two-operand contraction in one operand order.

    ``left``/``right`` are the operand terms after the single-operand reductions; ``swapped`` is
    True when ``left`` is the node's second input. ``reduce`` holds the letters summed out of the
    first and second input before the contraction.
    """

    def __init__(self, left: str, right: str, out: str, k_order: str, swapped: bool,
                 reduce: tuple[str, str]) -> None:
        self.swapped = swapped
        self.reduce = reduce
        self.batch = "".join(c for c in out if c in left and c in right)
        self.m = "".join(c for c in out if c in left and c not in right)
        self.n = "".join(c for c in out if c in right and c not in left)
        self.k = k_order
        self.perm_left = _perm(left, self.batch + self.m + self.k)
        self.perm_right = _perm(right, self.batch + self.k + self.n)
        self.perm_out = _perm(self.batch + self.m + self.n, out)

    def transposes(self) -> int:
        return sum(not _is_identity(p) for p in (self.perm_left, self.perm_right, self.perm_out))

    def reshapes(self) -> tuple[bool, bool, bool]:
        """Whether the left operand, the right operand and the MatMul result need a Reshape."""
        return (len(self.m) != 1 or len(self.k) != 1, len(self.k) != 1 or len(self.n) != 1,
                len(self.m) != 1 or len(self.n) != 1)


class EinsumToMatMul(Patch):
    """``Einsum`` (one or two operands) → Transpose/Reshape/MatMul/ReduceSum."""

    name = "einsum"
    op_type = "Einsum"
    description = "Einsum -> Transpose/Reshape/MatMul (+ReduceSum); 1-2 operands, no diagonals"
    exactness = "the same sums of products in another order: float rounding only (<= 1e-6 relative in the tests)"

    # -- analysis ------------------------------------------------------------------------------
    def _parse(self, node: onnx.NodeProto, view: GraphView):
        shapes = [view.shape(i) for i in node.input]
        ranks = [len(s) if s is not None else None for s in shapes]
        terms, out = parse_equation(str(attr(node, "equation", "")), ranks)
        sizes: dict[str, int | None] = {}
        for term, shape in zip(terms, shapes):
            for pos, c in enumerate(term):
                d = shape[pos] if shape is not None else None
                if isinstance(d, int) and (sizes.get(c) in (None, 1)):
                    sizes[c] = d
                else:
                    sizes.setdefault(c, None)
        return terms, out, sizes

    def _reject_reason(self, node: onnx.NodeProto, view: GraphView) -> str | None:
        if len(node.input) not in (1, 2):
            return (f"{len(node.input)} operands: only 1 or 2 are supported "
                    f"(split the Einsum into pairwise Einsums first)")
        try:
            terms, out, sizes = self._parse(node, view)
        except ValueError as exc:
            return f"equation '{attr(node, 'equation', '')}': {exc}"
        if len(terms) == 2:
            plan = self._plan(terms, out)
            unknown = self._unknown_merges(plan, sizes)
            if unknown:
                return (f"equation '{attr(node, 'equation', '')}': {unknown}; make the shapes static first "
                        f"(e.g. aipc compile --shape/--dim)")
        return None

    @staticmethod
    def _plan(terms: Sequence[str], out: str) -> _Plan:
        """The operand order and k-letter order with the fewest Transpose nodes (ties: A·B)."""
        a, b = terms
        reduce = ("".join(c for c in a if c not in b and c not in out),
                  "".join(c for c in b if c not in a and c not in out))
        a2 = "".join(c for c in a if c not in reduce[0])
        b2 = "".join(c for c in b if c not in reduce[1])
        best = None
        for swapped, k_from_left in product((False, True), (True, False)):
            left, right = (b2, a2) if swapped else (a2, b2)
            k = "".join(c for c in (left if k_from_left else right) if c in left and c in right and c not in out)
            plan = _Plan(left, right, out, k, swapped, reduce)
            if best is None or plan.transposes() < best.transposes():
                best = plan
        return best  # type: ignore[return-value]

    @staticmethod
    def _unknown_merges(plan: _Plan, sizes: dict[str, int | None]) -> str:
        """Why a Reshape target would need two ``-1`` entries ('' when all targets are expressible)."""
        def unknown_groups(groups: Sequence[str]) -> int:
            return sum(any(sizes.get(c) is None for c in g) for g in groups)

        need_left, need_right, need_result = plan.reshapes()
        if need_left and unknown_groups([plan.m, plan.k]) > 1:
            return "the left operand's Reshape would have more than one unknown dimension"
        if need_right and unknown_groups([plan.k, plan.n]) > 1:
            return "the right operand's Reshape would have more than one unknown dimension"
        if need_result and unknown_groups(list(plan.m + plan.n)) > 1:
            return "the result's Reshape would have more than one unknown dimension"
        return ""

    # -- rewrite -------------------------------------------------------------------------------
    def _apply(self, view: GraphView, node: onnx.NodeProto, index: int) -> PatchRecord:
        terms, out, sizes = self._parse(node, view)
        nb = NodeBuilder(view, node_label(node))
        equation = str(attr(node, "equation", ""))
        if len(terms) == 1:
            self._single(nb, view, node.input[0], terms[0], out, node.output[0])
        else:
            self._pair(nb, view, list(node.input), terms, out, sizes, node.output[0])
        ops = ", ".join(n.op_type for n in nb.nodes)
        return nb.record(self.name, node, index, f"Einsum('{equation}') -> {ops}")

    @staticmethod
    def _reduce(nb: NodeBuilder, view: GraphView, x: str, term: str, drop: str, hint: str) -> tuple[str, str]:
        if not drop:
            return x, term
        axes = [term.index(c) for c in drop]
        if view.opset >= 13:
            ax = nb.const(f"{hint}_axes", axes, np.int64)
            x = nb.op("ReduceSum", [x, ax], hint=f"{hint}_reduce", keepdims=0)
        else:
            x = nb.op("ReduceSum", [x], hint=f"{hint}_reduce", axes=axes, keepdims=0)
        return x, "".join(c for c in term if c not in drop)

    def _single(self, nb: NodeBuilder, view: GraphView, x: str, term: str, out: str, y: str) -> None:
        x, term = self._reduce(nb, view, x, term, "".join(c for c in term if c not in out), "in")
        perm = _perm(term, out)
        if _is_identity(perm):
            nb.op("Identity", [x], output=y, hint="identity")
        else:
            nb.op("Transpose", [x], output=y, hint="transpose_out", perm=perm)

    @staticmethod
    def _target(groups: Sequence[str], nbatch: int, sizes: dict[str, int | None]) -> list[int]:
        """Reshape target: 0 for each batch dim, then one entry per group (product or -1)."""
        shape = [0] * nbatch
        for g in groups:
            vals = [sizes.get(c) for c in g]
            shape.append(-1 if any(v is None for v in vals) else int(np.prod(vals, dtype=np.int64)))
        return shape

    def _pair(self, nb: NodeBuilder, view: GraphView, inputs: list[str], terms: list[str], out: str,
              sizes: dict[str, int | None], y: str) -> None:
        plan = self._plan(terms, out)
        a_red, b_red = plan.reduce
        a, _ = self._reduce(nb, view, inputs[0], terms[0], a_red, "a")
        b, _ = self._reduce(nb, view, inputs[1], terms[1], b_red, "b")
        left, right = (b, a) if plan.swapped else (a, b)
        nbatch = len(plan.batch)
        need_left, need_right, need_reshape = plan.reshapes()
        if not _is_identity(plan.perm_left):
            left = nb.op("Transpose", [left], hint="transpose_left", perm=plan.perm_left)
        if need_left:
            shape = nb.const("left_shape", self._target([plan.m, plan.k], nbatch, sizes), np.int64)
            left = nb.op("Reshape", [left, shape], hint="reshape_left")
        if not _is_identity(plan.perm_right):
            right = nb.op("Transpose", [right], hint="transpose_right", perm=plan.perm_right)
        if need_right:
            shape = nb.const("right_shape", self._target([plan.k, plan.n], nbatch, sizes), np.int64)
            right = nb.op("Reshape", [right, shape], hint="reshape_right")
        need_transpose = not _is_identity(plan.perm_out)
        res = nb.op("MatMul", [left, right], output=None if (need_reshape or need_transpose) else y,
                    hint="matmul")
        if need_reshape:
            target = self._target(list(plan.m + plan.n), nbatch, sizes)
            shape = nb.const("result_shape", target, np.int64)
            res = nb.op("Reshape", [res, shape], output=None if need_transpose else y, hint="reshape_result")
        if need_transpose:
            nb.op("Transpose", [res], output=y, hint="transpose_out", perm=plan.perm_out)
