"""The backend protocol: what every execution target behind ``onnxwrapper.InferenceSession`` implements.

A backend is a small class registered under the entry-point group ``onnxwrapper.backends``
(entry-point name = canonical backend name, e.g. ``qnn = onnxwrapper.backends.qnn:QnnBackend``).
The façade (:class:`onnxwrapper.InferenceSession`) selects one, instantiates it with the
validated ``backend_options`` and calls :meth:`Backend.open` with a :class:`SessionRequest`.
``open`` returns a :class:`BackendSession` that the façade attaches to itself:

* :class:`OrtBackendSession` — the backend runs through ONNX Runtime (CPU, QNN EP, …). It names
  the model, session options and providers for the real ``onnxruntime.InferenceSession``
  constructor, so every ORT method works natively on the façade; it may override run methods
  (e.g. to pick a shape specialization) and adjust what the session reports afterwards.
* :class:`ForeignBackendSession` — the backend is not ONNX Runtime (qai_appbuilder, SNPE). It
  supplies metadata and ``run``; every ORT method it cannot serve raises
  :class:`~onnxwrapper.errors.BackendCapabilityError`.

Backend classes must not import their SDK at module import time: do it in :meth:`Backend.probe`
and :meth:`Backend.open` (``import onnxwrapper`` stays cheap and quiet).
"""

from __future__ import annotations

import abc
import difflib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

from onnxwrapper.errors import BackendCapabilityError, BackendOptionError

__all__ = [
    "did_you_mean",
    "Availability",
    "OptionSpec",
    "SessionRequest",
    "Backend",
    "BackendSession",
    "OrtBackendSession",
    "ForeignBackendSession",
]


def did_you_mean(word: str, choices) -> str:
    """``" Did you mean 'x'?"`` for the closest of ``choices`` to ``word`` (difflib), else ``""``.

    Used in every "unknown name" message (options, targets, EP options, patch names).
    """
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run on this host, probed once per process.

    Attributes:
        available: True when sessions can be opened.
        reason: why it is unavailable, or a note when available (e.g. "HTP simulator on x86-64").
        install_hint: the command or step that would make it available (e.g.
            ``pip install 'onnxwrapper[qnn]'``); empty when nothing can be installed.
        real_npu: True only when a physical NPU runs the graphs. ``auto`` selection considers
            only backends with ``real_npu`` (and ``auto_selectable``); a simulated NPU is never
            picked automatically.
        simulated: True when the device is emulated on the host CPU (e.g. the QNN HTP simulator
            of ``onnxruntime-qnn`` on x86-64): device numerics, not device speed.
        auto_selectable: False for backends that must be asked for by name even on a real NPU
            (e.g. ``qai``/``snpe`` only run precompiled artifacts, not arbitrary ONNX models).
        details: free-form facts for listings (SDK versions, device names).
    """

    available: bool
    reason: str = ""
    install_hint: str = ""
    real_npu: bool = False
    simulated: bool = False
    auto_selectable: bool = True
    details: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OptionSpec:
    """One documented backend option.

    Attributes:
        name: the key in ``backend_options``.
        doc: one-line description with units and source of the allowed values.
        default: value used when the option is absent (``None`` = not set).
        convert: callable turning the user's value into the canonical value; it raises
            ``ValueError`` or ``TypeError`` with an explanation for bad values.
        choices: allowed canonical values, or ``None`` for any value ``convert`` accepts.
    """

    name: str
    doc: str
    default: Any = None
    convert: Callable[[Any], Any] | None = None
    choices: Sequence[Any] | None = None


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
        provider_backend_options: backend options taken from a ``(EP name, options)`` tuple in
            ``providers`` that selected this backend (strings, as ORT would pass them).
    """

    path_or_bytes: Any
    sess_options: Any = None
    providers: Any = None
    provider_options: Any = None
    kwargs: dict = field(default_factory=dict)
    provider_backend_options: dict = field(default_factory=dict)

    @property
    def model_path(self) -> str | None:
        """The model path as ``str``, or ``None`` when the model was given as bytes."""
        if isinstance(self.path_or_bytes, (str, os.PathLike)):
            return os.fspath(self.path_or_bytes)
        return None


