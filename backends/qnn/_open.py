"""``QnnBackend.open``: from a :class:`~onnxwrapper.backends.base.SessionRequest` to a backend session.

Order of work (each step can raise, nothing native happens before step 4):

1. the model argument → :class:`~onnxwrapper.kernel._model_source.ModelSource` + ``onnx.ModelProto``
   (ORT's exception classes and messages for bad input);
2. raw QNN EP options from the request (the user's SessionOptions, ``providers``/``provider_options``)
   + backend options → :class:`~onnxwrapper.backends.qnn._settings.QnnSettings`;
3. the QNN plugin is registered and the process-global configuration pinned;
4. raw QNN context binary (``.bin`` model path): wrapped in an EPContext model and loaded;
   EPContext model given directly: loaded as it is;
   static model: precompiled artifact next to the model, else cached / compiled EPContext;
   dynamic model: a metadata session + per-shape specializations built on demand (a precompiled
   ``<stem>_ctx*.onnx`` for that shape first, else cached / compiled).

Compiles go through :func:`onnxwrapper.backends.qnn._patching.compile_with_patches`: nodes the QNN
EP leaves on CPU are patched and the model recompiled when the ``patches`` option allows it;
``strict`` is judged on the partition after patching.
"""

from __future__ import annotations

import os
import time
from typing import Any

from onnxwrapper.kernel._partition import PartitionReport
from onnxwrapper.backends.qnn._artifacts import check_artifact_interface, resolve_precompiled, resolve_specialization
from onnxwrapper.backends.qnn._compile import (build_session_options, cached_compile, compile_cache_key,
                                               create_qnn_session)
from onnxwrapper.backends.qnn._patching import FailureMemo, compile_with_patches
from onnxwrapper.backends.qnn._runtime import (EP_NAME, claim_config, copy_session_options, ensure_registered,
                                               user_qnn_ep_options)
from onnxwrapper.backends.qnn._session import ArtifactInfo, QnnDynamicSession, QnnStaticSession, check_partition
from onnxwrapper.backends.qnn._settings import merge_raw_options, resolve_settings
from onnxwrapper.errors import BackendCapabilityError, BackendOptionError

__all__ = ["open_session", "request_ep_options"]


def request_ep_options(request) -> dict[str, str]:
    """Raw QNN EP options carried by a request, lowest precedence first: the user's SessionOptions
    entries ``ep.qnnexecutionprovider.*``, then the ``QNNExecutionProvider`` options of
    ``providers``/``provider_options`` (parsed once by backend selection: ``request.ep_options``),
    whether or not ``backend=`` was given too."""
    return merge_raw_options(user_qnn_ep_options(request.sess_options), request.ep_options.get(EP_NAME))


def _label(source) -> str:
    return repr(os.path.basename(source.path)) if source.path is not None else "the model (bytes)"


def _is_ort_format(request, source) -> bool:
    if source.path is not None and source.path.lower().endswith(".ort"):
        return True
    so = request.sess_options
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


def _open_raw_binary(source, settings, devices, user_so, kwargs, configs, label: str, warn_key: str):
    """Session on one graph of a raw QNN context binary, wrapped as an EPContext model
    (``backends/qnn/_binary.py``); names/order/dtypes/metadata from the companion ONNX model."""
    from onnxwrapper.kernel._model_source import ModelSource
    from onnxwrapper.backends._foreign_io import companion_onnx
    from onnxwrapper.backends.qnn._binary import RAW_BINARY_SUFFIXES, wrap_raw_binary

    start = time.perf_counter()
    if not os.path.isfile(source.path):
        source.read_bytes()  # ORT's NoSuchFile (missing) / InvalidProtobuf (a directory)
    companion_path = companion_onnx(source.path, RAW_BINARY_SUFFIXES, settings.companion)
    companion = ModelSource(companion_path, None).load_proto() if companion_path else None
    ctx, _graph = wrap_raw_binary(source.path, graph=settings.graph, onnx_model=companion,
                                  cache_dir=settings.cache_dir)
    meta = None
    if companion is not None:
        import onnx

        meta = _model_meta_override(onnx.load(ctx, load_external_data=False), companion)
    so = build_session_options(user_so, settings.ep_options, devices, configs)
    info = ArtifactInfo("precompiled", ctx, None, time.perf_counter() - start)
    return QnnStaticSession(ctx, so, kwargs, report=None, strict=settings.strict, label=label, warn_key=warn_key,
                            artifact=info, model_meta=meta)


