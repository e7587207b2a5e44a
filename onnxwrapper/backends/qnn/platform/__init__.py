"""What this host's QNN runtime and HTP are: the named SoC targets (and the option converters that
resolve them), the SoC of this host's NPU, the ``OrtEpDevice`` that drives the HTP, the
process-level plumbing of the QNN plugin EP (registration, versions, the process-global
configuration guard, configured copies of ``SessionOptions``), the FP16 refusal for HTPs without
FP16 units, and the field report of ``aipc doctor``. Nothing here compiles or opens a model; it
imports no other part of the qnn package.
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.platform._devices import HtpDevice, choose_htp_device
from onnxwrapper.backends.qnn.platform._platform_facts import qnn_platform_facts
from onnxwrapper.backends.qnn.platform._precision_check import check_fp16_support
from onnxwrapper.backends.qnn.platform._runtime import (EP_NAME, INSTALL_HINT, copy_session_options, ensure_registered,
                                                        htp_device, htp_library_path, is_x86_host, native_stdout_guard,
                                                        qnn_versions, session_options_from_state, session_options_state,
                                                        user_qnn_ep_options)
from onnxwrapper.backends.qnn.platform._soc import DeviceSoc, detected_soc
from onnxwrapper.backends.qnn.platform._targets import (DEFAULT_SIMULATOR_TARGET, FP16_MIN_SOC_MODEL, FP32_SOC_MODEL,
                                                        PERFORMANCE_MODES, PROFILING_LEVELS, RUNTIME_ONLY_EP_OPTIONS,
                                                        SocTarget, TARGETS, convert_bool, convert_choice,
                                                        convert_htp_arch, convert_positive_int,
                                                        convert_provider_options, convert_soc_model, convert_target,
                                                        validate_ep_options)

__all__ = [
    "DEFAULT_SIMULATOR_TARGET",
    "DeviceSoc",
    "EP_NAME",
    "FP16_MIN_SOC_MODEL",
    "FP32_SOC_MODEL",
    "HtpDevice",
    "INSTALL_HINT",
    "PERFORMANCE_MODES",
    "PROFILING_LEVELS",
    "RUNTIME_ONLY_EP_OPTIONS",
    "SocTarget",
    "TARGETS",
    "check_fp16_support",
    "choose_htp_device",
    "convert_bool",
    "convert_choice",
    "convert_htp_arch",
    "convert_positive_int",
    "convert_provider_options",
    "convert_soc_model",
    "convert_target",
    "copy_session_options",
    "detected_soc",
    "ensure_registered",
    "htp_device",
    "htp_library_path",
    "is_x86_host",
    "native_stdout_guard",
    "qnn_platform_facts",
    "qnn_versions",
    "session_options_from_state",
    "session_options_state",
    "user_qnn_ep_options",
    "validate_ep_options",
]
