"""Where the ORT session of one specialization comes from: a verified precompiled artifact next to the
model, else the compile cache (compiling on a miss, in a worker process).

One exception, measured on onnxruntime 1.32 + onnxruntime-qnn 2.7.0: when an ``If`` with a
data-dependent condition stays in the graph and its branches hold initializers, ORT cannot *write*
the EPContext model (``… references an ORT in-memory address marker``) although a just-in-time
session of the same model runs. Such a model is then compiled just in time, in this process, by
the session's own ORT constructor (:class:`JitModel`; not cached, one INFO line): the QNN EP still
takes the nodes around the ``If``.

:class:`SpecializationBuilder` is the ``build`` callable of
:class:`~onnxwrapper.backends.qnn.session._session.QnnDynamicSession` (models with dynamic input dims or
control inputs) and :func:`static_compile` the compile of a static model; both bound the feed's cost
first (:func:`~onnxwrapper.backends.qnn.model._feed_limits.check_feed_cost`) and fold control flow
(:func:`~onnxwrapper.backends.qnn.model._specialize.specialize_for_qnn`).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Mapping

from onnxwrapper.backends.qnn.artifacts import check_artifact_interface, resolve_specialization
from onnxwrapper.backends.qnn.compile import build_session_options, create_qnn_session, epcontext_unwritable
from onnxwrapper.backends.qnn.model import Signature, check_feed_cost, specialize_for_qnn, structure_key
from onnxwrapper.backends.qnn.platform import EP_NAME
from onnxwrapper.backends.qnn.recovery import BatchSplitRunner, batch_split_of
from onnxwrapper.backends.qnn.session import (ArtifactInfo, BAKED_IN, check_partition, compile_or_verdict,
                                              model_verdict, remember_verdict)
from onnxwrapper.errors import PartitionError
from onnxwrapper.kernel import PartitionReport, has_control_flow, input_dims

__all__ = ["JitModel", "SpecializationBuilder", "artifact_info", "static_compile"]

_log = logging.getLogger("onnxwrapper.qnn")


@dataclass(frozen=True)
class JitModel:
    """A model to compile just in time in this process (see the module docstring).

    Attributes:
        data: the serialized (specialized, folded) model. configs: session config entries it needs
            (the folder of its external data).
    """

    data: bytes
    configs: Mapping[str, str]


def _jit(setup, model, exc: BaseException, label: str) -> JitModel:
    _log.info("onnxwrapper qnn: ORT cannot write the EPContext model of %s (control flow left in the graph: %s); "
              "compiling it just in time in this process, not cached", label, str(exc).splitlines()[-1][:160])
    folder = setup.source.directory
    return JitModel(model.SerializeToString(),
                    {"session.model_external_initializers_file_folder_path": folder} if folder else {})


def artifact_info(compiled, shapes) -> ArtifactInfo:
    """The :class:`ArtifactInfo` of a compiled (or cached) EPContext model."""
    return ArtifactInfo("cache" if compiled.reused else "compiled", compiled.ctx_path,
                        dict(shapes) if shapes else None, compiled.seconds, compiled.key)


def static_compile(setup, proto, model_input, compile_fn):
    """Compile (or find in the cache) a static model: its declared shapes bounded, its shape-decided
    ``If`` nodes folded (only for models with control flow; others are compiled as given).

    Args:
        setup: the session's ``QnnSetup``. proto: the model (its inputs as ORT sees them).
        model_input: what to compile when nothing is folded (path or bytes).
        compile_fn: ``compile_fn(model_input, proto)`` — the compile (its result is returned).

    Returns:
        What ``compile_fn`` returns, or a :class:`JitModel` when ORT cannot write the EPContext model
        of a graph with control flow left in it.
    """
    shapes = {name: dims for name, dims in input_dims(proto).items() if dims is not None}
    check_feed_cost(proto, shapes, setup.settings, setup.label)
    folded, count = specialize_for_qnn(proto, Signature({}, {}), None, external_data_dir=setup.source.directory)
    try:
        if count:
            return compile_fn(lambda: folded.SerializeToString(), folded)
        return compile_fn(model_input, proto)
    except Exception as exc:  # noqa: BLE001 - only ORT's EPContext-writing failure is handled here
        if not (epcontext_unwritable(exc) and has_control_flow(folded)):
            raise
        return _jit(setup, folded, exc, setup.label)


class SpecializationBuilder:
    """``builder(signature, feed) -> (ORT session, PartitionReport, ArtifactInfo)`` for one specialization.

    Args:
        setup: the session's ``QnnSetup`` (registered). proto: the model (inputs as ORT sees them).
        compile_epcontext: the session's compile step (``EpContextFromOnnx``, or a repaired step).
        store: the session's ``CacheStore``. patches: the ``patches`` option for the no-node verdict,
            or ``None`` to compile without one (a repaired model).
        load_configs / strict_configs: session config entries for loading precompiled / compiled ctx models.
        warn_key: identity of the model for warn-once. neighbours: look for verified precompiled
            specializations next to the model. on_cpu: ``on_cpu()`` → ORT's CPU session of the model
            (for a specialization the QNN EP takes no node of).
    """

    def __init__(self, setup, proto, compile_epcontext, store, *, load_configs: Mapping[str, str],
                 strict_configs: Mapping[str, str], warn_key: str, neighbours: bool, on_cpu, patches) -> None:
        self.setup, self.proto, self.compile_epcontext, self.store = setup, proto, compile_epcontext, store
        self.load_configs, self.strict_configs, self.warn_key = dict(load_configs), dict(strict_configs), warn_key
        self.neighbours, self.on_cpu, self.patches = neighbours, on_cpu, patches

    def cached(self, shapes: Mapping[str, tuple], values: Mapping[str, Any] | None = None) -> bool:
        """Whether the compile cache holds the specialization of ``shapes`` (and control ``values``) as
        given (e.g. precompiled with ``aipc compile --from-capture``): a shape bucket is then not used
        for a call of exactly these shapes. One ``stat``; never raises."""
        try:
            key = self.store.key({k: tuple(v) for k, v in shapes.items()} or None, [], dict(values or {}) or None)
            return os.path.isdir(self.store.cache.entry_dir(key))
        except Exception:  # noqa: BLE001 - an unreadable cache holds nothing usable here
            return False

    @staticmethod
    def load(setup, ctx, configs: Mapping[str, str]):
        """ORT's QNN session of the EPContext model ``ctx`` with the session's options and ``configs``."""
        so = build_session_options(setup.user_so, setup.settings.ep_options, setup.devices, configs,
                                   skip_recorded=BAKED_IN)
        return create_qnn_session(ctx, so, setup.kwargs)

    def _load(self, ctx, configs: Mapping[str, str]):
        return self.load(self.setup, ctx, configs)

    def _compile(self, spec, shapes, note: str, values):
        """``(Compiled, None)``, or ``(None, report)`` when the QNN EP takes no node."""
        model_input = lambda: spec.SerializeToString()  # noqa: E731 - evaluated on a cache miss only
        if self.patches is None:
            try:
                if values:
                    return self.compile_epcontext(model_input, spec, shapes, note, values), None
                return self.compile_epcontext(model_input, spec, shapes, note), None
            except PartitionError as exc:  # a repair recipe running every node on the CPU
                if exc.report is None:
                    raise
                return None, exc.report
        return compile_or_verdict(self.compile_epcontext, self.store, self.patches, model_input, spec, shapes, note,
                                  values)

    def __call__(self, signature: Signature, feed: Mapping[str, Any] | None = None):
        """The session of ``signature``: precompiled next to the model (verified), else cached / compiled.

        Raises:
            BackendCapabilityError: the feed is beyond what the HTP compiler can take (checked first).
            BackendCompileError: the compiler process died. ORT's and the pipeline's errors otherwise.
        """
        start = time.perf_counter()
        setup, settings = self.setup, self.setup.settings
        note = f"{setup.label} [{signature.note()}]"
        shapes = dict(signature.shapes)
        values = dict(signature.values) or None
        artifact = (resolve_specialization(setup.source, settings, shapes, dict(signature.values))
                    if self.neighbours else None)
        if artifact is not None:
            check_artifact_interface(artifact, self.proto, bound=tuple(signature.values))
            session = self._load(artifact.ctx_path, self.load_configs)
            report = PartitionReport.from_session(session, EP_NAME, source="artifact", note=note)
            return session, report, ArtifactInfo("precompiled", artifact.ctx_path, shapes or None,
                                                 time.perf_counter() - start)
        graph_key = structure_key(setup.source, setup.user_so)
        known = model_verdict(self.store.cache, graph_key, settings.compile_options()) if self.patches is not None \
            else None
        if known is not None:  # the QNN EP takes no node of this model (found at another shape, or remembered)
            return self.on_cpu(), known, ArtifactInfo("cpu", "", shapes or None, time.perf_counter() - start)
        if feed is not None:
            feed_shapes = {name: tuple(_shape(value)) for name, value in feed.items() if name not in signature.values}
            check_feed_cost(self.proto, feed_shapes, settings, note)
        spec, _folded = specialize_for_qnn(self.proto, signature, feed, external_data_dir=setup.source.directory)
        try:
            compiled, no_node = self._compile(spec, shapes or None, note, values)
        except Exception as exc:  # noqa: BLE001 - only ORT's EPContext-writing failure is handled here
            if not (epcontext_unwritable(exc) and has_control_flow(spec)):
                raise
            jit = _jit(setup, spec, exc, note)
            session = self._load(jit.data, dict(self.load_configs, **jit.configs))
            report = PartitionReport.from_session(session, EP_NAME, source="compile", note=note)
            return session, report, ArtifactInfo("jit", "<in memory>", shapes or None, time.perf_counter() - start)
        if no_node is not None:  # found out once, from this shape: every other shape runs on the CPU too
            if self.patches is not None and not no_node.recovery:
                remember_verdict(self.store.cache, graph_key, settings.compile_options(), no_node)
            return self.on_cpu(), no_node, ArtifactInfo("cpu", "", shapes or None, time.perf_counter() - start)
        if settings.strict:
            check_partition(compiled.report, strict=True, label=note, warn_key=self.warn_key)
        session = self._load(compiled.ctx_path, self.strict_configs)
        split = batch_split_of(compiled)
        if split is not None:  # the recovery ladder compiled a smaller batch: run the feed in chunks
            session = BatchSplitRunner(session, *split)
        return session, compiled.report, artifact_info(compiled, shapes)


def _shape(value) -> tuple:
    if hasattr(value, "shape") and callable(value.shape):  # onnxruntime.OrtValue
        return tuple(value.shape())
    return tuple(getattr(value, "shape", ()))
