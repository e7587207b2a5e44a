"""The float model as onnxruntime.quantization's QNN flow should see it: opset upgrades, QNN
preprocessing and the fragile-tensor overrides, decided in one place before ``get_qnn_qdq_config``.

Order (each step on an in-memory copy; files only in the caller's temporary directory):

1. **opset for the quantizer** (:mod:`onnxwrapper.toolkit._opset`): 13 for per-channel weights
   (the ``axis`` attribute), 17 when the fragile-tensor policy wants a decomposed LayerNorm fused;
2. ``qnn_preprocess_model`` (onnxruntime's basic graph optimizer — which fuses LayerNorm at
   opset ≥ 17 — then its own Gelu, LpNormalization and SpaceToDepth fusions). Two facts of
   onnxruntime 1.32 (read in ``execution_providers/qnn/preprocess.py``, measured):
   it saves the ModelProto it receives with ``save_as_external_data=True``, which rewrites that
   proto's initializers ≥ 1 KB into references to a temporary file deleted on return — so it is
   given a copy; and when none of its own fusions applies it returns ``False`` and writes nothing,
   discarding the optimizer's LayerNorm fusion (always so at opset ≥ 20, where the optimizer
   already fused Gelu). Then, when a decomposed LayerNorm is left, the same optimizer pass
   (``onnxruntime.tools.onnx_model_utils.optimize_model``, ``ORT_ENABLE_BASIC``) is run here and
   kept if it fused one;
3. the fragile-tensor plan (:mod:`onnxwrapper.toolkit._fragile`) on the preprocessed model;
4. opset 21 when 16-bit Q/DQ will be written (W8A16 activations or 16-bit overrides) — the upgrade
   onnxruntime.quantization would otherwise do itself inside ``quantize``; done here, after
   preprocessing (whose fusions find nothing at opset ≥ 20, measured), so it is reported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnxruntime.tools.onnx_model_utils import optimize_model

from onnxwrapper.toolkit._fragile import FragilePlan, count_op, find_fragile_chains, fragile_plan
from onnxwrapper.toolkit._opset import (INT16_QDQ_OPSET, LAYERNORM_OPSET, PER_CHANNEL_OPSET, OpsetUpgrade,
                                        default_opset, upgrade_opset)

__all__ = ["PreparedModel", "prepare_for_quantizer"]

#: op types whose initializer inputs onnxruntime.quantization quantizes per channel in the QNN flow
#: (``operators/conv.py``, ``gemm.py``, ``norm.py``; ``get_qnn_qdq_config`` makes MatMul weights per-tensor).
_PER_CHANNEL_OPS = {"Conv", "ConvTranspose", "Gemm", "LayerNormalization", "BatchNormalization",
                    "InstanceNormalization"}
_INT16 = {"QUInt16", "QInt16"}


@dataclass
class PreparedModel:
    """The model handed to ``get_qnn_qdq_config`` / ``quantize``.

    Attributes:
        path: where it was saved (inside the caller's working directory).
        opset: its default-domain opset.
        preprocessed: whether ``qnn_preprocess_model`` changed it.
        upgrades: the opset conversions done, in order.
        fragile: the fragile-tensor plan (``overrides`` go to ``init_overrides``).
    """

    path: str
    opset: int
    preprocessed: bool
    upgrades: list[OpsetUpgrade] = field(default_factory=list)
    fragile: FragilePlan = field(default_factory=FragilePlan)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _has_per_channel_weights(model: onnx.ModelProto) -> bool:
    inits = {i.name for i in model.graph.initializer}
    return any(n.op_type in _PER_CHANNEL_OPS and any(i in inits for i in n.input[1:]) for n in model.graph.node)


def _optimized(model: onnx.ModelProto, workdir: str) -> onnx.ModelProto:
    """onnxruntime's basic graph optimizer on ``model`` (what ``qnn_preprocess_model`` runs first)."""
    source, target = Path(workdir, "to_optimize.onnx"), Path(workdir, "optimized.onnx")
    onnx.save(model, source)
    optimize_model(source, target)
    return onnx.load(target)


def prepare_for_quantizer(model: onnx.ModelProto, workdir: str, *, activation_type: str, weight_type: str,
                          per_channel: bool, preprocess: bool = True, keep_fragile: bool = True) -> PreparedModel:
    """Upgrade, preprocess and plan the fragile-tensor overrides for ``model`` (see module doc).

    Args:
        model: the float model (static or dynamic shapes, no ``metadata_props``: onnxruntime 1.31+'s
            ``qnn_preprocess_model`` fails on them); not modified.
        workdir: an existing temporary directory for the preprocessed model.
        activation_type / weight_type: ``onnxruntime.quantization.QuantType`` names.
        per_channel: per-channel weights (needs opset 13).
        preprocess: run ``qnn_preprocess_model``.
        keep_fragile: apply the fragile-tensor policy (fusion and 16-bit overrides).

    Returns:
        :class:`PreparedModel`.

    Raises:
        onnxwrapper.toolkit._opset.OpsetConversionError: onnx's version converter cannot convert the model.
    """
    # on use: onnxruntime.quantization is only for quantizing
    from onnxruntime.quantization.execution_providers.qnn import qnn_preprocess_model

    needs = {}
    if default_opset(model) < 10:  # onnxruntime.quantization converts these itself (update_opset_version)
        needs[11] = "onnxruntime.quantization quantizes models of opset ≥ 11"
    if per_channel and _has_per_channel_weights(model):
        needs[PER_CHANNEL_OPSET] = (f"per-channel weights: the `axis` attribute of QuantizeLinear/DequantizeLinear "
                                    f"needs opset ≥ {PER_CHANNEL_OPSET}")
    if keep_fragile and any(c.kind == "layernorm" for c in find_fragile_chains(model)):
        needs[LAYERNORM_OPSET] = (f"decomposed LayerNorm: onnxruntime can fuse it into LayerNormalization (opset ≥ "
                                  f"{LAYERNORM_OPSET}), whose variance is not quantized")
    upgrades = []
    work, upgrade = upgrade_opset(model, needs)
    if upgrade:
        upgrades.append(upgrade)
    layernorms_before = count_op(work, "LayerNormalization")
    preprocessed = False
    if preprocess:
        pre_path = os.path.join(workdir, "preprocessed.onnx")
        if qnn_preprocess_model(_copy(work), pre_path):
            work, preprocessed = onnx.load(pre_path), True
        elif keep_fragile and any(c.kind == "layernorm" for c in find_fragile_chains(work)):
            optimized = _optimized(work, workdir)
            if count_op(optimized, "LayerNormalization") > layernorms_before:
                work, preprocessed = optimized, True
    plan = fragile_plan(work, activation_type, layernorms_before=layernorms_before, enabled=keep_fragile)
    if default_opset(work) < INT16_QDQ_OPSET and (activation_type in _INT16 or weight_type in _INT16
                                                   or plan.overrides):
        why = ("16-bit activations" if activation_type in _INT16 else "16-bit weights" if weight_type in _INT16
               else "16-bit fragile tensors")
        work, upgrade = upgrade_opset(work, {INT16_QDQ_OPSET: f"{why}: 16-bit QuantizeLinear/DequantizeLinear "
                                                              f"need opset ≥ {INT16_QDQ_OPSET}"})
        upgrades.append(upgrade)
        # the converter may rewrite nodes (e.g. ReduceMean axes → input at opset 18): plan on the result
        plan = fragile_plan(work, activation_type, layernorms_before=layernorms_before, enabled=keep_fragile)
    path = os.path.join(workdir, "to_quantize.onnx")
    onnx.save(work, path)
    return PreparedModel(path, default_opset(work), preprocessed, upgrades, plan)
