"""The ``qnn`` backend class: its options (:mod:`onnxwrapper.backends.qnn.settings._options`), its probe, and ``open``.

``QnnBackend.open``: from a :class:`~onnxwrapper.backends.base.SessionRequest` to a backend session.
A static model whose compiled EPContext model is in the compile cache is opened by
:func:`~onnxwrapper.backends.qnn.artifacts._cache_hit.open_cached` (no onnx import, no model parse);
everything else — and any doubt there — by the full path,
:func:`~onnxwrapper.backends.qnn.open._open.open_session` (its module docstring has the order of work).
Both give the same session: the fast path only skips work a hit does not need.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from onnxwrapper.backends.base import Availability, Backend, BackendSession, SessionRequest
from onnxwrapper.backends.qnn.artifacts import first_compile, first_no_node, open_cached
from onnxwrapper.backends.qnn.platform import (INSTALL_HINT, detected_soc, ensure_registered, htp_device,
                                               htp_library_path, is_x86_host, native_stdout_guard, qnn_versions)
from onnxwrapper.backends.qnn.session import CpuSessionAhead, user_session_options
from onnxwrapper.backends.qnn.settings import OPTIONS, qnn_setup, request_ep_options
from onnxwrapper.errors import BackendUnavailableError
from onnxwrapper.kernel import ArtifactCache, ModelSource, host_architecture

_log = logging.getLogger("onnxwrapper.qnn")

__all__ = ["QnnBackend", "known_no_node", "open_session", "prestart_worker", "request_ep_options"]


def open_session(config, request, availability):
    """The full path of :meth:`QnnBackend.open` (:func:`onnxwrapper.backends.qnn.open._open.open_session`).

    A model the compile cache remembers the QNN EP takes no node of becomes ORT's CPU session at
    once (:func:`known_no_node`: no onnx import, no parse). For a model this cache has never seen,
    the compile worker is started first (:func:`prestart_worker`), so that its start-up overlaps
    the full path's own work. A model that looks like classical ML (an ``ai.onnx.ml`` op in its bytes)
    and has no facts in the cache gets its ORT CPU session created first, in a thread, instead of
    this process's QNN backend warmed, and the compile worker finds the verdict
    (:func:`~onnxwrapper.backends.qnn.artifacts.first_no_node`) without this process importing
    onnx or parsing the model: a 20 MB no-node ensemble handed over as bytes opens in 1.09× raw ORT's
    time (1.46× with the QNN backend warmed and the model parsed here; measured on the 2-core x86-64
    host, fresh processes, median of 15 pairs)."""
    source = ModelSource.from_arg(request.path_or_bytes)  # hashed once for both checks
    ahead = None
    # the facts first: one digest (needed below anyway), where the scan for ``ai.onnx.ml`` reads the whole
    # model — on every open of a dynamic model's path otherwise
    if config.get("repairs") is None and _unseen(config, source) and CpuSessionAhead.worth_it(source):
        # classical ML the cache has no facts of (never opened, or judged no-node by the compile worker):
        # its CPU session is most of the open, so it starts first and the checks below overlap it
        ahead = CpuSessionAhead(request.path_or_bytes, user_session_options(request), request.kwargs)
    known = known_no_node(config, request, availability, source, ahead=ahead)
    if known is not None:
        return known
    if prestart_worker(config, request, availability, source, warm_here=ahead is None):  # unseen: compile it
        user_so = user_session_options(request)
        if ahead is not None and first_no_node(config, request, availability, source, user_so):  # recorded now
            known = known_no_node(config, request, availability, source, ahead=ahead, found_now=True)
            if known is not None:
                return known
        start = time.perf_counter()
        answer = first_compile(config, request, availability, source, user_so)
        if answer in ("compiled", "cache"):
            session = open_cached(config, request, availability)
            if session is not None and answer == "compiled":  # compiled now, opened as the hit it has become
                session.artifacts[0] = session.artifacts[0]._replace(origin="compiled",
                                                                     seconds=time.perf_counter() - start)
                session.report = session.report.with_source("compile")
            if session is not None:
                return session
    # imported here: the full path imports onnx, the operator patches, the repair recipes and the
    # compile-worker layer (60-140 ms in a new process, measured); a cache hit needs none of them
    from onnxwrapper.backends.qnn.open import open_session as full

    return full(config, request, availability, source, ahead)


def _unseen(config, source) -> bool:
    """No facts of the model's content are recorded in the compile cache (no full open of it yet)."""
    from onnxwrapper.backends.qnn.model import stored_facts

    try:
        return stored_facts(config.get("cache_dir"), source) is None
    except Exception:  # noqa: BLE001 - a speed-up only; the full path reports an unreadable model
        return False


