"""Backend selection: a pure function of the request, the environment and the registry.

Order (first that applies wins):

1. ``backend=`` argument (case-insensitive name or alias) — explicit: an unavailable backend raises.
2. ``providers=`` — the first provider whose execution provider belongs to a backend. Providers
   are ORT *preferences*: when the backend of a named EP is unavailable here, a ``UserWarning``
   says so (as ORT warns about an unavailable provider) and the next provider is considered,
   ending at ``cpu``.
3. ``ONNXWRAPPER_BACKEND`` environment variable — explicit: an unavailable backend raises.
4. ``auto`` — the first backend with a real NPU on this host that accepts any ONNX model
   (``Availability.auto_selectable``), else ``cpu``. A simulated NPU (the QNN HTP simulator on
   x86-64) is never picked automatically.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field, replace
from typing import Mapping

from onnxwrapper.backends.base import SessionRequest
from onnxwrapper.errors import BackendUnavailableError

__all__ = ["Selection", "select_backend", "reselect", "provider_names", "provider_ep_options", "require_available"]

_log = logging.getLogger("onnxwrapper")
ENV_BACKEND = "ONNXWRAPPER_BACKEND"


@dataclass(frozen=True)
class Selection:
    """The outcome of selection.

    Attributes:
        name: canonical backend name.
        source: ``"argument"``, ``"providers"``, ``"environment"`` or ``"auto"``.
        reason: one human sentence explaining the choice.
        provider_options: options of the provider entry that selected the backend (``None`` unless
            ``source == "providers"`` and that entry had options).
        ep_options: ``{EP name: {key: str}}`` for every provider entry with options (see
            :func:`provider_ep_options`): ``providers`` is parsed here once, and the backend
            receives this as ``SessionRequest.ep_options``.
    """

    name: str
    source: str
    reason: str
    provider_options: Mapping[str, str] | None = None
    ep_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"<Selection {self.name} (from {self.source}): {self.reason}>"


def provider_names(providers, provider_options=None) -> list[tuple[str, dict | None]]:
    """``providers`` as ``[(name, options or None)]``, the one parser of ORT's provider arguments.

    Options come from a ``(name, options)`` tuple or from the dict at the same index of
    ``provider_options`` (ORT's two forms); values become ``str`` as ORT passes them. Anything ORT
    would reject is skipped here (ORT itself reports it later with its own message).
    """
    result: list[tuple[str, dict | None]] = []
    if providers is None or isinstance(providers, (str, bytes)):
        return result
    try:
        items = list(providers)
    except TypeError:
        return result
    extra = list(provider_options) if isinstance(provider_options, (list, tuple)) else []
    for index, item in enumerate(items):
        if isinstance(item, str):
            options = extra[index] if index < len(extra) and isinstance(extra[index], dict) else None
            result.append((item, None if options is None else {str(k): str(v) for k, v in options.items()}))
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], dict):
            result.append((item[0], {str(k): str(v) for k, v in item[1].items()}))
    return result


def provider_ep_options(parsed: list[tuple[str, dict | None]]) -> dict[str, dict[str, str]]:
    """``{EP name: options}`` of :func:`provider_names` output; an EP named twice merges its
    options, the first entry winning per key."""
    merged: dict[str, dict[str, str]] = {}
    for name, options in reversed(parsed):
        if options is not None:
            merged[name] = {**merged.get(name, {}), **options}
    return merged


def require_available(registry, name: str, how: str) -> None:
    """Raise unless backend ``name`` can run here.

    Args:
        registry: a :class:`~onnxwrapper._registry.BackendRegistry`.
        name: canonical backend name.
        how: how it was requested, for the message (e.g. ``"backend='qnn'"``, ``"--backend qnn"``).

    Raises:
        BackendUnavailableError: with the probe's reason and install hint.
    """
    av = registry.probe(name)
    if not av.available:
        hint = f" To fix: {av.install_hint}." if av.install_hint else ""
        raise BackendUnavailableError(
            f"Backend '{name}' ({how}) is not available on this host: {av.reason}.{hint} "
            f"onnxwrapper never runs a requested backend's model elsewhere; pick another "
            f"backend explicitly (e.g. backend='cpu') if that is what you want.",
            backend=name, reason=av.reason, install_hint=av.install_hint)


def select_backend(requested, providers, env: Mapping[str, str], registry, provider_options=None) -> Selection:
    """Choose the backend for one session.

    Args:
        requested: the ``backend=`` argument (``str`` or ``None``).
        providers: the ``providers=`` argument as given to ORT.
        provider_options: the ``provider_options=`` argument as given to ORT.
        env: environment mapping (``os.environ``), read for ``ONNXWRAPPER_BACKEND``.
        registry: a :class:`~onnxwrapper._registry.BackendRegistry`.

    Raises:
        BackendNotFoundError: an explicit name is unknown.
        BackendUnavailableError: an explicit backend cannot run here.
    """
    parsed = provider_names(providers, provider_options)
    selection = _select(requested, parsed, env, registry)
    return replace(selection, ep_options=provider_ep_options(parsed))


def _select(requested, parsed, env: Mapping[str, str], registry) -> Selection:
    if requested is not None:
        name = registry.resolve(requested)
        require_available(registry, name, f"backend={requested!r}")
        return Selection(name, "argument", f"backend={requested!r} was passed")

    for ep, options in parsed:
        name = registry.backend_for_provider(ep)
        if name is None:
            continue
        av = registry.probe(name)
        if av.available:
            return Selection(name, "providers", f"providers names {ep}", options)
        warnings.warn(
            f"Provider '{ep}' belongs to backend '{name}', which is not available here: "
            f"{av.reason}.{(' ' + av.install_hint + '.') if av.install_hint else ''} "
            f"Trying the next provider, as onnxruntime does.", UserWarning, stacklevel=5)

    env_name = (env.get(ENV_BACKEND) or "").strip()
    if env_name and env_name.lower() != "auto":
        name = registry.resolve(env_name)
        require_available(registry, name, f"{ENV_BACKEND}={env_name}")
        return Selection(name, "environment", f"{ENV_BACKEND}={env_name}")

    for name in registry.names():
        if name == "cpu":
            continue
        try:
            av = registry.probe(name)
        except Exception as exc:  # one broken plugin must not stop auto selection
            _log.warning("backend %s could not be probed: %s", name, exc)
            continue
        if av.available and av.real_npu and av.auto_selectable:
            _log.info("onnxwrapper: auto-selected backend '%s' (real NPU on this host)", name)
            return Selection(name, "auto", f"backend '{name}' has a real NPU on this host")
    _log.info("onnxwrapper: auto-selected backend 'cpu' (no real NPU on this host)")
    return Selection("cpu", "auto", "no backend with a real NPU on this host")


def reselect(current, request: SessionRequest, providers, provider_options, registry) -> tuple[Selection, SessionRequest]:
    """Where ``set_providers(providers, provider_options)`` re-creates a session of backend ``current``.

    Empty ``providers`` (``None``, ``[]``: ORT re-creates the session as it was): the same backend
    and request. A list naming one of ``current.execution_providers``: the same backend with the
    new providers (and their options). Otherwise the backend the first claimed provider belongs
    to, else ``cpu`` (ORT always ends at its CPU EP); the move is logged at INFO.

    Args:
        current: the session's backend instance. request: its :class:`SessionRequest`.
        providers, provider_options: ``set_providers``' arguments (already checked as ORT checks them).
        registry: a :class:`~onnxwrapper._registry.BackendRegistry`.

    Returns:
        ``(Selection, SessionRequest)`` for the re-created session.
    """
    parsed = provider_names(providers, provider_options)
    names = [name for name, _options in parsed]
    reason = f"set_providers({names}) was called"
    if not parsed:
        return Selection(current.name, "providers", reason, None, request.ep_options), request
    if any(name in current.execution_providers for name in names):
        target = current.name
    else:
        target = next((b for b in map(registry.backend_for_provider, names) if b is not None), "cpu")
        _log.info("onnxwrapper: set_providers(%s) moves the session from backend '%s' to '%s'", names,
                  current.name, target)
    new = SessionRequest(request.path_or_bytes, request.sess_options, providers, provider_options,
                         dict(request.kwargs), provider_ep_options(parsed))
    return Selection(target, "providers", reason, None, new.ep_options), new