class BackendSession(abc.ABC):
    """One open session of a backend, attached to exactly one façade ``InferenceSession``."""

    #: run-method names a backend session may override; the façade routes them here when defined.
    RUN_METHODS: ClassVar[tuple[str, ...]] = ("run", "run_with_ort_values", "run_with_iobinding", "run_async")

    @abc.abstractmethod
    def attach(self, session) -> None:
        """Initialise ``session`` (the façade) so that ORT's methods work on it.

        Must be called exactly once, by the façade's constructor.
        """

    def close(self) -> None:
        """Release backend resources. Called at most once; the default does nothing."""


class OrtBackendSession(BackendSession):
    """A backend session executed by ONNX Runtime itself.

    Args:
        path_or_bytes: what to hand to ``onnxruntime.InferenceSession`` (the user's model, or a
            compiled artifact such as an EPContext model).
        sess_options: the ``SessionOptions`` to use (possibly a configured copy of the user's).
        providers, provider_options: as for ``onnxruntime.InferenceSession``.
        kwargs: ORT keyword arguments (e.g. ``{"enable_fallback": 0}``).

    Subclasses may override :meth:`after_create` to check or adjust the created session (e.g.
    make ``get_providers()`` truthful) and may define any of :attr:`RUN_METHODS` with the façade
    as first argument, e.g. ``def run(self, session, output_names, input_feed, run_options=None)``.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 kwargs: Mapping[str, Any] | None = None) -> None:
        self.path_or_bytes = path_or_bytes
        self.sess_options = sess_options
        self.providers = providers
        self.provider_options = provider_options
        self.kwargs = dict(kwargs or {})

    def attach(self, session) -> None:
        import onnxruntime

        onnxruntime.InferenceSession.__init__(session, self.path_or_bytes, self.sess_options,
                                              self.providers, self.provider_options, **self.kwargs)
        self.after_create(session)

    def after_create(self, session) -> None:
        """Hook run right after ORT created the session; the default does nothing."""


class ForeignBackendSession(BackendSession):
    """A backend session that does not run through ONNX Runtime (qai_appbuilder, SNPE, …).

    Subclasses implement :meth:`run` and the metadata methods. When
    :attr:`validate_feeds_in_facade` is True (the default) the façade first checks the feed with
    :func:`onnxwrapper.kernel._feeds.validate_feed` against :meth:`get_inputs` — raising exactly what ORT
    raises for missing/unknown names, dtypes, ranks and dims, casting lists as ORT does — and
    resolves ``output_names`` (``None`` → all outputs), so :meth:`run` receives clean arguments.
    """

    #: when True the façade checks names, dtypes, ranks and dims of feeds (ORT's messages) first.
    validate_feeds_in_facade: ClassVar[bool] = True

    def attach(self, session) -> None:
        session._sess = None
        session._model_path = None
        session._model_bytes = None
        session._sess_options = self.get_session_options()
        session._sess_options_initial = session._sess_options
        session._enable_fallback = False
        session._inputs_meta = list(self.get_inputs())
        session._outputs_meta = list(self.get_outputs())
        session._overridable_initializers = list(self.get_overridable_initializers())
        session._model_meta = self.get_modelmeta()
        session._providers = list(self.get_providers())
        session._provider_options = dict(self.get_provider_options())
        session._profiling_start_time_ns = 0

    @abc.abstractmethod
    def run(self, session, output_names, input_feed, run_options=None) -> list:
        """Run one inference.

        Args:
            session: the façade ``InferenceSession``.
            output_names: ``list[str]``, already resolved and checked (never ``None``).
            input_feed: ``{name: numpy.ndarray}`` validated against :meth:`get_inputs` (dtype,
                rank, fixed dims); arrays may be non-contiguous.
            run_options: ``onnxruntime.RunOptions`` or ``None``.

        Returns:
            One ``numpy.ndarray`` per requested output, in the requested order, with the ONNX
            output dtype and shape.
        """

    @abc.abstractmethod
    def get_inputs(self) -> list:
        """ONNX-named input metadata objects with ``name``, ``shape`` and ``type`` (ORT strings)."""

    @abc.abstractmethod
    def get_outputs(self) -> list:
        """ONNX-named output metadata objects, in ONNX order."""

    def get_overridable_initializers(self) -> list:
        """Initializers that may be fed; none by default."""
        return []

    def get_modelmeta(self):
        """A metadata object with ORT's ``ModelMetadata`` attributes; see :class:`onnxwrapper.ModelMetadataInfo`."""
        from onnxwrapper.kernel._metadata import ModelMetadataInfo

        return ModelMetadataInfo()

    @abc.abstractmethod
    def get_providers(self) -> list[str]:
        """What actually runs the graph, e.g. ``["QnnContextBinary(qai_appbuilder)"]``."""

    def get_provider_options(self) -> dict:
        """Options per provider name; empty by default."""
        return {}

    def get_session_options(self):
        """The ``SessionOptions`` reported by ``get_session_options()``; a fresh default one."""
        import onnxruntime

        return onnxruntime.SessionOptions()

    def unsupported(self, method: str, backend: str) -> BackendCapabilityError:
        """Build the error for an ORT method this backend cannot serve."""
        return BackendCapabilityError(
            f"InferenceSession.{method}() is not supported by backend '{backend}': it does not run "
            f"through ONNX Runtime. Use run() instead, or choose backend='cpu' or 'qnn' for this feature.",
            backend=backend,
        )


