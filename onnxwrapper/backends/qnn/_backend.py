"""The ``qnn`` backend class: its options (:mod:`onnxwrapper.backends.qnn.settings._options`), its probe, and ``open``.

``QnnBackend.open``: from a :class:`~onnxwrapper.backends.base.SessionRequest` to a backend session.
A static model whose compiled EPContext model is in the compile cache is opened by
:func:`~onnxwrapper.backends.qnn.artifacts._cache_hit.open_cached` (no onnx import, no model parse);
everything else — and any doubt there — by the full path,
:func:`~onnxwrapper.backends.qnn.open._open.open_session` (its module docstring has the order of work).
Both give the same session: the fast path only skips work a hit does not need.
"""

from __future__ import annotations

import os
import threading

from onnxwrapper.backends.base import Availability, Backend, BackendSession, SessionRequest
from onnxwrapper.backends.qnn.artifacts import open_cached
from onnxwrapper.backends.qnn.platform import (INSTALL_HINT, detected_soc, ensure_registered, htp_device,
                                               htp_library_path, is_x86_host, native_stdout_guard, qnn_versions)
from onnxwrapper.backends.qnn.settings import OPTIONS, request_ep_options
from onnxwrapper.errors import BackendUnavailableError
from onnxwrapper.kernel import host_architecture

__all__ = ["QnnBackend", "open_session", "request_ep_options"]


def open_session(config, request, availability):
    """The full path of :meth:`QnnBackend.open` (:func:`onnxwrapper.backends.qnn.open._open.open_session`)."""
    # imported here: the full path imports onnx, the operator patches, the repair recipes and the
    # compile-worker layer (60-140 ms in a new process, measured); a cache hit needs none of them
    from onnxwrapper.backends.qnn.open import open_session as full

    return full(config, request, availability)


class QnnBackend(Backend):
    """ONNX Runtime's QNN execution provider on the Hexagon HTP (NPU or x86-64 simulator).

    Args:
        options: ``backend_options`` (see :attr:`options` and docs/backends/qnn.md).

    Raises:
        BackendOptionError: unknown option (closest valid one suggested) or invalid value.
    """

    name = "qnn"
    aliases = ("qairt",)
    suggested_for = ("npu", "htp", "hexagon", "nsp", "dsp")
    execution_providers = ("QNNExecutionProvider",)
    options = OPTIONS
    npu = True

    _probe_result: Availability | None = None
    _probe_lock = threading.Lock()

    @classmethod
    def probe(cls) -> Availability:
        """Whether onnxruntime-qnn is importable, and what its HTP is (cached; quiet; no registration on x86-64).

        In an x86-64 process the HTP is the simulator (``simulated=True``, ``real_npu=False``; the
        reason names the fix when the OS is ARM64: an emulated x64 Python). Elsewhere the plugin is
        registered and the device that drives the HTP chosen
        (:func:`~onnxwrapper.backends.qnn.platform._devices.choose_htp_device`: the NPU device in any
        position of the list; on Linux aarch64, where ORT lists none, the CPU device when a
        FastRPC compute DSP is there); its SoC is read from QNN or the OS
        (:func:`~onnxwrapper.backends.qnn.platform._soc.detected_soc`) into ``details``.
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
            note = host_architecture().note()
            return Availability(True, reason=f"QNN HTP simulator on x86-64 (QNN SDK {versions['qnn_sdk']}): device "
                                f"numerics, not device speed" + (f"; {note}" if note else ""), real_npu=False,
                                simulated=True, details={**versions, "device_type": "CPU (simulator)"})
        try:
            choice = htp_device()
        except BackendUnavailableError as exc:
            return Availability(False, reason=exc.reason or str(exc), install_hint=exc.install_hint, details=versions)
        if not choice.devices:
            return Availability(False, reason=choice.reason, details={**versions, "ep_devices": list(choice.listed)})
        details = {**versions, "device_type": "NPU" if choice.real_npu else "CPU (simulator)",
                   "ep_devices": list(choice.listed)}
        if choice.real_npu:
            with native_stdout_guard():  # loading the HTP library prints QNN's LIBNATIVE line once
                soc = detected_soc(htp_library_path())
            if soc is not None:
                details.update(soc_model=soc.soc_model, htp_arch=soc.htp_arch, soc=soc.describe())
        return Availability(True, reason=f"{choice.reason}, QNN SDK {versions['qnn_sdk']}", real_npu=choice.real_npu,
                            simulated=not choice.real_npu, details=details)

    @classmethod
    def prepare_process(cls) -> None:
        """Register the QNN plugin EP now (about 3 ms, measured on x86-64), so that
        ``onnxruntime.get_available_providers()`` lists ``QNNExecutionProvider`` before the first
        session, as in a script that registers onnxruntime-qnn itself (ORT's own tests pick FP16
        tolerances by that list). Nothing happens when the backend is unavailable."""
        if cls.probe().available:
            ensure_registered()

    def open(self, request: SessionRequest) -> BackendSession:
        """Prepare a QNN session: settings, artifact (verified precompiled / cached / compiled in a worker).

        A cache hit of a static model is opened by :func:`~onnxwrapper.backends.qnn.artifacts._cache_hit.open_cached`
        (no onnx import, no parse of the model); everything else by :func:`open_session`.

        Raises:
            ORT's exception (class and message) for a bad model argument or file, or a
            ``sess_options`` that is not a SessionOptions (ORT's TypeError);
            BackendUnavailableError (no onnxruntime-qnn, EP creation failed), BackendOptionError,
            PartitionError (strict, or QNN took no node), BackendCapabilityError (shapes beyond the
            HTP compiler, fp32 graphs the simulator cannot finalize), BackendCompileError (the
            compiler process died), ArtifactError (cache problems).
        """

        availability = self.probe()
        if not availability.available:
            raise BackendUnavailableError(
                f"Backend 'qnn' is not available: {availability.reason}. To fix: {availability.install_hint}.",
                backend="qnn", reason=availability.reason, install_hint=availability.install_hint)
        session = open_cached(self.config, request, availability)
        return session if session is not None else open_session(self.config, request, availability)
