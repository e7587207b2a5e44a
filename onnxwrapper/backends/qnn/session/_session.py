"""The two kinds of QNN backend session the façade attaches to.

* :class:`QnnStaticSession` — models whose inputs are all static. The façade *is* the ORT session
  of the EPContext model (cached, compiled or precompiled), so every ORT method (``run``,
  ``run_with_ort_values``, IOBinding, ``run_async``, profiling) is ORT's own code on the QNN EP,
  with no per-run overhead. Names/shapes/types of the ctx model equal the original's (checked).
* :class:`QnnDynamicSession` — models with dynamic or partially fixed input dims, which the QNN
  EP refuses. The façade is attached to a CPU session of the *original* model that is never run
  (``ORT_DISABLE_ALL``): it reports the symbolic ``get_inputs()/get_outputs()``, metadata and ORT's
  validation. Each run is validated against the symbolic metadata (ORT's errors), then routed to
  a static specialization compiled for the feed's shapes on first use (cached on disk and in an
  in-memory LRU of ``max_specializations`` sessions). IOBinding cannot be served (binding happens
  before shapes are known) and raises :class:`~onnxwrapper.errors.BackendCapabilityError`.

Both report their partition (:meth:`partition`), warn once per model when part of the graph runs
on CPU (:class:`~onnxwrapper.kernel.session._partition.PartialOffloadWarning`) and raise
:class:`~onnxwrapper.errors.PartitionError` under ``strict``. ``get_providers()`` and
``get_provider_options()`` say what ORT + QNN EP says (``['QNNExecutionProvider',
'CPUExecutionProvider']``); ``get_provider_graph_assignment_info()`` answers for the user's nodes
(:mod:`onnxwrapper.backends.qnn.session._assignment`). A specialization the QNN EP takes no node of runs
on CPU (:mod:`onnxwrapper.backends.qnn.session._no_node`).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable, Mapping, NamedTuple

from onnxwrapper.backends.base import BackendSession, OrtSessionArgs, SessionDescription
from onnxwrapper.backends.qnn.compile import ort_session_class, qnn_creation_guard
from onnxwrapper.backends.qnn.model import control_value, signature_of
from onnxwrapper.backends.qnn.platform import EP_NAME
from onnxwrapper.backends.qnn.session._assignment import assigned_subgraphs, require_assignment_enabled
from onnxwrapper.backends.qnn.session._buckets import as_array, as_ort_value
from onnxwrapper.backends.qnn.session._context_budget import context_bytes, load_with_room
from onnxwrapper.backends.qnn.session._dispatch import plan_run
from onnxwrapper.backends.qnn.session._no_node import no_node_policy, ort_provider_options, ort_providers
from onnxwrapper.backends.qnn.session._partition_check import check_partition
from onnxwrapper.backends.qnn.session._run_progress import simulator_watch
from onnxwrapper.errors import BackendCapabilityError, PartitionError
from onnxwrapper.kernel import NonFiniteInputCheck, PartitionReport, RunPlans

__all__ = ["ArtifactInfo", "QnnStaticSession", "QnnDynamicSession", "nonfinite_check"]

_log = logging.getLogger("onnxwrapper.qnn")


class ArtifactInfo(NamedTuple):
    """Where the compiled model of a session (or specialization) came from (an immutable ``NamedTuple``).

    Attributes:
        origin: ``"compiled"`` (compiled now, into the cache), ``"cache"`` (cache hit),
            ``"precompiled"`` (an artifact next to the model), ``"cpu"`` (the QNN EP took no node:
            ORT's CPU session of the model runs it; ``ctx_path`` empty) or ``"jit"`` (compiled by ORT
            in this process, not cached: a graph with control flow whose EPContext model ORT cannot write).
        ctx_path: the EPContext model loaded. shapes: specialization shapes, ``None`` for static models.
        seconds: compile time (``"compiled"``) or lookup + load time (others), in seconds.
        key: cache key, when cached.
    """

    origin: str
    ctx_path: str
    shapes: Mapping[str, tuple] | None = None
    seconds: float = 0.0
    key: str | None = None


def nonfinite_check(settings, label: str) -> NonFiniteInputCheck | None:
    """The once-per-session NaN/±Inf feed check of a session computing in FP16 (every target but
    ``precision='fp32'``, which gets ``None``): the HTP turns such inputs into large finite values."""
    if settings.precision == "fp32":
        return None
    return NonFiniteInputCheck(label, "the QNN HTP in FP16", "131008")


def _refuse_move(strict: bool, backend: str, label: str) -> None:
    if strict and backend != "qnn":
        raise BackendCapabilityError(
            f"set_providers() would move the session of {label} off the QNN NPU to backend '{backend}', and "
            f"strict=True forbids running its nodes elsewhere. Create a new InferenceSession without strict (or "
            f"with backend='{backend}') instead.", backend="qnn")


class QnnStaticSession(BackendSession):
    """ORT's session of an EPContext model with the QNN EP; every run method is ORT's own.

    Args:
        ctx_path: EPContext model to load. sess_options: configured copy with the QNN EP added
            (with ``session.record_ep_graph_assignment_info=1`` when ``report`` is ``None``).
        kwargs: ORT keyword arguments (``enable_fallback`` forced to 0).
        report: partition from compile/cache, or ``None`` to read it from the loaded session
            (precompiled artifacts). strict: raise on CPU nodes. label: model name for messages.
        warn_key: identity of the model for warn-once. artifact: :class:`ArtifactInfo`.
        model_meta: metadata object to report instead of the artifact's (precompiled ctx models
            that lack the original metadata), or ``None``. user_so: the user's ``SessionOptions``
            (whether ``get_provider_graph_assignment_info()`` is enabled).
        nonfinite_check: a :class:`~onnxwrapper.kernel.NonFiniteInputCheck` the façade calls with
            each feed until it has warned (FP16 targets), or ``None``.
    """

    process_bound = True  # QNN's HTP state does not survive fork() (onnxwrapper/_fork_guard.py)

    def __init__(self, ctx_path: str, sess_options, kwargs: Mapping[str, Any], *, report: PartitionReport | None,
                 strict: bool, label: str, warn_key: str, artifact: ArtifactInfo, model_meta=None,
                 user_so=None, guard=qnn_creation_guard, nonfinite_check=None) -> None:
        self.ort_args = OrtSessionArgs(ctx_path, sess_options, None, None, dict(kwargs, enable_fallback=0),
                                       guard=guard, read_assignment=report is None)
        self.report = report
        self.strict, self.label, self.warn_key = strict, label, warn_key
        self.artifacts = [artifact]
        self.model_meta = model_meta
        self.user_so = user_so
        self.nonfinite_check = nonfinite_check

    def describe(self) -> SessionDescription:
        """ORT's session of the EPContext model; a precompiled one's assignment is read back (:meth:`loaded`)."""
        return SessionDescription(ort=self.ort_args, feed_check=self.nonfinite_check, watch=simulator_watch(self.label))

    def loaded(self, graph_assignment) -> None:
        """Read a precompiled artifact's partition; refuse no QNN node; warn once (``strict``: raise) on CPU nodes."""
        if self.report is None:
            source = "compile" if self.artifacts[0].origin == "jit" else "artifact"  # jit: compiled by ORT now
            self.report = PartitionReport.from_assignment(graph_assignment, EP_NAME, source=source, note=self.label)
        if self.report.target_nodes == 0:
            raise PartitionError(f"The QNN execution provider took no node of {self.label}: {self.report.summary()}.",
                                 backend="qnn", cpu_nodes=self.report.cpu_nodes)
        check_partition(self.report, strict=self.strict, label=self.label, warn_key=self.warn_key)

    def modelmeta(self):
        return self.model_meta

    def partition(self) -> PartitionReport:
        """The :class:`~onnxwrapper.kernel.PartitionReport` of this session."""
        return self.report

    def graph_assignment(self):
        """ORT's ``Fail`` unless the user enabled the record; the compile-time partition of the user's
        nodes; for a precompiled artifact ORT's own answer (its ``EPContext`` nodes)."""
        require_assignment_enabled(self.user_so)
        return None if self.report is None or self.report.source == "artifact" else assigned_subgraphs(self.report)

    def before_providers_change(self, backend: str) -> None:
        """``strict`` refuses a move off the QNN EP."""
        _refuse_move(self.strict, backend, self.label)