class Backend(abc.ABC):
    """Base class of every backend.

    Class attributes a backend sets:
        name: canonical registry name (``"cpu"``, ``"qnn"``); equals its entry-point name.
        aliases: other accepted names, case-insensitive (``("qairt",)``).
        execution_providers: ORT EP names whose presence in ``providers=`` selects this backend.
        options: ``{key: OptionSpec}`` documented options; any other key is rejected.
        npu: True for backends that target an NPU (no silent CPU fallback is allowed for them).
        process_global_config: True when the backend's configuration is per process (QNN).

    Args:
        options: the user's ``backend_options`` dict (``None`` = defaults).

    Raises:
        BackendOptionError: an unknown key (with the closest valid key) or a bad value.
    """

    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    execution_providers: ClassVar[tuple[str, ...]] = ()
    options: ClassVar[Mapping[str, OptionSpec]] = {}
    npu: ClassVar[bool] = False
    process_global_config: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.config = self.validate_options(options or {})

    @classmethod
    @abc.abstractmethod
    def probe(cls) -> Availability:
        """Return whether this backend can run here. Must be cheap after the first call and quiet."""

    @abc.abstractmethod
    def open(self, request: SessionRequest) -> BackendSession:
        """Prepare a session for ``request`` (compile, load artifacts, …) and return it.

        Raises:
            The same exception class ORT raises for bad model input (``NoSuchFile``,
            ``InvalidProtobuf``, …); :class:`~onnxwrapper.errors.OnnxwrapperError` subclasses
            for backend-specific failures.
        """

    @classmethod
    def validate_options(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``options`` against :attr:`options` and return the canonical dict with defaults.

        Raises:
            BackendOptionError: unknown key (suggests the nearest valid one) or invalid value.
        """
        if not isinstance(options, Mapping):
            raise BackendOptionError(
                f"backend_options must be a dict, got {type(options).__name__}.", backend=cls.name)
        result: dict[str, Any] = {}
        for key, value in options.items():
            spec = cls.options.get(key)
            if spec is None:
                known = sorted(cls.options)
                hint = did_you_mean(key, known)
                raise BackendOptionError(
                    f"Unknown option '{key}' for backend '{cls.name}'.{hint} "
                    f"Valid options: {', '.join(known) if known else '(none)'}.", backend=cls.name)
            if spec.convert is not None:
                try:
                    value = spec.convert(value)
                except (ValueError, TypeError) as exc:
                    raise BackendOptionError(
                        f"Invalid value {value!r} for option '{key}' of backend '{cls.name}': {exc}",
                        backend=cls.name) from exc
            if spec.choices is not None and value not in spec.choices:
                raise BackendOptionError(
                    f"Invalid value {value!r} for option '{key}' of backend '{cls.name}'. "
                    f"Expected one of: {', '.join(map(repr, spec.choices))}.", backend=cls.name)
            result[key] = value
        for key, spec in cls.options.items():
            result.setdefault(key, spec.default)
        return result
