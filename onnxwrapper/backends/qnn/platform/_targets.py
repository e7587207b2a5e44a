"""QNN backend settings: named SoC targets, option converters, raw QNN EP option validation.

Sources of the numbers:

* ``soc_model`` values are the ``Qnn_SocModel_t`` enum of the QNN SDK header ``QnnTypes.h``
  (``QNN_SOC_MODEL_SC8280X = 37``, ``SM8450 = 36``, ``SM8550 = 43``, ``SM8650 = 57``,
  ``SC8380XP = 60``, ``QCS8550 = 66``, ``SM8750 = 69``, ``SM8850 = 87``); values the header
  snapshot we read stops before: ``QCM6490 = 93`` (ExecuTorch's Qualcomm backend,
  ``backends/qualcomm/serialization/qc_schema.py``, ``QcomChipset.QCM6490 = 93  # v68``; QCS6490
  is the IoT part of the same die, Linux ``qcom,ids.h`` IDs 497/498) and ``SC8480XP = 88``
  (Snapdragon X2 Elite, as listed in QAIRT 2.45's ``Qnn_SocModel_t`` documentation). Both are
  accepted by onnxruntime-qnn 2.7.0's simulator (measured) but unverified on hardware here.
* ``htp_arch`` (Hexagon architecture) per SoC: QNN SDK documentation "Supported Snapdragon
  devices", as mirrored in ExecuTorch's Qualcomm backend SoC table (SM8450 v69, SM8550 v73,
  SM8650 v75, SM8750 v79, SM8850 v81, SM8350/SA8295/QCM6490 v68) and Qualcomm's QAIRT
  context-binary tooling (v73 → SC8380XP = 60). SC8280X (8cx Gen 3) v68, SC8480XP (X2 Elite) v81:
  onnxruntime-qnn 2.7.0's ``win_arm64`` wheel ships HTP skels for exactly v68, v73 and v81, the
  Windows-on-Snapdragon generations. QCS8550 is v73 (the SM8550 die).
* FP16: HTP v68 has no FP16 units; FP16 starts at v69 (QNN HTP backend docs, "Supported
  Snapdragon devices"). On the simulator, ``htp_arch=68`` with FP16 precision makes the QNN EP
  refuse every float node (measured: ``Conv`` on soc_model 37 or 93), so a float model compiles to
  nothing there and would fail on the device; :attr:`SocTarget.fp16` says which targets have it.
  The QNN EP writes ``…:73:60:…`` (arch, soc) into the ``ep_compatibility_info`` of an EPContext
  model compiled with ``soc_model=60, htp_arch=73`` (measured, onnxruntime-qnn 2.7.0).
* Raw QNN EP option names and values: ORT's QNN EP documentation ("Configuration Options") and
  the behaviour measured on onnxruntime-qnn 2.7.0: most
  bad values are accepted silently, and an unknown ``qnn_context_priority`` or ``device_id``
  sends *every* node to the CPU EP without an error — hence the validation here, before the EP
  sees the options.
* Precision: on a Qualcomm device the HTP runs float32 graphs with FP16 math ("QNN HTP supports
  running float32 networks using float16 math on select Qualcomm SoCs", QNN HTP backend docs).
  The x86-64 simulator of onnxruntime-qnn computes in fp32 unless ``soc_model`` ≥ 36 is given,
  then it emulates the FP16 math (measured). So ``precision="fp32"`` is allowed only on the
  simulator, where it means ``soc_model=30``: ``QNN_SOC_MODEL_SM8350`` (``QnnTypes.h``), the
  documented default of ``QNN_HTP_DEVICE_CONFIG_OPTION_SOC`` and what the simulator computes with
  when none is given — passed explicitly, because a session without ``soc_model`` inherits the last
  explicit one of the process (measured: after a ``soc_model=60`` session, ``soc_model=30`` still
  gives fp32 numerics, no ``soc_model`` gives FP16). A numerics reference, not a device mode.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, NamedTuple

from onnxwrapper.backends.base import did_you_mean
from onnxwrapper.errors import BackendOptionError

__all__ = ["SocTarget", "TARGETS", "HTP_ARCHS", "PERFORMANCE_MODES", "CONTEXT_PRIORITIES", "PROFILING_LEVELS",
           "FP16_MIN_HTP_ARCH", "FP16_MIN_SOC_MODEL", "FP32_SOC_MODEL", "htp_has_fp16", "DEFAULT_SIMULATOR_TARGET",
           "RUNTIME_ONLY_EP_OPTIONS",
           "find_target", "convert_target", "convert_soc_model", "convert_htp_arch", "convert_bool", "convert_choice",
           "convert_positive_int", "convert_provider_options", "validate_ep_options"]


class SocTarget(NamedTuple):
    """A named Snapdragon SoC the QNN HTP can be compiled for (an immutable ``NamedTuple``).

    Attributes:
        name: canonical option value, e.g. ``"snapdragon-x-elite"``.
        title: marketing name. chip: Qualcomm part number (``"SC8380XP"``).
        soc_model: QNN ``Qnn_SocModel_t`` value. htp_arch: Hexagon architecture (73 = v73).
        aliases: other accepted spellings (compared without case, spaces, dashes, underscores).
    """

    name: str
    title: str
    chip: str
    soc_model: int
    htp_arch: int
    aliases: tuple[str, ...] = ()

    @property
    def fp16(self) -> bool:
        """True when the HTP has FP16 units (v69 and later; module docstring)."""
        return htp_has_fp16(self.htp_arch)


TARGETS: dict[str, SocTarget] = {t.name: t for t in (
    SocTarget("snapdragon-x-elite", "Snapdragon X Elite", "SC8380XP", 60, 73,
              ("x-elite", "xelite", "sc8380xp", "sc8380", "x-plus", "snapdragon-x-plus")),
    SocTarget("snapdragon-8-gen-1", "Snapdragon 8 Gen 1", "SM8450", 36, 69, ("8gen1", "8-gen-1", "sm8450")),
    SocTarget("snapdragon-8-gen-2", "Snapdragon 8 Gen 2", "SM8550", 43, 73, ("8gen2", "8-gen-2", "sm8550")),
    SocTarget("snapdragon-8-gen-3", "Snapdragon 8 Gen 3", "SM8650", 57, 75, ("8gen3", "8-gen-3", "sm8650")),
    SocTarget("snapdragon-8-elite", "Snapdragon 8 Elite", "SM8750", 69, 79, ("8elite", "8-elite", "sm8750")),
    SocTarget("snapdragon-8-elite-gen-5", "Snapdragon 8 Elite Gen 5", "SM8850", 87, 81,
              ("8elitegen5", "8-elite-gen-5", "sm8850")),
    SocTarget("snapdragon-x2-elite", "Snapdragon X2 Elite", "SC8480XP", 88, 81, ("x2-elite", "x2elite", "sc8480xp",
                                                                                   "sc8480")),
    SocTarget("snapdragon-8cx-gen-3", "Snapdragon 8cx Gen 3", "SC8280X", 37, 68, ("8cx-gen-3", "8cxgen3", "sc8280x",
                                                                                    "sc8280xp")),
    SocTarget("qcs6490", "Qualcomm QCS6490", "QCS6490", 93, 68, ("qcm6490", "rb3-gen-2", "rb3gen2")),
    SocTarget("qcs8550", "Qualcomm QCS8550", "QCS8550", 66, 73, ("qcm8550",)),
)}

#: the first Hexagon architecture with FP16 units (module docstring)
FP16_MIN_HTP_ARCH = 69


def htp_has_fp16(htp_arch: int | None) -> bool:
    """True when HTP ``htp_arch`` (68, 69, 73, …) has FP16 units; ``None`` (unknown) counts as True."""
    return htp_arch is None or int(htp_arch) >= FP16_MIN_HTP_ARCH


#: default target on a host without a real NPU: emulate the FP16 math of a Snapdragon X Elite
DEFAULT_SIMULATOR_TARGET = "snapdragon-x-elite"
#: smallest soc_model for which the simulator emulates FP16 (measured: 30 → fp32, 36 → fp16)
FP16_MIN_SOC_MODEL = 36
#: soc_model of ``precision="fp32"`` on the simulator: QNN_SOC_MODEL_SM8350 (QnnTypes.h), the HTP default
FP32_SOC_MODEL = 30
#: htp_arch values the QNN EP accepts (ORT QNN EP docs list 68/69/73/75; 79/81 measured accepted)
HTP_ARCHS = (68, 69, 73, 75, 79, 81)
#: ORT QNN EP docs, option ``htp_performance_mode``
PERFORMANCE_MODES = ("burst", "balanced", "default", "high_performance", "high_power_saver", "low_balanced",
                     "low_power_saver", "power_saver", "extreme_power_saver", "sustained_high_performance")
#: ORT QNN EP docs, option ``qnn_context_priority`` (anything else → every node on CPU, measured)
CONTEXT_PRIORITIES = ("low", "normal", "normal_high", "high")
PROFILING_LEVELS = ("off", "basic", "detailed")
#: raw EP options that only affect execution, not the compiled context (not in the cache key)
RUNTIME_ONLY_EP_OPTIONS = frozenset({"htp_performance_mode", "qnn_context_priority", "device_id", "profiling_level",
                                     "profiling_file_path", "rpc_control_latency"})


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def find_target(name: str) -> SocTarget | None:
    """The :class:`SocTarget` for a name, chip or alias (case, spaces, ``-`` and ``_`` ignored)."""
    key = _norm(name)
    for target in TARGETS.values():
        if key in {_norm(target.name), _norm(target.title), _norm(target.chip)} | {_norm(a) for a in target.aliases}:
            return target
    return None


def convert_target(value: Any) -> str:
    """Option converter: a target name → canonical :attr:`SocTarget.name`."""
    if not isinstance(value, str):
        raise TypeError(f"expected a target name (str), got {type(value).__name__}")
    target = find_target(value)
    if target is None:
        hint = did_you_mean(value.lower(), TARGETS)
        raise ValueError(f"unknown target.{hint} Known targets: {', '.join(TARGETS)} (or give soc_model/htp_arch).")
    return target.name


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, got a bool")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ValueError(f"{what} must be an integer, got {value!r}")


def convert_soc_model(value: Any) -> int:
    """Option converter for ``soc_model``: an int > 0 (QNN ``Qnn_SocModel_t``; 0 would mean "unset")."""
    number = _as_int(value, "soc_model")
    if number <= 0 or number > 10_000:
        raise ValueError("soc_model must be a positive QNN Qnn_SocModel_t value (e.g. 60 = SC8380XP)")
    return number


def convert_htp_arch(value: Any) -> int:
    """Option converter for ``htp_arch``: 68/69/73/75/79/81, also given as ``"v73"``."""
    if isinstance(value, str) and value.strip().lower().startswith("v"):
        value = value.strip()[1:]
    number = _as_int(value, "htp_arch")
    if number not in HTP_ARCHS:
        raise ValueError(f"htp_arch must be one of {', '.join(map(str, HTP_ARCHS))}")
    return number


def convert_bool(value: Any) -> bool:
    """Option converter: bool, 0/1 or "true"/"false"/"0"/"1"/"yes"/"no"."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value.strip().lower() in ("1", "true", "yes", "on")
    raise ValueError("expected a boolean (True/False, 0/1)")


