"""ONNX Runtime's own answers for session-API calls a backend serves itself, asked of ORT.

Where a backend answers a session method in place of ORT (``set_providers`` on an NPU backend,
``get_provider_graph_assignment_info`` of a compiled model), the errors must stay ORT's: same
class, same message, also when a later onnxruntime changes them. So they are not written down
here but obtained from ORT, with a throw-away CPU session of a one-node model (an ``Identity``
on ``float[1]``; about a millisecond):

* :func:`check_providers` — what ORT's ``InferenceSession.set_providers(providers,
  provider_options)`` raises for these arguments: ``ValueError`` from ORT's
  ``check_and_normalize_provider_args`` (not a sequence, length mismatch, …) and
  ``RuntimeError('Unknown Provider Type: X')`` from the native session's provider registration
  (measured on onnxruntime 1.32.0: raised for ``InvalidProvider``, ``cpu``,
  ``JsExecutionProvider``; names ORT knows but has not built in are accepted and dropped), plus
  ORT's warnings about unavailable providers.
* :func:`assignment_not_enabled_error` — ORT's ``Fail`` of ``get_provider_graph_assignment_info()``
  on a session without the config entry ``session.record_ep_graph_assignment_info=1``
  (onnxruntime 1.32.0: ``[ONNXRuntimeError] : 1 : FAIL : 1Session configuration entry
  'session.record_ep_graph_assignment_info' must be set to "1" to retrieve EP graph assignment
  information.``).
"""

from __future__ import annotations

import threading

from onnxruntime.capi import onnxruntime_pybind11_state as C

__all__ = ["assignment_not_enabled_error", "check_providers"]

_lock = threading.Lock()
_cached: dict[str, object] = {}


def _probe_model() -> bytes:
    """A one-node ONNX model (``Y = Identity(X)``, ``float[1]``), serialized once."""
    with _lock:
        if "model" not in _cached:
            from onnx import TensorProto, helper

            graph = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "probe",
                                      [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
                                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
            _cached["model"] = model.SerializeToString()
        return _cached["model"]


def _ort_class():
    # onnxruntime's own class from its defining module: never an import-hot-patched entry point
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

    return InferenceSession


def check_providers(providers, provider_options=None, own=()) -> list[str]:
    """Raise what ``onnxruntime.InferenceSession.set_providers(providers, provider_options)`` raises.

    ORT's own two checks run: ``check_and_normalize_provider_args`` (``ValueError``s and its
    warnings), then the native session's provider registration (``Unknown Provider Type``) for
    every provider not in ``own`` — the execution providers of the calling backend, which it
    handles itself (they may be plugin EPs this process has not registered with ORT).

    Returns:
        The normalized provider names (ORT's order, duplicates dropped).

    Raises:
        ValueError: ORT's argument checks. RuntimeError: ``Unknown Provider Type: …``.
    """
    from onnxruntime.capi.onnxruntime_inference_collection import check_and_normalize_provider_args

    own = set(own)
    available = list(C.get_available_providers()) + sorted(own - set(C.get_available_providers()))
    names, options = check_and_normalize_provider_args(providers, provider_options, available)
    others = [(name, opts) for name, opts in zip(names, options) if name not in own]
    session = C.InferenceSession(C.SessionOptions(), _probe_model(), False, False)
    session.initialize_session([name for name, _o in others], [opts for _n, opts in others], set())
    return list(names)


def assignment_not_enabled_error() -> Exception | None:
    """A new instance of the error ORT raises for ``get_provider_graph_assignment_info()`` when
    ``session.record_ep_graph_assignment_info`` is not ``"1"`` (class and message: ORT's), or
    ``None`` if this onnxruntime answers without the entry."""
    with _lock:
        known = "assignment" in _cached
        cached = _cached.get("assignment")
    if not known:
        session = _ort_class()(_probe_model(), providers=["CPUExecutionProvider"])
        try:
            session.get_provider_graph_assignment_info()
            cached = None
        except Exception as exc:  # noqa: BLE001 - whatever ORT raises is the answer
            cached = (type(exc), str(exc))
        with _lock:
            _cached["assignment"] = cached
    if cached is None:
        return None
    cls, message = cached
    return cls(message)
