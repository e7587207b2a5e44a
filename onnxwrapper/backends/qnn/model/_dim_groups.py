"""Which input dims of a dynamic model move together: its *dim groups*, read from the graph.

Shape buckets (:mod:`onnxwrapper.backends.qnn.model._padding`) pad a growing dimension up to a
compiled size. Which input axes share that dimension comes from the graph, never from input names:

* every symbolic input dim is a linear expression of *base symbols*: a ``dim_param`` such as
  ``"batch"`` is one symbol, ``"past_sequence_length + 1"`` or ``"2*frames"`` an expression (read by a
  small parser of names, integers, ``+``, ``-`` and ``*``; anything else is one opaque symbol — a
  model's text is never evaluated), and an unnamed dim is a symbol of its own;
* a ``dim_param`` that is a standalone name but stands for an expression of others — an
  ``attention_mask`` declared ``[batch, total_sequence_length]`` where the graph adds it to scores of
  ``past_sequence_length + sequence_length`` keys — is resolved by ONNX Runtime's symbolic shape
  inference (``onnxruntime.tools.symbolic_shape_infer``), which merges the two while propagating
  shapes: ``total_sequence_length`` becomes ``past_sequence_length + sequence_length``.

A *group* is one base symbol: its size in a call is solved from the axes that hold it alone
(:meth:`DimGroups.solve`), and every other axis must then agree (else the call is not bucketed).
What padding a group tolerates is not decided here: it is certified on ORT's CPU against the
call's own inputs (:mod:`onnxwrapper.backends.qnn.session._certify`).
"""

from __future__ import annotations

import logging
import re
from typing import Mapping, NamedTuple, Sequence

__all__ = ["DimGroups", "Linear", "inferred_merges", "parse_dim"]

_log = logging.getLogger("onnxwrapper.qnn")
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_.:]*)|([+\-*]))")


class Linear(NamedTuple):
    """``constant + Σ coefficient·symbol`` with integer coefficients (an immutable ``NamedTuple``).

    Attributes:
        terms: ``((symbol, coefficient), …)``, sorted by symbol. constant: the integer term.
    """

    terms: tuple
    constant: int = 0

    @classmethod
    def symbol(cls, name: str) -> "Linear":
        """The expression of one symbol ``name`` (coefficient 1, constant 0)."""
        return cls(((name, 1),), 0)

    @property
    def single(self) -> str | None:
        """The symbol when the expression is one symbol with coefficient 1 (plus any constant)."""
        return self.terms[0][0] if len(self.terms) == 1 and self.terms[0][1] == 1 else None

    def value(self, sizes: Mapping[str, int]) -> int | None:
        """The expression's value for ``sizes`` (``None`` when a symbol has no size)."""
        total = self.constant
        for name, coefficient in self.terms:
            if name not in sizes:
                return None
            total += coefficient * sizes[name]
        return total

    def substitute(self, name: str, other: "Linear") -> "Linear":
        """This expression with ``name`` replaced by ``other``."""
        coefficient = dict(self.terms).get(name)
        if coefficient is None:
            return self
        terms = {k: v for k, v in self.terms if k != name}
        for k, v in other.terms:
            terms[k] = terms.get(k, 0) + coefficient * v
        return Linear(tuple(sorted((k, v) for k, v in terms.items() if v)), self.constant + coefficient * other.constant)


def parse_dim(text: str) -> Linear | None:
    """The :class:`Linear` form of a ``dim_param`` such as ``"past + 1"`` or ``"2*n - 1"``; ``None``
    when it is not a linear expression of names and integers (it is then one opaque symbol)."""
    terms: dict[str, int] = {}
    constant, pos, sign = 0, 0, 1
    expect_term = True
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            return None
        number, name, operator = match.groups()
        pos = match.end()
        if expect_term:
            if operator == "-":
                sign = -sign
                continue
            if operator is not None:
                return None
            factor = sign
            if number is not None:
                nxt = _TOKEN.match(text, pos)
                if nxt is not None and nxt.group(3) == "*":
                    name_match = _TOKEN.match(text, nxt.end())
                    if name_match is None or name_match.group(2) is None:
                        return None
                    terms[name_match.group(2)] = terms.get(name_match.group(2), 0) + factor * int(number)
                    pos = name_match.end()
                else:
                    constant += factor * int(number)
            else:
                terms[name] = terms.get(name, 0) + factor
            expect_term, sign = False, 1
        else:
            if operator not in ("+", "-"):
                return None
            sign = 1 if operator == "+" else -1
            expect_term = True
    if expect_term or not terms and text.strip() == "":
        return None
    return Linear(tuple(sorted((k, v) for k, v in terms.items() if v)), constant)


