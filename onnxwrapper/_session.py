"""``onnxwrapper.InferenceSession``: onnxruntime's InferenceSession, dispatched to a backend.

The class subclasses ``onnxruntime.InferenceSession`` so ``isinstance`` checks in user code hold.
On ORT-based backends (``cpu``, ``qnn``) the real ORT constructor initialises the object with
the arguments the backend prepared, so every ORT method (``run``, ``run_with_ort_values``,
``io_binding``, ``get_inputs``, …) is ORT's own code; a backend may route run methods through
itself. Foreign backends (qai_appbuilder, SNPE) serve ``run`` and metadata and raise
:class:`~onnxwrapper.errors.BackendCapabilityError` for the rest.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Callable

import onnxruntime

from onnxwrapper.kernel._feeds import check_output_names, validate_feed
from onnxwrapper._registry import default_registry
from onnxwrapper._selection import select_backend
from onnxwrapper.errors import BackendCapabilityError

__all__ = ["InferenceSession", "add_run_observer"]

_log = logging.getLogger("onnxwrapper")
_ORT = onnxruntime.InferenceSession

#: observers called after every run-method call of every session (see add_run_observer)
_RUN_OBSERVERS: list[Callable] = []
_observers_lock = threading.Lock()
#: live sessions whose ``run`` may be bound straight to the backend's (no observer → no wrapper)
_FAST_PATH_SESSIONS: "weakref.WeakSet" = weakref.WeakSet()


def _set_fast_paths(enabled: bool) -> None:
    for session in list(_FAST_PATH_SESSIONS):
        session._ow_set_fast_path(enabled)


def add_run_observer(observer: Callable) -> Callable[[], None]:
    """Call ``observer`` after every ``run``/``run_with_ort_values``/``run_with_iobinding``.

    The observer receives one keyword-only record: ``observer(session=…, method=…,
    output_names=…, input_feed=…, run_options=…, outputs=…, seconds=…)`` where ``seconds`` is
    the wall time of the call (float, s) and ``outputs`` what the call returned. It runs in the
    calling thread after the call; an exception it raises propagates to the caller. Used by
    ``aipc diff`` and ``aipc capture`` to record calls.

    Returns:
        A function that removes the observer again (idempotent).
    """
    with _observers_lock:
        _RUN_OBSERVERS.append(observer)
        _set_fast_paths(False)

    def undo() -> None:
        with _observers_lock:
            if observer in _RUN_OBSERVERS:
                _RUN_OBSERVERS.remove(observer)
                if not _RUN_OBSERVERS:
                    _set_fast_paths(True)

    return undo


def _notify(session, method, output_names, input_feed, run_options, outputs, seconds) -> None:
    for observer in list(_RUN_OBSERVERS):
        observer(session=session, method=method, output_names=output_names, input_feed=input_feed,
                 run_options=run_options, outputs=outputs, seconds=seconds)


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
        Whatever ``onnxruntime.InferenceSession`` raises for the same bad input (same class and
        message prefix); :class:`~onnxwrapper.errors.BackendNotFoundError`,
        :class:`~onnxwrapper.errors.BackendUnavailableError`,
        :class:`~onnxwrapper.errors.BackendOptionError` for backend problems.

    Attributes:
        backend_name: canonical name of the backend that runs this session.
        backend_selection: the :class:`~onnxwrapper._selection.Selection` with its reason.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, *,
                 backend: str | None = None, backend_options: dict | None = None, **kwargs) -> None:
        from onnxwrapper.backends.base import ForeignBackendSession, SessionRequest

        registry = default_registry()
        selection = select_backend(backend, providers, os.environ, registry)
        cls = registry.get(selection.name)
        instance = cls(backend_options)
        request = SessionRequest(path_or_bytes, sess_options, providers, provider_options, dict(kwargs),
                                 dict(selection.provider_options or {}))
        self._ow_closed = False
        self._ow_request = request  # what the user asked for (the model as given), e.g. for capture
        self.backend_name = selection.name
        self.backend_selection = selection
        self._ow_backend = instance
        self._ow_backend_session = None
        backend_session = instance.open(request)
        self._ow_backend_session = backend_session
        self._ow_foreign = isinstance(backend_session, ForeignBackendSession)
        backend_session.attach(self)
        self._ow_bind_run_methods(backend_session)
        if type(self).run is InferenceSession.run:  # a subclass overriding run() keeps its own
            with _observers_lock:
                _FAST_PATH_SESSIONS.add(self)
                self._ow_set_fast_path(not _RUN_OBSERVERS)
        _log.debug("onnxwrapper: session on backend '%s' (%s)", selection.name, selection.reason)

    # -- dispatch --------------------------------------------------------------------------------
    def _ow_bind_run_methods(self, backend_session) -> None:
        for method in backend_session.RUN_METHODS:
            impl = getattr(type(backend_session), method, None)
            if method == "run" and self._ow_foreign and backend_session.validate_feeds_in_facade:
                self._ow_run = self._ow_validated_foreign_run
            elif impl is not None:
                bound = getattr(backend_session, method)
                setattr(self, "_ow_" + method, lambda *a, _b=bound, **k: _b(self, *a, **k))
            elif self._ow_foreign:
                setattr(self, "_ow_" + method, self._ow_unsupported(method))
            else:
                setattr(self, "_ow_" + method, getattr(super(), method))

    def _ow_validated_foreign_run(self, output_names, input_feed, run_options=None):
        arrays = validate_feed(self._inputs_meta, input_feed, output_names, self._outputs_meta)
        names = check_output_names(output_names, self._outputs_meta)
        return self._ow_backend_session.run(self, names, arrays, run_options)

    def _ow_set_fast_path(self, enabled: bool) -> None:
        # With no run observer, ``session.run`` is the backend's run itself (an instance
        # attribute shadowing the class method): zero added cost per call on the cpu backend.
        if enabled:
            self.__dict__["run"] = self._ow_run
        else:
            self.__dict__.pop("run", None)

    def _ow_unsupported(self, method: str):
        def raise_unsupported(*args, **kwargs):
            raise self._ow_backend_session.unsupported(method, self.backend_name)
        return raise_unsupported

    def _ow_require_ort(self, method: str) -> None:
        if self._ow_foreign:
            raise self._ow_backend_session.unsupported(method, self.backend_name)

    def run(self, output_names, input_feed, run_options=None):
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
            for unknown names, dtypes, ranks, dims).
        """
        if not _RUN_OBSERVERS:
            return self._ow_run(output_names, input_feed, run_options)
        start = time.perf_counter()
        outputs = self._ow_run(output_names, input_feed, run_options)
        _notify(self, "run", output_names, input_feed, run_options, outputs, time.perf_counter() - start)
        return outputs

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        """As ``onnxruntime.InferenceSession.run_with_ort_values``: ``{name: OrtValue}`` in,
        ``list[OrtValue]`` out."""
        if not _RUN_OBSERVERS:
            return self._ow_run_with_ort_values(output_names, input_dict_ort_values, run_options)
        start = time.perf_counter()
        outputs = self._ow_run_with_ort_values(output_names, input_dict_ort_values, run_options)
        _notify(self, "run_with_ort_values", output_names, input_dict_ort_values, run_options, outputs,
                time.perf_counter() - start)
        return outputs

    def run_with_iobinding(self, iobinding, run_options=None):
        """As ``onnxruntime.InferenceSession.run_with_iobinding``."""
        if not _RUN_OBSERVERS:
            return self._ow_run_with_iobinding(iobinding, run_options)
        start = time.perf_counter()
        result = self._ow_run_with_iobinding(iobinding, run_options)
        _notify(self, "run_with_iobinding", None, iobinding, run_options, result, time.perf_counter() - start)
        return result

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None):
        """As ``onnxruntime.InferenceSession.run_async``: ``callback(results, user_data, err)``
        is called from an ORT thread; ``err`` is ``""`` on success."""
        return self._ow_run_async(output_names, input_feed, callback, user_data, run_options)

    # -- onnxwrapper additions --------------------------------------------------------------------
    def get_partition(self):
        """Which execution provider runs each node, as recorded by the backend.

        Returns:
            A :class:`onnxwrapper.PartitionReport` (per node name, op type and EP; counts per EP;
            reasons where the backend knows them), or ``None`` when the backend records none (the
            ``cpu`` backend runs what ORT runs and records nothing).
        """
        partition = getattr(self._ow_backend_session, "partition", None)
        return partition() if callable(partition) else None

    def close(self) -> None:
        """Release backend resources now instead of at garbage collection (idempotent)."""
        if not self._ow_closed and self._ow_backend_session is not None:
            self._ow_closed = True
            self._ow_backend_session.close()

    # -- ORT methods that need a real ORT session ------------------------------------------------
    def io_binding(self):
        """As ``onnxruntime.InferenceSession.io_binding`` (ORT-based backends only)."""
        self._ow_require_ort("io_binding")
        return super().io_binding()

    def set_providers(self, providers=None, provider_options=None) -> None:
        """As ORT on the ``cpu`` backend. On an NPU backend changing providers would silently
        move the model elsewhere, so it raises :class:`~onnxwrapper.errors.BackendCapabilityError`:
        create a new session with ``backend=`` instead."""
        if self._ow_foreign or getattr(self._ow_backend, "npu", False):
            raise BackendCapabilityError(
                f"set_providers() would move this session off backend '{self.backend_name}'. "
                f"Create a new InferenceSession with backend='cpu' (or another backend) instead.",
                backend=self.backend_name)
        return super().set_providers(providers, provider_options)

    def enable_fallback(self) -> None:
        """As ORT on the ``cpu`` backend. NPU backends never fall back to CPU silently: there the
        call is ignored with a warning and run errors are raised."""
        if getattr(self._ow_backend, "npu", False):
            import warnings

            warnings.warn(f"enable_fallback() is ignored on backend '{self.backend_name}': onnxwrapper "
                          f"never moves an NPU session to CPU silently; errors are raised instead.",
                          UserWarning, stacklevel=2)
            return
        super().enable_fallback()

    def end_profiling(self):
        """As ORT; foreign backends raise :class:`~onnxwrapper.errors.BackendCapabilityError`."""
        self._ow_require_ort("end_profiling")
        return super().end_profiling()

    def get_profiling_start_time_ns(self):
        """As ORT; foreign backends report 0 (profiling not started), as ORT does when disabled."""
        if self._ow_foreign:
            return 0
        return super().get_profiling_start_time_ns()

    def get_provider_graph_assignment_info(self):
        """As ORT; foreign backends raise :class:`~onnxwrapper.errors.BackendCapabilityError`."""
        self._ow_require_ort("get_provider_graph_assignment_info")
        return super().get_provider_graph_assignment_info()
