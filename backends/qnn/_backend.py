"""The ``qnn`` backend class: its options, its probe, and ``open`` (see :mod:`onnxwrapper.backends.qnn`)."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import onnxruntime

from onnxwrapper.backends._foreign_io import companion_option
from onnxwrapper.backends.base import Availability, Backend, BackendSession, OptionSpec, SessionRequest
from onnxwrapper.backends.qnn._open import open_session
from onnxwrapper.backends.qnn._patching import convert_patches
from onnxwrapper.backends.qnn._runtime import INSTALL_HINT, ensure_registered, is_x86_host, qnn_versions
from onnxwrapper.backends.qnn._targets import (PERFORMANCE_MODES, PROFILING_LEVELS, TARGETS, convert_bool,
                                               convert_choice, convert_htp_arch, convert_positive_int,
                                               convert_provider_options, convert_soc_model, convert_target)
from onnxwrapper.errors import BackendUnavailableError

__all__ = ["QnnBackend", "convert_graph"]

_log = logging.getLogger("onnxwrapper.qnn")
_SRC = "QNN SDK QnnTypes.h Qnn_SocModel_t; QNN 'Supported Snapdragon devices'"


def convert_graph(value: Any) -> int | str:
    """Option converter for ``graph``: a graph index (int ≥ 0) or a non-empty graph name."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "" or (
            isinstance(value, int) and value < 0):
        raise ValueError("expected a graph name (str) or a graph index (int >= 0)")
    return value


def _convert_companion(value: Any):
    return companion_option(value)


