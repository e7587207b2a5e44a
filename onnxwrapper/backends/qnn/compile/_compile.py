"""Compile an ONNX model to a QNN EPContext model (+ raw QNN context binary), cached by content.

Where it runs: :func:`generate_epcontext` and :func:`dump_dlc` are what a compile *worker process*
executes (:mod:`onnxwrapper.backends.qnn.workers._workers`), so a compiler abort or crash never takes the
user's process down and the worker's QNN configuration is exactly the requested one; the user's
process only loads the result. Their arguments are therefore plain data (the session options as
:func:`~onnxwrapper.backends.qnn.platform._runtime.session_options_state`, the original's metadata as a
model without nodes).

Compilation is ORT's EPContext generation (measured on onnxruntime 1.31.1 + onnxruntime-qnn 2.7.0):
a QNN session created with the session configs ``ep.context_enable=1``,
``ep.context_embed_mode=0`` and ``ep.context_file_path=<dir>/model_ctx.onnx`` writes
``model_ctx.onnx`` (one ``EPContext`` node per QNN partition, plus any CPU nodes) and
``model_ctx_qnn.bin`` (a real QNN context binary, referenced by a relative path). Loading the
ctx model takes milliseconds instead of a compile. ``session.record_ep_graph_assignment_info=1``
on the generating session gives the per-node partition (:class:`~onnxwrapper.kernel.PartitionReport`),
which is stored with the cache entry because a loaded ctx model only shows ``EPContext`` nodes.

The generated ctx model gets the original model's metadata (producer, domain, doc strings,
model_version, metadata_props, graph name/doc), so ``get_modelmeta()`` equals the original's;
ORT's own ``ep_compatibility_info.QNNExecutionProvider`` entry is moved to the cache manifest
(the cache key already pins QNN SDK, ORT, soc_model and htp_arch), and the provenance record of
:mod:`onnxwrapper.backends.qnn.compile._provenance` is added (the façade reports the original's metadata).
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

from onnxwrapper.backends.qnn.compile._cache_provenance import RECORD_META, hit_problem
from onnxwrapper.backends.qnn.compile._compile_errors import context_load_error
from onnxwrapper.backends.qnn.compile._overridable import overridable_initializers, restore_overridable_initializers
from onnxwrapper.backends.qnn.compile._provenance import file_sha256, stamp, verify
from onnxwrapper.backends.qnn.platform import (EP_NAME, copy_session_options, ensure_registered, native_stdout_guard,
                                               qnn_versions, session_options_from_state)
from onnxwrapper.errors import ArtifactError, BackendUnavailableError, PartitionError
from onnxwrapper.kernel import ArtifactCache, CacheEntry, PartitionReport, __version__, make_key

__all__ = ["CACHE_FORMAT", "CTX_NAME", "ort_session_class", "build_session_options", "ep_creation_error",
           "qnn_creation_guard", "create_qnn_session", "metadata_model", "generate_epcontext", "compile_cache_key",
           "cached_compile", "complete_epcontext", "copy_model_metadata", "DLC_EP_OPTIONS", "qnn_ir_backend_path", "dump_dlc"]

_log = logging.getLogger("onnxwrapper.qnn")

#: part of every cache key; bump when what is stored changes. v2: overridable initializers stay graph
#: inputs. v3: explicit soc_model for fp32 (older entries may hold FP16 contexts under fp32 keys),
#: control-flow folding, provenance records
CACHE_FORMAT = "qnn-epcontext-v3"
CTX_NAME = "model_ctx.onnx"
_COMPAT_PREFIX = "ep_compatibility_info."


def ort_session_class():
    """onnxruntime's own ``InferenceSession`` class, from its defining module (unaffected by an
    import hot-patch of ``onnxruntime.InferenceSession``)."""
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

    return InferenceSession


def build_session_options(user_so, ep_options: Mapping[str, str], devices, configs: Mapping[str, str] | None = None,
                          *, profiling: bool | None = None, skip_recorded=()):
    """A fresh ``SessionOptions``: a copy of the user's, the extra ``configs`` and the QNN EP.

    Args:
        user_so: the user's ``SessionOptions`` or ``None`` (never modified).
        ep_options: QNN EP options for ``add_provider_for_devices``.
        devices: the QNN ``OrtEpDevice`` list. configs: extra session config entries.
        profiling: override ``enable_profiling`` (``None`` keeps the user's).
        skip_recorded: recorded ``SessionOptions`` calls not to replay (see ``copy_session_options``).
    """
    so, _entries = copy_session_options(user_so, skip_recorded=skip_recorded)
    for key, value in (configs or {}).items():
        so.add_session_config_entry(key, str(value))
    if profiling is not None:
        so.enable_profiling = profiling
    so.add_provider_for_devices(devices, dict(ep_options))
    return so


def ep_creation_error(exc: Exception) -> BackendUnavailableError | None:
    """The error to raise for ORT's ``RuntimeError`` "Error creating execution provider" or ``Fail``
    "… CreateProvider … while creating QNN EP" (the QNN EP could not be created; ORT would retry on
    CPU unless ``enable_fallback=0``), else ``None``."""
    text = str(exc)
    if "Error creating execution provider" not in text and not ("CreateProvider" in text and "QNN EP" in text):
        return None
    return BackendUnavailableError(
        f"The QNN execution provider could not be created: {exc}. onnxwrapper does not fall back to CPU; check the "
        f"QNN options (or run with backend='cpu').", backend="qnn", reason=str(exc))


@contextlib.contextmanager
def qnn_creation_guard() -> Iterator[None]:
    """Around ORT's constructor of a QNN session: :func:`native_stdout_guard`, and ORT's
    "Error creating execution provider" mapped to :class:`~onnxwrapper.errors.BackendUnavailableError`
    (see :func:`ep_creation_error`), a QNN context that cannot be loaded to
    :class:`~onnxwrapper.errors.ContextLoadError`, chained to ORT's error."""
    with native_stdout_guard():
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - ORT raises RuntimeError or its Fail here; others re-raised
            mapped = ep_creation_error(exc)
            if mapped is None and "Failed to load from EpContext" in str(exc):
                mapped = context_load_error(exc, "the model", 0.0)
            if mapped is None:
                raise
            raise mapped from exc


def create_qnn_session(model, so, kwargs: Mapping[str, Any] | None = None):
    """``onnxruntime.InferenceSession(model, so, enable_fallback=0, …)`` with the native stdout guard.

    Raises:
        BackendUnavailableError: the QNN EP could not be created (see :func:`ep_creation_error`),
            chained to ORT's error.
        Anything else ORT raises for the model (unchanged).
    """
    args = dict(kwargs or {})
    args["enable_fallback"] = 0
    with qnn_creation_guard():
        return ort_session_class()(model, so, **args)


def metadata_model(original):
    """A model without nodes or weights that carries what :func:`copy_model_metadata` reads from
    ``original``: its metadata (producer, domain, doc strings, model_version, metadata_props, graph
    name/doc) and its overridable initializers (graph inputs, with data-less initializer stubs).
    Small enough to send to a compile worker."""
    import onnx

    meta = onnx.ModelProto()
    meta.producer_name, meta.producer_version = original.producer_name, original.producer_version
    meta.domain, meta.model_version, meta.doc_string = original.domain, original.model_version, original.doc_string
    meta.graph.name, meta.graph.doc_string = original.graph.name, original.graph.doc_string
    meta.metadata_props.extend(original.metadata_props)
    for value in overridable_initializers(original):
        meta.graph.input.append(value)
        meta.graph.initializer.add().name = value.name
    return meta


def copy_model_metadata(ctx_path: str, original, provenance: Mapping[str, Any] | None = None,
                        bin_path: str | None = None) -> str | None:
    """Give the ctx model at ``ctx_path`` the metadata of ``original`` (an ``onnx.ModelProto``), its
    overridable initializers back as graph inputs (:func:`restore_overridable_initializers`) and,
    when given, the ``provenance`` record (:func:`onnxwrapper.backends.qnn.compile._provenance.stamp`, with
    the sha256 of ``bin_path``).

    Returns:
        ORT's removed ``ep_compatibility_info.*`` value (or ``None``).
    """
    import onnx

    ctx = onnx.load(ctx_path, load_external_data=False)
    compat = None
    for prop in ctx.metadata_props:
        if prop.key.startswith(_COMPAT_PREFIX):
            compat = prop.value
    ctx.producer_name = original.producer_name
    ctx.producer_version = original.producer_version
    ctx.domain = original.domain
    ctx.model_version = original.model_version
    ctx.doc_string = original.doc_string
    ctx.graph.name = original.graph.name
    ctx.graph.doc_string = original.graph.doc_string
    del ctx.metadata_props[:]
    ctx.metadata_props.extend(original.metadata_props)
    restore_overridable_initializers(ctx, original)
    if provenance is not None:
        stamp(ctx, provenance, bin_path)
    tmp = ctx_path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(ctx.SerializeToString())
    os.replace(tmp, ctx_path)
    return compat


def generate_epcontext(model, out_dir: str, session_state: Mapping[str, Any] | None, ep_options: Mapping[str, str], *,
                       original, external_data_dir: str | None = None, ctx_name: str = CTX_NAME,
                       kwargs: Mapping[str, Any] | None = None, note: str = "",
                       provenance: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Compile ``model`` into ``out_dir/<ctx_name>`` (+ ``<ctx stem>_qnn.bin``) in this process.

    Runs in a compile worker (see the module docstring); registers the QNN plugin EP when needed.

    Args:
        model: model path or serialized bytes (static shapes).
        out_dir: existing, empty directory.
        session_state: the user's session options as ``session_options_state`` (``None``: defaults).
        ep_options: QNN EP options.
        original: ``onnx.ModelProto`` whose metadata the ctx model gets (:func:`metadata_model`).
        external_data_dir: folder of the model's external data when ``model`` is bytes.
        note: text for the partition report (e.g. the specialization shapes).
        provenance: record stamped into the ctx model (without ``bin_sha256``), or ``None``.

    Returns:
        JSON-ready dict: ``ctx`` / ``bin`` (file names), ``partition`` (report dict),
        ``compile_seconds``, ``ep_options``, ``ep_compatibility_info``, ``provenance`` (the record
        stamped into the ctx model, with ``bin_sha256``; checked on cache hits).

    Raises:
        PartitionError: the QNN EP took no node at all (nothing was compiled).
        BackendUnavailableError: the QNN EP could not be created. ArtifactError: no ctx written.
        ORT's errors for the model (unchanged).
    """
    ctx_path = os.path.join(out_dir, ctx_name)
    configs = {"ep.context_enable": "1", "ep.context_embed_mode": "0", "ep.context_file_path": ctx_path,
               "session.record_ep_graph_assignment_info": "1"}
    if external_data_dir:
        configs["session.model_external_initializers_file_folder_path"] = external_data_dir
    # the rebuilt options hold the OrtValues of replayed add_initializer calls: keep them alive
    user_so = session_options_from_state(session_state)
    so = build_session_options(user_so, ep_options, ensure_registered(), configs, profiling=False)
    start = time.perf_counter()
    session = create_qnn_session(model, so, kwargs)
    seconds = time.perf_counter() - start
    report = PartitionReport.from_session(session, EP_NAME, source="compile", note=note)
    del session, user_so
    if report.target_nodes == 0:
        raise PartitionError(
            f"The QNN execution provider took none of the model's {len(report.nodes)} nodes ({report.summary()}): "
            f"the QNN backend could not be set up or supports none of these ops (see ORT's E-level log lines on "
            f"stderr); there is nothing to compile for the NPU.",
            backend="qnn", cpu_nodes=report.cpu_nodes, report=report)
    if not os.path.exists(ctx_path):
        raise ArtifactError(f"The QNN EP compiled the model but wrote no EPContext model at {ctx_path}.", path=ctx_path)
    stem = os.path.splitext(ctx_name)[0]
    bins = sorted(os.path.basename(p) for p in glob.glob(os.path.join(glob.escape(out_dir), stem + "*.bin")))
    bin_path = os.path.join(out_dir, bins[0]) if bins else None
    compat = copy_model_metadata(ctx_path, original, provenance, bin_path)
    record = dict(provenance, bin_sha256=file_sha256(bin_path) if bin_path else None) if provenance else None
    return {"ctx": ctx_name, "bin": bins[0] if bins else None, "partition": report.to_dict(),
            "compile_seconds": seconds, "ep_options": dict(ep_options), "ep_compatibility_info": compat,
            RECORD_META: record}


def compile_cache_key(model_hash: str, compile_options: Mapping[str, str], shapes: Mapping[str, Any] | None,
                      so_entries: Mapping[str, str], graph_optimization_level: int,
                      patches: Sequence[Mapping[str, Any]] | None = None,
                      values: Mapping[str, Any] | None = None) -> str:
    """Cache key of one compile: model content (+ external data), compile-relevant EP options,
    specialization shapes and bound control-input values, copied session config entries and
    optimization level, QNN SDK / onnxruntime-qnn / onnxruntime versions and :data:`CACHE_FORMAT`
    (which also versions the control-flow folding); for a patched model also the patch records
    (``PatchRecord.to_dict()``: patch, node, inserted nodes) and the onnxwrapper version (the patch
    implementations). Keys without patches or values do not change with ``patches=None``/``values=None``."""
    parts = {"format": CACHE_FORMAT, "model": model_hash, "ep_options": dict(sorted(compile_options.items())),
             "shapes": {k: list(v) for k, v in sorted((shapes or {}).items())}, "session_config": dict(so_entries),
             "graph_optimization_level": int(graph_optimization_level)}
    if values:
        parts["values"] = {str(k): repr(v) for k, v in sorted(values.items())}
    if patches:

        parts["patches"] = [dict(p) for p in patches]
        parts["onnxwrapper"] = __version__
    parts.update(qnn_versions())
    return make_key(parts)


def cached_compile(cache: ArtifactCache, key: str, build: Callable[[str], Mapping[str, Any]], *,
                   note: str = "", expected: Mapping[str, Any] | None = None) -> tuple[CacheEntry, str, PartitionReport]:
    """The cached EPContext for ``key``, built with ``build(directory) -> meta`` on a miss.

    ``build`` runs with the key's cache lock held and writes the ctx model and its binary into the
    empty temporary ``directory`` (e.g. by sending a request to a compile worker); its ``meta`` is
    what :func:`generate_epcontext` returns. A hit never calls it (no worker is started).

    With ``expected`` (the session's provenance record), a hit is served only when the entry's
    record matches it (:mod:`onnxwrapper.backends.qnn.compile._cache_provenance`); otherwise the entry is
    rebuilt, with a WARNING.

    Returns:
        ``(entry, ctx path, partition report)``; ``entry.hit`` tells whether it was compiled now.
        The report's ``source`` is ``"compile"`` on a miss and ``"cache"`` on a hit.
    """
    def logged_build(directory: str) -> Mapping[str, Any]:
        _log.info("onnxwrapper qnn: compiling %s for the QNN HTP …", note or "model")
        return build(directory)

    entry = cache.get_or_create(key, logged_build, complete_epcontext)
    if "partition" not in entry.meta or not os.path.isfile(entry.file(entry.meta.get("ctx", CTX_NAME))):
        _log.warning("onnxwrapper qnn: cache entry %s lacks its EPContext model or partition record; rebuilding",
                     key[:16])
        cache.remove(key)
        entry = cache.get_or_create(key, logged_build, complete_epcontext)
    why = _provenance_problem(entry, expected) if entry.hit and expected is not None else None
    if why is not None:
        _log.warning("onnxwrapper qnn: cache entry %s in %s does not answer for this session: %s; rebuilding it",
                     key[:16], cache.root, why)
        cache.remove(key)
        entry = cache.get_or_create(key, logged_build, complete_epcontext)
    ctx = entry.file(entry.meta.get("ctx", CTX_NAME))
    report = PartitionReport.from_dict(entry.meta["partition"])
    if entry.hit:
        report = report.with_source("cache")
    return entry, ctx, report


def complete_epcontext(directory: str, meta: Mapping[str, Any]) -> None:
    """The check of a compiled cache entry before it is published (``ArtifactCache.get_or_create``'s
    ``verify``): its EPContext model parses and the context binaries it names (``bin``; a stitched or
    graph-split model's ``bins``) are not empty — a file cut short by a full disk, whose write error
    the compiler did not report, is never stored.

    Raises:
        ArtifactError: a missing or empty file. ``google.protobuf`` ``DecodeError``: a cut model.
    """
    if "partition" not in meta:  # not a compiled model (nothing to parse)
        return
    import onnx  # a compile has imported it already

    ctx = os.path.join(directory, meta.get("ctx", CTX_NAME))
    if not os.path.isfile(ctx) or os.path.getsize(ctx) == 0:
        raise ArtifactError(f"the EPContext model {os.path.basename(ctx)} is missing or empty", path=ctx)
    onnx.load(ctx, load_external_data=False)
    for name in dict.fromkeys([meta.get("bin")] + list(meta.get("bins") or ())):  # one, or a stitched model's
        binary = os.path.join(directory, name) if name else None
        if binary is not None and (not os.path.isfile(binary) or not os.path.getsize(binary)):
            raise ArtifactError(f"the context binary {name} is missing or empty", path=binary)


def _provenance_problem(entry: CacheEntry, expected: Mapping[str, Any]) -> str | None:
    """:func:`~onnxwrapper.backends.qnn.compile._cache_provenance.hit_problem`; an entry written before
    records were kept in manifests is checked against the record inside its EPContext model."""
    why = hit_problem(entry, expected, CTX_NAME)
    if why != "no record":
        return why
    import onnx  # only for entries of an older onnxwrapper (the record is in their ctx model)

    ctx = entry.file(entry.meta.get("ctx", CTX_NAME))
    try:
        proto = onnx.load(ctx, load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - an unreadable ctx model is no answer
        return f"its EPContext model cannot be read ({type(exc).__name__})"
    return verify(ctx, proto, source_sha256=expected["source_sha256"], qnn_options=expected["qnn"],
                  shapes=expected.get("shapes"), values=expected.get("values"))


#: the QNN EP options of a DLC dump (QNN IR backend); set only by :func:`dump_dlc`, refused as raw options
DLC_EP_OPTIONS = ("dump_qnn_ir_dlc", "dump_qnn_ir_dlc_dir", "qnn_ir_backend_path")


def qnn_ir_backend_path() -> str:
    """onnxruntime-qnn's QNN IR backend library (``libQnnIr.so`` / ``QnnIr.dll``, next to its EP library).

    Raises:
        ArtifactError: onnxruntime-qnn ships no IR backend library.
    """
    import onnxruntime_qnn

    folder = os.path.dirname(onnxruntime_qnn.get_library_path())
    for name in ("libQnnIr.so", "QnnIr.dll"):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise ArtifactError(f"onnxruntime-qnn has no QNN IR backend library (libQnnIr.so / QnnIr.dll) in {folder}; DLC "
                        f"export needs it.", path=folder)


def dump_dlc(model, out_dir: str, session_state: Mapping[str, Any] | None, ep_options: Mapping[str, str], *,
             external_data_dir: str | None = None, kwargs: Mapping[str, Any] | None = None) -> list[str]:
    """Write one DLC per QNN partition of ``model`` into the folder ``out_dir`` (created if missing).

    A session with the compile's QNN EP options plus ``dump_qnn_ir_dlc=1``,
    ``dump_qnn_ir_dlc_dir=out_dir`` and ``qnn_ir_backend_path`` (:func:`qnn_ir_backend_path`)
    makes the QNN EP build its graphs with QNN's IR backend, which serializes each one as a
    ``.dlc`` (measured: real DLCs, onnxruntime-qnn 2.7.0). It cannot be the EPContext-generating
    session (measured: ``EP_FAIL … Failed to get QNN context binary size``), so this is a second
    session. ORT's log is raised to FATAL for it: the IR backend logs a harmless E-level line
    ("Failed to create HTP power config id").

    Args:
        model: model path or serialized bytes (static shapes). ep_options: the compile's QNN EP
            options (validated). session_state: the user's session options as
            ``session_options_state`` (``None``: defaults). Runs in a compile worker.

    Returns:
        The written ``.dlc`` paths, sorted.

    Raises:
        ArtifactError: no IR backend library, or no DLC written. ORT's errors for the session.
    """
    os.makedirs(out_dir, exist_ok=True)
    options = dict(ep_options, dump_qnn_ir_dlc="1", dump_qnn_ir_dlc_dir=out_dir,
                   qnn_ir_backend_path=qnn_ir_backend_path())
    configs = {"session.model_external_initializers_file_folder_path": external_data_dir} if external_data_dir else {}
    user_so = session_options_from_state(session_state)  # alive until the session exists (its OrtValues)
    so = build_session_options(user_so, options, ensure_registered(), configs, profiling=False)
    so.log_severity_level = 4
    session = create_qnn_session(model, so, kwargs)
    del session, user_so
    written = sorted(glob.glob(os.path.join(glob.escape(out_dir), "*.dlc")))
    if not written:
        raise ArtifactError(f"The QNN IR backend wrote no DLC into {out_dir}.", path=out_dir)
    return written
