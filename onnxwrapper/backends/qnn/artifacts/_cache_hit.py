"""Opening a session whose compiled model is already in the compile cache, with only the work a hit needs.

:func:`open_cached` gives :meth:`QnnBackend.open <onnxwrapper.backends.qnn.QnnBackend.open>` the
session the full path (:func:`onnxwrapper.backends.qnn.open._open.open_session`) would give for a
static model compiled as it is — the same settings, cache key, partition report, warnings, session
options and metadata — without importing onnx, the operator patches, the repair recipes or the
compile-worker layer, and without parsing the model: what the full path reads from the parsed
model comes from the model's facts, recorded per model content in the compile cache by an earlier
full open (:mod:`onnxwrapper.backends.qnn.model._model_identity`). What stays on the hit path:

* the model's bytes are read in full (the first time in a process; the cache key needs their
  content hash, and the facts are found by it), its external data files too. A model without
  external data whose digest hint matches (:func:`~onnxwrapper.kernel.recorded_digest`: the file's
  size, times, inode and CRC-32 are those recorded with its sha256) is not hashed again; otherwise
  it is, and its hint is recorded for the next process;
* the cache entry is verified as the locked lookup verifies it (sizes always, the content once per
  process per file state), only without the lock (:meth:`onnxwrapper.kernel.ArtifactCache.peek`),
  and its provenance record must be the session's
  (:mod:`onnxwrapper.backends.qnn.compile._cache_provenance`).

Whenever anything is not that plain case — a bytes model or a path whose facts are not recorded, a
``.ort``/``.bin``/EPContext model, dynamic or control inputs, control flow, the options ``repairs``,
``graph`` or ``onnx``, recorded ``SessionOptions`` calls, a file next to the model a resolver could
use, resolvers registered by the user, no intact cache entry, nodes left on CPU that patches could
move — it returns ``None`` before anything visible happened, and the full path opens the session
(reporting, repairing or compiling as it always does).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

from onnxwrapper.backends.qnn.artifacts._artifacts import (ARTIFACT_RESOLVERS, RAW_BINARY_SUFFIXES,
                                                           resolve_epcontext_next_to_model)
from onnxwrapper.backends.qnn.compile import CTX_NAME, hit_problem, session_record
from onnxwrapper.backends.qnn.model import check_feed_rows, model_key, session_cache_key, stored_facts
from onnxwrapper.backends.qnn.session import (ASSIGNMENT_KEY, ArtifactInfo, check_partition, records_assignment,
                                              static_session, user_session_options)
from onnxwrapper.backends.qnn.settings import qnn_setup, request_ep_options
from onnxwrapper.kernel import ArtifactCache, ModelSource, PartitionReport, record_digest, recorded_digest, recorded_key

__all__ = ["is_ort_format", "is_raw_binary", "model_label", "open_cached"]


def model_label(source) -> str:
    """The model's name in messages: its file name quoted, or ``the model (bytes)``."""
    return repr(os.path.basename(source.path)) if source.path is not None else "the model (bytes)"


def is_ort_format(so, source) -> bool:
    """True for an ORT-format model: a ``.ort`` path, or ``session.load_model_format=ORT`` in ``so``."""
    if source.path is not None and source.path.lower().endswith(".ort"):
        return True
    if so is not None:
        try:
            return so.get_session_config_entry("session.load_model_format").upper() == "ORT"
        except RuntimeError:
            return False
    return False


def is_raw_binary(source) -> bool:
    """True for a model path naming a raw QNN context binary (``*.bin``)."""
    return source.path is not None and source.path.lower().endswith(".bin")


def _plain_request(config, source, user_so) -> bool:
    """The request itself allows the fast path (module docstring); the model file exists."""
    return (source.path is not None and not is_ort_format(user_so, source) and not is_raw_binary(source)
            and config.get("repairs") is None and config.get("graph") is None and config.get("onnx") is None
            and not recorded_key(user_so) and os.path.isfile(source.path))


