"""The full path of ``QnnBackend.open``: every kind of model, compiled on a cache miss.

Order of work (each step can raise, nothing native happens before step 4):

1. the model argument → :class:`~onnxwrapper.kernel.model._model_source.ModelSource` + ``onnx.ModelProto``
   (ORT's exception classes and messages for bad input);
2. raw QNN EP options from the request (the user's SessionOptions, ``providers``/``provider_options``)
   + backend options → :class:`~onnxwrapper.backends.qnn.settings._settings.QnnSettings`;
3. the QNN plugin is registered (nothing is pinned: every session passes an explicit
   ``soc_model``, and compiles run in a worker process);
4. raw QNN context binary (``.bin`` model path): wrapped in an EPContext model and loaded;
   EPContext model given directly: loaded as it is;
   static model: a *verified* precompiled artifact next to the model, else cached / compiled EPContext;
   model with dynamic dims or control inputs (rank-0 inputs that decide an ``If``): a metadata
   session + specializations per (shapes, control values) built on demand (a verified
   ``<stem>_ctx*.onnx`` first, else cached / compiled: :mod:`onnxwrapper.backends.qnn.open._spec_builder`).

Compiles go through the one QNN compile pipeline (:mod:`onnxwrapper.backends.qnn.pipeline._pipeline`,
shared with ``compile_model``): feeds beyond the HTP compiler are refused first, shape-decided
``If`` nodes are folded, nodes the QNN EP leaves on CPU are patched and the model recompiled when
the ``patches`` option allows it; ``strict`` is judged on the partition after patching.

A static model whose compiled model is already in the cache is opened by
:mod:`onnxwrapper.backends.qnn.artifacts._cache_hit` without this module; this path records the model facts
that make that possible (:func:`~onnxwrapper.backends.qnn.model._model_identity.remember_facts`).
"""

from __future__ import annotations

import os
import time
from typing import Any

import onnx
import onnxruntime

from onnxwrapper.backends._artifact_files import companion_onnx
from onnxwrapper.backends.qnn._op_support import predicted_no_node
from onnxwrapper.backends.qnn.artifacts import (RAW_BINARY_SUFFIXES, check_artifact_interface, is_ort_format,
                                                is_raw_binary, model_label, probe_no_node, resolve_precompiled)
from onnxwrapper.backends.qnn.binary import wrap_raw_binary
from onnxwrapper.backends.qnn.compile import ort_session_class
from onnxwrapper.backends.qnn.model import (DimGroups, control_inputs, is_epcontext_model, model_key, remember_facts,
                                            structure_key)
from onnxwrapper.backends.qnn.open._spec_builder import JitModel, SpecializationBuilder, artifact_info, static_compile
from onnxwrapper.backends.qnn.pipeline import CacheStore, prepare_repairs, refuse_for_artifact, repaired_step
from onnxwrapper.backends.qnn.platform import copy_session_options
from onnxwrapper.backends.qnn.recovery import BatchSplitRunner, batch_split_of, recovering_step
from onnxwrapper.backends.qnn.session import (ASSIGNMENT_KEY, ArtifactInfo, BucketRouter, QnnCpuSession,
                                              QnnDynamicSession, check_partition, compile_or_verdict,
                                              context_budget_mb, no_node_policy, nonfinite_check, records_assignment,
                                              remember_verdict, static_session, user_facing_options,
                                              user_session_options)
from onnxwrapper.backends.qnn.settings import QnnSetup, qnn_setup, request_ep_options
from onnxwrapper.errors import BackendCapabilityError, BackendOptionError, PartitionError
from onnxwrapper.kernel import ModelSource, dynamic_inputs, fix_free_dimensions, modelmeta_from_onnx, recorded_key

__all__ = ["open_session"]

def _open_raw_binary(setup: QnnSetup, configs, warn_key: str):
    """Session on one graph of a raw QNN context binary, wrapped as an EPContext model
    (``onnxwrapper/backends/qnn/binary/_binary.py``); names/order/dtypes/metadata from the companion ONNX model."""
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


