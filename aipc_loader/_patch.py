"""The hot patch: while active, ``onnxruntime.InferenceSession`` builds onnxwrapper sessions.

How it works
------------
A post-import hook (``wrapt.register_post_import_hook`` on ``"onnxruntime"``; it fires at once
when onnxruntime is already imported) wraps one attribute, ``InferenceSession.__init__`` of the
class defined in ``onnxruntime.capi.onnxruntime_inference_collection``, with
``wrapt.wrap_function_wrapper`` and keeps the handle; :func:`uninstall` removes it with
``wrapt.unwrap_object``, which puts the identical function object back.

While active it also wraps the ``onnxruntime.SessionOptions`` methods whose effect ORT cannot
report back (``onnxwrapper.kernel.RECORDED_METHODS``: ``add_initializer``,
``add_external_initializers`` and its in-memory variant, the two free-dimension overrides,
``register_custom_ops_library``, ``set_load_cancellation_flag``; the methods of the class, again
with handles): each call is recorded (:func:`onnxwrapper.kernel.record_call`), so a
backend that compiles with a configured copy of the options applies them too. And it lets the
backend prepare the process once (:meth:`onnxwrapper.backends.base.Backend.prepare_process`: the
qnn backend registers its plugin execution provider, so ``onnxruntime.get_available_providers()``
lists ``QNNExecutionProvider`` from the start, as in a script that registers onnxruntime-qnn
itself).

The class object itself is never replaced, and neither is any module: ``onnxruntime``,
``onnxruntime.InferenceSession``, a name bound by ``from onnxruntime import InferenceSession``
before or after activation, ``importlib.import_module("onnxruntime").InferenceSession`` and
``onnxruntime.capi.onnxruntime_inference_collection.InferenceSession`` are all the same object,
before, during and after activation. So ``isinstance(s, onnxruntime.InferenceSession)`` and
``class MySession(onnxruntime.InferenceSession)`` keep working, and every other onnxruntime
name (``capi._pybind_state``, ``quantization``, ``tools``, ``SessionOptions``, ``OrtValue``) is
the same object (``SessionOptions`` only has the recording wrappers on those methods).

When the wrapped ``__init__`` runs for a new object while the patch is active, it turns the
object into an onnxwrapper session before initialising it: the object's ``__class__`` becomes
:class:`onnxwrapper.InferenceSession` (for a user subclass ``MySession``, a class derived from
``(MySession, onnxwrapper.InferenceSession)`` with the same name, created once per subclass), and
the façade's constructor runs with ``backend=`` and ``backend_options=`` of the activation. The
façade's explicit ``backend=`` takes precedence over ``providers=``, so a script asking for
``["CPUExecutionProvider"]`` still runs on the chosen backend.

Left untouched (the real ORT constructor runs with the caller's providers):

* objects that already are onnxwrapper sessions (the façade itself initialises through ORT's
  ``__init__``), and everything created while a redirected session is being built (a backend's
  helper sessions);
* calls whose direct caller is a module of the ``onnxruntime``, ``onnxwrapper`` or ``aipc_loader``
  packages (quantization calibration, the transformers optimizer, ``onnxruntime.backend``,
  ``onnxruntime.tools``): onnxruntime's internal work keeps the providers it asks for. A module
  run as ``__main__`` counts by its ``__spec__`` name (``python -m onnxruntime.…``). The caller is
  found by looking at the calling frame (``sys._getframe``), skipping wrapt's frames. This look
  at the stack is deliberate: onnxruntime's internal modules call the constructor with nothing
  that marks the call (their code is not ours), so the caller is the only fact available; it
  routes a session, it does not police the API. An explicit mechanism would have to wrap every
  internal entry point of onnxruntime (quantization, tools, transformers, backend) per release.

Limits: ``type(s) is onnxruntime.InferenceSession`` is false for redirected sessions (it is false
for every onnxwrapper session; ``isinstance`` holds). Sessions created before activation stay
ORT sessions. A post-import hook does not cope with ``importlib.reload(onnxruntime)`` (a reload
defines a new class that is not patched).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import wrapt

__all__ = ["Activation", "install", "uninstall", "activated", "is_active", "current_activation",
           "add_session_listener", "validate", "HOOK_MODULE", "CLASS_MODULE", "INTERNAL_PACKAGES"]

#: the module whose import triggers the patch.
HOOK_MODULE = "onnxruntime"
#: where ``InferenceSession`` is defined (re-exported by ``onnxruntime/__init__.py``).
CLASS_MODULE = "onnxruntime.capi.onnxruntime_inference_collection"
#: packages whose own sessions are never redirected.
INTERNAL_PACKAGES = ("onnxruntime", "onnxwrapper", "aipc_loader")


@dataclass(frozen=True)
class Activation:
    """One activation of the patch.

    Attributes:
        backend: canonical backend name (``"qnn"``, ``"cpu"``, a plugin's name).
        backend_options: the options as the user gave them; each redirected session passes them
            to the façade as ``backend_options=`` (which validates them).
    """

    backend: str
    backend_options: Mapping[str, Any] = field(default_factory=dict)


class _State:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.activation: Activation | None = None
        self.handle = None          # the wrapt FunctionWrapper installed on InferenceSession.__init__
        self.target: type | None = None
        self.recorders: dict[str, Any] = {}  # SessionOptions method name -> its recording wrapper
        self.options_class: type | None = None
        self.prepared: set[str] = set()  # backends whose prepare_process() ran in this process
        self.hook_pending = False
        self.derived: dict[type, type] = {}
        self.listeners: list[Callable] = []


_state = _State()
_local = threading.local()
_facade: type | None = None


def _reinit_lock_after_fork() -> None:
    _state.lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_lock_after_fork)


# -- public API ---------------------------------------------------------------------------------
def install(backend: str = "qnn", **backend_options: Any) -> None:
    """Activate the patch: from now on ``onnxruntime.InferenceSession(...)`` builds onnxwrapper
    sessions on ``backend`` with ``backend_options`` (see the module docstring for what is and
    is not redirected).

    Installing again while active replaces the backend and options for sessions created
    afterwards. If onnxruntime is not imported yet, the patch is applied when it is.

    Args:
        backend: backend name or alias, case-insensitive. Defaults to ``"qnn"``.
        **backend_options: options documented by that backend (e.g. ``target``, ``precision``,
            ``strict``, ``cache_dir`` for ``qnn``); typos are rejected.

    Raises:
        onnxwrapper.BackendNotFoundError: unknown backend name.
        onnxwrapper.BackendOptionError: unknown option or bad value.
        onnxwrapper.BackendUnavailableError: the backend cannot run on this host.
        onnxwrapper.BackendValidationError: the backend's plugin is broken.
    """
    name = validate(backend, backend_options)
    _activate(Activation(name, dict(backend_options)))


def uninstall() -> None:
    """Deactivate the patch and restore ``InferenceSession.__init__`` (the identical object).

    Idempotent. Sessions created while active stay onnxwrapper sessions.

    Raises:
        wrapt.WrapperNotOutermostError: a non-wrapt wrapper was put on top of ours; the patch is
            then inert (it passes every call through) but cannot be removed.
    """
    with _state.lock:
        _state.activation = None
        handle, target = _state.handle, _state.target
        recorders, options_class = dict(_state.recorders), _state.options_class
        _state.handle = _state.target = _state.options_class = None
        _state.recorders.clear()
        _state.derived.clear()
    if handle is not None:
        wrapt.unwrap_object(target, "__init__", handle, missing_ok=True)
    for name, recorder in recorders.items():
        wrapt.unwrap_object(options_class, name, recorder, missing_ok=True)


@contextlib.contextmanager
def activated(backend: str = "qnn", **backend_options: Any) -> Iterator[Activation]:
    """``with activated("cpu"): …`` — :func:`install` on entry; on exit the previous state comes
    back (the previous activation, or none: then :func:`uninstall`). Nests.

    Yields:
        The :class:`Activation` in force inside the block.

    Raises:
        As :func:`install`, on entry.
    """
    with _state.lock:
        previous = _state.activation
    install(backend, **backend_options)
    try:
        yield current_activation()
    finally:
        if previous is None:
            uninstall()
        else:
            _activate(previous)


def is_active() -> bool:
    """True while the patch is active in this process (installed and not uninstalled)."""
    return _state.activation is not None


def current_activation() -> Activation | None:
    """The activation in force, or ``None``."""
    return _state.activation


def add_session_listener(listener: Callable[..., None]) -> Callable[[], None]:
    """Call ``listener(session, model=…, seconds=…)`` after each redirected session was created.

    ``model`` is the ``path_or_bytes`` the caller passed; ``seconds`` the constructor's wall
    time (float, s). The listener runs in the creating thread, right after the façade's constructor returned; an
    exception it raises propagates to the code that created the session.

    Returns:
        A function that removes the listener again (idempotent).
    """
    with _state.lock:
        _state.listeners.append(listener)

    def undo() -> None:
        with _state.lock:
            if listener in _state.listeners:
                _state.listeners.remove(listener)

    return undo


def validate(backend: str, backend_options: Mapping[str, Any]) -> str:
    """Check ``backend`` and ``backend_options`` as the façade will, and that the backend can run.

    Imports onnxwrapper (and so onnxruntime) and probes the backend.

    Returns:
        The canonical backend name.

    Raises:
        As :func:`install`.
    """
    # importing aipc_loader must not import onnxruntime (every child of an aipc run imports it)
    from onnxwrapper._registry import default_registry
    from onnxwrapper._selection import require_available

    registry = default_registry()
    name = registry.resolve(backend)
    registry.get(name).validate_options(dict(backend_options))
    require_available(registry, name, f"--backend {backend}")
    return name


# -- activation machinery -------------------------------------------------------------------------
def _activate(activation: Activation) -> None:
    """Make ``activation`` current without validating it (child processes: the parent did)."""
    register = False
    with _state.lock:
        _state.activation = activation
        if _state.handle is None and not _state.hook_pending:
            _state.hook_pending = register = True
        wrapped = _state.handle is not None
    if register:
        # fires at once when onnxruntime is already imported; outside our lock (wrapt's advice)
        wrapt.register_post_import_hook(_on_onnxruntime_imported, HOOK_MODULE)
    elif wrapped:
        _prepare(activation.backend)


def _on_onnxruntime_imported(module) -> None:
    """Post-import hook: wrap ``InferenceSession.__init__`` and the recorded ``SessionOptions``
    methods if still active and not yet wrapped; then let the backend prepare the process."""
    import importlib

    from onnxwrapper.kernel import RECORDED_METHODS  # onnxruntime is imported by now

    with _state.lock:
        _state.hook_pending = False
        if _state.activation is None or _state.handle is not None:
            return
        target = importlib.import_module(CLASS_MODULE).InferenceSession
        _state.handle = wrapt.wrap_function_wrapper(target, "__init__", _init_wrapper)
        _state.target = target
        options_class = module.SessionOptions
        _state.options_class = options_class
        for name in RECORDED_METHODS:
            if hasattr(options_class, name):  # onnxruntime 1.23 (Intel Macs, macOS 13) lacks the newest ones
                _state.recorders[name] = wrapt.wrap_function_wrapper(options_class, name, _recording_wrapper(name))
        backend = _state.activation.backend
    _prepare(backend)


def _recording_wrapper(method: str):
    def record(wrapped, instance, args, kwargs):
        from onnxwrapper.kernel import RecordingSessionOptions, record_call

        result = wrapped(*args, **kwargs)
        # onnxwrapper.SessionOptions records its own calls (they reach this wrapper through super())
        if instance is not None and _state.activation is not None and not isinstance(instance,
                                                                                     RecordingSessionOptions):
            record_call(instance, method, tuple(args) + tuple(kwargs.values()))
        return result
    return record


def _prepare(backend: str) -> None:
    """Run the backend's ``prepare_process()`` once per process (failures are logged, not raised)."""
    import logging

    with _state.lock:
        if backend in _state.prepared:
            return
        _state.prepared.add(backend)
    try:
        from onnxwrapper._registry import default_registry

        default_registry().get(backend).prepare_process()
    except Exception as exc:  # noqa: BLE001 - preparing is a courtesy; sessions report real problems
        logging.getLogger("onnxwrapper").debug("aipc: backend %s could not prepare the process: %s", backend, exc)


def _facade_class() -> type:
    global _facade
    if _facade is None:
        from onnxwrapper._session import InferenceSession  # on first redirect: see validate()

        _facade = InferenceSession
    return _facade


def _is_internal(module_name: str) -> bool:
    return any(module_name == p or module_name.startswith(p + ".") for p in INTERNAL_PACKAGES)


def _caller_module(frame) -> str:
    """Module name of the first frame at or above ``frame`` that is not wrapt's."""
    while frame is not None:
        g = frame.f_globals
        name = g.get("__name__") or ""
        if name == "wrapt" or name.startswith("wrapt."):
            frame = frame.f_back
            continue
        if name in ("__main__", "__mp_main__"):
            spec = g.get("__spec__")
            name = getattr(spec, "name", None) or name
        return name
    return ""


def _init_wrapper(wrapped, instance, args, kwargs):
    activation = _state.activation
    if (activation is None or instance is None or getattr(_local, "depth", 0)
            or isinstance(instance, _facade_class())
            or _is_internal(_caller_module(sys._getframe(1)))):
        return wrapped(*args, **kwargs)
    _redirect(instance, activation, args, kwargs)
    return None


def _redirect_class(cls: type, facade: type) -> type:
    if cls in facade.__mro__:
        return facade
    with _state.lock:
        derived = _state.derived.get(cls)
        if derived is None:
            namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                         "__doc__": cls.__doc__, "_aipc_original_class": cls}
            derived = type(cls)(cls.__name__, (cls, facade), namespace)
            _state.derived[cls] = derived
        return derived


def _redirect(instance, activation: Activation, args: tuple, kwargs: dict) -> None:
    facade = _facade_class()
    original = type(instance)
    try:
        instance.__class__ = _redirect_class(original, facade)
    except TypeError as exc:
        raise TypeError(
            f"aipc cannot run {original.__module__}.{original.__qualname__} on backend "
            f"'{activation.backend}': it cannot be combined with onnxwrapper.InferenceSession "
            f"({exc}). Create the session with onnxwrapper.InferenceSession(…, backend=…) instead, "
            f"or run without aipc.") from exc
    model = args[0] if args else kwargs.get("path_or_bytes")
    start = time.perf_counter()
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        facade.__init__(instance, *args, backend=activation.backend,
                        backend_options=dict(activation.backend_options), **kwargs)
    finally:
        _local.depth -= 1
    seconds = time.perf_counter() - start
    for listener in list(_state.listeners):
        listener(instance, model=model, seconds=seconds)
