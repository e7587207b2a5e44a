"""The run callables a session façade keeps, built so that they hold no reference back to it.

A façade (:class:`onnxwrapper.InferenceSession`) keeps callables that run ORT's methods on its
state: ``run`` as an instance attribute (ORT's bound method, zero added cost per call), and one
callable per run method for its run path. Bound to the façade itself they would form a reference
cycle (the façade → its ``__dict__`` → a bound method → the façade), so a dropped session would
live on — its ORT session, HTP context and, on Windows ARM64, its mapped context binaries — until
the cyclic garbage collector runs. They are bound instead to the façade's *ORT twin*: a plain
``onnxruntime.InferenceSession`` object (``object.__new__``, no constructor) whose ``__dict__``
holds a copy of the façade's ORT state (the same native session), refreshed by :func:`sync_twin`
whenever the façade writes that state. A bound ``run`` taken from a session keeps the native
session alive as ORT's does (``InferenceSession(model).run(...)`` works). The plan dispatcher
gets :func:`no_plan` for a call without a plan, so it holds nothing of the façade either.
"""

from __future__ import annotations

import contextlib

import types
from typing import Any, Callable, Iterable, Mapping

import onnxruntime

from onnxwrapper.backends.base import capability_error

__all__ = ["NO_PLAN", "foreign_ort_state", "no_plan", "ort_state", "run_callables", "sync_twin"]

_ORT = onnxruntime.InferenceSession
#: what the plan dispatcher returns for a call without a plan
NO_PLAN = object()
#: the façade's own attributes, never copied to its twin (besides every ``_ow*`` one)
_FACADE_ONLY = frozenset({"run", "backend_name", "backend_selection"})


def no_plan(output_names, input_feed, run_options=None):
    """The dispatcher's ``missed`` callable: :data:`NO_PLAN` (the façade then takes the full path)."""
    return NO_PLAN


def sync_twin(state: dict) -> None:
    """Create (first call) or refresh the twin in a façade's ``__dict__`` (``state["_ow_twin"]``): its
    ``__dict__`` becomes a copy of the façade's ORT attributes. One change it cannot follow: ORT's
    own fallback inside ``run`` after an execution provider failure rebuilds the twin's session only."""
    twin = state.get("_ow_twin")
    if twin is None:
        twin = state["_ow_twin"] = _ORT.__new__(_ORT)
    copy = twin.__dict__
    copy.clear()
    copy.update((k, v) for k, v in state.items() if not k.startswith("_ow") and k not in _FACADE_ONLY)


def _unsupported(method: str, backend_name: str) -> Callable[..., Any]:
    def raise_unsupported(*args, **kwargs):
        raise capability_error(method, backend_name)
    return raise_unsupported


def run_callables(methods: Iterable[str], served: Mapping[str, Callable], twin: Any, foreign: bool,
                  backend_name: str, watch: Callable | None = None) -> dict[str, Callable]:
    """``{method: callable}`` for each run method: the backend's own (``served``), else ORT's bound to
    ``twin``, or — for a foreign backend — one raising
    :class:`~onnxwrapper.errors.BackendCapabilityError`; each wrapped by ``watch(method, callable)``
    when given (``SessionDescription.watch``: e.g. the simulator's progress lines of a long call)."""
    found = {}
    for method in methods:
        impl = served.get(method)
        if impl is None:
            impl = _unsupported(method, backend_name) if foreign else types.MethodType(getattr(_ORT, method), twin)
        found[method] = impl if watch is None else watch(method, impl)
    return found


def ort_state(facade: Any, ort: Any) -> None:
    """Write ORT's state on ``facade`` from ``ort`` (an ``OrtSessionArgs``): ORT's own constructor in the
    backend's guard, or the state of the ``onnxruntime.InferenceSession`` the backend already created
    with these arguments (``ort.prebuilt``), taken over as it is."""
    if ort.prebuilt is not None:
        facade.__dict__.update(vars(ort.prebuilt))
        return
    with (ort.guard() if ort.guard is not None else contextlib.nullcontext()):
        _ORT.__init__(facade, ort.path_or_bytes, ort.sess_options, ort.providers, ort.provider_options,
                      **dict(ort.kwargs))


def foreign_ort_state(foreign: Any, backend_session: Any) -> dict[str, Any]:
    """ORT's attributes for the façade of a foreign backend's session (it has no ORT session), from
    its ``SessionDescription.foreign`` and the backend session's reports, so that ORT's inherited
    getters (``get_inputs``, ``get_outputs``, ``get_session_options``, …) work."""
    options = foreign.sess_options if foreign.sess_options is not None else onnxruntime.SessionOptions()
    return {"_sess": None, "_model_path": None, "_model_bytes": None, "_sess_options": options,
            "_sess_options_initial": options, "_enable_fallback": False, "_inputs_meta": list(foreign.inputs),
            "_outputs_meta": list(foreign.outputs), "_overridable_initializers": list(foreign.overridable_initializers),
            "_model_meta": backend_session.modelmeta(), "_providers": list(backend_session.providers() or []),
            "_provider_options": dict(backend_session.provider_options() or {}), "_profiling_start_time_ns": 0}
