"""The one QNN compile pipeline, shared by static sessions, dynamic-shape specializations and
:func:`~onnxwrapper.backends.qnn.compile_model`.

Lazy steps named ``<Output>From<Input>`` (as Polygraphy's loaders), built up front and evaluated
when called:

* the input is a :class:`~onnxwrapper.backends.qnn._settings.QnnSetup` (settings, registered QNN
  devices, the user's session options);
* :class:`EpContextFromOnnx` — a static ONNX model → EPContext model + QNN context binary +
  partition: compile, patch the nodes the QNN EP left on CPU and compile again
  (:func:`~onnxwrapper.backends.qnn._patching.compile_with_patches`), into an artifact *store*:
  :class:`CacheStore` (the content-addressed compile cache; sessions) or :class:`FolderStore`
  (a fresh folder; ``compile_model``). Dynamic models are specialized first
  (:func:`onnxwrapper.kernel.specialize`, one static shape per call).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Mapping

from onnxwrapper.backends.qnn._compile import cached_compile, compile_cache_key, generate_epcontext
from onnxwrapper.backends.qnn._patching import FailureMemo, compile_with_patches
from onnxwrapper.backends.qnn._runtime import copy_session_options
from onnxwrapper.backends.qnn._settings import QnnSetup
from onnxwrapper.kernel import ArtifactCache, PartitionReport

__all__ = ["CacheStore", "Compiled", "EpContextFromOnnx", "FolderStore"]


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


class CacheStore:
    """Compiles into the content-addressed compile cache (sessions: compile once per content).

    Args:
        setup: the :class:`QnnSetup` (registered). proto: the original ``onnx.ModelProto`` (its
            metadata goes into every ctx model). model_hash: content hash of the model (+ external data).
    """

    def __init__(self, setup: QnnSetup, proto, model_hash: str) -> None:
        self.setup = setup
        self.proto = proto
        self.cache = ArtifactCache(setup.settings.cache_dir)
        user_so = setup.user_so
        _copy, self.so_entries = copy_session_options(user_so)
        self.level = int(user_so.graph_optimization_level) if user_so is not None else 99
        self.model_hash = model_hash

    def key(self, shapes: Mapping[str, tuple] | None, records: list) -> str:
        """The cache key of one compile (model, compile options, shapes, session config, patches)."""
        return compile_cache_key(self.model_hash, self.setup.settings.compile_options(), shapes, self.so_entries,
                                 self.level, records)

    def memo(self, shapes) -> FailureMemo:
        """Remembers patched compiles that failed, next to their would-be cache entries."""
        return FailureMemo(self.cache, lambda records: self.key(shapes, records))

    def build(self, model_input, records: list, shapes, note: str) -> tuple[Compiled, PartitionReport]:
        s = self.setup
        entry, ctx, report = cached_compile(self.cache, self.key(shapes, records), model_input, s.user_so,
                                            s.settings.ep_options, s.devices, original=self.proto,
                                            external_data_dir=s.source.directory, kwargs=s.kwargs, note=note)
        compiled = Compiled(ctx, report, tuple(records), entry.hit, 0.0 if entry.hit else entry.build_seconds,
                            entry.key, os.path.dirname(ctx), dict(entry.meta))
        return compiled, report


class FolderStore:
    """Compiles into fresh sub-folders of ``folder`` (``compile_model``: the caller moves the result).

    Args:
        setup: the :class:`QnnSetup` (registered). proto: the original ``onnx.ModelProto``.
        folder: an existing, empty folder. ctx_name: file name of the EPContext model.
    """

    def __init__(self, setup: QnnSetup, proto, folder: str, ctx_name: str) -> None:
        self.setup, self.proto, self.folder, self.ctx_name = setup, proto, folder, ctx_name

    def memo(self, shapes) -> None:
        return None

    def build(self, model_input, records: list, shapes, note: str) -> tuple[Compiled, PartitionReport]:
        s = self.setup
        directory = os.path.join(self.folder, str(len(os.listdir(self.folder))))
        os.mkdir(directory)
        data = model_input() if callable(model_input) else model_input
        meta = generate_epcontext(data, directory, s.user_so, s.settings.ep_options, s.devices, original=self.proto,
                                  external_data_dir=s.source.directory, ctx_name=self.ctx_name, note=note)
        report = PartitionReport.from_dict(meta["partition"])
        compiled = Compiled(os.path.join(directory, self.ctx_name), report, tuple(records), False,
                            float(meta["compile_seconds"]), None, directory, dict(meta, model_input=data))
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

    def __call__(self, model_input, proto, shapes: Mapping[str, tuple] | None = None, note: str = "") -> Compiled:
        """Compile ``model_input`` (path, bytes, or a callable returning bytes) whose proto is ``proto``.

        Args:
            shapes: the specialization shapes (``None`` for a static model as given).
            note: text for logs and the partition report (the model label, plus shapes).

        Raises:
            PartitionError (QNN took no node, patches cannot help), BackendUnavailableError,
            BackendConfigConflictError, ORT's errors for the model.
        """
        start = time.perf_counter()
        compiled_now: list[float] = []

        def compile_fn(model_in, records):
            compiled, report = self.store.build(model_in, records, shapes, note)
            if not compiled.reused:
                compiled_now.append(compiled.seconds)
            return compiled, report

        compiled, report, records = compile_with_patches(compile_fn, model_input, proto,
                                                         self.store.setup.settings.disabled_patches(),
                                                         label=note, memo=self.store.memo(shapes))
        seconds = sum(compiled_now) if compiled_now and not compiled.reused else time.perf_counter() - start
        return Compiled(compiled.ctx_path, report, tuple(records), compiled.reused, seconds, compiled.key,
                        compiled.directory, compiled.meta)