class DimGroups:
    """The dim groups of a model's inputs (see the module docstring).

    Attributes:
        axes: ``{input name: [Linear or int per axis]}`` for the dynamic inputs (``int`` = fixed).
        groups: the base symbols, sorted.
        merged: ``{dim_param: its expression}`` that symbolic shape inference supplied.
    """

    def __init__(self, axes: Mapping[str, Sequence], merged: Mapping[str, Linear] | None = None) -> None:
        self.axes = {name: list(dims) for name, dims in axes.items()}
        self.merged = dict(merged or {})
        self.groups = sorted({s for dims in self.axes.values() for d in dims if isinstance(d, Linear)
                              for s, _c in d.terms})

    @classmethod
    def of(cls, model, dynamic: Mapping[str, Sequence], *, merges: Mapping[str, Linear] | None = None
           ) -> "DimGroups":
        """The groups of ``model`` (an ``onnx.ModelProto``) for its ``dynamic`` inputs
        (``{name: declared dims}`` as :func:`onnxwrapper.kernel.dynamic_inputs` gives them; an input
        without shape information is left out: it is never bucketed).

        Args:
            merges: standalone names resolved to expressions of others (:func:`inferred_merges`);
                ``None``: the names alone group the dims.
        """
        axes: dict[str, list] = {}
        for name, dims in dynamic.items():
            if dims is None:
                continue
            row: list = []
            for axis, dim in enumerate(dims):
                if isinstance(dim, int):
                    row.append(dim)
                elif isinstance(dim, str) and dim:
                    row.append(parse_dim(dim) or Linear.symbol(dim))
                else:
                    row.append(Linear.symbol(f"?{name}:{axis}"))
            axes[name] = row
        merged = dict(merges or {})
        for symbol, expression in merged.items():
            for name, row in axes.items():
                axes[name] = [d.substitute(symbol, expression) if isinstance(d, Linear) else d for d in row]
        return cls(axes, merged)

    @property
    def needs_inference(self) -> bool:
        """Whether ORT's symbolic shape inference could relate the groups: two or more dynamic inputs
        (the dims of one input are never each other's expressions). It runs once per model, at its
        first call (seconds on a large CNN: 10 s measured on an OCR detector, never needed there)."""
        return len(self.axes) >= 2

    def solve(self, shapes: Mapping[str, Sequence[int]]) -> dict[str, int] | None:
        """The size of every group in a call with input ``shapes``, or ``None`` when the call does not
        fit the expressions (a group gets two sizes, an axis disagrees, a size is negative)."""
        sizes: dict[str, int] = {}
        for name, row in self.axes.items():
            shape = shapes.get(name)
            if shape is None or len(shape) != len(row):
                continue
            for dim, size in zip(row, shape):
                symbol = dim.single if isinstance(dim, Linear) else None
                if symbol is None:
                    continue
                value = int(size) - dim.constant
                if sizes.setdefault(symbol, value) != value or value < 0:
                    return None
        for name, row in self.axes.items():
            shape = shapes.get(name)
            if shape is None or len(shape) != len(row):
                continue
            for dim, size in zip(row, shape):
                if isinstance(dim, Linear) and dim.value(sizes) != int(size):
                    return None
        return sizes

    def shapes(self, sizes: Mapping[str, int], given: Mapping[str, Sequence[int]]) -> dict[str, tuple]:
        """The input shapes for group ``sizes``: each dynamic input of ``given`` with its axes recomputed."""
        result = {}
        for name, shape in given.items():
            row = self.axes.get(name)
            if row is None or len(row) != len(shape):
                result[name] = tuple(shape)
                continue
            result[name] = tuple(d.value(sizes) if isinstance(d, Linear) else int(s) for d, s in zip(row, shape))
        return result

    def describe(self) -> str:
        """E.g. ``"batch, past_sequence_length, sequence_length (total_sequence_length = past_sequence_length +
        sequence_length)"`` for logs."""
        text = ", ".join(self.groups)
        if self.merged:
            text += " (" + "; ".join(f"{k} = {_text(v)}" for k, v in sorted(self.merged.items())) + ")"
        return text


def _text(expression: Linear) -> str:
    parts = [name if c == 1 else f"{c}*{name}" for name, c in expression.terms]
    if expression.constant:
        parts.append(str(expression.constant))
    return " + ".join(parts) or "0"


def inferred_merges(model) -> dict[str, Linear]:
    """``{standalone dim_param: Linear}`` from ORT's symbolic shape inference (its suggested merges of a
    name with an expression of other names); ``{}`` when it cannot run (a DEBUG line says why). The
    inference is ORT's own tool; its internal steps are used because its public entry point returns
    only the model."""
    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        engine = SymbolicShapeInference(2**31 - 1, True, False, 0)
        engine._preprocess(model)
        while engine.run_:
            engine._infer_impl()
        suggested = dict(engine.suggested_merge_)
    except Exception as exc:  # noqa: BLE001 - an optional refinement: names alone still group dims
        _log.debug("onnxwrapper qnn: symbolic shape inference did not run (%s: %s); dim groups by name only",
                   type(exc).__name__, str(exc)[:200])
        return {}
    merged: dict[str, Linear] = {}
    for left, right in suggested.items():
        for name, expression in ((str(right), str(left)), (str(left), str(right))):
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:]*", name):
                continue
            parsed = parse_dim(expression)
            if parsed is not None and parsed.terms and name not in dict(parsed.terms):
                merged.setdefault(name, parsed)
                break
    return merged
