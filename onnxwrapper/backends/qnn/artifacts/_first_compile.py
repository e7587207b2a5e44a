"""The first compile of a plain static model, with the model read by the compile worker only.

A process's first QNN session of a model that is not in the compile cache used to import onnx
(≈ 0.2 s), parse and analyse the model, send it to the compile worker — which parsed it again — and
load the result: about 0.55 s of the user's process before the compile even started (measured on
light squeezenet, x86-64 host), where raw ORT + QNN EP compiles the same model in-process in
0.3–0.8 s. For the common case — a model path with static inputs, no control flow, nothing next to
it, a plain request — this does the work once, where the compile happens:

1. :func:`first_compile_job` runs in the compile worker (the user's compile server, usually warm
   already): it parses the model, records its facts in the compile cache
   (:func:`~onnxwrapper.backends.qnn.model.remember_facts`), and — when the model is plain, its
   declared feeds within the HTP compiler's limits, and some op has a QNN EP builder — compiles it
   as given into the very cache entry (key, provenance record) a session of the full open path
   compiles first;
2. the user's process then opens that entry as any cache hit
   (:func:`~onnxwrapper.backends.qnn.artifacts.open_cached`): no onnx import, no parse.

Anything else — the worker finds the model is not plain, a compile that fails, a budget exceeded,
no worker — returns ``None``, and the full open path decides as it always did. A compile failure the
recovery ladder works on is kept (:func:`~onnxwrapper.backends.qnn.compile.remember_first_failure`):
the ladder starts from it instead of compiling the same graph again.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from onnxwrapper.backends.qnn.artifacts._artifacts import ARTIFACT_RESOLVERS, resolve_epcontext_next_to_model
from onnxwrapper.backends.qnn.artifacts._cache_hit import is_ort_format, is_raw_binary, model_label
from onnxwrapper.backends.qnn.compile import (cached_compile, default_compile_memory_mb, metadata_model, recoverable,
                                              remember_first_failure, session_record)
from onnxwrapper.backends.qnn.model import check_feed_rows, facts_of, model_key, remember_facts, session_cache_key
from onnxwrapper.backends.qnn.platform import session_options_from_state, session_options_state
from onnxwrapper.backends.qnn.settings import qnn_setup, request_ep_options
from onnxwrapper.errors import BackendCapabilityError, CompileBudgetError
from onnxwrapper.kernel import ArtifactCache, ModelSource, recorded_key

__all__ = ["first_compile", "first_compile_job", "first_failure_token", "run_job", "writable"]

_log = logging.getLogger("onnxwrapper.qnn")


def first_compile_job(config: Mapping[str, Any], raw_ep_options: Mapping[str, Any], path: str,
                      so_state: Mapping[str, Any] | None, label: str, real_npu: bool) -> str:
    """Step 1 of the module docstring, in the compile worker. Returns ``"compiled"`` (compiled now into
    the cache), ``"cache"`` (another process had compiled it: found under the key's lock), ``"not plain"``, ``"no builder"`` (no op the QNN EP could take) or ``"refused"``
    (declared feeds beyond the HTP compiler; the full path raises it)."""
    from onnxwrapper.backends.qnn._op_support import predicted_no_node
    from onnxwrapper.backends.qnn.workers import CompileRequest, execute

    source = ModelSource(path, None)
    user_so = session_options_from_state(so_state) if so_state is not None else None
    proto = source.load_proto()
    remember_facts(config.get("cache_dir"), source, proto)
    facts = facts_of(source, proto)
    if not facts.plain:
        return "not plain"
    if predicted_no_node(proto, label) is not None:
        return "no builder"
    setup = qnn_setup(config, raw_ep_options, source, user_so=user_so, kwargs={}, label=label,
                      real_npu=real_npu).register()
    try:
        check_feed_rows(facts.feeds[setup.settings.precision], setup.settings, label)
    except BackendCapabilityError:
        return "refused"
    model_hash = model_key(source, user_so)
    record = session_record(setup, model_hash)

    def build(directory: str):
        return execute(CompileRequest(source.path, directory, dict(setup.settings.ep_options), so_state,
                                      metadata_model(proto).SerializeToString(), source.directory, note=label,
                                      label=label, provenance=record))

    entry, _ctx, _report = cached_compile(ArtifactCache(setup.settings.cache_dir), session_cache_key(setup, model_hash),
                                          build, note=label, expected=record)
    return "cache" if entry.hit else "compiled"


def _plain_path_request(config: Mapping[str, Any], source, user_so) -> bool:
    """The request is one :func:`~onnxwrapper.backends.qnn.artifacts.open_cached` can serve once compiled."""
    if source.path is None or not os.path.isfile(source.path) or is_raw_binary(source) or \
            is_ort_format(user_so, source) or recorded_key(user_so):
        return False
    if any(config.get(option) is not None for option in ("repairs", "graph", "onnx")):
        return False
    if ARTIFACT_RESOLVERS != [resolve_epcontext_next_to_model]:
        return False
    return not os.path.exists(os.path.join(source.directory, f"{source.stem}_ctx.onnx"))


def first_failure_token(path: str, settings) -> tuple:
    """What a failed first compile is kept under: the model file and the settings it was compiled with."""
    return ("first-compile", os.path.abspath(path), settings.describe())


def writable(root: str) -> bool:
    """Whether the cache root (or, when it does not exist yet, its nearest existing parent) is writable."""
    path = root
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return os.access(path, os.W_OK)


def run_job(job, settings, config: Mapping[str, Any], request, availability, source, user_so,
            budget_seconds: float | None) -> Any:
    """Run ``job(config, raw QNN EP options, model, session-options state, label, real_npu)`` — a module-level
    function the worker imports — on the process's compile pool, budget and all, with ``source``'s model as
    its path (absolute) or, for a model given as bytes, its bytes. Returns what the job returns.

    Raises:
        What the pool raises (the worker's error, ``CompileBudgetError``, no worker)."""
    # imported here: a cache hit in a new process imports no compile-worker layer (measured: 10-20 ms)
    from onnxwrapper.backends.qnn.workers import CompileRequest, default_pool

    model = os.path.abspath(source.path) if source.path is not None else source.read_bytes()
    args = (dict(config), dict(request_ep_options(request)), model,
            session_options_state(user_so) if user_so is not None else None, model_label(source),
            bool(availability.real_npu))
    return default_pool().run(CompileRequest(
        model if isinstance(model, str) else b"", settings.cache_dir or "", dict(settings.ep_options), kind="job",
        label=model_label(source), budget_seconds=budget_seconds,
        budget_mb=settings.compile_memory_mb or default_compile_memory_mb(), job=job, job_args=args))


def first_compile(config: Mapping[str, Any], request, availability, source, user_so) -> str | None:
    """Run :func:`first_compile_job` on the process's compile pool for a plain path request (module
    docstring); its answer, or ``None`` when it does not apply or failed (never raises: the full open
    path decides and reports)."""
    if not _plain_path_request(config, source, user_so):
        return None
    try:
        settings = qnn_setup(config, request_ep_options(request), source, user_so=user_so, kwargs={},
                             label=model_label(source), real_npu=availability.real_npu).settings
        if not writable(ArtifactCache(settings.cache_dir).root):
            return None  # a read-only cache: the full path compiles into a temporary one, once
        budget = min(x for x in (settings.compile_timeout, settings.compile_budget) if x is not None) \
            if (settings.compile_timeout or settings.compile_budget) else None
        return run_job(first_compile_job, settings, config, request, availability, source, user_so, budget)
    except Exception as exc:  # noqa: BLE001 - the full path meets and reports any real problem
        if recoverable(exc) or isinstance(exc, CompileBudgetError):  # the ladder starts from this failure
            remember_first_failure(first_failure_token(source.path, settings), exc)
        _log.debug("onnxwrapper qnn: first compile in the worker not used (%s: %s)", type(exc).__name__, exc)
        return None
