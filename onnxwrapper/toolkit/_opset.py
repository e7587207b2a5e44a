"""Opset upgrades for quantization: which default-domain opset the QDQ quantizer needs, and the
in-memory conversion with onnx's version converter.

Why a quantizer needs a newer opset (ONNX operator specifications, ``onnx/defs/quantization``):

* ``QuantizeLinear`` / ``DequantizeLinear`` take the per-channel ``axis`` attribute from opset 13.
  onnxruntime.quantization writes it for per-channel weights (and their int32 biases) whatever
  the model's opset: a per-channel W8A8 model of opset < 13 fails to load with
  ``INVALID_GRAPH … Unrecognized attribute: axis for operator DequantizeLinear`` (measured with
  onnxruntime 1.32 on RapidOCR's opset-11 recognizer).
* ``LayerNormalization`` exists from opset 17. onnxruntime's graph optimizer (run by
  ``qnn_preprocess_model``) fuses a decomposed LayerNorm (ReduceMean, Sub, Pow, ReduceMean, Add,
  Sqrt, Div, Mul, Add) into it only at opset ≥ 17 (measured: none of the recognizer's five is fused
  at opsets 11 and 13, all five at 17 and 19), so the fragile variance is never quantized
  (:mod:`onnxwrapper.toolkit._fragile`).
* 16-bit ``QuantizeLinear`` / ``DequantizeLinear`` (UINT16/INT16) exist from opset 21 (before that
  only as ``com.microsoft`` contrib ops); onnxruntime.quantization itself converts a model to
  opset 21 for 16-bit types (``quant_utils.update_opset_version``, with the same converter).

The conversion is ``onnx.version_converter.convert_version`` on a copy in memory: the user's model
file is never rewritten and nothing is written next to it. Only the default (``ai.onnx``) domain is
converted; other domains (``com.microsoft``) are kept as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import version_converter

from onnxwrapper.errors import OnnxwrapperError

__all__ = ["PER_CHANNEL_OPSET", "LAYERNORM_OPSET", "INT16_QDQ_OPSET", "OpsetConversionError", "OpsetUpgrade",
           "default_opset", "upgrade_opset"]

#: first opset whose QuantizeLinear/DequantizeLinear have the per-channel ``axis`` attribute.
PER_CHANNEL_OPSET = 13
#: first opset with the ``LayerNormalization`` operator.
LAYERNORM_OPSET = 17
#: first opset whose QuantizeLinear/DequantizeLinear take 16-bit integer types.
INT16_QDQ_OPSET = 21


class OpsetConversionError(OnnxwrapperError, ValueError):
    """onnx's version converter cannot bring the model to the opset the quantizer needs.

    Attributes:
        from_version / to_version: the default-domain opsets of the attempted conversion.
        reasons: why ``to_version`` is needed (one sentence each).
    """

    def __init__(self, message: str, *, from_version: int, to_version: int, reasons: tuple[str, ...]) -> None:
        super().__init__(message)
        self.from_version = from_version
        self.to_version = to_version
        self.reasons = reasons


@dataclass(frozen=True)
class OpsetUpgrade:
    """One default-domain opset conversion done for quantization.

    Attributes:
        from_version / to_version: opsets before and after.
        reasons: why (one sentence each, e.g. the per-channel ``axis`` attribute).
        by: who converted: ``"onnxwrapper"`` (before quantization, reported here) or
            ``"onnxruntime.quantization"`` (inside ``quantize``, detected afterwards).
    """

    from_version: int
    to_version: int
    reasons: tuple[str, ...]
    by: str = "onnxwrapper"

    def to_dict(self) -> dict:
        """A JSON-safe dict: from, to, reasons and the converter used."""
        return {"from": self.from_version, "to": self.to_version, "reasons": list(self.reasons), "by": self.by}

    def describe(self) -> str:
        """``"opset 11 → 17: reason; reason"``."""
        return f"opset {self.from_version} → {self.to_version}: " + "; ".join(self.reasons)


def default_opset(model: onnx.ModelProto) -> int:
    """The model's default-domain (``""`` / ``"ai.onnx"``) opset version.

    Raises:
        ValueError: the model imports no default-domain opset.
    """
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise ValueError("the model imports no default-domain (ai.onnx) opset: it has no standard ONNX operators "
                     "to quantize")


def upgrade_opset(model: onnx.ModelProto, needs: dict[int, str]) -> tuple[onnx.ModelProto, OpsetUpgrade | None]:
    """Convert ``model`` (in memory) to the highest opset in ``needs`` when its own is lower.

    Args:
        model: the float model; not modified.
        needs: ``{minimum opset: reason}`` — e.g. ``{PER_CHANNEL_OPSET: "per-channel weights: …"}``;
            only the entries above the model's opset count as reasons.

    Returns:
        ``(model, None)`` when no conversion is needed (the same object), else the converted copy and
        an :class:`OpsetUpgrade` with the reasons above the model's opset.

    Raises:
        OpsetConversionError: the converter fails (an operator without a conversion adapter, an
            operator removed from the standard, a model shape inference rejects); the message names
            the converter's complaint, the reasons and what to do.
    """
    current = default_opset(model)
    pending = {v: r for v, r in needs.items() if v > current}
    if not pending:
        return model, None
    target = max(pending)
    reasons = tuple(pending[v] for v in sorted(pending))

    try:
        converted = version_converter.convert_version(model, target)
    except Exception as exc:  # noqa: BLE001 - the converter raises RuntimeError, InferenceError, ValidationError…
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        detail = detail.split("failed: ", 1)[-1]
        removed = sorted({n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")
                          and not _has_schema(n.op_type, target)})
        hint = f" (operators not in opset {target}: {', '.join(removed)})" if removed else ""
        raise OpsetConversionError(
            f"the quantizer needs opset {target} but onnx's version converter cannot convert this model from "
            f"opset {current}{hint}: {detail}. Needed because: {'; '.join(reasons)}. Export the model again at "
            f"opset {target} or newer (e.g. torch.onnx.export(..., opset_version={target})), or replace the "
            f"operators the converter rejects"
            + ("; per-tensor weights (--per-tensor / per_channel=False) avoid the per-channel axis requirement"
               if any("per-channel" in r for r in reasons) else "") + ".",
            from_version=current, to_version=target, reasons=reasons) from exc
    return converted, OpsetUpgrade(current, target, reasons)


def _has_schema(op_type: str, version: int) -> bool:
    try:
        onnx.defs.get_schema(op_type, version)
    except onnx.defs.SchemaError:
        return False
    return True
