"""Refuse a float model for a HTP without FP16 units (Hexagon v68: QCS6490, 8cx Gen 3) before compiling.

A float model runs on the HTP as FP16 (QNN HTP backend docs: float32 networks run "using float16
math"). HTP v68 has no FP16 units: on the device the QNN EP rejects every float node, and on the
x86-64 simulator ``htp_arch=68`` with FP16 precision does the same (measured: ``Conv`` with
soc_model 37 or 93 went to the CPU EP), so the compile would end with nothing on the NPU — or, with
an older default target, compile here and fail there. A quantized (QDQ) model runs on v68's
fixed-point units and is accepted.
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.platform._targets import TARGETS, htp_has_fp16
from onnxwrapper.errors import PrecisionUnsupportedError

__all__ = ["QUANTIZED_OPS", "check_fp16_support", "is_quantized"]

#: ops whose presence marks a quantized model (QDQ format, or ONNX's quantized operator format)
QUANTIZED_OPS = frozenset({"DequantizeLinear", "QuantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger",
                           "MatMulInteger"})


def is_quantized(proto) -> bool:
    """True when the ``onnx.ModelProto``'s main graph holds a quantized op (:data:`QUANTIZED_OPS`)."""
    return any(node.op_type in QUANTIZED_OPS for node in proto.graph.node)


def check_fp16_support(settings, proto, label: str) -> None:
    """Raise when ``settings`` ask for FP16 on a HTP without FP16 units and ``proto`` is a float model.

    Args:
        settings: ``QnnSettings`` (``precision``, ``htp_arch``, ``target``, ``soc_model``).
        proto: the ``onnx.ModelProto`` to compile. label: the model's name in the message.

    Raises:
        PrecisionUnsupportedError: FP16 on HTP v68 for a model without quantized ops.
    """
    if settings.precision != "fp16" or htp_has_fp16(settings.htp_arch) or is_quantized(proto):
        return
    target = TARGETS.get(settings.target or "")
    what = f"{target.title} (soc_model {target.soc_model}, HTP v{target.htp_arch})" if target else (
        f"HTP v{settings.htp_arch} (soc_model {settings.soc_model})")
    raise PrecisionUnsupportedError(
        f"{label}: {what} has no FP16 units, and this is a float model, which the HTP runs in FP16: the FP16 "
        f"compile is refused (it would place no node on the NPU). Quantize the model instead: record calibration "
        f"data with `aipc capture -o calib/ your_script.py`, then `aipc compile MODEL -o OUT --precision w8a16 "
        f"--calibration calib/` (QDQ W8A16 runs on v68's fixed-point units), and run the QDQ model; or choose a "
        f"target with FP16 (HTP v69 or later).", backend="qnn", precision="fp16", htp_arch=settings.htp_arch)