def _refuse_graph_option(settings, why: str) -> None:
    """BackendOptionError when the ``graph`` option is set for a session without a raw context binary."""
    if settings.graph is not None:
        raise BackendOptionError(f"Option 'graph' applies to raw QNN context binaries only (a .bin model path, or "
                                 f"one found next to the model); {why}. Drop it.", backend="qnn")


def _model_meta_override(ctx_proto, original):
    """A look-alike ModelMetadata of ``original`` when the artifact's metadata differs, else ``None``."""
    from onnxwrapper.kernel._metadata import modelmeta_from_onnx

    wanted = modelmeta_from_onnx(original)
    got = modelmeta_from_onnx(ctx_proto)
    return None if wanted == got else wanted


def open_session(config: dict[str, Any], request, availability):
    """Open a QNN backend session for ``request`` (see the module docstring).

    Args:
        config: validated backend options. request: the SessionRequest. availability: probe result.
    """
    import onnxruntime

    from onnxwrapper.kernel._cache import ArtifactCache
    from onnxwrapper.kernel._model_source import ModelSource
    from onnxwrapper.kernel._shapes import dynamic_inputs, shapes_note, specialize

    source = ModelSource.from_arg(request.path_or_bytes)
    if _is_ort_format(request, source):
        raise BackendCapabilityError("Backend 'qnn' compiles ONNX models; ORT-format (.ort) models are not "
                                     "supported. Pass the .onnx model.", backend="qnn")
    raw_binary = _is_raw_binary(source)
    proto = None if raw_binary else source.load_proto()
    label = _label(source)
    stem = source.stem or "model"
    settings = resolve_settings(config, request_ep_options(request), real_npu=availability.real_npu,
                                default_profile_path=os.path.abspath(f"onnxwrapper_qnn_profile_{stem}.csv"))
    if not raw_binary and settings.companion is not None:
        raise BackendOptionError("Option 'onnx' names the ONNX model of a raw QNN context binary given as the model "
                                 "path; here the model path is the ONNX model itself. Drop it.", backend="qnn")
    devices = ensure_registered()
    claim_config(settings.process_config(), label)
    kwargs = {k: v for k, v in request.kwargs.items() if k != "enable_fallback"}
    user_so = request.sess_options
    _copy, so_entries = copy_session_options(user_so, warn=True)
    level = int(user_so.graph_optimization_level) if user_so is not None else 99
    load_configs = {"session.record_ep_graph_assignment_info": "1"}
    # strict sessions are checked on the compile-time partition before loading; the loaded ctx
    # session then also refuses CPU nodes in ORT itself (cannot fire: checked already)
    strict_configs = dict(load_configs, **({"session.disable_cpu_ep_fallback": "1"} if settings.strict else {}))
    if raw_binary:
        warn_key = f"{os.path.abspath(source.path)}:{settings.describe()}"
        return _open_raw_binary(source, settings, devices, user_so, kwargs, load_configs, label, warn_key)
    model_hash = source.content_hash()
    warn_key = f"{model_hash}:{settings.describe()}:patches={settings.patches}"
    cache = ArtifactCache(settings.cache_dir)
    dynamic = dynamic_inputs(proto)
    disabled = settings.disabled_patches()

    def compile_patched(model_input, proto_to_patch, shapes, note, start: float):
        """``(ctx path, report, ArtifactInfo)`` of the (patched) cached compile of ``model_input``."""
        built: list[float] = []  # build seconds of the entries compiled now (original and patched)

        def key_for(records):
            return compile_cache_key(model_hash, settings.compile_options(), shapes, so_entries, level, records)

        def compile_fn(model_in, records):
            entry, ctx, report = cached_compile(cache, key_for(records), model_in, user_so, settings.ep_options,
                                                devices, original=proto, external_data_dir=source.directory,
                                                kwargs=kwargs, note=note)
            if not entry.hit:
                built.append(entry.build_seconds)
            return (entry, ctx), report

        (entry, ctx), report, _records = compile_with_patches(compile_fn, model_input, proto_to_patch, disabled,
                                                              label=note, memo=FailureMemo(cache, key_for))
        seconds = sum(built) if not entry.hit else time.perf_counter() - start
        info = ArtifactInfo("cache" if entry.hit else "compiled", ctx, dict(shapes) if shapes else None, seconds,
                            entry.key)
        return ctx, report, info

    if not dynamic and _is_epcontext_model(proto):
        # an EPContext model given directly (e.g. `aipc compile` output): load it as it is
        _refuse_graph_option(settings, "this model is an EPContext model")
        model_input = source.path if source.path is not None else source.read_bytes()
        so = build_session_options(user_so, settings.ep_options, devices, load_configs)
        info = ArtifactInfo("precompiled", source.path or "<EPContext model bytes>", None, 0.0)
        return QnnStaticSession(model_input, so, kwargs, report=None, strict=settings.strict, label=label,
                                warn_key=warn_key, artifact=info)
    if not dynamic:
        start = time.perf_counter()
        artifact = resolve_precompiled(source, settings)
        if artifact is None or artifact.kind != "context_binary":
            _refuse_graph_option(settings, "no raw context binary is used for this model")
        if artifact is not None:
            ctx_proto = check_artifact_interface(artifact, proto)
            so = build_session_options(user_so, settings.ep_options, devices, load_configs)
            info = ArtifactInfo("precompiled", artifact.ctx_path, None, time.perf_counter() - start)
            return QnnStaticSession(artifact.ctx_path, so, kwargs, report=None, strict=settings.strict, label=label,
                                    warn_key=warn_key, artifact=info, model_meta=_model_meta_override(ctx_proto, proto))
        model_input = source.path if source.path is not None else source.read_bytes()
        ctx, report, info = compile_patched(model_input, proto, None, label, start)
        check_partition(report, strict=settings.strict, label=label, warn_key=warn_key, stacklevel=4)
        so = build_session_options(user_so, settings.ep_options, devices, strict_configs)
        return QnnStaticSession(ctx, so, kwargs, report=report, strict=settings.strict, label=label,
                                warn_key=warn_key, artifact=info)
    _refuse_graph_option(settings, "this model has dynamic input shapes (compiled per feed shape)")

    def build(shapes: dict[str, tuple]):
        start = time.perf_counter()
        note = f"{label} [{shapes_note(shapes)}]"
        artifact = resolve_specialization(source, settings, shapes)
        if artifact is not None:
            check_artifact_interface(artifact, proto)
            so = build_session_options(user_so, settings.ep_options, devices, load_configs)
            session = create_qnn_session(artifact.ctx_path, so, kwargs)
            report = PartitionReport.from_session(session, EP_NAME, source="artifact", note=note)
            return session, report, ArtifactInfo("precompiled", artifact.ctx_path, dict(shapes),
                                                 time.perf_counter() - start)
        spec = specialize(proto, shapes)
        ctx, report, info = compile_patched(spec.SerializeToString(), spec, shapes, note, start)
        if settings.strict:
            check_partition(report, strict=True, label=note, warn_key=warn_key)
        session = create_qnn_session(ctx, build_session_options(user_so, settings.ep_options, devices, strict_configs),
                                     kwargs)
        return session, report, info

    meta_so, _entries = copy_session_options(user_so)
    meta_so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    meta_so.enable_profiling = False
    model_input = source.path if source.path is not None else source.read_bytes()
    return QnnDynamicSession(model_input, meta_so, kwargs, build=build, dynamic_names=list(dynamic),
                             ep_options=settings.ep_options, max_specializations=settings.max_specializations,
                             strict=settings.strict, label=label, warn_key=warn_key)