def convert_choice(*choices: str):
    """Option converter factory: a case-insensitive string among ``choices``."""
    def convert(value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"expected one of {', '.join(choices)}, got {type(value).__name__}")
        text = value.strip().lower()
        if text not in choices:
            hint = did_you_mean(text, choices)
            raise ValueError(f"expected one of: {', '.join(choices)}.{hint}")
        return text
    return convert


def convert_positive_int(value: Any) -> int:
    """Option converter: an int ≥ 1."""
    number = _as_int(value, "value")
    if number < 1:
        raise ValueError("expected an integer >= 1")
    return number


def convert_provider_options(value: Any) -> dict[str, str]:
    """Option converter for ``provider_options``: raw QNN EP options, validated (see
    :func:`validate_ep_options`; the device-dependent ``device_id`` check happens at open)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a dict of QNN EP options, got {type(value).__name__}")
    return validate_ep_options(value, real_npu=True, backend="qnn")


def _int_range(low: int, high: int | None):
    def check(value: str) -> str:
        number = _as_int(value, "value")
        if number < low or (high is not None and number > high):
            raise ValueError(f"expected an integer in [{low}, {high if high is not None else '∞'}]")
        return str(number)
    return check


def _choice(*choices: str):
    def check(value: str) -> str:
        return convert_choice(*choices)(value)
    return check


def _htp_only(value: str) -> str:
    if value.strip().lower() != "htp":
        raise ValueError("only 'htp' is supported: with backend_type cpu/gpu/saver/ir the QNN EP silently runs every "
                         "node on CPU or returns garbage (measured on onnxruntime-qnn 2.7.0)")
    return "htp"


def _fp16_flag(value: str) -> str:
    if str(value).strip() != "1":
        raise ValueError("enable_htp_fp16_precision=0 does not force fp32 when the SoC supports FP16 (measured); "
                         "use backend option precision='fp32' (simulator only) instead")
    return "1"


_VALIDATORS = {
    "backend_type": _htp_only,
    "soc_model": lambda v: str(convert_soc_model(v)),
    "htp_arch": lambda v: str(convert_htp_arch(v)),
    "enable_htp_fp16_precision": _fp16_flag,
    "htp_performance_mode": _choice(*PERFORMANCE_MODES),
    "qnn_context_priority": _choice(*CONTEXT_PRIORITIES),
    "device_id": _int_range(0, None),
    "vtcm_mb": _int_range(0, 64),
    "htp_graph_finalization_optimization_mode": _int_range(0, 3),
    "profiling_level": _choice(*PROFILING_LEVELS),
    "profiling_file_path": lambda v: _non_empty(v),
    "rpc_control_latency": _int_range(0, None),
    "enable_htp_spill_fill_buffer": _choice("0", "1"),
    "offload_graph_io_quantization": _choice("0", "1"),
    "enable_htp_shared_memory_allocator": _choice("0", "1"),
}

_REJECTED = {
    "backend_path": "onnxwrapper selects the HTP backend library of onnxruntime-qnn itself",
    "enable_htp_prepare_only": "the session would not be able to run",
    "qnn_saver_path": "the QNN Saver backend records calls and returns garbage outputs",
    "dump_qnn_ir_dlc": "DLC export is compile_model(..., dlc_dir=DIR) or `aipc compile --dlc`",
    "dump_qnn_ir_dlc_dir": "DLC export is compile_model(..., dlc_dir=DIR) or `aipc compile --dlc`",
    "qnn_ir_backend_path": "DLC export is compile_model(..., dlc_dir=DIR) or `aipc compile --dlc`",
    "htp_bf16_enable": "BF16 is not a validated precision of this backend",
}


def _non_empty(value: Any) -> str:
    text = str(value)
    if not text.strip():
        raise ValueError("expected a non-empty path")
    return text


def validate_ep_options(options: Mapping[str, Any], *, real_npu: bool, backend: str = "qnn") -> dict[str, str]:
    """Check raw QNN EP provider options before the EP sees them.

    Args:
        options: ``{key: value}`` as given to ORT (values are ``str()``-converted, as ORT does).
        real_npu: True on a host with a physical NPU; on the simulator only ``device_id=0`` exists.
        backend: backend name for error messages.

    Returns:
        ``{key: canonical str value}``.

    Raises:
        BackendOptionError: unknown key (with the closest known one), a key onnxwrapper does not
            pass through (with the reason), or a bad value (with the allowed values).
    """
    result: dict[str, str] = {}
    for key, raw in options.items():
        key = str(key)
        if key in _REJECTED:
            raise BackendOptionError(f"QNN EP option '{key}' is not supported by backend '{backend}': "
                                     f"{_REJECTED[key]}.", backend=backend)
        check = _VALIDATORS.get(key)
        if check is None:
            hint = did_you_mean(key, _VALIDATORS)
            raise BackendOptionError(
                f"Unknown or unsupported QNN EP option '{key}'.{hint} The QNN EP ignores unknown keys silently, "
                f"so onnxwrapper rejects them. Supported: {', '.join(sorted(_VALIDATORS))}.", backend=backend)
        try:
            value = check(raw if isinstance(raw, (int, str)) and not isinstance(raw, bool) else str(raw))
        except (ValueError, TypeError) as exc:
            raise BackendOptionError(f"Invalid value {raw!r} for QNN EP option '{key}': {exc}",
                                     backend=backend) from exc
        if key == "device_id" and not real_npu and value != "0":
            raise BackendOptionError(
                f"Invalid value {raw!r} for QNN EP option 'device_id': the HTP simulator has only device 0 "
                f"(any other id makes the QNN EP run every node on CPU, silently).", backend=backend)
        if key == "enable_htp_shared_memory_allocator" and value == "1" and not real_npu:
            raise BackendOptionError("QNN EP option 'enable_htp_shared_memory_allocator=1' needs a real NPU (rpcmem); "
                                     "on the simulator the EP cannot be created.", backend=backend)
        result[key] = value
    return result
