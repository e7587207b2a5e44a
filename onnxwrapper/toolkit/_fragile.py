"""Numerically fragile tensors of a float model, and the policy that keeps them out of 8 bits.

A decomposed LayerNorm or RMSNorm computes ``d / sqrt(mean(d²) + ε)``; a decomposed Softmax
computes ``e / Σe``. Quantized to 8 bits, the tensors in the denominator lose exactly what matters:
the 8-bit scale of ``d²`` (or of the variance) is set by the largest values in the calibration data,
so small squares and variances round to 0, ``ε`` alone is left (or less: ``ε`` rounds to 0 as well)
and the division returns ±Inf/NaN. Measured on RapidOCR's recognizer (W8A8, one captured batch):
in ORT CPU's QDQ run of the last LayerNorm, 9,120 of 25,560 elements of the ``Div`` output were
non-finite (75 of 213 rows had a variance quantized to 0); the next ``QuantizeLinear`` saturated
them, so the model's outputs stayed finite but wrong.

Policy (:func:`fragile_plan`), applied by :func:`onnxwrapper.toolkit._quantize.quantize_qdq` unless
``keep_fragile=False``:

1. **Fuse** — at opset ≥ 17 onnxruntime's graph optimizer (run by ``qnn_preprocess_model``)
   fuses the standard decomposed LayerNorm into one ``LayerNormalization`` node, which the QNN EP
   supports; its variance is computed inside the operator and never quantized. The quantizer asks
   :mod:`onnxwrapper.toolkit._opset` for opset 17 when :func:`find_fragile_chains` finds a
   LayerNorm chain.
2. **16 bits** — chains still decomposed after preprocessing (other patterns: ``Reciprocal`` +
   ``Mul``, RMSNorm, no ``γ``/``β``, decomposed Softmax; and at opset ≥ 20, where
   ``qnn_preprocess_model`` of onnxruntime 1.32 keeps the unfused graph when its own fusions find
   nothing) get tensor-level overrides ``{"quant_type": QUInt16}`` for every tensor of the
   denominator (``TensorQuantOverrides`` of ``get_qnn_qdq_config``, which adds the 8↔16-bit
   conversions around them and the QNN EP runs). With W8A16 all activations are 16-bit already.
   16 bits make a rounding to 0 2⁸ times less likely, not impossible: the three-way check counts
   non-finite values (:mod:`onnxwrapper.toolkit._nonfinite`) and says so if it still happens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

__all__ = ["FragileChain", "FragilePlan", "find_fragile_chains", "fragile_plan", "count_op"]


@dataclass(frozen=True)
class FragileChain:
    """The denominator of one decomposed normalization.

    Attributes:
        kind: ``"layernorm"`` (``Pow``/``Mul`` square → ``ReduceMean`` → ``Add ε`` → ``Sqrt`` →
            ``Div``/``Reciprocal``; RMSNorm included) or ``"softmax"`` (``Exp`` → ``ReduceSum`` →
            ``Div``/``Reciprocal``).
        node: name of the chain's last node (``Sqrt`` or ``ReduceSum``), for reports.
        tensors: ``((tensor name, role), ...)`` in graph order, e.g. ``("Pow.9", "square")``.
    """

    kind: str
    node: str
    tensors: tuple[tuple[str, str], ...]

    def to_dict(self) -> dict:
        """A JSON-safe dict: kind, node and the tensors kept at 16 bits with their roles."""
        return {"kind": self.kind, "node": self.node, "tensors": [{"tensor": t, "role": r} for t, r in self.tensors]}


@dataclass
class FragilePlan:
    """What the policy did to one model.

    Attributes:
        fused_layernorms: decomposed LayerNorms fused into ``LayerNormalization`` by preprocessing.
        kept: chains whose tensors are quantized at 16 bits (overrides), or that are 16-bit anyway
            (W8A16).
        overrides: ``TensorQuantOverrides`` entries (``{tensor: [{"quant_type": QuantType}]}``).
        reason: one sentence for reports.
        enabled: ``False`` when the policy was turned off (``keep_fragile=False``).
    """

    fused_layernorms: int = 0
    kept: list[FragileChain] = field(default_factory=list)
    overrides: dict = field(default_factory=dict)
    reason: str = ""
    enabled: bool = True

    def to_dict(self) -> dict:
        """A JSON-safe dict of the plan (the ``--json`` output)."""
        return {"enabled": self.enabled, "fused_layernorms": self.fused_layernorms,
                "kept_16bit": [c.to_dict() for c in self.kept], "reason": self.reason}

    def describe(self) -> str:
        """One line for the compile summary."""
        if not self.enabled:
            return "fragile tensors: policy off — LayerNorm/Softmax denominators quantized like every tensor"
        parts = []
        if self.fused_layernorms:
            parts.append(f"{self.fused_layernorms} decomposed LayerNorm(s) fused into LayerNormalization "
                         f"(variance never quantized)")
        if self.kept:
            tensors = sum(len(c.tensors) for c in self.kept)
            kinds = ", ".join(f"{sum(c.kind == k for c in self.kept)} {k}" for k in ("layernorm", "softmax")
                              if any(c.kind == k for c in self.kept))
            parts.append(f"{tensors} denominator tensor(s) of {kinds} chain(s) kept at 16 bits")
        if not parts:
            return "fragile tensors: none (no decomposed LayerNorm or Softmax)"
        return "fragile tensors: " + "; ".join(parts) + (f" — {self.reason}" if self.reason else "")


def count_op(model: onnx.ModelProto, op_type: str) -> int:
    """Number of nodes of ``op_type`` in the top-level graph."""
    return sum(n.op_type == op_type for n in model.graph.node)


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    values = {i.name: i for i in model.graph.initializer}
    out: dict[str, np.ndarray] = {}
    for name, tensor in values.items():
        if onnx.external_data_helper.uses_external_data(tensor) or int(np.prod(tensor.dims or [1])) > 16:
            continue  # scalars and tiny vectors only: ε, the exponent 2
        out[name] = onnx.numpy_helper.to_array(tensor)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.t.ByteSize() < 1024:
                    out[node.output[0]] = onnx.numpy_helper.to_array(attr.t)
    return out


def find_fragile_chains(model: onnx.ModelProto) -> list[FragileChain]:
    """The decomposed LayerNorm/RMSNorm and Softmax denominators of the top-level graph.

    A LayerNorm chain is ``s = Pow(d, 2)`` or ``Mul(d, d)`` → ``v = ReduceMean(s)`` →
    ``a = Add(v, ε)`` (ε constant) → ``q = Sqrt(a)`` consumed as the divisor of a ``Div`` or by a
    ``Reciprocal``; a Softmax chain is ``e = Exp(x)`` → ``s = ReduceSum(e)`` consumed as the
    divisor of a ``Div`` or by a ``Reciprocal``. Axes are not checked (any reduction is fragile).

    Args:
        model: ``onnx.ModelProto`` (not modified).

    Returns:
        One :class:`FragileChain` per match, in graph order.
    """
    producer = {o: n for n in model.graph.node for o in n.output if o}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    constants = _constants(model)

    def const(name: str) -> np.ndarray | None:
        return constants.get(name)

    def denominator(tensor: str) -> tuple[bool, list[tuple[str, str]]]:
        """Whether ``tensor`` is a divisor (of a Div, or through a Reciprocal), and the Reciprocal outputs."""
        uses = consumers.get(tensor, [])
        recips = [(n.output[0], "reciprocal") for n in uses if n.op_type == "Reciprocal"]
        divides = any(n.op_type == "Div" and len(n.input) > 1 and n.input[1] == tensor for n in uses)
        return bool(recips) or divides, recips

    chains = []
    for node in model.graph.node:
        if node.op_type == "Sqrt":
            add = producer.get(node.input[0])
            if add is None or add.op_type != "Add" or len(add.input) != 2:
                continue
            eps_side = [i for i, name in enumerate(add.input) if const(name) is not None]
            if len(eps_side) != 1:
                continue
            mean = producer.get(add.input[1 - eps_side[0]])
            if mean is None or mean.op_type != "ReduceMean":
                continue
            square = producer.get(mean.input[0])
            if square is None or not _is_square(square, const):
                continue
            divides, tail = denominator(node.output[0])
            if not divides:
                continue
            tensors = ((square.output[0], "square"), (mean.output[0], "variance"), (add.output[0], "variance + ε"),
                       (node.output[0], "standard deviation"), *tail)
            chains.append(FragileChain("layernorm", node.name or node.output[0], tensors))
        elif node.op_type == "ReduceSum":
            exp = producer.get(node.input[0])
            if exp is None or exp.op_type != "Exp":
                continue
            divides, tail = denominator(node.output[0])
            if divides:
                chains.append(FragileChain("softmax", node.name or node.output[0],
                                           ((node.output[0], "softmax denominator"), *tail)))
    return chains


def _is_square(node: onnx.NodeProto, const) -> bool:
    if node.op_type == "Mul" and len(node.input) == 2:
        return node.input[0] == node.input[1]
    if node.op_type == "Pow" and len(node.input) == 2:
        exponent = const(node.input[1])
        return exponent is not None and exponent.size == 1 and float(exponent.ravel()[0]) == 2.0
    return False


def fragile_plan(model: onnx.ModelProto, activation_type: str, *, layernorms_before: int = 0,
                 enabled: bool = True) -> FragilePlan:
    """The overrides for the fragile chains of the model about to be quantized.

    Args:
        model: the preprocessed model (after ``qnn_preprocess_model``), as the quantizer will see it.
        activation_type: ``QuantType`` name of the activations (``"QUInt8"``, ``"QUInt16"``…).
        layernorms_before: ``LayerNormalization`` nodes in the model before preprocessing (to count
            the fusions).
        enabled: ``False`` returns an empty, disabled plan (nothing kept).

    Returns:
        :class:`FragilePlan`; ``overrides`` is empty with 16-bit activations (nothing to raise).
    """
    if not enabled:
        return FragilePlan(enabled=False)
    from onnxruntime.quantization import QuantType  # on use: onnxruntime.quantization is only for quantizing

    fused = max(0, count_op(model, "LayerNormalization") - layernorms_before)
    chains = find_fragile_chains(model)
    plan = FragilePlan(fused_layernorms=fused, kept=chains)
    if not chains:
        return plan
    if activation_type in ("QUInt16", "QInt16"):
        plan.reason = "16-bit like every activation (W8A16)"
        return plan
    wide = QuantType.QUInt16 if activation_type.startswith("QU") else QuantType.QInt16
    for chain in chains:
        for tensor, _ in chain.tensors:
            plan.overrides[tensor] = [{"quant_type": wide}]
    plan.reason = ("8-bit rounds small squares, variances and sums in a denominator to 0, and the division "
                   "then returns Inf/NaN")
    return plan