def open_session(config: dict[str, Any], request, availability, source: ModelSource | None = None, ahead=None):
    """Open a QNN backend session for ``request`` (see the module docstring).

    Args:
        config: validated backend options. request: the SessionRequest. availability: probe result.
        source: the request's model as a ``ModelSource`` already made (and hashed) by the caller, or
            ``None`` to make it here. ahead: a ``CpuSessionAhead`` of the model being created meanwhile
            (used when the QNN EP takes no node of it), or ``None``.
    """
    source = source if source is not None else ModelSource.from_arg(request.path_or_bytes)
    given_so = user_session_options(request)
    if is_ort_format(given_so, source):
        raise BackendCapabilityError("Backend 'qnn' compiles ONNX models; ORT-format (.ort) models are not "
                                     "supported. Pass the .onnx model.", backend="qnn")
    raw_binary = is_raw_binary(source)
    proto = None if raw_binary else source.load_proto()
    repair = (None if raw_binary else  # a repair recipe (docs/repair.md)
              prepare_repairs(config, source, proto, real_npu=availability.real_npu))
    if repair is not None:
        config, proto = repair.config, repair.proto
    stem = source.stem or "model"
    setup = qnn_setup(config, request_ep_options(request), source, user_so=given_so,
                      kwargs=request.kwargs, label=model_label(source), real_npu=availability.real_npu,
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
    compile_epcontext = recovering_step(store)  # the recovery ladder around the compile
    model_input = source.path if source.path is not None else source.read_bytes()
    compile_input = model_input
    if repair is not None:
        compile_epcontext = repaired_step(repair, setup, model_hash, step_for=recovering_step)  # the ladder too
        compile_input = repair.proto.SerializeToString()
    fixed = fix_free_dimensions(proto, user_so)  # the inputs as ORT sees them with the user's overrides
    dynamic = dynamic_inputs(fixed)
    control = control_inputs(fixed)
    # precompiled neighbours are verified against the model file alone: not for a repaired model, nor
    # when the user's SessionOptions change it (recorded initializers, overrides)
    neighbours = repair is None and not recorded_key(user_so)

    if not dynamic and not control and is_epcontext_model(proto):
        # an EPContext model given directly (e.g. `aipc compile` output): load it as it is
        _refuse_graph_option(settings, "this model is an EPContext model")
        refuse_for_artifact(config, "this EPContext model")
        info = ArtifactInfo("precompiled", source.path or "<EPContext model bytes>", None, 0.0)
        return static_session(setup, model_input, load_configs, None, info, warn_key)
    no_node = predicted_no_node(fixed, label) if repair is None else None
    if no_node is None and repair is None and not is_epcontext_model(proto):
        no_node = probe_no_node(setup, fixed)  # the candidates compiled alone
    if no_node is not None:  # the next process opens its CPU session before parsing the model
        remember_verdict(store.cache, structure_key(source, user_so), settings.compile_options(), no_node)
    if no_node is not None:  # nothing for the NPU: ORT's own CPU session, dynamic shapes and all, no compile
        no_node_policy(no_node, strict=settings.strict, label=label, warn_key=warn_key)
        return QnnCpuSession(request.path_or_bytes, user_so, request.kwargs, report=no_node,
                             ep_options=settings.ep_options, ahead=ahead)
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
                try:
                    return compile_epcontext(model_in, model_proto, None, label), None
                except PartitionError as exc:  # the recipe runs every node on the CPU
                    if exc.report is None:
                        raise
                    return None, exc.report
            return compile_or_verdict(compile_epcontext, store, settings.patches, model_in, model_proto, None, label)

        if repair is None:  # a later session of these bytes may then open its cache entry without parsing them
            remember_facts(settings.cache_dir, source, proto)
        result = static_compile(setup, fixed, compile_input, compile_static)
        if isinstance(result, JitModel):  # ORT cannot write its EPContext model: ORT compiles it at load
            info = ArtifactInfo("jit", "<in memory>", None, 0.0)
            return static_session(setup, result.data, dict(load_configs, **result.configs), None, info, warn_key,
                                  model_meta=modelmeta_from_onnx(proto))
        compiled, no_node = result
        if no_node is not None:
            no_node_policy(no_node, strict=settings.strict, label=label, warn_key=warn_key)
            return QnnCpuSession(request.path_or_bytes, user_so, request.kwargs, report=no_node,
                                 ep_options=settings.ep_options, ahead=ahead)
        check_partition(compiled.report, strict=settings.strict, label=label, warn_key=warn_key)
        split = batch_split_of(compiled)
        if split is None:
            return static_session(setup, compiled.ctx_path, strict_configs, compiled.report,
                                  artifact_info(compiled, None), warn_key, model_meta=modelmeta_from_onnx(proto))

        def build_split(_signature, _feed=None):  # run in chunks of the smaller batch the ladder compiled
            session = SpecializationBuilder.load(setup, compiled.ctx_path, strict_configs)
            return BatchSplitRunner(session, *split), compiled.report, artifact_info(compiled, None)
        return _dynamic_session(setup, request, model_input, user_so, own_configs, build_split, [], [], warn_key)
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
    buckets = None
    if config.get("shape_buckets", True) and dynamic:
        buckets = BucketRouter(DimGroups.of(fixed, dynamic), model=fixed, dynamic=dynamic, cache=store.cache,
                               model_hash=model_hash,
                               strict=settings.strict, label=label)
    return _dynamic_session(setup, request, model_input, user_so, own_configs, build, list(dynamic), control,
                            warn_key, buckets=buckets, output_names=[o.name for o in fixed.graph.output])


def _dynamic_session(setup: QnnSetup, request, model_input, user_so, own_configs, build, dynamic, control,
                     warn_key: str, buckets=None, output_names=()) -> QnnDynamicSession:
    """The session of a model compiled per feed (dynamic dims, control inputs) or run in chunks of a
    smaller batch (a batch split of the recovery ladder): a never-run metadata session of the model,
    runs routed to what ``build`` gives for the feed's signature."""
    settings, label = setup.settings, setup.label
    meta_so, _entries = copy_session_options(user_so)
    user_facing_options(meta_so, user_so)
    if not meta_so.optimized_model_filepath:  # never run: no optimization needed (else ORT writes the model)
        meta_so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    if own_configs:
        meta_so.add_session_config_entry(ASSIGNMENT_KEY, "1")
    return QnnDynamicSession(model_input, meta_so, setup.kwargs, build=build, dynamic_names=dynamic,
                             ep_options=settings.ep_options, max_specializations=settings.max_specializations,
                             strict=settings.strict, label=label, warn_key=warn_key, user_so=user_so,
                             control_names=control, nonfinite_check=nonfinite_check(settings, label),
                             context_memory_mb=context_budget_mb(settings), buckets=buckets,
                             output_names=output_names)