def known_no_node(config, request, availability, source=None, ahead=None, found_now: bool = False):
    """:class:`~onnxwrapper.backends.qnn.session.QnnCpuSession` of a model the compile cache remembers
    the QNN EP takes no node of (:func:`~onnxwrapper.backends.qnn.session.model_verdict`), checked
    before onnx is imported or the model parsed; ``None`` otherwise (and for a repaired model, a
    ``.bin`` model or any request the full path must judge: it raises what is wrong). ``ahead``: the
    model's ``CpuSessionAhead``, whose ORT session the CPU session adopts; ``found_now``: the verdict
    was recorded by this very open (:func:`~onnxwrapper.backends.qnn.artifacts.first_no_node`), so
    the partition report's source is ``"predicted"``, not ``"cache"``.

    Raises:
        PartitionError: remembered no-node model under ``strict``."""
    from onnxwrapper.backends.qnn.artifacts import is_raw_binary, model_label
    from onnxwrapper.backends.qnn.model import structure_key
    from onnxwrapper.backends.qnn.session import QnnCpuSession, model_verdict, no_node_policy, user_session_options

    if config.get("repairs") is not None:
        return None
    try:
        source = source or ModelSource.from_arg(request.path_or_bytes)
        if is_raw_binary(source) or (source.path is not None and not os.path.isfile(source.path)):
            return None
        user_so = user_session_options(request)
        setup = qnn_setup(config, request_ep_options(request), source, user_so=user_so, kwargs=request.kwargs,
                          label=model_label(source), real_npu=availability.real_npu)
        graph_key = structure_key(source, user_so)
        report = model_verdict(ArtifactCache(setup.settings.cache_dir), graph_key, setup.settings.compile_options())
    except Exception:  # noqa: BLE001 - the full path reports what is wrong with the request
        return None
    if report is None:
        return None
    settings = setup.settings
    no_node_policy(report, strict=settings.strict, label=setup.label,
                   warn_key=f"{graph_key}:{settings.describe()}:patches={settings.patches}")
    if found_now:
        report = report.with_source("predicted")
        _log.info("onnxwrapper qnn: %s: the QNN EP takes none of its %d node(s) (found by the compile worker); "
                  "one ORT CPU session runs it", setup.label, len(report.nodes))
    return QnnCpuSession(request.path_or_bytes, user_so, request.kwargs, report=report, ep_options=settings.ep_options,
                         ahead=ahead)


def prestart_worker(config, request, availability, source=None, warm_here: bool = True) -> bool:
    """Start the process's compile worker now, warming up with the session's QNN EP options, when
    the model's content has no facts recorded in the compile cache (no process has opened it:
    a compile is coming), or finding the user's compile server running. Its start-up (Python,
    onnxruntime and onnxruntime-qnn imports, the plugin EP's registration, an initialised QNN
    backend: ≈ 0.5 s on the x86-64 host, measured) then overlaps this process's import of onnx,
    parse, hashing and analysis of the model instead of delaying the first compile; and this
    process's own QNN backend, which loads the compiled model, is initialised meanwhile too
    (:func:`~onnxwrapper.backends.qnn.compile.warm_qnn_backend`, in a thread; not with ``warm_here``
    false, for a model that will likely not load any context). Returns whether a
    start was requested; never raises (the full path reports every problem of the request itself)."""
    try:
        from onnxwrapper.backends.qnn.artifacts import model_label
        from onnxwrapper.backends.qnn.compile import warm_qnn_backend
        from onnxwrapper.backends.qnn.model import stored_facts
        from onnxwrapper.backends.qnn.workers import default_pool

        source = source or ModelSource.from_arg(request.path_or_bytes)
        if source.path is not None and not os.path.isfile(source.path):
            return False
        if stored_facts(config.get("cache_dir"), source) is not None:
            return False  # seen before: most likely compiled and cached already
        setup = qnn_setup(config, request_ep_options(request), source, user_so=None, kwargs={},
                          label=model_label(source), real_npu=availability.real_npu)
        default_pool().start(setup.settings.ep_options)
        # this process loads what is compiled: its QNN backend initialises meanwhile, not after
        if warm_here:
            threading.Thread(target=warm_qnn_backend, args=(setup.settings.ep_options,), daemon=True,
                             name="onnxwrapper-qnn-warm").start()
        return True
    except Exception:  # noqa: BLE001 - a speed-up only; the full path raises what is wrong
        return False


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
