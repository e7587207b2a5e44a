"""The ``qnn`` backend class: its options, its probe, and ``open``.

``QnnBackend.open``: from a :class:`~onnxwrapper.backends.base.SessionRequest` to a backend session.

Order of work (each step can raise, nothing native happens before step 4):

1. the model argument → :class:`~onnxwrapper.kernel._model_source.ModelSource` + ``onnx.ModelProto``
   (ORT's exception classes and messages for bad input);
2. raw QNN EP options from the request (the user's SessionOptions, ``providers``/``provider_options``)
   + backend options → :class:`~onnxwrapper.backends.qnn._settings.QnnSettings`;
3. the QNN plugin is registered (nothing is pinned: every session passes an explicit
   ``soc_model``, and compiles run in a worker process);
4. raw QNN context binary (``.bin`` model path): wrapped in an EPContext model and loaded;
   EPContext model given directly: loaded as it is;
   static model: a *verified* precompiled artifact next to the model, else cached / compiled EPContext;
   model with dynamic dims or control inputs (rank-0 inputs that decide an ``If``): a metadata
   session + specializations per (shapes, control values) built on demand (a verified
   ``<stem>_ctx*.onnx`` first, else cached / compiled: :mod:`onnxwrapper.backends.qnn._spec_builder`).

Compiles go through the one QNN compile pipeline (:mod:`onnxwrapper.backends.qnn._pipeline`,
shared with ``compile_model``): feeds beyond the HTP compiler are refused first, shape-decided
``If`` nodes are folded, nodes the QNN EP leaves on CPU are patched and the model recompiled when
the ``patches`` option allows it; ``strict`` is judged on the partition after patching.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import onnx
import onnxruntime

from onnxwrapper.backends._artifact_files import companion_onnx, companion_option
from onnxwrapper.backends.base import Availability, Backend, BackendSession, OptionSpec, SessionRequest
from onnxwrapper.backends.qnn._artifacts import check_artifact_interface, resolve_precompiled
from onnxwrapper.backends.qnn._assignment import ASSIGNMENT_KEY, records_assignment
from onnxwrapper.backends.qnn._compile import ort_session_class
from onnxwrapper.backends.qnn._feed_limits import DEFAULT_MAX_FEED_MB
from onnxwrapper.backends.qnn._no_node import QnnCpuSession, compile_or_verdict, no_node_policy
from onnxwrapper.backends.qnn._patching import convert_patches
from onnxwrapper.backends.qnn._pipeline import CacheStore, EpContextFromOnnx, model_key
from onnxwrapper.backends.qnn._repair import (REPAIRS_DOC, convert_repairs, prepare_repairs, refuse_for_artifact,
                                              repaired_step)
from onnxwrapper.backends.qnn._runtime import (EP_NAME, INSTALL_HINT, copy_session_options, ensure_registered,
                                               is_x86_host, qnn_versions, user_qnn_ep_options)
from onnxwrapper.backends.qnn._session import ArtifactInfo, QnnDynamicSession, check_partition, nonfinite_check
from onnxwrapper.backends.qnn._spec_builder import JitModel, SpecializationBuilder, artifact_info, static_compile
from onnxwrapper.backends.qnn._specialize import control_inputs
from onnxwrapper.backends.qnn._user_session import static_session, user_facing_options, user_session_options
from onnxwrapper.backends.qnn._settings import QnnSetup, merge_raw_options, qnn_setup
from onnxwrapper.backends.qnn._targets import (PERFORMANCE_MODES, PROFILING_LEVELS, TARGETS, convert_bool,
                                               convert_choice, convert_htp_arch, convert_positive_int,
                                               convert_provider_options, convert_soc_model, convert_target)
from onnxwrapper.backends.qnn._wrap import RAW_BINARY_SUFFIXES, wrap_raw_binary
from onnxwrapper.errors import BackendCapabilityError, BackendOptionError, BackendUnavailableError
from onnxwrapper.kernel import ModelSource, dynamic_inputs, fix_free_dimensions, modelmeta_from_onnx, recorded_key

__all__ = ["QnnBackend", "convert_graph", "open_session", "request_ep_options"]

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
    "precision": "'fp16' (default: the HTP's float math) or 'fp32' (x86-64 simulator only, soc_model=30: an fp32 "
                 "reference, not a device mode; no fp32 kernels for Gather, LSTM, GRU, HardSigmoid, … — see "
                 "docs/backends/qnn.md).",
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
    "repairs": REPAIRS_DOC,
    "max_feed_mb": f"Largest feed (MiB, logical size: broadcast views count in full) a shape is compiled for; larger "
                   f"feeds raise BackendCapabilityError at once instead of exhausting the QNN compiler. Default "
                   f"{DEFAULT_MAX_FEED_MB}.",
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
    ("repairs", None, convert_repairs),
    ("max_feed_mb", DEFAULT_MAX_FEED_MB, convert_positive_int),
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
        return open_session(self.config, request, availability)

def request_ep_options(request) -> dict[str, str]:
    """Raw QNN EP options carried by a request, lowest precedence first: the user's SessionOptions
    entries ``ep.qnnexecutionprovider.*``, then the ``QNNExecutionProvider`` options of
    ``providers``/``provider_options`` (parsed once by backend selection: ``request.ep_options``),
    whether or not ``backend=`` was given too."""
    return merge_raw_options(user_qnn_ep_options(request.sess_options or None), request.ep_options.get(EP_NAME))


def _label(source) -> str:
    return repr(os.path.basename(source.path)) if source.path is not None else "the model (bytes)"


def _is_ort_format(so, source) -> bool:
    if source.path is not None and source.path.lower().endswith(".ort"):
        return True
    if so is not None:
        try:
            return so.get_session_config_entry("session.load_model_format").upper() == "ORT"
        except RuntimeError:
            return False
    return False


def _is_epcontext_model(proto) -> bool:
    """True when the model already is a compiled EPContext model (it has ``EPContext`` nodes)."""
    return any(node.op_type == "EPContext" for node in proto.graph.node)


def _is_raw_binary(source) -> bool:
    """True for a model path naming a raw QNN context binary (``*.bin``)."""
    return source.path is not None and source.path.lower().endswith(".bin")


def _open_raw_binary(setup: QnnSetup, configs, warn_key: str):
    """Session on one graph of a raw QNN context binary, wrapped as an EPContext model
    (``backends/qnn/_binary.py``); names/order/dtypes/metadata from the companion ONNX model."""
    start = time.perf_counter()
    source, settings = setup.source, setup.settings
    if not os.path.isfile(source.path):
        source.read_bytes()  # ORT's NoSuchFile (missing) / InvalidProtobuf (a directory)
    companion_path = companion_onnx(source.path, RAW_BINARY_SUFFIXES, settings.companion)
    companion = ModelSource(companion_path, None).load_proto() if companion_path else None
    ctx, _graph = wrap_raw_binary(source.path, graph=settings.graph, onnx_model=companion,
                                  cache_dir=settings.cache_dir)
    meta = None
    if companion is not None:
        meta = _model_meta_override(onnx.load(ctx, load_external_data=False), companion)
    info = ArtifactInfo("precompiled", ctx, None, time.perf_counter() - start)
    return static_session(setup, ctx, configs, None, info, warn_key, model_meta=meta)


def _refuse_graph_option(settings, why: str) -> None:
    """BackendOptionError when the ``graph`` option is set for a session without a raw context binary."""
    if settings.graph is not None:
        raise BackendOptionError(f"Option 'graph' applies to raw QNN context binaries only (a .bin model path, or "
                                 f"one found next to the model); {why}. Drop it.", backend="qnn")


def _model_meta_override(ctx_proto, original):
    """A look-alike ModelMetadata of ``original`` when the artifact's metadata differs, else ``None``."""

    wanted = modelmeta_from_onnx(original)
    got = modelmeta_from_onnx(ctx_proto)
    return None if wanted == got else wanted


