"""What a backend session is asked for and how it describes itself: the data of the protocol.

:class:`SessionRequest` is what the user passed to ``InferenceSession``; a backend session answers
with a :class:`SessionDescription` (:class:`OrtSessionArgs` for ORT-executed sessions,
:class:`ForeignIO` for foreign ones, the run callables, whether feeds need validation). The
protocol's classes are in :mod:`onnxwrapper.backends.base`, which re-exports these names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Mapping, Sequence

from onnxwrapper.errors import InternalError

__all__ = ["RUN_METHODS", "ForeignIO", "OrtSessionArgs", "SessionDescription", "SessionRequest"]


@dataclass
class SessionRequest:
    """Everything the user passed to ``InferenceSession``, minus ``backend``/``backend_options``.

    Attributes:
        path_or_bytes: the model as given: ``str``, ``os.PathLike`` or ``bytes`` (ONNX or ORT format).
        sess_options: ``onnxruntime.SessionOptions`` or ``None``.
        providers: as given to ORT (names or ``(name, options)`` tuples), or ``None``.
        provider_options: as given to ORT, or ``None``.
        kwargs: the remaining ORT keyword arguments (``enable_fallback``, ``read_config_from_model``,
            ``disabled_optimizers``).
        ep_options: ``{execution provider name: {key: str}}`` parsed once, by backend selection,
            from ``providers`` (``(name, options)`` tuples) and ``provider_options`` (the dict at the
            same index as a provider name); for an EP named twice the first entry wins per key.
    """

    path_or_bytes: Any
    sess_options: Any = None
    providers: Any = None
    provider_options: Any = None
    kwargs: dict = field(default_factory=dict)
    ep_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def model_path(self) -> str | None:
        """The model path as ``str``, or ``None`` when the model was given as bytes."""
        if isinstance(self.path_or_bytes, (str, os.PathLike)):
            return os.fspath(self.path_or_bytes)
        return None


@dataclass(frozen=True)
class OrtSessionArgs:
    """How the façade builds ONNX Runtime's own session for an ORT-executed backend session.

    The façade calls ``onnxruntime.InferenceSession.__init__`` on itself with these arguments, so
    every ORT method (``run``, IOBinding, profiling, …) is ORT's code on that session.

    Attributes:
        path_or_bytes: the model or compiled artifact (e.g. an EPContext model) to load.
        sess_options, providers, provider_options, kwargs: as for ``onnxruntime.InferenceSession``.
        guard: ``None`` or a zero-argument callable returning a context manager entered around ORT's
            constructor (e.g. to keep native stdout noise off fd 1 and map ORT's
            "Error creating execution provider" to a typed error).
        read_assignment: True when the backend wants the loaded session's
            ``get_provider_graph_assignment_info()`` (its session options must set
            ``session.record_ep_graph_assignment_info=1``), handed to :meth:`BackendSession.loaded`.
        prebuilt: an ``onnxruntime.InferenceSession`` the backend already created with exactly these
            arguments (e.g. in a thread while it decided what to open): the façade takes over its
            state instead of creating the session again; ``None``: created by the façade.
    """

    path_or_bytes: Any
    sess_options: Any = None
    providers: Any = None
    provider_options: Any = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    guard: Callable[[], ContextManager] | None = None
    read_assignment: bool = False
    prebuilt: Any = None


@dataclass(frozen=True)
class ForeignIO:
    """What a session that does not run through ONNX Runtime reports as ORT would.

    Attributes:
        inputs / outputs: ONNX-named metadata objects (``name``, ``type`` ORT string, ``shape``),
            in model order (:class:`onnxwrapper.kernel.NodeArgInfo`).
        overridable_initializers: initializers that may be fed (usually none).
        sess_options: the ``SessionOptions`` reported by ``get_session_options()``.
    """

    inputs: Sequence[Any]
    outputs: Sequence[Any]
    overridable_initializers: Sequence[Any] = ()
    sess_options: Any = None


#: the ORT run methods a backend session may serve itself (see :attr:`SessionDescription.runs`)
RUN_METHODS: tuple[str, ...] = ("run", "run_with_ort_values", "run_with_iobinding", "run_async")


@dataclass(frozen=True)
class SessionDescription:
    """A backend session, described as data; the façade builds ORT's state from it.

    Exactly one of :attr:`ort` and :attr:`foreign` is set.

    Attributes:
        ort: for sessions ONNX Runtime executes: how to build ORT's session (see
            :class:`OrtSessionArgs`).
        foreign: for sessions something else executes: the metadata to report (:class:`ForeignIO`).
        runs: ``{run-method name: callable}`` for the methods of :data:`RUN_METHODS` the backend
            serves itself, called with ORT's arguments (never the façade):
            ``run(output_names, input_feed, run_options=None)``,
            ``run_with_ort_values(output_names, input_dict_ort_values, run_options=None)``,
            ``run_with_iobinding(iobinding, run_options=None)``,
            ``run_async(output_names, input_feed, callback, user_data, run_options=None)``.
            A method left out is ORT's own on ORT-executed sessions, and raises
            :class:`~onnxwrapper.errors.BackendCapabilityError` on foreign ones.
        validate_feeds: True when the façade must check feeds against the reported inputs (names,
            element types, ranks, fixed dims; ORT's exception classes and messages, one validator:
            :func:`onnxwrapper.kernel.validate_feed`) and resolve ``output_names`` (``None`` → all
            outputs) before it calls a callable of :attr:`runs`; those then receive
            ``{name: numpy.ndarray}`` and a ``list[str]``.
        feed_check: ``None``, or ``check(input_feed) -> bool`` the façade calls with the feed of
            every ``run``/``run_async`` served by ORT itself (not by :attr:`runs`) before running it,
            until it returns True (done: e.g. a warn-once check that has warned); while it is
            active, ``run`` is not bound to ORT's directly. It may warn; it must not modify the feed.
        plans: with :attr:`validate_feeds` and a ``run`` of :attr:`runs`: the backend's
            :class:`onnxwrapper.kernel.RunPlans`, whose ``build(feed, output_names)`` returns the plan
            of a validated call (e.g. straight to the ORT session of the feed's shapes); the backend
            clears it when a plan goes stale. ``None``: the façade plans calls itself (validation
            once per call key, then the ``run`` callable).
        watch: ``None``, or ``watch(method, impl) -> callable`` the façade applies to each run
            callable it binds (:attr:`runs` and ORT's own), e.g. a simulator's progress lines for
            a call that takes long; the result takes and returns what ``impl`` does. A backend
            applies it to its own :attr:`plans` itself.
    """

    ort: OrtSessionArgs | None = None
    foreign: ForeignIO | None = None
    runs: Mapping[str, Callable] = field(default_factory=dict)
    validate_feeds: bool = False
    feed_check: Callable[[Mapping[str, Any]], bool] | None = None
    plans: Any = None
    watch: Callable[[str, Callable], Callable] | None = None

    def __post_init__(self) -> None:
        if (self.ort is None) == (self.foreign is None):
            raise InternalError("SessionDescription needs exactly one of 'ort' and 'foreign'")
        unknown = sorted(set(self.runs) - set(RUN_METHODS))
        if unknown:
            raise InternalError(f"SessionDescription.runs has unknown run methods {unknown}; known: {RUN_METHODS}")
