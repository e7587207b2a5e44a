"""The backend registry: discovery through the entry-point group ``onnxwrapper.backends``.

Backends are found with importlib-metadata (the entry-point name is the canonical backend name)
and loaded lazily, on first use of that name; a new process reads them from a persistent index
instead while nothing was installed or removed (:mod:`onnxwrapper._entry_point_index`). A class is validated when loaded (it subclasses
:class:`~onnxwrapper.backends.base.Backend`, declares its name and implements ``probe``/``open``);
a broken plugin is a warning in :func:`get_available_backends` listings and a
:class:`~onnxwrapper.errors.BackendValidationError` (with ``__cause__``) when asked for by name.
Backends listed in ``ONNXWRAPPER_DISABLE_BACKENDS`` (comma separated) are ignored. Probe
results are cached per process.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from onnxwrapper._entry_point_index import index_location, read_index, write_index
from onnxwrapper.backends.base import Availability, Backend
from onnxwrapper.errors import BackendNotFoundError, BackendValidationError

if TYPE_CHECKING:
    from onnxwrapper._backend_info import BackendInfo, BackendList

__all__ = ["ENTRY_POINT_GROUP", "BackendInfo", "BackendList", "BackendRegistry", "default_registry",
           "get_available_backends"]

ENTRY_POINT_GROUP = "onnxwrapper.backends"
_log = logging.getLogger("onnxwrapper")


def __getattr__(name: str) -> Any:
    """``BackendInfo`` and ``BackendList`` (PEP 562): defined in :mod:`onnxwrapper._backend_info`,
    imported when a listing is made, not at ``import onnxwrapper``."""
    if name in ("BackendInfo", "BackendList"):
        from onnxwrapper import _backend_info

        return getattr(_backend_info, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class BackendRegistry:
    """Name → backend class, filled from entry points and :meth:`register`.

    Args:
        group: entry-point group to read. Defaults to ``onnxwrapper.backends``.
    """

    def __init__(self, group: str = ENTRY_POINT_GROUP) -> None:
        self.group = group
        self._lock = threading.RLock()
        self._entry_points: dict | None = None
        self._classes: dict[str, type] = {}
        self._registered: set[str] = set()
        #: name → the distribution that registered it: its name (``register``) or importlib-metadata's
        #: ``Distribution`` (entry points), whose name is read only when listed (:meth:`infos`):
        #: reading it parses the distribution's METADATA with the email package (~30 ms, measured)
        self._distributions: dict[str, object] = {}
        self._probes: dict[str, object] = {}
        #: the persistent index may be read (until a lookup it cannot answer) / written (until reload())
        self._use_index = True
        self._write_index = True
        self._from_index = False

    # -- discovery -----------------------------------------------------------------------------
    def _eps(self) -> dict:
        with self._lock:
            location = index_location(self.group) if self._entry_points is None else None
            if self._entry_points is None and self._use_index:
                indexed = read_index(location)
                if indexed is not None:
                    self._entry_points = {name.lower(): ep for name, ep in indexed.items()}
                    self._from_index = True
            if self._entry_points is None:
                import importlib_metadata  # 10-30 ms at import (measured): only when the index cannot answer

                eps = {}
                for ep in importlib_metadata.entry_points(group=self.group):
                    eps.setdefault(ep.name.lower(), ep)
                self._entry_points = eps
                self._from_index = False
                if self._write_index:
                    write_index(location, eps)
            return self._entry_points

    def _rescan(self) -> bool:
        """When the entry points came from the index: forget them and scan with importlib-metadata
        (a lookup the index could not answer). Returns False when they were scanned already."""
        with self._lock:
            if not self._from_index:
                return False
            self._use_index = False
            self._entry_points = None
            for name in [n for n in self._classes if n not in self._registered]:
                del self._classes[name]
                self._distributions.pop(name, None)
            self._probes.clear()
            return True

    @staticmethod
    def _disabled() -> set[str]:
        raw = os.environ.get("ONNXWRAPPER_DISABLE_BACKENDS", "")
        return {n.strip().lower() for n in raw.split(",") if n.strip()}

    def names(self) -> list[str]:
        """Canonical names of every registered, non-disabled backend; ``cpu`` first."""
        with self._lock:
            names = set(self._eps()) | set(self._classes)
        names -= self._disabled()
        return sorted(names, key=lambda n: (n != "cpu", n))

    def register(self, cls: type, *, distribution: str | None = None) -> None:
        """Register a backend class in this process (tests, in-process plugins).

        Raises:
            BackendValidationError: ``cls`` does not satisfy the protocol.
        """
        _validate(cls, None)
        with self._lock:
            self._classes[cls.name.lower()] = cls
            self._registered.add(cls.name.lower())
            self._distributions[cls.name.lower()] = distribution
            self._probes.pop(cls.name.lower(), None)

    def reload(self) -> None:
        """Forget discovered entry points, loaded classes and probe results, so that plugins
        installed or removed in this process since the first use are seen (as pluggy's
        ``load_setuptools_entrypoints`` reads a group when asked). Registrations made with
        :meth:`register` are kept."""
        with self._lock:
            self._entry_points = None
            self._use_index = self._write_index = False  # plugins changed in this process: keep them to it
            for name in [n for n in self._classes if n not in self._registered]:
                del self._classes[name]
                self._distributions.pop(name, None)
            self._probes.clear()

    def unregister(self, name: str) -> None:
        """Forget an in-process registration made with :meth:`register` (no error if absent)."""
        with self._lock:
            self._classes.pop(name.lower(), None)
            self._registered.discard(name.lower())
            self._probes.pop(name.lower(), None)

    # -- loading -------------------------------------------------------------------------------
    def _load(self, name: str) -> type:
        with self._lock:
            if name in self._classes:
                return self._classes[name]
            ep = self._eps().get(name)
            if ep is None:  # listed by a stale index, gone after the rescan
                raise BackendNotFoundError(f"Backend '{name}' is no longer installed (entry-point group "
                                           f"'{self.group}'); pick one of: {', '.join(self.names())}.",
                                           backend=name)
            text = f"{ep.name} = {ep.value}"
            try:
                cls = ep.load()
            except Exception as exc:  # a broken plugin must not break other backends
                if self._rescan():  # the index may be stale: ask importlib-metadata before judging
                    return self._load(name)
                raise BackendValidationError(
                    f"Backend '{name}' could not be loaded from entry point '{text}' "
                    f"({type(exc).__name__}: {exc}). Reinstall or disable it with "
                    f"ONNXWRAPPER_DISABLE_BACKENDS={name}.", backend=name, entry_point=text) from exc
            _validate(cls, text)
            if cls.name.lower() != name:
                raise BackendValidationError(
                    f"Entry point '{text}' registers a class whose name is '{cls.name}'; the entry "
                    f"point name and Backend.name must be equal.", backend=name, entry_point=text)
            self._classes[name] = cls
            self._distributions[name] = getattr(ep, "dist", None)
            return cls

    def resolve(self, name: str) -> str:
        """Map a user-given name or alias (case-insensitive) to the canonical backend name.

        Raises:
            BackendNotFoundError: no backend (or alias) has that name.
        """
        key = str(name).strip().lower()
        names = self.names()
        if key in names:
            return key
        for candidate in names:
            try:
                cls = self._load(candidate)
            except (BackendValidationError, BackendNotFoundError):
                continue
            if key in (a.lower() for a in cls.aliases):
                return candidate
        if self._rescan():  # the index may be stale: ask importlib-metadata before giving up
            return self.resolve(name)
        spelled = list(names) + [a.lower() for n in names for a in self._aliases(n)]
        import difflib  # noqa: PLC0415 - 1.7 ms of imports, only for this error's suggestion

        meant = [n for n in names if key in (w.lower() for w in self._attribute(n, "suggested_for"))]
        close = meant or difflib.get_close_matches(key, spelled, n=1, cutoff=0.6)
        hint = f"Did you mean '{self.resolve(close[0])}'? " if close else ""
        raise BackendNotFoundError(
            f"Unknown backend '{name}'. {hint}Registered backends: {', '.join(names)}. "
            f"Backends are plugins in the entry-point group '{self.group}'; "
            f"install the package that provides '{name}' or pick one of the above.", backend=key)

    def _aliases(self, name: str) -> tuple:
        return self._attribute(name, "aliases")

    def _attribute(self, name: str, attribute: str) -> tuple:
        """A backend class's tuple attribute (``aliases``, ``suggested_for``), ``()`` when it cannot load."""
        try:
            return tuple(getattr(self._load(name), attribute, ()))
        except (BackendValidationError, BackendNotFoundError):
            return ()

    def get(self, name: str) -> type:
        """The backend class for ``name`` (alias accepted).

        Raises:
            BackendNotFoundError, BackendValidationError.
        """
        return self._load(self.resolve(name))

    def probe(self, name: str) -> Availability:
        """Cached :class:`~onnxwrapper.backends.base.Availability` of backend ``name``."""
        canonical = self.resolve(name)
        with self._lock:
            if canonical not in self._probes:
                self._probes[canonical] = self._load(canonical).probe()
            return self._probes[canonical]

    def backend_for_provider(self, provider: str) -> str | None:
        """The canonical backend whose ``execution_providers`` contains ``provider``, if any."""
        for candidate in self.names():
            try:
                cls = self._load(candidate)
            except (BackendValidationError, BackendNotFoundError):
                continue
            if provider in cls.execution_providers:
                return candidate
        return None

    def infos(self) -> "BackendList":
        """Every backend with its availability; a plugin that fails to load is listed unavailable."""
        from onnxwrapper._backend_info import BackendInfo, BackendList

        result = BackendList()
        for name in self.names():
            try:
                cls = self._load(name)
                av = self.probe(name)
            except BackendNotFoundError:  # listed by a stale index, gone after the rescan
                continue
            except BackendValidationError as exc:
                _log.warning("%s", exc)
                result.append(BackendInfo(name=name, available=False, reason=str(exc)))
                continue
            result.append(BackendInfo(
                name=name, aliases=tuple(cls.aliases), available=av.available, reason=av.reason,
                install_hint=av.install_hint, real_npu=av.real_npu, simulated=av.simulated,
                auto_selectable=av.auto_selectable,
                execution_providers=tuple(cls.execution_providers),
                distribution=self._distribution(name), details=dict(av.details)))
        return result


    def _distribution(self, name: str) -> str | None:
        """The name of the distribution that registered backend ``name`` (``None``: in-process)."""
        dist = self._distributions.get(name)
        if dist is None or isinstance(dist, str):
            return dist
        try:
            return dist.name
        except Exception:  # noqa: BLE001 - an unreadable METADATA must not break a listing
            return None


def _validate(cls, entry_point: str | None) -> None:
    name = getattr(cls, "name", None) or getattr(cls, "__name__", repr(cls))
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendValidationError(
            f"{cls!r} is not a subclass of onnxwrapper.backends.base.Backend.",
            backend=str(name), entry_point=entry_point)
    if not cls.name:
        raise BackendValidationError(f"Backend class {cls.__qualname__} does not set 'name'.",
                                     backend=None, entry_point=entry_point)
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise BackendValidationError(
            f"Backend '{cls.name}' ({cls.__qualname__}) does not implement: {', '.join(missing)}.",
            backend=cls.name, entry_point=entry_point)


_default: BackendRegistry | None = None
_default_lock = threading.Lock()


def default_registry() -> BackendRegistry:
    """The process-wide registry (created on first use, not at import)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = BackendRegistry()
        return _default


def get_available_backends() -> BackendList:
    """Every registered backend with its availability on this host and, if unavailable, why.

    Returns:
        A :class:`BackendList` (a ``list``) of ``BackendInfo`` records, ``cpu`` first then
        alphabetical; ``print()`` shows one line per backend.
    """
    return default_registry().infos()