def _convert_cache_dir(value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise TypeError("expected a directory path (str or os.PathLike)")
    return os.path.abspath(os.path.expanduser(os.fspath(value)))


_DOCS = {
    "target": f"Named SoC to compile for: {', '.join(TARGETS)} (aliases such as 'x-elite', '8gen3', 'sm8650' "
              f"accepted); sets soc_model/htp_arch ({_SRC}). Default without a real NPU: 'snapdragon-x-elite' (FP16 "
              f"emulation); on a device: the device itself.",
    "soc_model": "Raw QNN soc_model (int, Qnn_SocModel_t, e.g. 60 = SC8380XP). On the simulator >= 36 switches FP16 "
                 "emulation on (measured).",
    "htp_arch": "Raw Hexagon arch: 68, 69, 73, 75, 79, 81 (or 'v73'); default from the target.",
    "precision": "'fp16' (default: the HTP's float math) or 'fp32' (x86-64 simulator only, no soc_model: an fp32 "
                 "reference, not a device mode).",
    "htp_performance_mode": f"HTP power/performance mode: {', '.join(PERFORMANCE_MODES)} (ORT QNN EP docs; no "
                            f"effect in the simulator).",
    "strict": "True: any node outside the QNN EP raises PartitionError (default False: warn once).",
    "profiling": f"QNN profiling level: {', '.join(PROFILING_LEVELS)}; writes a CSV (QNN EP profiling_file_path, "
                 f"default ./onnxwrapper_qnn_profile_<model>.csv).",
    "cache_dir": "Compile-cache directory (default $ONNXWRAPPER_CACHE_DIR, else the platform user cache dir, e.g. "
                 "~/.cache/onnxwrapper).",
    "max_specializations": "Live static-shape specializations per session for dynamic models (LRU; evicted ones "
                           "stay in the disk cache). Default 8.",
    "provider_options": "Raw QNN EP options, validated before the EP sees them (qnn_context_priority, device_id, "
                        "vtcm_mb, htp_graph_finalization_optimization_mode, profiling_level, ...; see "
                        "docs/backends/qnn.md).",
    "patches": "Operator patches for nodes the QNN EP leaves on CPU: True (default: every registered patch, "
               "onnxwrapper.patches.list_patches()), False (none), or a list of patch names to disable, e.g. "
               "['einsum']. The patched model is compiled instead and the partition report lists the patches.",
    "graph": "Graph name (str) or index (int) inside a raw QNN context binary (.bin model path, or one found next "
             "to the model); default: the only graph, else the one matching the ONNX model's IO names.",
    "onnx": "ONNX model describing a raw context binary given as the model path (names, order, dtypes, metadata); "
            "default <stem>.onnx next to the .bin when present; False: use the binary's own tensor names.",
}

_OPTIONS = {name: OptionSpec(name, _DOCS[name], default, convert) for name, default, convert in (
    ("target", None, convert_target),
    ("soc_model", None, convert_soc_model),
    ("htp_arch", None, convert_htp_arch),
    ("precision", "fp16", convert_choice("fp16", "fp32")),
    ("htp_performance_mode", None, convert_choice(*PERFORMANCE_MODES)),
    ("strict", False, convert_bool),
    ("profiling", "off", convert_choice(*PROFILING_LEVELS)),
    ("cache_dir", None, _convert_cache_dir),
    ("max_specializations", 8, convert_positive_int),
    ("provider_options", None, convert_provider_options),
    ("patches", True, convert_patches),
    ("graph", None, convert_graph),
    ("onnx", None, _convert_companion),
)}


class QnnBackend(Backend):
    """ONNX Runtime's QNN execution provider on the Hexagon HTP (NPU or x86-64 simulator).

    Args:
        options: ``backend_options`` (see :attr:`options` and docs/backends/qnn.md).

    Raises:
        BackendOptionError: unknown option (closest valid one suggested) or invalid value.
    """

    name = "qnn"
    aliases = ("qairt",)
    execution_providers = ("QNNExecutionProvider",)
    options = _OPTIONS
    npu = True
    process_global_config = True

    _probe_result: Availability | None = None
    _probe_lock = threading.Lock()

    @classmethod
    def probe(cls) -> Availability:
        """Whether onnxruntime-qnn is importable, and what its HTP is (cached; quiet; no registration on x86-64).

        On x86-64 the QNN ``OrtEpDevice`` reports device type CPU: the HTP is the simulator
        (``simulated=True``, ``real_npu=False``). Elsewhere the plugin is registered and its device
        type read: ``real_npu`` only for ``OrtHardwareDeviceType.NPU``.
        """
        with cls._probe_lock:
            if cls._probe_result is None:
                cls._probe_result = cls._probe()
            return cls._probe_result

    @classmethod
    def _probe(cls) -> Availability:
        try:
            import onnxruntime_qnn
            versions = qnn_versions()
        except ImportError as exc:
            return Availability(False, reason=f"onnxruntime-qnn is not installed ({exc})", install_hint=INSTALL_HINT)
        library = onnxruntime_qnn.get_library_path()
        if not os.path.exists(library):
            return Availability(False, reason=f"onnxruntime-qnn's EP library {os.path.basename(library)} is missing",
                                install_hint=INSTALL_HINT, details=versions)
        if is_x86_host():
            return Availability(True, reason=f"QNN HTP simulator on x86-64 (QNN SDK {versions['qnn_sdk']}): device "
                                f"numerics, not device speed", real_npu=False, simulated=True,
                                details={**versions, "device_type": "CPU (simulator)"})
        try:
            devices = ensure_registered()
        except BackendUnavailableError as exc:
            return Availability(False, reason=exc.reason or str(exc), install_hint=exc.install_hint, details=versions)
        device = devices[0].device
        real = device.type == onnxruntime.OrtHardwareDeviceType.NPU
        kind = "Hexagon NPU" if real else f"QNN device of type {device.type.name}"
        return Availability(True, reason=f"{kind} ({device.vendor}), QNN SDK {versions['qnn_sdk']}", real_npu=real,
                            simulated=not real, details={**versions, "device_type": device.type.name,
                                                         "device_vendor": str(device.vendor)})

    def open(self, request: SessionRequest) -> BackendSession:
        """Prepare a QNN session: settings, config pin, artifact (precompiled / cached / compiled).

        Raises:
            ORT's exception (class and message) for a bad model argument or file;
            BackendUnavailableError (no onnxruntime-qnn, EP creation failed), BackendOptionError,
            BackendConfigConflictError, PartitionError (strict, or QNN took no node),
            ArtifactError (stale precompiled artifact, cache problems).
        """

        availability = self.probe()
        if not availability.available:
            raise BackendUnavailableError(
                f"Backend 'qnn' is not available: {availability.reason}. To fix: {availability.install_hint}.",
                backend="qnn", reason=availability.reason, install_hint=availability.install_hint)
        return open_session(self.config, request, availability)