def _nothing_next_to(source) -> bool:
    """No resolver of :mod:`~onnxwrapper.backends.qnn.artifacts._artifacts` has anything to find or to warn
    about next to the model: only the default resolver is registered, there is no
    ``<stem>_ctx.onnx``, and no raw-binary name exists but the model's own external data."""
    if ARTIFACT_RESOLVERS != [resolve_epcontext_next_to_model]:
        return False
    folder, stem = source.directory, source.stem
    if os.path.exists(os.path.join(folder, f"{stem}_ctx.onnx")):
        return False
    own = {os.path.normcase(p) for p in source.external_data_files()}
    return not any(os.path.exists(p) and os.path.normcase(p) not in own
                   for p in (os.path.join(folder, stem + suffix) for suffix in RAW_BINARY_SUFFIXES))


def open_cached(config, request, availability):
    """The :class:`~onnxwrapper.backends.qnn.session._session.QnnStaticSession` of a cache hit, or ``None``
    (the full path then opens the session; module docstring).

    Args:
        config: validated ``qnn`` backend options. request: the ``SessionRequest``.
        availability: the backend's probe result.

    Raises:
        What the full path raises first for the same request: ORT's ``TypeError`` for a bad model
        or ``sess_options`` argument, BackendOptionError (settings), BackendUnavailableError (QNN
        registration), BackendCapabilityError (declared shapes beyond the HTP compiler), PartitionError
        (``strict`` and nodes on CPU with patches off).
    """
    source = ModelSource.from_arg(request.path_or_bytes)
    user_so = user_session_options(request)
    if not _plain_request(config, source, user_so):
        return None
    hint_root = ArtifactCache(config.get("cache_dir")).root
    try:
        if source.known_digest() is None and recorded_digest(hint_root, source) is None:
            record_digest(hint_root, source, source.bytes_digest())  # hashed now: kept for the next process
        facts = stored_facts(config.get("cache_dir"), source)
    except Exception:  # noqa: BLE001 - unreadable now: the full path raises ORT's error for it
        return None
    if facts is None or not facts.plain:
        return None
    source.set_external_data(facts.external)
    if not all(os.path.exists(p) for p in source.external_data_files()) or not _nothing_next_to(source):
        return None
    label = model_label(source)
    stem = source.stem or "model"
    setup = qnn_setup(config, request_ep_options(request), source, user_so=user_so, kwargs=request.kwargs,
                      label=label, real_npu=availability.real_npu,
                      default_profile_path=os.path.abspath(f"onnxwrapper_qnn_profile_{stem}.csv"))
    settings = setup.settings
    setup = setup.register()
    model_hash = model_key(source, setup.user_so)
    warn_key = f"{model_hash}:{settings.describe()}:patches={settings.patches}"
    check_feed_rows(facts.feeds[settings.precision], settings, label)
    start = time.perf_counter()
    key = session_cache_key(setup, model_hash)
    entry = ArtifactCache(settings.cache_dir).peek(key)
    if entry is None or "partition" not in entry.meta:
        return None
    if hit_problem(entry, session_record(setup, model_hash), CTX_NAME) is not None:
        return None  # not this session's compile (or no record in the manifest): the full path decides
    ctx = entry.file(entry.meta.get("ctx", CTX_NAME))
    report = PartitionReport.from_dict(entry.meta["partition"]).with_source("cache")
    if not os.path.isfile(ctx) or (report.offloaded_nodes and settings.patches is not False):
        return None
    check_partition(report, strict=settings.strict, label=label, warn_key=warn_key)
    own_configs = {ASSIGNMENT_KEY: "1"} if records_assignment(setup.user_so) else {}
    strict_configs = dict(own_configs, **({"session.disable_cpu_ep_fallback": "1"} if settings.strict else {}))
    info = ArtifactInfo("cache", ctx, None, time.perf_counter() - start, key)
    session = static_session(setup, ctx, strict_configs, report, info, warn_key, model_meta=facts.modelmeta())
    # an entry moved, removed or damaged while ORT loads it is a typed error (and rebuilt next time)
    session.ort_args = dataclasses.replace(session.ort_args, guard=_loading(ArtifactCache(settings.cache_dir), entry,
                                                                            session.ort_args.guard))
    return session


def _loading(cache: ArtifactCache, entry, guard):
    """``guard`` (ORT's constructor guard of the session) inside the cache's guard of ``entry``."""
    @contextlib.contextmanager
    def both():
        with cache.loading(entry), (guard() if guard is not None else contextlib.nullcontext()):
            yield
    return both
