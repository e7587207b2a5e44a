"""The backend protocol: what every execution target behind ``onnxwrapper.InferenceSession`` implements.

A backend is a small class registered under the entry-point group ``onnxwrapper.backends``
(entry-point name = canonical backend name, e.g. ``qnn = onnxwrapper.backends.qnn:QnnBackend``).
The façade (:class:`onnxwrapper.InferenceSession`) selects one, instantiates it with the
validated ``backend_options`` and calls :meth:`Backend.open` with a :class:`SessionRequest`.
``open`` returns a :class:`BackendSession`, which *describes itself* as data
(:meth:`BackendSession.describe` → :class:`SessionDescription`); only the façade writes
``onnxruntime.InferenceSession``'s state, in one place, and no backend method receives the façade:

* ORT-executed sessions (CPU, QNN EP, …; :class:`OrtBackendSession`) name the model, session
  options and providers for ORT's own constructor (:class:`OrtSessionArgs`), so every ORT method
  works natively; they may serve run methods themselves (e.g. to pick a shape specialization).
* Foreign sessions (qai_appbuilder, SNPE; :class:`ForeignBackendSession`) supply metadata
  (:class:`ForeignIO`) and ``run``; every ORT method they cannot serve raises
  :class:`~onnxwrapper.errors.BackendCapabilityError`.

A session also reports ``providers()``, ``provider_options()``, ``modelmeta()``,
``graph_assignment()`` (``None`` = ORT's own) and ``partition()``, may refuse a
``set_providers()`` (``before_providers_change``); ``close()`` releases its resources (idempotent; the façade raises
:class:`~onnxwrapper.errors.SessionClosedError` for every run afterwards). Feed validation, the
closed check and run observers live once, in the façade's run path.

Backend classes must not import their SDK at module import time: do it in :meth:`Backend.probe`
and :meth:`Backend.open` (``import onnxwrapper`` stays cheap and quiet).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Sequence

import onnxruntime

from onnxwrapper.backends._description import RUN_METHODS, ForeignIO, OrtSessionArgs, SessionDescription, SessionRequest
from onnxwrapper.errors import BackendCapabilityError, BackendOptionError
from onnxwrapper.kernel import ModelMetadataInfo, quiet_ort_telemetry

__all__ = [
    "Availability",
    "Backend",
    "BackendSession",
    "ForeignBackendSession",
    "ForeignIO",
    "OptionSpec",
    "OrtBackendSession",
    "OrtSessionArgs",
    "RUN_METHODS",
    "SessionDescription",
    "SessionRequest",
    "capability_error",
    "did_you_mean",
]


def did_you_mean(word: str, choices) -> str:
    """``" Did you mean 'x'?"`` for the closest of ``choices`` to ``word`` (difflib), else ``""``.

    Used in every "unknown name" message (options, targets, EP options, patch names).
    """
    import difflib  # noqa: PLC0415 - 1.7 ms of imports, only for an error message

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


class BackendSession(abc.ABC):
    """One open session of a backend. It describes itself; only the façade writes ORT's state.

    Life cycle: :meth:`Backend.open` returns it; the façade reads :meth:`describe` once, builds
    ORT's session (or the foreign metadata) from it, calls :meth:`loaded` for ORT-executed sessions
    that asked for the graph assignment, and from then on calls only the run callables of the
    description, the reporting methods below, and :meth:`close`. No method receives the façade.
    """

    #: True when the session's native state cannot be used in a child made by ``fork()`` (QNN's
    #: HTP state: a run there would hang); the façade then makes every run in such a child raise
    #: :class:`~onnxwrapper.errors.ForkedSessionError` at once.
    process_bound: bool = False

    @abc.abstractmethod
    def describe(self) -> SessionDescription:
        """How to build and run this session (called once, by the façade's constructor)."""

    def loaded(self, graph_assignment) -> None:
        """Called once after ORT built the session, when :attr:`OrtSessionArgs.read_assignment` is
        True, with ORT's ``get_provider_graph_assignment_info()`` result; may raise (e.g.
        :class:`~onnxwrapper.errors.PartitionError`). The default does nothing."""

    def providers(self) -> list[str] | None:
        """What ``get_providers()`` reports: the EPs (or runtimes) that run the graph, or ``None``
        for ORT's own list. May change as the session runs (shape specializations)."""
        return None

    def provider_options(self) -> dict | None:
        """What ``get_provider_options()`` reports, or ``None`` for ORT's own."""
        return None

    def modelmeta(self):
        """What ``get_modelmeta()`` reports, or ``None`` for ORT's own (the loaded model's)."""
        return None

    def partition(self):
        """Which execution provider runs each node: an :class:`onnxwrapper.kernel.PartitionReport`,
        or ``None`` when the backend records none."""
        return None

    def graph_assignment(self):
        """What ``get_provider_graph_assignment_info()`` returns, or ``None`` for ORT's own answer
        (of the session the façade built). A backend that compiled the model answers for the
        user's nodes (objects with ``ep_name`` and ``get_nodes()`` → ``name``, ``op_type``,
        ``domain``, as ORT's); it raises what ORT raises where ORT would refuse."""
        return None

    def before_providers_change(self, backend: str) -> None:
        """Called by ``InferenceSession.set_providers()`` after ORT's own argument checks and
        before the session is re-created on ``backend`` (this session's backend, or another one
        such as ``"cpu"`` when the new providers leave this backend's). Raise
        :class:`~onnxwrapper.errors.BackendCapabilityError` to refuse (e.g. a strict NPU session
        asked to move to CPU). The default allows it."""

    def close(self) -> None:
        """Release the backend's resources (compiled sessions, specializations, native contexts).

        Idempotent. The façade calls it from ``InferenceSession.close()`` and never runs the session
        afterwards (its run methods raise :class:`~onnxwrapper.errors.SessionClosedError`). The
        default releases nothing.
        """


class OrtBackendSession(BackendSession):
    """A backend session executed by ONNX Runtime itself, with ORT's own run methods.

    Args:
        path_or_bytes: what to hand to ``onnxruntime.InferenceSession`` (the user's model, or a
            compiled artifact such as an EPContext model).
        sess_options: the ``SessionOptions`` to use (possibly a configured copy of the user's).
        providers, provider_options: as for ``onnxruntime.InferenceSession``.
        kwargs: ORT keyword arguments (e.g. ``{"enable_fallback": 0}``).
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 kwargs: Mapping[str, Any] | None = None) -> None:
        self.ort_args = OrtSessionArgs(path_or_bytes, sess_options, providers, provider_options, dict(kwargs or {}))

    def describe(self) -> SessionDescription:
        """ORT's session from :attr:`ort_args`; every run method is ORT's own."""
        return SessionDescription(ort=self.ort_args)


class ForeignBackendSession(BackendSession):
    """A backend session that does not run through ONNX Runtime (qai_appbuilder, SNPE, …).

    Subclasses implement :meth:`run` and the metadata methods. The façade first checks each feed
    against :meth:`get_inputs` with :func:`onnxwrapper.kernel.validate_feed` — raising exactly what
    ORT raises for missing/unknown names, dtypes, ranks and dims, casting lists as ORT does — and
    resolves ``output_names`` (``None`` → all outputs), so :meth:`run` receives clean arguments.
    Every other run method raises :class:`~onnxwrapper.errors.BackendCapabilityError`.
    """

    def describe(self) -> SessionDescription:
        """Foreign metadata from the ``get_*`` methods, ``run`` = :meth:`run`, feeds validated."""
        io = ForeignIO(list(self.get_inputs()), list(self.get_outputs()), list(self.get_overridable_initializers()),
                       self.get_session_options())
        return SessionDescription(foreign=io, runs={"run": self.run}, validate_feeds=True)

    @abc.abstractmethod
    def run(self, output_names, input_feed, run_options=None) -> list:
        """Run one inference.

        Args:
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
        """A metadata object with ORT's ``ModelMetadata`` attributes (:class:`onnxwrapper.kernel.ModelMetadataInfo`)."""
        return ModelMetadataInfo()

    @abc.abstractmethod
    def get_providers(self) -> list[str]:
        """What actually runs the graph, e.g. ``["QnnContextBinary(qai_appbuilder)"]``."""

    def get_provider_options(self) -> dict:
        """Options per provider name; empty by default."""
        return {}

    def get_session_options(self):
        """The ``SessionOptions`` reported by ``get_session_options()``; a fresh default one."""
        return onnxruntime.SessionOptions()

    def providers(self) -> list[str]:
        return list(self.get_providers())

    def provider_options(self) -> dict:
        return dict(self.get_provider_options())

    def modelmeta(self):
        return self.get_modelmeta()


def capability_error(method: str, backend: str) -> BackendCapabilityError:
    """The error for an ORT method a foreign backend does not serve (raised by the façade)."""
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
        suggested_for: words users say for what this backend runs on (``("npu", "htp")``), not
            accepted as names: an unknown backend name equal to one of them suggests this backend.
        execution_providers: ORT EP names whose presence in ``providers=`` selects this backend.
        options: ``{key: OptionSpec}`` documented options; any other key is rejected.
        npu: True for backends that target an NPU (no silent CPU fallback is allowed for them).
        process_global_config: True when sessions with different configurations cannot coexist in one process.
        received_options: names of options, beyond the common ones (``target``, ``precision``, …),
            that a diff folder from elsewhere may set when ``aipc fix`` replays its runs: settings
            that shape the numbers, never a path, a library or a limit (docs/security.md).

    Args:
        options: the user's ``backend_options`` dict (``None`` = defaults).

    Raises:
        BackendOptionError: an unknown key (with the closest valid key) or a bad value.
    """

    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    suggested_for: ClassVar[tuple[str, ...]] = ()
    execution_providers: ClassVar[tuple[str, ...]] = ()
    options: ClassVar[Mapping[str, OptionSpec]] = {}
    npu: ClassVar[bool] = False
    process_global_config: ClassVar[bool] = False
    received_options: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        quiet_ort_telemetry()  # a backend is made per session: ORT's telemetry off, once (docs/security.md)
        self.config = self.validate_options(options or {})

    @classmethod
    @abc.abstractmethod
    def probe(cls) -> Availability:
        """Return whether this backend can run here. Must be cheap after the first call and quiet."""

    @classmethod
    def prepare_process(cls) -> None:
        """Make this process look as if the user's script had set this backend up itself.

        Called once by the ``aipc`` hot patch when it activates this backend in a process (after
        onnxruntime is imported, before the script creates sessions); e.g. the qnn backend
        registers its plugin execution provider, so ``onnxruntime.get_available_providers()``
        lists it as in a script that uses onnxruntime-qnn directly. Cheap and quiet; the default
        does nothing. It may raise; the caller logs and continues.
        """

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
