"""The compile worker process: executes :class:`~onnxwrapper.backends.qnn.workers._request.CompileRequest`\\ s.

Started by :class:`~onnxwrapper.backends.qnn.workers._workers.CompileWorker` as ``python -E -c <boot>
<parent's sys.path as JSON>`` (not ``multiprocessing``: its ``spawn`` re-imports the user's
``__main__``, which breaks scripts without an ``if __name__ == "__main__"`` guard and aipc's script
runner). Protocol, pickled objects over pipes: the worker first sends ``("ready", pid)``, then for
each ``("run", request)`` read from stdin it sends ``("ok", result)`` or ``("error", encoded
exception)``; EOF on stdin (the parent closed it or died) ends it. The protocol uses a private
duplicate of file descriptor 1; fd 1 itself is pointed at stderr, so native code printing to
stdout (the simulator's ``# LIBNATIVE:`` line) cannot corrupt it. SIGINT is ignored: a Ctrl-C is
the parent's to handle (it then ends the worker).

From its warm-up (or its first compile) on, the worker keeps one tiny QNN session alive
(:func:`~onnxwrapper.backends.qnn.compile.warm_qnn_backend`): while a QNN session exists the QNN
backend stays initialised, and each later compile is ~45 ms faster (measured, light squeezenet:
98 → 57 ms; every compile passes its own explicit ``soc_model``, so the tiny session changes
nothing else).
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import sys
import traceback
from typing import Any

from onnxwrapper.backends.qnn.compile import warm_qnn_backend

__all__ = ["execute", "encode_error", "decode_error", "serve"]

def execute(request) -> Any:
    """Run one request in this process (the worker, or the user's process when no worker can start).

    Returns:
        ``generate_epcontext``'s meta dict for ``kind == "epcontext"``; ``{"dlc": [paths]}`` for
        ``kind == "dlc"``; what ``request.job(*request.job_args)`` returns for ``kind == "job"``.
    """
    if request.kind == "job":
        return request.job(*request.job_args)
    import onnx

    from onnxwrapper.backends.qnn.compile import dump_dlc, generate_epcontext

    if request.kind == "dlc":
        return {"dlc": dump_dlc(request.model, request.out_dir, request.session_state, request.ep_options,
                                external_data_dir=request.external_data_dir, kwargs=request.kwargs)}
    original = onnx.ModelProto()
    original.ParseFromString(request.original)
    state = _single_threaded(request.session_state)
    return generate_epcontext(request.model, request.out_dir, state, request.ep_options,
                              original=original, external_data_dir=request.external_data_dir,
                              ctx_name=request.ctx_name, kwargs=request.kwargs, note=request.note,
                              provenance=request.provenance)


def _single_threaded(state):
    """``state`` (``session_options_state``) for the EPContext-generating session, which is created and
    never run: one ORT thread, no spinning. Its threads would only compete with parallel compiles
    (measured, tryaii's 18 shapes on 2 workers: 8.6 → 8.0 s); the compiled context and the cache key
    (computed by the caller from the user's options) do not depend on them."""
    state = dict(state or {})
    state["attributes"] = dict(state.get("attributes") or {}, intra_op_num_threads=1, inter_op_num_threads=1)
    state["configs"] = dict(state.get("configs") or {}, **{"session.intra_op.allow_spinning": "0"})
    state.setdefault("calls", [])
    return state


def encode_error(exc: BaseException) -> dict:
    """A picklable description of ``exc``: class (module, qualified name), message, picklable attributes."""
    attrs = {}
    for name, value in vars(exc).items():
        try:
            pickle.dumps(value)
        except Exception:  # noqa: BLE001 - anything unpicklable is left out
            continue
        attrs[name] = value
    cls = type(exc)
    return {"module": cls.__module__, "name": cls.__qualname__, "message": str(exc), "attrs": attrs,
            "traceback": "".join(traceback.format_exception(cls, exc, exc.__traceback__))}


def decode_error(data: dict) -> BaseException:
    """The exception :func:`encode_error` described: same class and message (``RuntimeError`` if the
    class cannot be imported here), attributes restored."""
    cls: type = RuntimeError
    try:
        found = importlib.import_module(data["module"])
        for part in data["name"].split("."):
            found = getattr(found, part)
        if isinstance(found, type) and issubclass(found, BaseException):
            cls = found
    except (ImportError, AttributeError):
        pass
    exc = cls.__new__(cls, data["message"])
    exc.args = (data["message"],)
    try:
        exc.__dict__.update(data.get("attrs", {}))
    except AttributeError:  # exception types without a __dict__
        pass
    return exc


def warm_up(ep_options) -> None:
    """Do, before the first request arrives, what every compile needs first: import onnx and the
    compile layer, register the QNN plugin EP and (with ``ep_options``, the options of the session
    that started this worker) create the tiny session of :func:`~onnxwrapper.backends.qnn.compile.warm_qnn_backend`. Started right after
    ``ready``, so this overlaps the parent's own work (reading, hashing and analysing the model)
    instead of delaying the first compile. Failures are left for the request to meet and report."""
    try:
        import onnx  # noqa: F401 - imported for its import time

        from onnxwrapper.backends.qnn.compile import generate_epcontext  # noqa: F401 - likewise
        from onnxwrapper.backends.qnn.platform import ensure_registered

        ensure_registered()
        if ep_options:
            warm_qnn_backend(ep_options)
    except Exception:  # noqa: BLE001 - only a speed-up: the request reports any real failure
        return


def serve(warm_options=None) -> None:
    """The worker's main loop (see the module docstring); ``warm_options``: :func:`warm_up` first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(message) -> None:
        pickle.dump(message, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()

    send(("ready", os.getpid()))
    warm_up(warm_options)
    while True:
        try:
            kind, request = pickle.load(requests)
        except EOFError:
            return
        if kind != "run":
            return
        try:
            reply = ("ok", execute(request))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent, typed
            reply = ("error", encode_error(exc))
        else:
            if request.kind == "epcontext":
                warm_qnn_backend(request.ep_options)
        try:
            send(reply)
        except (BrokenPipeError, OSError):
            return
