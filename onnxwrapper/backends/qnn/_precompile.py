"""``precompile``: fill the compile cache for a model's specializations, several at once.

What a session compiles on a cache miss — one specialization per signature (shapes of the dynamic
inputs, values of the control inputs) — compiled ahead of time, ``jobs`` at a time on a
:class:`~onnxwrapper.backends.qnn.workers._workers.WorkerPool` of its own, into the cache sessions read
(``cache_dir`` option, ``$ONNXWRAPPER_CACHE_DIR`` or the platform cache). Later sessions of the
model with the same options then hit the cache for those signatures: no compile at ``run``. Same
pipeline as a session's (feed bounds, control-flow folding, patches, the recovery ladder with its
memo, provenance records), same keys.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnxruntime

from onnxwrapper.backends.base import SessionRequest
from onnxwrapper.backends.qnn._backend import QnnBackend, request_ep_options
from onnxwrapper.backends.qnn.artifacts import model_label
from onnxwrapper.backends.qnn.model import (DimGroups, Signature, check_feed_cost, control_inputs, model_key,
                                            signature_of, specialize_for_qnn)
from onnxwrapper.backends.qnn.pipeline import CacheStore
from onnxwrapper.backends.qnn.recovery import recovering_step
from onnxwrapper.backends.qnn.session import BucketRouter
from onnxwrapper.backends.qnn.settings import qnn_setup
from onnxwrapper.backends.qnn.workers import WorkerPool
from onnxwrapper.errors import BackendOptionError, BackendUnavailableError
from onnxwrapper.kernel import (ArtifactCache, ModelSource, available_memory, cpu_count, dynamic_inputs,
                                fix_free_dimensions, input_dims)

__all__ = ["PrecompileResult", "default_jobs", "precompile", "WORKER_BASE_MIB", "MAX_DEFAULT_JOBS"]

#: resident memory of an idle compile worker (ORT + the QNN backend loaded), MiB — measured
WORKER_BASE_MIB = 180
#: peak worker memory while compiling, per byte of model file, beyond :data:`WORKER_BASE_MIB`
#: (measured: a 23 MB int8 MiniLM peaks at ≈ 600 MiB, i.e. ≈ 18 × the file)
_PEAK_PER_MODEL_BYTE = 18
#: the most workers :func:`default_jobs` suggests (each compile is single-threaded enough that more
#: processes than cores only add memory)
MAX_DEFAULT_JOBS = 8


@dataclass(frozen=True)
class PrecompileResult:
    """One signature of :func:`precompile`.

    Attributes:
        shapes: shapes of the dynamic inputs. values: control-input values.
        origin: ``"compiled"`` (now) or ``"cache"`` (it was there, or an earlier signature of this call
            compiled the same shape bucket). seconds: compile time (s).
        key: the cache key. partition: the :class:`~onnxwrapper.kernel.PartitionReport`.
        bucket: the padded shapes the signature runs at (a certified shape bucket, as a session of
            the model would use for the same calls), or ``None`` when it runs at its own shapes.
    """

    shapes: Mapping[str, tuple]
    values: Mapping[str, Any]
    origin: str
    seconds: float
    key: str | None
    partition: Any
    bucket: Mapping[str, tuple] | None = None


def _shape(value) -> tuple:
    if isinstance(value, np.ndarray) or hasattr(value, "dtype"):
        return tuple(np.shape(value))
    return tuple(int(d) for d in value)


def _elements(entry: Mapping[str, Any]) -> int:
    """Elements fed by a signature entry (its inputs' shapes multiplied out): the compile-cost order."""
    total = 0
    for value in entry.values():
        try:
            total += int(np.prod(_shape(value), dtype=np.int64))
        except (TypeError, ValueError):
            continue
    return total


def default_jobs(pending: int | None = None, model_bytes: int = 0) -> int:
    """How many compile workers to run at once: usable CPUs, bounded by half the available memory
    (a worker ≈ :data:`WORKER_BASE_MIB` MiB + ≈ 18 × the model file while compiling), by
    :data:`MAX_DEFAULT_JOBS` and by ``pending`` (the number of compiles). Always ≥ 1.

    Args:
        pending: number of compiles to run (``None``: no bound). model_bytes: size of the largest
            model file to compile (bytes).
    """
    jobs = min(cpu_count(), MAX_DEFAULT_JOBS)
    available = available_memory()
    if available:
        per_worker = WORKER_BASE_MIB * 2 ** 20 + _PEAK_PER_MODEL_BYTE * max(0, int(model_bytes))
        jobs = min(jobs, max(1, int(available // 2 // per_worker)))
    if pending is not None:
        jobs = min(jobs, max(1, int(pending)))
    return jobs


def precompile(model, signatures: Sequence[Mapping[str, Any]], backend_options: Mapping[str, Any] | None = None,
               *, sess_options=None, jobs: int = 1, pool: WorkerPool | None = None,
               on_result: Callable[[int, Any], None] | None = None) -> list:
    """Compile ``model``'s specializations for ``signatures`` into the compile cache, ``jobs`` at once.

    Args:
        model: model path (or bytes) as sessions will open it.
        signatures: one entry per specialization: a feed (``{input: array}``, e.g. a captured one) or
            ``{input: shape}`` for every dynamic input, plus ``{control input: value}`` for control
            inputs. Inputs with static dims may be left out. A static model without control inputs
            has one specialization (pass ``[{}]``). Feeds given in the order an app makes its calls
            are routed into shape buckets as a session routes them (the ``shape_buckets`` option:
            growing dims padded into certified compiled sizes, certified on ORT's CPU with these very
            feeds), so that the app's run finds every size it needs; entries of shapes only are
            compiled at their shapes.
        backend_options / sess_options: as for the sessions that will use the cache (they are part
            of the cache key).
        jobs: compile worker processes used at once (≥ 1; each ≈ 180 MiB, more while it compiles a
            large model: ≈ 600 MiB peak measured for a 23 MB int8 MiniLM); ignored with ``pool``.
        pool: a :class:`~onnxwrapper.backends.qnn.WorkerPool` to compile on (shared by several
            models compiled at once; left running), instead of a pool of ``jobs`` of its own.
        on_result: called as ``on_result(index, result)`` for each signature, in order, as soon as its
            compile (and every one before it) is done, e.g. to advance a progress bar; its exceptions
            propagate.

    Returns:
        One entry per signature, in order: a :class:`PrecompileResult`, or the exception that
        signature raised (``BackendCapabilityError`` for a feed beyond the HTP compiler,
        ``BackendCompileError`` for a compiler crash, ORT's errors) — never raised.

    Raises:
        BackendUnavailableError, BackendOptionError (also for the ``repairs`` option); ORT's errors
        for a bad model.
    """
    availability = QnnBackend.probe()
    if not availability.available:
        raise BackendUnavailableError(f"Backend 'qnn' is not available: {availability.reason}.", backend="qnn",
                                      reason=availability.reason, install_hint=availability.install_hint)
    config = QnnBackend.validate_options(backend_options or {})
    if config.get("repairs") is not None:
        raise BackendOptionError("precompile does not apply repair recipes; open a session with the 'repairs' option "
                                 "to compile a repaired model.", backend="qnn")
    own_pool = pool is None
    pool = WorkerPool(jobs) if pool is None else pool
    pool.start()  # the workers boot while the model is read and hashed here
    try:
        return _precompile_on(pool, model, signatures, config, sess_options, availability.real_npu, on_result)
    finally:
        if own_pool:
            pool.close()


def _precompile_on(pool: WorkerPool, model, signatures: Sequence[Mapping[str, Any]], config: Mapping[str, Any],
                   sess_options, real_npu: bool, on_result) -> list:
    """:func:`precompile` on ``pool`` with validated ``config``."""
    source = ModelSource.from_arg(model)
    original = source.load_proto()
    proto = fix_free_dimensions(original, sess_options)  # the inputs as ORT sees them, as in a session
    request = SessionRequest(model, sess_options)
    label = model_label(source)
    setup = qnn_setup(config, request_ep_options(request), source, user_so=sess_options, kwargs={}, label=label,
                      real_npu=real_npu).register()
    dynamic, control = list(dynamic_inputs(proto)), control_inputs(proto)
    static_dims = {n: d for n, d in input_dims(proto).items() if d is not None and n not in dynamic}
    # the recovery ladder as in a session: what it takes is remembered in the cache the sessions read
    compile_epcontext = recovering_step(CacheStore(setup, original, model_key(source, sess_options), pool=pool))

    def compiled_one(entry: Mapping[str, Any]):
        try:
            feed = {k: v for k, v in entry.items() if isinstance(v, np.ndarray)}
            shapes = {k: _shape(v) for k, v in entry.items() if k not in control}
            signature = signature_of(shapes, entry, dynamic, control) if (dynamic or control) else Signature({}, {})
            check_feed_cost(proto, dict(static_dims, **shapes), setup.settings, label)
            spec, _count = specialize_for_qnn(proto, signature, feed or None, external_data_dir=source.directory)
            note = f"{label} [{signature.note()}]" if signature.note() else label
            compiled = compile_epcontext(lambda: spec.SerializeToString(), spec, dict(signature.shapes) or None, note,
                                         dict(signature.values) or None)
            return PrecompileResult(dict(signature.shapes), dict(signature.values),
                                    "cache" if compiled.reused else "compiled", compiled.seconds, compiled.key,
                                    compiled.report)
        except Exception as exc:  # noqa: BLE001 - returned per signature
            return exc

    routed, buckets = _routed(signatures, proto, dynamic, control, config, setup, model, sess_options)
    unique: dict[Any, int] = {}  # run signature → index of its first entry
    for index, entry in enumerate(routed):
        unique.setdefault(_signature_key(entry, control), index)
    firsts = sorted(set(unique.values()), key=lambda i: -_elements(routed[i]))
    # largest signatures first (longest compiles first: the last compiles, running alone, are short)
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=pool.size,
                                                     thread_name_prefix="onnxwrapper-qnn-precompile")
    try:
        futures = {i: executor.submit(compiled_one, routed[i]) for i in firsts}
        results = []
        for index, entry in enumerate(routed):
            first = unique[_signature_key(entry, control)]
            result = futures[first].result()
            if isinstance(result, PrecompileResult):
                own = {k: _shape(v) for k, v in signatures[index].items() if k in dynamic}
                result = dataclasses.replace(result, shapes=own or result.shapes, bucket=buckets[index],
                                             origin=result.origin if index == first else "cache")
            if on_result is not None:
                on_result(index, result)
            results.append(result)
        return results
    finally:  # Ctrl-C: the queued compiles are dropped at once, not waited for (the running ones are killed
        executor.shutdown(wait=False, cancel_futures=True)  # with the pool by precompile())


def _signature_key(entry: Mapping[str, Any], control) -> tuple:
    return (tuple(sorted((k, _shape(v)) for k, v in entry.items() if k not in control)),
            tuple(sorted((k, repr(np.asarray(v).reshape(-1)[0].item())) for k, v in entry.items() if k in control)))


def _routed(signatures, proto, dynamic, control, config, setup, model, sess_options):
    """The entries as a session routes the same calls: feeds of growing dims padded into their certified
    shape buckets (:class:`~onnxwrapper.backends.qnn.session.BucketRouter`, rules and certificates kept
    in the compile cache for the app's run); and per entry the bucket's shapes, or ``None``."""
    feeds = [e for e in signatures if dynamic and all(isinstance(e.get(n), np.ndarray) for n in dynamic)]
    if not feeds or not config.get("shape_buckets", True):
        return list(signatures), [None] * len(signatures)
    router = BucketRouter(DimGroups.of(proto, dynamic_inputs(proto)), model=proto, dynamic=dynamic_inputs(proto),
                          cache=ArtifactCache(setup.settings.cache_dir),
                          model_hash=model_key(setup.source, sess_options), strict=setup.settings.strict,
                          label=setup.label)
    cpu: list = []

    def cpu_session():
        if not cpu:
            cpu.append(onnxruntime.InferenceSession(model, sess_options, providers=["CPUExecutionProvider"]))
        return cpu[0]

    routed, buckets = [], []
    for entry in signatures:
        if not all(isinstance(entry.get(n), np.ndarray) for n in dynamic):
            routed.append(entry), buckets.append(None)
            continue
        shapes = {n: entry[n].shape for n in dynamic}
        padding = router.route(shapes, entry, cpu_session)
        if padding is None:
            routed.append(entry), buckets.append(None)
        else:
            routed.append(padding.pad_feed(entry)), buckets.append(padding.shapes(shapes))
    return routed, buckets