def open_session(config: dict[str, Any], request, availability):
    """Open a QNN backend session for ``request`` (see the module docstring).

    Args:
        config: validated backend options. request: the SessionRequest. availability: probe result.
    """
    source = ModelSource.from_arg(request.path_or_bytes)
    given_so = user_session_options(request)
    if _is_ort_format(given_so, source):
        raise BackendCapabilityError("Backend 'qnn' compiles ONNX models; ORT-format (.ort) models are not "
                                     "supported. Pass the .onnx model.", backend="qnn")
    raw_binary = _is_raw_binary(source)
    proto = None if raw_binary else source.load_proto()
    repair = None if raw_binary else prepare_repairs(config, source, proto)  # a repair recipe (docs/repair.md)
    if repair is not None:
        config, proto = repair.config, repair.proto
    stem = source.stem or "model"
    setup = qnn_setup(config, request_ep_options(request), source, user_so=given_so,
                      kwargs=request.kwargs, label=_label(source), real_npu=availability.real_npu,
                      default_profile_path=os.path.abspath(f"onnxwrapper_qnn_profile_{stem}.csv"))
    settings, label = setup.settings, setup.label
    if not raw_binary and settings.companion is not None:
        raise BackendOptionError("Option 'onnx' names the ONNX model of a raw QNN context binary given as the model "
                                 "path; here the model path is the ONNX model itself. Drop it.", backend="qnn")
    setup = setup.register()
    user_so = setup.user_so
    # the façade session records the assignment only where the partition must be read back from
    # it (precompiled artifacts) or the user asked for it (ORT refuses the getter otherwise)
    load_configs = {ASSIGNMENT_KEY: "1"}
    own_configs = dict(load_configs) if records_assignment(user_so) else {}
    # strict sessions are checked on the compile-time partition before loading; the loaded ctx
    # session then also refuses CPU nodes in ORT itself (cannot fire: checked already)
    strict_configs = dict(own_configs, **({"session.disable_cpu_ep_fallback": "1"} if settings.strict else {}))
    if raw_binary:
        refuse_for_artifact(config, "a raw QNN context binary")
        return _open_raw_binary(setup, load_configs, f"{os.path.abspath(source.path)}:{settings.describe()}")
    model_hash = model_key(source, user_so)
    warn_key = f"{model_hash}:{settings.describe()}:patches={settings.patches}"
    store = CacheStore(setup, proto, model_hash)
    compile_epcontext = EpContextFromOnnx(store)
    model_input = source.path if source.path is not None else source.read_bytes()
    compile_input = model_input
    if repair is not None:
        compile_epcontext, compile_input = repaired_step(repair, setup, model_hash), repair.proto.SerializeToString()
    fixed = fix_free_dimensions(proto, user_so)  # the inputs as ORT sees them with the user's overrides
    dynamic = dynamic_inputs(fixed)
    control = control_inputs(fixed)
    # precompiled neighbours are verified against the model file alone: not for a repaired model, nor
    # when the user's SessionOptions change it (recorded initializers, overrides)
    neighbours = repair is None and not recorded_key(user_so)

    if not dynamic and not control and _is_epcontext_model(proto):
        # an EPContext model given directly (e.g. `aipc compile` output): load it as it is
        _refuse_graph_option(settings, "this model is an EPContext model")
        refuse_for_artifact(config, "this EPContext model")
        info = ArtifactInfo("precompiled", source.path or "<EPContext model bytes>", None, 0.0)
        return static_session(setup, model_input, load_configs, None, info, warn_key)
    if not dynamic and not control:
        start = time.perf_counter()
        artifact = resolve_precompiled(source, settings) if neighbours else None
        if artifact is None or artifact.kind != "context_binary":
            _refuse_graph_option(settings, "no raw context binary is used for this model")
        if artifact is not None:
            ctx_proto = check_artifact_interface(artifact, proto)
            info = ArtifactInfo("precompiled", artifact.ctx_path, None, time.perf_counter() - start)
            return static_session(setup, artifact.ctx_path, load_configs, None, info, warn_key,
                                  model_meta=_model_meta_override(ctx_proto, proto))

        def compile_static(model_in, model_proto):
            if repair is not None:  # a recipe's model is compiled as it is (no CPU-fallback verdict for it)
                return compile_epcontext(model_in, model_proto, None, label), None
            return compile_or_verdict(compile_epcontext, store, settings.patches, model_in, model_proto, None, label)

        result = static_compile(setup, fixed, compile_input, compile_static)
        if isinstance(result, JitModel):  # ORT cannot write its EPContext model: ORT compiles it at load
            info = ArtifactInfo("jit", "<in memory>", None, 0.0)
            return static_session(setup, result.data, dict(load_configs, **result.configs), None, info, warn_key,
                                  model_meta=modelmeta_from_onnx(proto))
        compiled, no_node = result
        if no_node is not None:
            no_node_policy(no_node, strict=settings.strict, label=label, warn_key=warn_key)
            return QnnCpuSession(request.path_or_bytes, user_so, request.kwargs, report=no_node,
                                 ep_options=settings.ep_options)
        check_partition(compiled.report, strict=settings.strict, label=label, warn_key=warn_key)
        return static_session(setup, compiled.ctx_path, strict_configs, compiled.report,
                              artifact_info(compiled, None), warn_key, model_meta=modelmeta_from_onnx(proto))
    _refuse_graph_option(settings, "this model has dynamic input shapes or control inputs (compiled per feed)")
    cpu_runner: list = []

    def on_cpu():
        """ORT's CPU session of the model with the user's options (specializations QNN takes no node of)."""
        if not cpu_runner:
            cpu_runner.append(ort_session_class()(request.path_or_bytes, user_so, **request.kwargs))
        return cpu_runner[0]

    build = SpecializationBuilder(setup, fixed, compile_epcontext, store, load_configs=load_configs,
                                  strict_configs=strict_configs, warn_key=warn_key, neighbours=neighbours,
                                  on_cpu=on_cpu, patches=None if repair is not None else settings.patches)

    meta_so, _entries = copy_session_options(user_so)
    user_facing_options(meta_so, user_so)
    if not meta_so.optimized_model_filepath:  # never run: no optimization needed (else ORT writes the model)
        meta_so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    if own_configs:
        meta_so.add_session_config_entry(ASSIGNMENT_KEY, "1")
    return QnnDynamicSession(model_input, meta_so, setup.kwargs, build=build, dynamic_names=list(dynamic),
                             ep_options=settings.ep_options, max_specializations=settings.max_specializations,
                             strict=settings.strict, label=label, warn_key=warn_key, user_so=user_so,
                             control_names=control, nonfinite_check=nonfinite_check(settings, label))
