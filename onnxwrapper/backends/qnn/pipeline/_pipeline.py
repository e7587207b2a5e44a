"""The one QNN compile pipeline, shared by static sessions, dynamic-shape specializations and
:func:`~onnxwrapper.backends.qnn.compile_model`.

Lazy steps named ``<Output>From<Input>`` (as Polygraphy's loaders), built up front and evaluated
when called:

* the input is a :class:`~onnxwrapper.backends.qnn.settings._settings.QnnSetup` (settings, registered QNN
  devices, the user's session options);
* :class:`EpContextFromOnnx` — a static ONNX model → EPContext model + QNN context binary +
  partition: compile, patch the nodes the QNN EP left on CPU and compile again
  (:func:`~onnxwrapper.backends.qnn.pipeline._patching.compile_with_patches`), into an artifact *store*:
  :class:`CacheStore` (the content-addressed compile cache; sessions) or :class:`FolderStore`
  (a fresh folder; ``compile_model``). Dynamic models and models with control flow are
  specialized first (:func:`onnxwrapper.backends.qnn.model._specialize.specialize_for_qnn`: shapes, bound
  control inputs, folded ``If`` nodes).

Every compile is a :class:`~onnxwrapper.backends.qnn.workers._request.CompileRequest` served by a compile
worker process (:func:`~onnxwrapper.backends.qnn.workers._workers.default_pool`); a cache hit starts none.
Each ctx model gets a provenance record (:mod:`onnxwrapper.backends.qnn.compile._provenance`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Mapping

from onnxwrapper.backends.qnn.compile import (cached_compile, compile_cache_key, compile_hint, compile_seconds,
                                              default_compile_memory_mb, metadata_model, recoverable, session_record,
                                              typed_failure)
from onnxwrapper.backends.qnn.model import model_key
from onnxwrapper.backends.qnn.pipeline._patching import FailureMemo, compile_with_patches
from onnxwrapper.backends.qnn.platform import check_fp16_support, copy_session_options, session_options_state
from onnxwrapper.backends.qnn.settings import QnnSetup
from onnxwrapper.backends.qnn.workers import CompileRequest, default_pool
from onnxwrapper.errors import CompileFailedError
from onnxwrapper.kernel import ArtifactCache, PartitionReport

__all__ = ["CacheStore", "Compiled", "EpContextFromOnnx", "FolderStore", "compile_request", "model_key",
           "session_record"]


@dataclass(frozen=True)
class Compiled:
    """One compiled EPContext model.

    Attributes:
        ctx_path: the EPContext model (in the store). report: its partition (of the patched model
            when patched; ``report.patches`` lists the patches). records: the patch records.
        reused: True when the store already held it (a cache hit). seconds: compile seconds of what
            was compiled now (0 when reused). key: the cache key, or ``None``. directory: the
            folder holding the ctx model and its binary. meta: the store's record (``ctx``, ``bin``, …).
    """

    ctx_path: str
    report: PartitionReport
    records: tuple
    reused: bool
    seconds: float
    key: str | None
    directory: str
    meta: Mapping[str, Any]


def compile_request(setup: QnnSetup, proto, model_input, out_dir: str, *, record: Mapping[str, Any] | None,
                    shapes=None, note: str = "", ctx_name: str = "model_ctx.onnx",
                    kind: str = "epcontext", rung: str = "") -> CompileRequest:
    """The :class:`CompileRequest` of one compile of ``model_input`` (path, bytes, or a zero-argument
    callable returning bytes) into ``out_dir``.

    Args:
        setup: the session's :class:`QnnSetup`. proto: the original model (metadata source).
        record: the provenance record to stamp (:func:`~onnxwrapper.backends.qnn.compile._provenance.make_record`).
        shapes: the specialization shapes (for error messages). kind: ``"epcontext"`` or ``"dlc"``.
        rung: the recovery rung of this compile (progress lines). The budget is the settings'
            ``compile_timeout`` (at most what the model's total ``compile_budget`` has left:
            :func:`~onnxwrapper.backends.qnn.compile.compile_seconds`, which raises when nothing is) /
            ``compile_memory_mb`` (default: half the physical memory).
    """
    data = model_input() if callable(model_input) else model_input
    settings = setup.settings
    return CompileRequest(data, out_dir, dict(settings.ep_options), session_options_state(setup.user_so),
                          metadata_model(proto).SerializeToString(), setup.source.directory, ctx_name,
                          dict(setup.kwargs), note, setup.label, dict(shapes) if shapes else None,
                          dict(record) if record else None, kind, compile_seconds(settings.compile_timeout),
                          settings.compile_memory_mb or default_compile_memory_mb(), rung)


class CacheStore:
    """Compiles into the content-addressed compile cache (sessions: compile once per content).

    Args:
        setup: the :class:`QnnSetup` (registered). proto: the original ``onnx.ModelProto`` (its
            metadata goes into every ctx model). model_hash: content hash of the model (+ external data).
        pool: the :class:`~onnxwrapper.backends.qnn.workers._workers.WorkerPool` compiling misses
            (``None``: the process's :func:`~onnxwrapper.backends.qnn.workers._workers.default_pool`).
    """

    def __init__(self, setup: QnnSetup, proto, model_hash: str, pool=None, rung: str = "") -> None:
        self.setup = setup
        self.rung = rung
        self.proto = proto
        self.pool = pool
        self.cache = ArtifactCache(setup.settings.cache_dir)
        user_so = setup.user_so
        _copy, self.so_entries = copy_session_options(user_so)
        self.level = int(user_so.graph_optimization_level) if user_so is not None else 99
        self.model_hash = model_hash

    def with_setup(self, setup: QnnSetup, rung: str) -> "CacheStore":
        """The same store for another setup (the recovery ladder's options rung)."""
        return CacheStore(setup, self.proto, self.model_hash, self.pool, rung)

    def key(self, shapes: Mapping[str, tuple] | None, records: list, values: Mapping[str, Any] | None = None) -> str:
        """The cache key of one compile (model, compile options, shapes, control values, session config, patches)."""
        return compile_cache_key(self.model_hash, self.setup.settings.compile_options(), shapes, self.so_entries,
                                 self.level, records, values)

    def memo(self, shapes, values=None) -> FailureMemo:
        """Remembers patched compiles that failed, next to their would-be cache entries."""
        return FailureMemo(self.cache, lambda records: self.key(shapes, records, values))

    def build(self, model_input, records: list, shapes, note: str, values=None) -> tuple[Compiled, PartitionReport]:
        """Compile ``model_input`` on the worker pool into its cache entry; a hit compiles nothing,
        unless the entry's provenance record is not this session's (then it is rebuilt, with a WARNING).

        Returns:
            ``(Compiled, its PartitionReport)``.

        Raises:
            What the compile raises (:class:`~onnxwrapper.errors.BackendCompileError`, ORT's ``EPFail``,
            ``PartitionError`` …).
        """
        record = session_record(self.setup, self.model_hash, shapes, values)

        def build(directory: str):
            request = compile_request(self.setup, self.proto, model_input, directory, shapes=shapes, note=note,
                                      record=record, rung=self.rung)
            return (self.pool or default_pool()).run(request)

        entry, ctx, report = cached_compile(self.cache, self.key(shapes, records, values), build, note=note,
                                            expected=record)
        compiled = Compiled(ctx, report, tuple(records), entry.hit, 0.0 if entry.hit else entry.build_seconds,
                            entry.key, os.path.dirname(ctx), dict(entry.meta))
        return compiled, report


class FolderStore(CacheStore):
    """Compiles into fresh sub-folders of ``folder`` (``compile_model``: the caller moves the result).

    Its keys are a :class:`CacheStore`'s for the same model and options: the recovery ladder keeps
    its memo and the graph split's parts in the compile cache of the settings.

    Args:
        setup: the :class:`QnnSetup` (registered). proto: the original ``onnx.ModelProto``.
        folder: an existing, empty folder. ctx_name: file name of the EPContext model.
        record: the provenance record stamped into the ctx model, or ``None``.
        model_hash: content hash of the model (+ external data), for the keys. rung: the recovery
            rung compiling (progress lines).
    """

    def __init__(self, setup: QnnSetup, proto, folder: str, ctx_name: str,
                 record: Mapping[str, Any] | None = None, *, model_hash: str = "", rung: str = "") -> None:
        super().__init__(setup, proto, model_hash, None, rung)
        self.folder, self.ctx_name = folder, ctx_name
        self.record = record

    def with_setup(self, setup: QnnSetup, rung: str) -> "FolderStore":
        """The same folder store for another setup (the recovery ladder's options rung)."""
        return FolderStore(setup, self.proto, self.folder, self.ctx_name, self.record, model_hash=self.model_hash,
                           rung=rung)

    def memo(self, shapes, values=None) -> None:
        """No memo of failed patched compiles: a folder compile is not repeated by later sessions."""
        return None

    def build(self, model_input, records: list, shapes, note: str, values=None) -> tuple[Compiled, PartitionReport]:
        """Compile ``model_input`` on the default worker pool into a fresh numbered sub-folder of ``folder``.

        Returns:
            ``(Compiled, its PartitionReport)``; ``Compiled.key`` is ``None`` (not cached).

        Raises:
            What the compile raises (:class:`~onnxwrapper.errors.BackendCompileError`, ORT's ``EPFail`` …).
        """
        directory = os.path.join(self.folder, str(len(os.listdir(self.folder))))
        os.mkdir(directory)
        request = compile_request(self.setup, self.proto, model_input, directory, record=self.record, shapes=shapes,
                                  note=note, ctx_name=self.ctx_name, rung=self.rung)
        meta = default_pool().run(request)
        report = PartitionReport.from_dict(meta["partition"])
        compiled = Compiled(os.path.join(directory, self.ctx_name), report, tuple(records), False,
                            float(meta["compile_seconds"]), None, directory, dict(meta, model_input=request.model))
        return compiled, report


class EpContextFromOnnx:
    """Lazy step: a static ONNX model → :class:`Compiled` (EPContext model, context binary, partition).

    The QNN EP compiles the model; when the ``patches`` option allows it and nodes stay on CPU,
    they are patched and the patched model is compiled under its own key; a patched model the EP
    cannot compile falls back to the unpatched one (remembered by the store's memo). ``strict`` is
    judged by the caller, on the returned report.

    Args:
        store: :class:`CacheStore` or :class:`FolderStore`.
    """

    def __init__(self, store) -> None:
        self.store = store

    def __call__(self, model_input, proto, shapes: Mapping[str, tuple] | None = None, note: str = "",
                 values: Mapping[str, Any] | None = None) -> Compiled:
        """Compile ``model_input`` (path, bytes, or a callable returning bytes) whose proto is ``proto``.

        Args:
            shapes: the specialization shapes (``None`` for a static model as given).
            note: text for logs and the partition report (the model label, plus shapes).
            values: bound control-input values of the specialization (``None``: none).

        Raises:
            PrecisionUnsupportedError (a float model for a HTP without FP16, before any compile),
            PartitionError (QNN took no node, patches cannot help), BackendUnavailableError,
            BackendCompileError (the compiler process died), CompileFailedError (the HTP cannot
            finalize the graph, with QNN's error name and code; CompileBudgetError past the budget),
            ORT's errors for the model.
        """
        check_fp16_support(self.store.setup.settings, proto, note or self.store.setup.label)
        start = time.perf_counter()
        compiled_now: list[float] = []

        def compile_fn(model_in, records):
            compiled, report = self.store.build(model_in, records, shapes, note, values)
            if not compiled.reused:
                compiled_now.append(compiled.seconds)
            return compiled, report

        settings = self.store.setup.settings
        try:
            compiled, report, records = compile_with_patches(compile_fn, model_input, proto,
                                                             settings.disabled_patches(), label=note,
                                                             memo=self.store.memo(shapes, values))
        except Exception as exc:  # noqa: BLE001 - mapped to a typed error where one says more than ORT's
            if not recoverable(exc) or isinstance(exc, CompileFailedError):
                raise
            raise typed_failure(exc, label=note, shapes=shapes, hint=compile_hint(settings, proto)) from exc
        seconds = sum(compiled_now) if compiled_now and not compiled.reused else time.perf_counter() - start
        return Compiled(compiled.ctx_path, report, tuple(records), compiled.reused, seconds, compiled.key,
                        compiled.directory, compiled.meta)