class _Specialization(NamedTuple):
    """One live specialization: its ORT session, partition report, artifact and context bytes."""

    session: Any
    report: PartitionReport
    artifact: ArtifactInfo
    nbytes: int = 0


class QnnDynamicSession(BackendSession):
    """Façade = never-run CPU session of the original model; runs go to per-shape QNN sessions.

    Args:
        model: the original model (path or bytes) for the metadata session.
        meta_options: ``SessionOptions`` for the metadata session (CPU only).
        kwargs: ORT keyword arguments for the metadata session.
        build: ``build(shapes) -> (ort session, PartitionReport, ArtifactInfo)`` compiles or loads
            the specialization for ``{input name: shape}`` (a report with no QNN node comes with
            ORT's CPU session of the model).
        dynamic_names: names of the inputs with non-static dims.
        ep_options: QNN EP options (reported by ``get_provider_options()``).
        max_specializations: LRU bound of live specialization sessions (≥ 1).
        context_memory_mb: LRU bound of the live sessions' context binaries (MiB;
            :mod:`onnxwrapper.backends.qnn.session._context_budget`), ``None``: none.
        strict, label, warn_key, user_so: as :class:`QnnStaticSession`.
        control_names: control inputs (rank-0 inputs that decide an ``If``); their values are part
            of a specialization's signature and they are not fed to it (it holds them as constants).
        nonfinite_check: called with each feed until it has warned (FP16 targets), or ``None``.
        buckets: the :class:`~onnxwrapper.backends.qnn.session._buckets.BucketRouter` that pads a call of a
            growing dim group into a certified shape bucket, or ``None`` (one specialization per shape).
        output_names: the model's output names (outputs of padded calls are cut by name).

    A feed with a dim of size 0 is not compiled: it runs on a CPU session of the original model
    (created on first use), as plain ORT returns empty outputs for it.
    """

    process_bound = True  # QNN's HTP state does not survive fork() (onnxwrapper/_fork_guard.py)

    def __init__(self, model, meta_options, kwargs: Mapping[str, Any], *, build: Callable, dynamic_names,
                 ep_options: Mapping[str, str], max_specializations: int, strict: bool, label: str,
                 warn_key: str, user_so=None, control_names=(), nonfinite_check=None,
                 context_memory_mb: float | None = None, buckets=None, output_names=()) -> None:
        # no providers: ORT's default CPU EP (a user's session.disable_cpu_ep_fallback=1 then fails as
        # with ORT + QNN EP, which takes no node of a symbolic model)
        self.ort_args = OrtSessionArgs(model, meta_options, None, None, dict(kwargs, enable_fallback=0))
        self._build = build
        self.control_names = tuple(control_names)
        self.nonfinite_check = nonfinite_check
        self._empty_session = None
        self.dynamic_names = tuple(dynamic_names)
        self.ep_options = dict(ep_options)
        self.max_specializations = max(1, int(max_specializations))
        self.context_bytes = None if context_memory_mb is None else int(context_memory_mb * 1024 * 1024)
        self.strict = strict
        self.label = label
        self.warn_key = warn_key
        self.artifacts: list[ArtifactInfo] = []
        self._live: OrderedDict[tuple, _Specialization] = OrderedDict()
        self._latest: PartitionReport | None = None
        self._lock = threading.RLock()
        self.user_so = user_so
        self.buckets = buckets
        self.output_names = list(output_names)
        # progress lines of a long call on the simulator: around the specialization's ORT call, not a compile
        watch = self._watch = simulator_watch(label) or (lambda _method, impl: impl)
        #: plans of validated run() calls (:mod:`onnxwrapper.backends.qnn.session._dispatch`), cleared on release;
        #: they hold this session through a weak proxy (no reference cycle: freed with its last reference)
        owner = weakref.proxy(self)
        self.plans = RunPlans(lambda feed, names: watch("run", plan_run(owner, feed, names)))

    def describe(self) -> SessionDescription:
        """The metadata session (never run); run methods served here; feeds validated by the façade,
        which runs a validated kind of call by its plan (:attr:`plans`)."""
        return SessionDescription(ort=self.ort_args, validate_feeds=True, plans=self.plans, runs={
            "run": self.run, "run_with_ort_values": self.run_with_ort_values, "run_async": self.run_async,
            "run_with_iobinding": self.run_with_iobinding})

    def providers(self) -> list[str]:
        """What ORT + QNN EP reports: ``['QNNExecutionProvider', 'CPUExecutionProvider']``."""
        return ort_providers()

    def provider_options(self) -> dict:
        return ort_provider_options(self.ep_options)

    def partition(self) -> PartitionReport:
        """Partition of the most recently used specialization; before the first run a
        :meth:`~onnxwrapper.kernel.PartitionReport.pending` report (no nodes; its summary says that
        the model compiles per input shape at the first run)."""
        if self._latest is None:
            return PartitionReport.pending(EP_NAME, f"{self.label}: dynamic inputs {', '.join(self.dynamic_names)}")
        stats = self.buckets.stats() if self.buckets is not None else ()
        return self._latest.with_buckets(stats) if stats else self._latest

    def graph_assignment(self):
        """ORT's ``Fail`` unless the user enabled the record; else the partition of the most recently
        used specialization (``[]`` before the first run)."""
        require_assignment_enabled(self.user_so)
        return [] if self._latest is None else assigned_subgraphs(self._latest)

    def before_providers_change(self, backend: str) -> None:
        """``strict`` refuses a move off the QNN EP."""
        _refuse_move(self.strict, backend, self.label)

    def close(self) -> None:
        """Release the live specialization sessions (their artifacts stay in the disk cache)."""
        with self._lock:
            self.plans.clear()
            self._live.clear()
            self._empty_session = None

    # -- specializations -------------------------------------------------------------------------
    def _specialization(self, key: tuple, shapes: dict, feed) -> _Specialization:
        spec = self._live.get(key)
        if spec is not None and self._latest is spec.report:
            return spec  # the hot path: the same signature as the previous run
        with self._lock:
            spec = self._live.get(key)
            if spec is not None:
                self._live.move_to_end(key)
            else:
                spec = self._add(key, signature_of(shapes, feed, self.dynamic_names, self.control_names), feed)
            self._latest = spec.report
            return spec

    def _add(self, key: tuple, signature, feed) -> _Specialization:
        label = f"{self.label} [{signature.note()}]"
        ort_session, report, artifact = load_with_room(lambda: self._build(signature, feed), self._release_oldest,
                                                       self._live_mb, label)
        if report.target_nodes == 0:  # the build gave ORT's CPU session of the model
            no_node_policy(report, strict=self.strict, label=label, warn_key=self.warn_key)
        else:
            check_partition(report, strict=self.strict, label=label, warn_key=self.warn_key)
        spec = _Specialization(ort_session, report, artifact, context_bytes(artifact.ctx_path))
        self.artifacts.append(artifact)
        self._live[key] = spec
        _log.info("onnxwrapper qnn: specialization %s of %s ready (%s, %.2f s); %d live, %.0f MiB of contexts",
                  signature.note(), self.label, artifact.origin, artifact.seconds, len(self._live), self._live_mb())
        while len(self._live) > self.max_specializations or (
                self.context_bytes is not None and len(self._live) > 1
                and sum(s.nbytes for s in self._live.values()) > self.context_bytes):
            self._release_oldest()
        return spec

    def _live_mb(self) -> float:
        return sum(s.nbytes for s in self._live.values()) / (1024 * 1024)

    def _release_oldest(self) -> bool:
        """Release the least recently used specialization (False when none is live)."""
        if not self._live:
            return False
        self._live.popitem(last=False)
        self.plans.clear()  # plans hold their specialization's session
        _log.info("onnxwrapper qnn: released a specialization of %s (max_specializations=%d, context_memory_mb=%s; "
                  "it stays in the disk cache)", self.label, self.max_specializations,
                  "none" if self.context_bytes is None else f"{self.context_bytes / 1024 / 1024:g}")
        return True

    def padding_for(self, shapes: Mapping[str, tuple], feed: Mapping[str, Any]) -> tuple[Any, dict]:
        """``(Padding or None, usage record)`` of a new kind of call (its dynamic-input ``shapes``, its
        numpy ``feed``; :attr:`buckets` set): the :class:`~onnxwrapper.backends.qnn.model.Padding` into its
        certified shape bucket, or ``None`` to run it at its shapes (also when the compile cache holds
        these very shapes, e.g. precompiled); the record's ``"calls"`` counts its calls."""
        with self._lock:
            cached, values = getattr(self._build, "cached", None), {n: control_value(feed[n]) for n in self.control_names}
            key = (tuple(shapes.values()), tuple(values.values())) if values else tuple(shapes.values())
            exact = key in self._live or (cached is not None and cached(shapes, values))
            padding = None if exact else self.buckets.route(shapes, feed, self._empty)
            run_shapes = padding.shapes(shapes) if padding is not None else shapes
            return padding, self.buckets.served(run_shapes, shapes)

    def _route(self, feed: Mapping[str, Any], shape_of) -> tuple[Any, Mapping[str, Any], Any]:
        """``(ORT session to run, feed for it, Padding or None)``: the specialization of the feed's
        signature (control inputs dropped from the feed; padded into its shape bucket when one is
        certified), or the CPU session of the original model for an empty dim. The key is built from
        plain tuples; the :class:`~onnxwrapper.backends.qnn.model._specialize.Signature` only on a miss."""
        check = self.nonfinite_check
        if check is not None and check(feed):
            self.nonfinite_check = None
        shapes = {name: tuple(shape_of(feed[name])) for name in self.dynamic_names if name in feed}
        for shape in shapes.values():
            if 0 in shape:
                return self._empty(), feed, None
        padding = None
        if self.buckets is not None:
            arrays = {name: as_array(value) for name, value in feed.items()}
            padding, usage = self.padding_for(shapes, arrays)
            usage["calls"] += 1
            if padding is not None:
                feed = padding.pad_feed(arrays)
                shapes = padding.shapes(shapes)
        if not self.control_names:
            return self._specialization(tuple(shapes.values()), shapes, feed).session, feed, padding
        values = tuple(control_value(feed[name]) for name in self.control_names if name in feed)
        spec = self._specialization((tuple(shapes.values()), values), shapes, feed)
        return spec.session, {name: value for name, value in feed.items() if name not in self.control_names}, padding

    def _empty(self):
        """A CPU session of the original model (``ORT_DISABLE_ALL``), for feeds with a size-0 dim."""
        with self._lock:
            if self._empty_session is None:
                args = self.ort_args
                self._empty_session = ort_session_class()(args.path_or_bytes, args.sess_options, args.providers,
                                                          **dict(args.kwargs))
            return self._empty_session

    # -- run callables (feeds validated by the façade) -----------------------------------------------
    def run(self, output_names, input_feed, run_options=None):
        """Run the specialization for the feed's signature (``input_feed`` validated, names resolved)."""
        session, feed, padding = self._route(input_feed, _array_shape)
        run = self._watch("run", session.run)
        if padding is None:
            return run(output_names, feed, run_options)
        names = list(output_names) if output_names else list(self.output_names)
        return padding.cut_outputs(names, run(names, feed, run_options))

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        """As ORT: ``{name: OrtValue}`` in, ``list[OrtValue]`` out, on the specialization for their signature."""
        session, feed, padding = self._route(input_dict_ort_values, _ort_value_shape)
        if padding is None:
            return self._watch("run_with_ort_values", session.run_with_ort_values)(output_names, feed, run_options)
        names = list(output_names) if output_names else list(self.output_names)
        outputs = self._watch("run", session.run)(names, feed, run_options)
        return [as_ort_value(value) for value in padding.cut_outputs(names, outputs)]

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None):
        """As ORT's ``run_async``; a missing specialization is compiled first, in the calling thread."""
        session, feed, padding = self._route(input_feed, _array_shape)
        if padding is None:
            return session.run_async(output_names, feed, callback, user_data, run_options)
        names = list(output_names) if output_names else list(self.output_names)

        def cut(outputs, data, error):
            callback(padding.cut_outputs(names, outputs) if outputs else outputs, data, error)
        return session.run_async(names, feed, cut, user_data, run_options)

    def run_with_iobinding(self, iobinding, run_options=None):
        """Not served: raises :class:`~onnxwrapper.errors.BackendCapabilityError`."""
        raise BackendCapabilityError(
            f"run_with_iobinding() is not supported by backend 'qnn' for {self.label}: the model has dynamic input "
            f"dims or control inputs ({', '.join(self.dynamic_names + self.control_names)}), and the QNN backend "
            f"compiles one static specialization per feed shape (and control value) at run(). Use "
            f"run()/run_with_ort_values(), or a model with static shapes.", backend="qnn")


def _array_shape(value) -> tuple:
    return value.shape  # numpy: a tuple of ints already


def _ort_value_shape(value) -> tuple:
    return tuple(int(d) for d in value.shape())

