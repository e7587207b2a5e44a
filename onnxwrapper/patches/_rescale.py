"""Rewrite ``rescale``: power-of-two rescaling that keeps an FP16 computation in range, exactly.

Why: FP16 holds magnitudes up to 65504 (the QNN HTP simulator saturates at 131008). A model whose
intermediate values exceed that returns garbage on an FP16 NPU although its inputs and outputs are
small (magika: a decomposed LayerNorm's sum of squares reaches 2.08e5). Computing the same graph on
values scaled by ``2^k`` keeps them in range.

Rewrite (parameters ``log2`` = ``k``, ``output``, ``pass_through``): the named node's output
``t`` (its output number ``output``, default 0) is scaled by ``2^k`` — folded into the node's
constant weight (and bias) when the node is a ``MatMul``/``Gemm``/``Conv``/``ConvTranspose`` with
one, else by a ``Mul`` after it — and the scale travels forward through the consumers by the rules
of :mod:`onnxwrapper.patches._rescale_rules`, each node computing ``2^e`` times its original
values, until it is cancelled: by a normalization (``LayerNormalization(2^e·x, 2^(2e)·ε) =
LayerNormalization(x, ε)``; a decomposed one divides two equally scaled tensors), by a
constant-weight ``MatMul``/``Gemm``/``Conv`` whose weight takes ``2^−e`` (unless the node is listed in
``pass_through``: then its bias is scaled and the scale goes on), or by a ``Mul`` by ``2^−e`` in front
of a node without a rule (``Exp``, ``Softmax``, …) and of graph outputs. Tensor names seen outside the
scaled region keep their original values; scaled copies get new names (``<name>/x2^<e>``).

The four accuracy repairs of the issue are this one rewrite at different places: around a
``MatMul``/``Conv``/``Gemm`` chain (``W₁·2^k`` … ``W₂·2^−k``, biases scaled); ``LayerNormalization(x/s,
ε/s²)``; ``ReduceSumSquare`` / ``Pow(x, 2)`` + ``ReduceSum`` on a pre-scaled input (the sum carries
``2^(2k)``, cancelled by the normalization that divides by its square root).

Exactness: **bit-exact** in IEEE 754 arithmetic — not only in exact arithmetic — as long as no
value of either graph overflows or becomes subnormal: every operation of the region computes on
operands scaled by powers of two, its correctly rounded result is the original result times a power
of two (scaling commutes with rounding), and the final ``2^−e`` restores the original bits. The
test suite checks bit-identity against onnxruntime's CPU kernels on random data. Where the original
graph overflows, the rewritten one is the correct one; ``k`` too negative makes small values
subnormal (FP16 below 6.1e-5): choose it from the values' range (``aipc fix`` does).

Applied only when a repair recipe names it (not automatic). :meth:`PowerOfTwoRescale.plan`
describes the region without changing the model (which tensors carry which exponent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxwrapper.patches._base import GraphView, Patch, PatchError, PatchRecord, constant_value, node_label
from onnxwrapper.patches._rescale_join import JOIN_OPS, join_operands
from onnxwrapper.patches._rescale_rules import LINEAR_WEIGHT_OPS, NodeFacts, Step, rule_for

__all__ = ["PowerOfTwoRescale", "RescalePlan"]

_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
_NP = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.DOUBLE: np.float64}
_MAX_LOG2 = 24


@dataclass(frozen=True)
class RescalePlan:
    """Where the scale of one ``rescale`` application goes (nothing is changed by planning).

    Attributes:
        start: the scaled tensor. log2: its exponent ``k``. folded_start: the scale is folded into
            the start node's weight (else a ``Mul`` follows it).
        exponents: ``{tensor: e}`` for every tensor holding ``2^e`` times its original values.
        region: names (or ``<op>#<index>``) of the nodes computing on scaled values.
        folds: nodes whose weight took the scale back. restored: tensors restored by a ``Mul``
            by ``2^−e`` for consumers outside the region or graph outputs.
        barriers: ``(node, tensor)`` of the nodes outside the region reading a restored tensor.
        steps: ``{node index: Step}`` of the region. joined: ``{tensor: (e, how)}`` of the tensors scaled to join
            the region (``join``): ``how`` is ``"mul"`` (computed unscaled, then a ``Mul`` scales a copy)
            or ``"fold"`` (its producer's weight took the scale).
    """

    start: str
    log2: int
    folded_start: bool
    exponents: dict
    region: tuple
    folds: tuple
    restored: tuple
    barriers: tuple
    steps: dict
    joined: dict = None

    def describe(self) -> str:
        """One line for reports."""
        where = "folded into the start node's weight" if self.folded_start else "by a Mul"
        folds = f"; folded back into {', '.join(self.folds)}" if self.folds else ""
        restored = f"; restored by Mul before {len(self.restored)} use(s)" if self.restored else ""
        return (f"'{self.start}' x 2^{self.log2} ({where}), {len(self.region)} node(s) on scaled values"
                f"{folds}{restored}")


def _label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}#{index}"


def _subgraph_names(node: onnx.NodeProto) -> set:
    """Names read inside ``node``'s subgraphs (outer-scope references included)."""
    names: set = set()
    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            for n in g.node:
                names.update(n.input)
                names |= _subgraph_names(n)
    return names


def _constants(view: GraphView) -> set:
    """Names of the top-level constants (see :func:`~onnxwrapper.patches._base.constant_value`)."""
    inputs = {i.name for i in view.graph.input}
    names = {t.name for t in view.graph.initializer if t.name not in inputs}
    names |= {n.output[0] for n in view.graph.node if n.op_type == "Constant" and n.output
              and any(a.name == "value" for a in n.attribute)}
    return names


def _drop_unused(view: GraphView, names: set) -> None:
    """Remove the initializers among ``names`` that no node (or subgraph) reads any more and that
    are not graph inputs: their scaled copies replaced them."""
    used = {t for n in view.graph.node for t in list(n.input) + sorted(_subgraph_names(n))}
    used |= {i.name for i in view.graph.input}
    keep = [t for t in view.graph.initializer if t.name not in names or t.name in used]
    if len(keep) != len(view.graph.initializer):
        view.graph.ClearField("initializer")
        view.graph.initializer.extend(keep)


class PowerOfTwoRescale(Patch):
    """Scale a node's output by ``2^log2`` and carry the scale through scale-homogeneous consumers."""

    name = "rescale"
    op_type = ""
    description = ("power-of-two rescaling around scale-homogeneous ops (MatMul/Conv/Gemm with bias, "
                   "LayerNormalization eps/s^2, sums of squares), cancelled exactly downstream")
    exactness = ("bit-exact in IEEE 754 arithmetic barring overflow and subnormal values (scaling by 2^k commutes "
                 "with rounding)")
    automatic = False
    parameters = {"log2": "the exponent k of the scale 2^k (a non-zero integer, |k| <= 24)",
                  "output": "which output of the node to scale (default 0)",
                  "pass_through": "names of constant-weight MatMul/Gemm/Conv nodes that keep the scale "
                                  "(their bias is scaled) instead of folding it back into their weight",
                  "join": "true: an Add/Sub/Concat/... meeting the scaled region with an unscaled operand scales "
                          "that operand too (folded into its constant-weight producer, else by a Mul) instead of "
                          "restoring the region's values (residual streams into a normalization)"}

    def __init__(self, **params) -> None:
        super().__init__(**params)
        k = params.get("log2", -4)
        if isinstance(k, bool) or not isinstance(k, int) or k == 0 or abs(k) > _MAX_LOG2:
            raise PatchError(f"Patch 'rescale': log2 must be a non-zero integer within ±{_MAX_LOG2}, got {k!r}.",
                             patch=self.name)
        self.log2 = int(k)
        self.output = int(params.get("output", 0))
        self.pass_through = frozenset(str(n) for n in params.get("pass_through", ()) or ())
        join = params.get("join", False)
        if not isinstance(join, bool):
            raise PatchError(f"Patch 'rescale': join must be true or false, got {join!r}.", patch=self.name)
        self.join = join

    def targets(self, node: onnx.NodeProto) -> bool:
        """Any node of the default domain with an output (the rewrite starts at one of its outputs)."""
        return node.domain in ("", "ai.onnx") and len(node.output) > self.output

    # -- planning ------------------------------------------------------------------------------------
    def _is_float(self, view: GraphView, name: str) -> bool:
        elem = view.elem_type(name)
        return elem is None or elem in _FLOATS

    def _fold_weights(self, node: onnx.NodeProto, view: GraphView) -> list | None:
        """Input indices of the start node's weight and bias to scale when folding, else ``None``."""
        if node.op_type not in LINEAR_WEIGHT_OPS or self.output != 0:
            return None
        consts = [constant_value(view, n) is not None for n in node.input]
        weight = 1 if consts[1] else (0 if node.op_type in ("MatMul", "Gemm") and consts[0] else None)
        if weight is None:
            return None
        if len(node.input) > 2 and node.input[2]:
            return [weight, 2] if consts[2] else None
        return [weight]

    def plan(self, model: onnx.ModelProto | GraphView, node: onnx.NodeProto) -> RescalePlan:
        """The region of this rescale (see :class:`RescalePlan`).

        Raises:
            PatchError: the rewrite does not apply (the reason is in the message).
        """
        view = model if isinstance(model, GraphView) else GraphView(model)
        reason = self.reject_reason(node, view)
        if reason is not None:
            raise PatchError(f"Cannot apply patch 'rescale' to node '{node.name}' ({node.op_type}): {reason}",
                             patch=self.name, node_name=node.name)
        return self._plan(view, node)

    def _plan(self, view: GraphView, node: onnx.NodeProto) -> RescalePlan:
        nodes = list(view.graph.node)
        start_index = view.node_index(node)
        start = node.output[self.output]
        folded = self._fold_weights(node, view) is not None
        exps = {start: self.log2}
        steps: dict[int, Step] = {}
        outside: dict[str, list] = {}
        consts = _constants(view)
        joined: dict = {}
        if self.join:
            producers = {o: (i, m) for i, m in enumerate(nodes) for o in m.output if o}
            readers: dict = {}
            for m in nodes:
                for t in set(m.input) | _subgraph_names(m):
                    readers[t] = readers.get(t, 0) + 1
            outputs = {o.name for o in view.graph.output}
        for j in range(start_index + 1, len(nodes)):
            n = nodes[j]
            reads = [name for name in n.input if name in exps]
            implicit = _subgraph_names(n) & set(exps)
            for name in implicit:
                outside.setdefault(name, []).append(_label(n, j))
            if not reads:
                continue
            rule = rule_for(n)
            facts = self._facts(n, view, exps, consts)
            step = rule(n, facts) if rule is not None else None
            if step is None and self.join and rule is not None and n.op_type in JOIN_OPS:
                muls, folds = join_operands(n, facts, consts=consts, producers=producers, readers=readers,
                                            steps=steps, outputs=outputs)
                if muls or folds:
                    for i, fold in folds.items():
                        exps[nodes[i].output[0]] = fold.outputs[0]
                        joined[nodes[i].output[0]] = (fold.outputs[0], "fold")
                    step = rule(n, self._facts(n, view, dict(exps, **{n.input[i]: e for i, e in muls.items()}),
                                               consts))
                    if step is not None:
                        steps.update(folds)
                        step.join_inputs = dict(muls)
                        joined.update({n.input[i]: (e, "mul") for i, e in muls.items()})
                    else:
                        for i in folds:
                            exps.pop(nodes[i].output[0], None)
                            joined.pop(nodes[i].output[0], None)
            if step is None:
                for name in reads:
                    outside.setdefault(name, []).append(_label(n, j))
                continue
            steps[j] = step
            for k, out in enumerate(n.output):
                if out and k < len(step.outputs) and step.outputs[k]:
                    exps[out] = step.outputs[k]
        for o in view.graph.output:
            if o.name in exps:
                outside.setdefault(o.name, []).append("graph output")
        region = tuple(_label(nodes[j], j) for j in sorted(steps))
        folds = tuple(_label(nodes[j], j) for j, s in sorted(steps.items()) if s.folded)
        restored = tuple(t for t in exps if t in outside and (t != start or folded))
        barriers = tuple((use, t) for t in exps for use in outside.get(t, ()))
        return RescalePlan(start, self.log2, folded, dict(exps), region, folds, restored, barriers, steps, joined)

    def _facts(self, n: onnx.NodeProto, view: GraphView, exps: dict, consts: set) -> NodeFacts:
        power = None
        if n.op_type == "Pow" and len(n.input) > 1:
            value = constant_value(view, n.input[1])
            if value is not None and value.size and np.all(value == value.reshape(-1)[0]):
                power = float(value.reshape(-1)[0])
        return NodeFacts(exps=[exps.get(name, 0) if name else 0 for name in n.input],
                         consts=[bool(name) and name in consts for name in n.input],
                         floats=[bool(o) and self._is_float(view, o) for o in n.output],
                         pass_through=n.name in self.pass_through, power=power)

    def _reject_reason(self, node: onnx.NodeProto, view: GraphView) -> str | None:
        if len(node.output) <= self.output or not node.output[self.output]:
            return f"the node has no output number {self.output}"
        if not self._is_float(view, node.output[self.output]):
            return "the output to scale is not a floating-point tensor"
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return "the node has subgraphs"
        plan = self._plan(view, node)
        if not plan.region:
            uses = sorted({u for u, _t in plan.barriers})
            return (f"the scale cannot travel: every consumer of '{plan.start}' needs the original values "
                    f"({', '.join(uses) or 'none'})")
        for t, e in plan.exponents.items():
            if view.elem_type(t) == onnx.TensorProto.FLOAT16 and abs(e) > 14:
                return f"2^{e} is not a normal FP16 number (tensor '{t}' is float16)"
        return None

    # -- rewriting -----------------------------------------------------------------------------------
    def _apply(self, view: GraphView, node: onnx.NodeProto, index: int) -> PatchRecord:
        plan = self._plan(view, node)
        outputs = tuple(node.output)
        nodes = list(view.graph.node)
        added_nodes: list[tuple[str, str]] = []
        added_inits: list[str] = []
        scaled_consts: dict[tuple[str, int], str] = {}
        renamed = {t: view.unique_name(f"{t}/x2^{e}") for t, e in plan.exponents.items()}

        def scaled_const(name: str, k: int) -> str:
            if (name, k) not in scaled_consts:
                value = np.asarray(constant_value(view, name))
                new = np.ldexp(value, k).astype(value.dtype) if value.dtype.kind == "f" else value
                if value.dtype.kind == "f" and not np.all(np.isfinite(new) | ~np.isfinite(value)):
                    raise PatchError(f"Patch 'rescale': constant '{name}' x 2^{k} overflows {value.dtype}.",
                                     patch=self.name, node_name=node.name)
                out = view.unique_name(f"{name}/x2^{k}")
                view.graph.initializer.append(numpy_helper.from_array(new, out))
                added_inits.append(out)
                scaled_consts[(name, k)] = out
            return scaled_consts[(name, k)]

        def mul(source: str, target: str, k: int) -> onnx.NodeProto:
            elem = view.elem_type(source) or view.elem_type(target) or onnx.TensorProto.FLOAT
            const = view.unique_name(f"{node_label(node)}/rescale/2^{k}")
            view.graph.initializer.append(numpy_helper.from_array(np.asarray(2.0 ** k, dtype=_NP.get(elem, np.float32)),
                                                                  const))
            added_inits.append(const)
            name = view.unique_name(f"{node_label(node)}/rescale/mul_2^{k}")
            added_nodes.append((name, "Mul"))
            return helper.make_node("Mul", [source, const], [target], name=name)

        def restores(outputs) -> list:
            return [mul(renamed[o], o, -plan.exponents[o]) for o in outputs if o in plan.restored]

        result: list[onnx.NodeProto] = []
        for j, n in enumerate(nodes):
            if j == index:
                fold = self._fold_weights(n, view)
                if fold is not None:
                    for k in fold:
                        n.input[k] = scaled_const(n.input[k], self.log2)
                    n.output[self.output] = renamed[plan.start]
                    result += [n] + restores([plan.start])
                else:
                    result += [n, mul(plan.start, renamed[plan.start], self.log2)]
                continue
            step = plan.steps.get(j)
            if step is None:
                result.append(n)
                continue
            for k, name in enumerate(n.input):
                if name in renamed:
                    n.input[k] = renamed[name]
            for k, e in sorted(step.join_inputs.items()):
                joined = view.unique_name(f"{n.input[k]}/x2^{e}")
                result.append(mul(n.input[k], joined, e))
                n.input[k] = joined
            for k, e in step.scale_inputs.items():
                n.input[k] = scaled_const(n.input[k], e)
            for a in n.attribute:
                if a.name in step.scale_attrs:
                    a.f = float(np.ldexp(np.float32(a.f), step.scale_attrs[a.name]))
            originals = list(n.output)
            for k, out in enumerate(n.output):
                if out in renamed:
                    n.output[k] = renamed[out]
            result += [n] + restores(originals)
        view.graph.ClearField("node")
        view.graph.node.extend(result)
        _drop_unused(view, {name for name, _k in scaled_consts})
        view._types = None  # names changed: shape facts are recomputed on demand
        return PatchRecord(patch=self.name, node_name=node.name, op_type=node.op_type, node_index=index,
                           summary=plan.describe(), added_nodes=tuple(added_nodes),
                           added_initializers=tuple(added_inits), outputs=outputs)
