"""``onnxwrapper.InferenceSession``: onnxruntime's InferenceSession, dispatched to a backend.

A subclass of ``onnxruntime.InferenceSession`` (``isinstance`` holds). The backend session
describes itself (:class:`onnxwrapper.backends.base.SessionDescription`); the façade writes ORT's
state from it in one place, :meth:`InferenceSession._ow_ort_state`: on ORT-executed backends
(``cpu``, ``qnn``) ORT's own constructor initialises the object, so every ORT method is ORT's code;
foreign backends (qai_appbuilder, SNPE) serve ``run`` and metadata, and raise
:class:`~onnxwrapper.errors.BackendCapabilityError` for the rest.

One run path, as Polygraphy's ``BaseRunner.infer`` → ``infer_impl``: every run method goes
through :meth:`InferenceSession._ow_call` — closed check, feed validation when the backend asks
for it (one validator, :func:`onnxwrapper.kernel.validate_feed`), the backend's run callable,
then the run observers. While no observer is registered, ``run`` is ORT's own bound method (an
instance attribute: zero added cost per call), or a dict lookup of the call's plan
(:class:`onnxwrapper.kernel.RunPlans`: validation, routing and feed checks decided once per kind
of call; a miss takes the full path).

No reference cycle: a dropped session is freed at once, without the cyclic garbage collector (its
run callables are bound to an ORT twin, :mod:`onnxwrapper._ort_twin`; ``run`` reaches the plans).
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from typing import Any, Callable, Mapping, Sequence

import onnxruntime

from onnxwrapper._fork_guard import bind, check_new, check_open
from onnxwrapper._observers import FAST_PATH_SESSIONS, RUN_OBSERVERS, add_run_observer, notify, observers_lock
from onnxwrapper._ort_twin import NO_PLAN, foreign_ort_state, no_plan, ort_state, run_callables, sync_twin
from onnxwrapper._registry import default_registry
from onnxwrapper._selection import reselect, select_backend
from onnxwrapper.backends.base import RUN_METHODS, SessionDescription, SessionRequest, capability_error
from onnxwrapper.errors import BackendCapabilityError
from onnxwrapper.kernel import (PartitionReport, RunPlans, call_key, check_output_names, check_providers, plannable,
                                validate_feed, validate_ort_values)

__all__ = ["InferenceSession", "add_run_observer"]

_log = logging.getLogger("onnxwrapper")
_ORT = onnxruntime.InferenceSession

class InferenceSession(_ORT):
    """ONNX Runtime's ``InferenceSession`` with a selectable execution backend.

    Args:
        path_or_bytes: model path (``str`` or ``os.PathLike``) or serialized model (``bytes``).
        sess_options: ``onnxruntime.SessionOptions`` or ``None``.
        providers: ORT execution providers, as names or ``(name, options)`` tuples. A provider
            that belongs to a backend selects it (``QNNExecutionProvider`` → ``qnn``).
        provider_options: per-provider option dicts, as in ORT.
        backend: backend name or alias, case-insensitive (``"cpu"``, ``"qnn"``/``"qairt"``, any
            registered plugin). Default: providers, then ``ONNXWRAPPER_BACKEND``, then ``auto``
            (a real NPU if this host has one, else ``cpu``); see :mod:`onnxwrapper._selection`.
        backend_options: dict of options documented by the backend (typos are rejected).
        **kwargs: ORT keyword arguments (``enable_fallback``, ``read_config_from_model``,
            ``disabled_optimizers``).

    Raises:
        What ``onnxruntime.InferenceSession`` raises for the same bad input (class, message prefix);
        ``BackendNotFoundError``, ``BackendUnavailableError``, ``BackendOptionError`` (onnxwrapper.errors).

    Attributes:
        backend_name: canonical name of the backend that runs this session.
        backend_selection: the :class:`~onnxwrapper._selection.Selection` with its reason.
        backend_session: the backend's session object (see :mod:`onnxwrapper.backends.base`).
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, *,
                 backend: str | None = None, backend_options: dict | None = None, **kwargs) -> None:
        registry = default_registry()
        selection = select_backend(backend, providers, os.environ, registry, provider_options)
        check_new(selection.name)  # a forked child of a process with such sessions open: fail fast
        instance = registry.get(selection.name)(backend_options)
        request = SessionRequest(path_or_bytes, sess_options, providers, provider_options, dict(kwargs),
                                 selection.ep_options)
        self._ow_closed = False
        self._ow_backend_session = None
        self._ow_dispatch = None
        self._ow_open(instance, request, selection)
        _log.debug("onnxwrapper: session on backend '%s' (%s)", selection.name, selection.reason)

    def _ow_open(self, instance, request: SessionRequest, selection) -> None:
        """Open ``request`` on backend ``instance`` and make this object that session."""
        self._ow_request = request  # what the user asked for (the model as given), e.g. for capture
        self.backend_name = selection.name
        self.backend_selection = selection
        self._ow_backend = instance
        backend_session = instance.open(request)
        self._ow_backend_session = backend_session
        try:
            description = backend_session.describe()
            self._ow_ort_state(description)
        except BaseException:
            backend_session.close()
            raise
        self._ow_bind(description)

    # -- ORT's state: written here only --------------------------------------------------------------
    def _ow_ort_state(self, description: SessionDescription | None) -> None:
        """The only code that writes ORT's state on this object: ORT's own constructor with
        ``description.ort`` (in the backend's guard; the graph assignment to ``BackendSession.loaded``
        when asked), ORT's attributes from ``description.foreign`` (so ORT's inherited getters work),
        or, with ``None`` (``close()``), the ORT session released."""
        if description is None:  # after every write of ORT's state here: its twin too (onnxwrapper/_ort_twin.py)
            self._sess = None
            return sync_twin(self.__dict__)
        ort, foreign = description.ort, description.foreign
        self._ow_foreign = foreign is not None
        if ort is not None:
            ort_state(self, ort)
            sync_twin(self.__dict__)
            if ort.read_assignment:
                self._ow_backend_session.loaded(_ORT.get_provider_graph_assignment_info(self))
            return
        self.__dict__.update(foreign_ort_state(foreign, self._ow_backend_session))

    # -- the run path ------------------------------------------------------------------------------
    def _ow_bind(self, description: SessionDescription) -> None:
        impls = run_callables(RUN_METHODS, description.runs, self.__dict__.get("_ow_twin"), self._ow_foreign,
                              self.backend_name, description.watch)
        self._ow_impls = impls
        #: run methods whose feeds the façade validates: the backend's own callables, when it asks
        self._ow_validate = frozenset(description.runs) if description.validate_feeds else frozenset()
        self._ow_served = frozenset(description.runs)  # run methods the backend serves itself
        own_run = type(self).run is InferenceSession.run  # a subclass overriding run() keeps its own
        self._ow_fast_ok = not self._ow_validate and "run" not in description.runs and not self._ow_foreign and own_run
        #: plans per call key: validated runs (the backend's or the façade's), or ORT's after a feed check
        self._ow_plans = None
        if "run" in self._ow_validate and own_run:
            self._ow_plans = description.plans if description.plans is not None else RunPlans.calling(impls["run"])
        elif self._ow_fast_ok and hasattr(description.feed_check, "screen"):
            self._ow_plans = RunPlans.checking(description.feed_check, impls["run"])
        self._ow_feed_check = description.feed_check
        bind(self, self._ow_backend_session)
        self._ow_enable_fast_path()

    def _ow_enable_fast_path(self, checked: bool = False) -> None:  # checked: the backend's feed check is done
        if checked:
            self._ow_feed_check = None
        self._ow_fast = self._ow_fast_ok and self._ow_feed_check is None
        plans = self._ow_plans  # the run attribute: ORT's own run (bound to the twin); or the plan dispatcher
        self._ow_direct = self._ow_impls["run"] if self._ow_fast else None
        self._ow_dispatcher = plans.dispatcher(no_plan) if plans is not None and not self._ow_fast else None
        self._ow_dispatch = None
        if self._ow_direct is not None or self._ow_dispatcher is not None:
            with observers_lock:
                FAST_PATH_SESSIONS.add(self)
                self._ow_set_fast_path(not RUN_OBSERVERS)

    def _ow_set_fast_path(self, enabled: bool) -> None:  # no observer: ORT's run, or the plans
        enabled = enabled and not self._ow_closed
        if enabled and self._ow_direct is not None:
            self.__dict__["run"] = self._ow_direct
        else:
            self.__dict__.pop("run", None)
        self._ow_dispatch = self._ow_dispatcher if enabled else None

    def _ow_drop_direct(self) -> None:
        """Back to the class's ``run``, plans dropped (``close``, ``set_providers``)."""
        with observers_lock:
            FAST_PATH_SESSIONS.discard(self)
            self._ow_set_fast_path(False)
        if self._ow_plans is not None:
            self._ow_plans.clear()

    def _ow_run_missed(self, output_names, input_feed, run_options=None):
        """``run`` of a call without a plan: checked as always (ORT's errors), planned when it can be."""
        plans = self._ow_plans
        if "run" not in self._ow_validate:  # ORT runs and checks it: the backend's feed check, then ORT's run
            outputs = self._ow_call("run", output_names, input_feed, (run_options,))
            if self._ow_feed_check is not None and plannable(output_names, input_feed):
                plans.add(call_key(output_names, input_feed), plans.build(input_feed, output_names))
            return outputs
        self._ow_check_open("run")
        feed = validate_feed(self._inputs_meta, input_feed, output_names, self._outputs_meta)
        names = check_output_names(output_names, self._outputs_meta)
        if plannable(output_names, input_feed) and (plan := plans.build(feed, names)) is not None:
            plans.add(call_key(output_names, input_feed), plan)
            return plan(input_feed, run_options)
        return self._ow_impls["run"](names, feed, run_options)

    def _ow_check_open(self, method: str) -> None:
        check_open(self, method)  # closed, or inherited through fork() (onnxwrapper/_fork_guard.py)

    def _ow_call(self, method: str, output_names, feed, args: tuple):
        """Closed check → feed validation (when the backend asks) → backend run → observers."""
        self._ow_check_open(method)
        names, given = output_names, feed
        check = self._ow_feed_check
        if check is not None and method in ("run", "run_async") and method not in self._ow_served and check(feed):
            self._ow_enable_fast_path(checked=True)  # e.g. the NaN/±Inf check has warned once
        if method in self._ow_validate:
            if method == "run_with_ort_values":
                validate_ort_values(self._inputs_meta, feed, output_names, self._outputs_meta)
            else:
                feed = validate_feed(self._inputs_meta, feed, output_names, self._outputs_meta)
            names = check_output_names(output_names, self._outputs_meta)
        impl = self._ow_impls[method]
        if not RUN_OBSERVERS or method == "run_async":
            return impl(names, feed, *args)
        start = time.perf_counter()
        outputs = impl(names, feed, *args)
        notify(self, method, output_names, given, args[-1], outputs, time.perf_counter() - start)
        return outputs

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[Any]:
        """Compute outputs, exactly as ``onnxruntime.InferenceSession.run``.

        Args:
            output_names: list of output names, or ``None``/``[]`` for all outputs in model order.
            input_feed: ``{input name: numpy array | list | OrtValue}``; lists are cast to the
                declared dtype as ORT does, scalars are rejected as ORT does.
            run_options: ``onnxruntime.RunOptions`` or ``None``.

        Returns:
            ``list`` of ``numpy.ndarray`` (sequences as ``list``, maps as ``dict``), one per output.

        Raises:
            ORT's classes for bad feeds (``ValueError`` for missing inputs, ``InvalidArgument``
            for unknown names, dtypes, ranks, dims); :class:`~onnxwrapper.errors.SessionClosedError`
            after :meth:`close`.
        """
        dispatch = self._ow_dispatch
        if dispatch is not None:  # run plans, no observer: the plan of the call's key, else the full path
            outputs = dispatch(output_names, input_feed, run_options)
            if outputs is NO_PLAN:
                return self._ow_run_missed(output_names, input_feed, run_options)
            if getattr(self._ow_feed_check, "done", False):  # a plan's screen has warned: ORT's own run from now on
                self._ow_enable_fast_path(checked=True)
            return outputs
        return self._ow_call("run", output_names, input_feed, (run_options,))

    def run_with_ort_values(self, output_names: Sequence[str] | None, input_dict_ort_values: Mapping[str, Any],
                            run_options: Any = None) -> list[Any]:
        """As ``onnxruntime.InferenceSession.run_with_ort_values``: ``{name: OrtValue}`` in,
        ``list[OrtValue]`` out."""
        return self._ow_call("run_with_ort_values", output_names, input_dict_ort_values, (run_options,))

    def run_with_iobinding(self, iobinding: Any, run_options: Any = None) -> None:
        """As ORT's ``run_with_iobinding``."""
        self._ow_check_open("run_with_iobinding")
        impl = self._ow_impls["run_with_iobinding"]
        if not RUN_OBSERVERS:
            return impl(iobinding, run_options)
        start = time.perf_counter()
        result = impl(iobinding, run_options)
        notify(self, "run_with_iobinding", None, iobinding, run_options, result, time.perf_counter() - start)
        return result

    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
                  callback: Callable[..., Any], user_data: Any, run_options: Any = None) -> Any:
        """As ``onnxruntime.InferenceSession.run_async``: ``callback(results, user_data, err)``
        is called from an ORT thread; ``err`` is ``""`` on success."""
        return self._ow_call("run_async", output_names, input_feed, (callback, user_data, run_options))

    # -- what the backend reports ------------------------------------------------------------------
    def get_providers(self) -> list[str]:
        """As ORT: the session's execution providers (the backend's report where it keeps one)."""
        providers = self._ow_backend_session.providers()
        return list(providers) if providers is not None else super().get_providers()

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        """As ORT (the backend's report where it keeps one)."""
        options = self._ow_backend_session.provider_options()
        return dict(options) if options is not None else super().get_provider_options()

    def get_modelmeta(self) -> Any:
        """As ORT: the model's metadata — the original ONNX model's, also for compiled artifacts."""
        meta = self._ow_backend_session.modelmeta()
        return meta if meta is not None else super().get_modelmeta()

    # -- onnxwrapper additions --------------------------------------------------------------------
    @property
    def backend_session(self) -> Any:
        """The backend's :class:`onnxwrapper.backends.base.BackendSession` serving this session
        (read-only; its ``partition()`` outlives this object, e.g. for exit reports)."""
        return self._ow_backend_session

    def get_partition(self) -> PartitionReport | None:
        """Which execution provider runs each node, as recorded by the backend.

        Returns:
            A :class:`onnxwrapper.PartitionReport` (per node name, op type and EP; counts per EP;
            reasons where the backend knows them), or ``None`` when the backend records none (the
            ``cpu`` backend runs what ORT runs and records nothing). A model with dynamic input
            shapes on the ``qnn`` backend is compiled per input shape at its first run; before
            that the report is *pending* (``source == "pending"``, no nodes, and ``summary()`` says
            so), afterwards it is the partition of the most recently run shape.
        """
        return self._ow_backend_session.partition()

    def close(self) -> None:
        """Release the backend's resources now instead of at garbage collection.

        Releases ORT's session, compiled shape specializations and native contexts. Idempotent.
        Afterwards every run method (and every ORT method that needs the session) raises
        :class:`~onnxwrapper.errors.SessionClosedError`; metadata getters keep working.
        """
        if self._ow_closed or self._ow_backend_session is None:
            return
        self._ow_closed = True
        self._ow_drop_direct()
        self._ow_backend_session.close()
        self._ow_ort_state(None)

    # -- ORT methods that need a real ORT session ------------------------------------------------
    def _ow_require_ort(self, method: str) -> None:
        self._ow_check_open(method)
        if self._ow_foreign:
            raise capability_error(method, self.backend_name)

    def io_binding(self) -> Any:
        """As ORT (ORT-based backends only)."""
        self._ow_require_ort("io_binding")
        return super().io_binding()

    def set_providers(self, providers=None, provider_options=None) -> None:
        """As ORT: re-create the session with these execution providers (ORT's own on ``cpu``).

        On an NPU backend ORT executes (``qnn``): checked exactly as ORT checks (``ValueError``,
        ``RuntimeError('Unknown Provider Type: X')``, its warnings), then opened again on the
        backend :func:`onnxwrapper._selection.reselect` picks (``['CPUExecutionProvider']`` →
        ``cpu``, as ORT + QNN EP lands on CPU), unless the backend refuses the move
        (``BackendCapabilityError``, e.g. ``strict=True``). Foreign backends raise it always.
        """
        if self._ow_foreign:
            raise BackendCapabilityError(
                f"set_providers() would move this session off backend '{self.backend_name}'. "
                f"Create a new InferenceSession with backend='cpu' (or another backend) instead.",
                backend=self.backend_name)
        self._ow_check_open("set_providers")
        if not self._ow_backend.npu:
            try:
                return super().set_providers(providers, provider_options)
            finally:
                sync_twin(self.__dict__)
        check_providers(providers, provider_options, own=self._ow_backend.execution_providers)
        registry, current = default_registry(), self._ow_backend
        selection, request = reselect(current, self._ow_request, providers, provider_options, registry)
        self._ow_backend_session.before_providers_change(selection.name)
        instance = current if selection.name == current.name else registry.get(selection.name)(None)
        previous = self._ow_backend_session
        self._ow_drop_direct()
        self._ow_open(instance, request, selection)
        previous.close()

    def enable_fallback(self) -> None:
        """As ORT on the ``cpu`` backend. NPU backends never fall back to CPU silently: there the
        call is ignored with a warning and run errors are raised."""
        if self._ow_backend.npu:
            warnings.warn(f"enable_fallback() is ignored on backend '{self.backend_name}': onnxwrapper "
                          f"never moves an NPU session to CPU silently; errors are raised instead.",
                          UserWarning, stacklevel=2)
            return
        super().enable_fallback()
        sync_twin(self.__dict__)

    def disable_fallback(self) -> None:
        """As ORT: no fallback to CPU after an execution provider failure in ``run`` (the ``cpu`` backend)."""
        super().disable_fallback()
        sync_twin(self.__dict__)

    def end_profiling(self) -> str:
        """As ORT; foreign backends raise :class:`~onnxwrapper.errors.BackendCapabilityError`."""
        self._ow_require_ort("end_profiling")
        return super().end_profiling()

    def run_with_ortvaluevector(self, run_options: Any, feed_names: Any, feeds: Any, fetch_names: Any, fetches: Any,
                                fetch_devices: Any) -> None:
        """As ORT where ORT's session runs the model; a backend that serves ``run`` itself (e.g. one
        compile per feed shape) raises :class:`~onnxwrapper.errors.BackendCapabilityError`."""
        self._ow_require_ort("run_with_ortvaluevector")
        if "run" in self._ow_served:
            raise BackendCapabilityError(
                f"InferenceSession.run_with_ortvaluevector() is not supported by backend '{self.backend_name}' for "
                f"this session: the backend serves run() itself (e.g. per feed shape). Use run() or "
                f"run_with_ort_values().", backend=self.backend_name)
        return super().run_with_ortvaluevector(run_options, feed_names, feeds, fetch_names, fetches, fetch_devices)

    def get_profiling_start_time_ns(self) -> int:
        """As ORT; foreign backends report 0 (profiling not started), as ORT does when disabled."""
        if self._ow_foreign:
            return 0
        return super().get_profiling_start_time_ns()

    def get_provider_graph_assignment_info(self) -> Any:
        """As ORT (``Fail`` without ``session.record_ep_graph_assignment_info=1``); a backend that compiled
        the model answers for the user's nodes; foreign backends raise ``BackendCapabilityError``."""
        self._ow_require_ort("get_provider_graph_assignment_info")
        answer = self._ow_backend_session.graph_assignment()
        return list(answer) if answer is not None else super().get_provider_graph_assignment_info()
