"""FAKE backend plugins for tests: the real backend classes bound to test doubles through their
documented injection seams, registered through the entry-point group ``onnxwrapper.backends``
like any third-party backend (see :func:`plugged_in`). Production code knows nothing of them:
each plugin says what it is through the backend's public methods only — its ``probe()`` reports
an emulation (``simulated``, no real NPU, "FAKE" in the reason and details) and the sessions its
``open()`` returns name their providers ``…,FAKE)`` (:class:`LabelledSession`).

* :class:`FakeQaiBackend` — :class:`~onnxwrapper.backends.qai.QaiBackend` whose
  :meth:`~onnxwrapper.backends.qai.QaiBackend.load_sdk` returns the FAKE ``qai_appbuilder``
  package of this folder (it enforces qai_appbuilder 2.51's signatures and native quirks);
* :class:`FakeSnpeBackend` — :class:`~onnxwrapper.backends.snpe.SnpeBackend` whose SDK (found as
  usual, e.g. the fake tree of ``fake_qairt.make_fake_sdk`` in ``QAIRT_SDK_ROOT``) is labelled
  FAKE and whose ``qai_appbuilder`` engine is :class:`FakeQaiBackend`;
* :class:`FakeAihubBackend` — :class:`~onnxwrapper.backends.aihub.AihubBackend` whose
  :meth:`~onnxwrapper.backends.aihub.AihubBackend.load_client` returns the qai-hub TEST DOUBLE of
  this folder (``qai_hub``: it enforces qai-hub 0.56's API and runs models with onnxruntime) with
  the double's simulated clock.

In this process :func:`plugged_in` installs them; child processes (``aipc diff`` runs) find them
through :func:`plugin_distribution`, a distribution on ``PYTHONPATH`` whose entry points name them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import Iterator

import importlib_metadata
import wrapt

from onnxwrapper._registry import ENTRY_POINT_GROUP, default_registry
from onnxwrapper.backends.aihub import AihubBackend, HubClient
from onnxwrapper.backends.base import Availability
from onnxwrapper.backends.qai import QaiBackend, QaiSdk
from onnxwrapper.backends.snpe import SnpeBackend
from onnxwrapper.errors import BackendUnavailableError


def _import_double(module: str, label: str, *, backend: str):
    """Import the double ``module`` (this folder must be on ``sys.path``); when it cannot be imported,
    raise what the backend's SDK seam promises: :class:`BackendUnavailableError` with a reason."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        reason = f"{label} is not importable ({exc})"
        raise BackendUnavailableError(reason, backend=backend, reason=reason) from exc


LABEL = "FAKE"


def _labelled_provider(name: str) -> str:
    """``"SNPE(dsp)"`` → ``"SNPE(dsp,FAKE)"`` (once: a session of another FAKE plugin keeps its label)."""
    if name.endswith(f",{LABEL})") or not name.endswith(")"):
        return name
    return f"{name[:-1]},{LABEL})"


class LabelledSession(wrapt.ObjectProxy):
    """A backend session whose provider names carry the FAKE label; everything else is the wrapped
    session's (``isinstance`` holds, attributes and the optional ``run_batch`` / ``device_profiles``
    pass through)."""

    def providers(self):
        """The wrapped session's providers, labelled."""
        return [_labelled_provider(p) for p in self.__wrapped__.providers() or []]

    def provider_options(self):
        """The wrapped session's provider options, keyed by the labelled names."""
        return {_labelled_provider(k): v for k, v in (self.__wrapped__.provider_options() or {}).items()}

    def get_providers(self):
        """As :meth:`providers` (the foreign session's own reporting method)."""
        return self.providers()

    def get_provider_options(self):
        """As :meth:`provider_options`."""
        return self.provider_options()


def _emulation(availability: Availability, key: str, product: str, version: str, what: str) -> Availability:
    """What an emulation reports once available: simulated, no real NPU, the reason
    ``"<product> <version> (FAKE): <what>"`` and ``details[key]`` labelled too."""
    labelled = f"{version} ({LABEL})"
    return Availability(True, reason=f"{product} {labelled}: {what}", simulated=True, real_npu=False,
                        auto_selectable=availability.auto_selectable, details={**availability.details, key: labelled})


class FakeQaiBackend(QaiBackend):
    """``qai`` bound to the FAKE qai_appbuilder (this folder must be on ``sys.path``)."""

    @classmethod
    def load_sdk(cls) -> QaiSdk:
        module = _import_double("qai_appbuilder", "the FAKE qai_appbuilder", backend="qai")
        return QaiSdk(module, module.__version__)

    @classmethod
    def probe(cls) -> Availability:
        availability = super().probe()
        if not availability.available:
            return availability
        return _emulation(availability, "qai_appbuilder", "qai_appbuilder", cls.load_sdk().version,
                          "an emulation, no NPU")

    def open(self, request):
        return LabelledSession(super().open(request))


class FakeSnpeBackend(SnpeBackend):
    """``snpe`` whose SDK (found as usual) is reported as FAKE and whose qai_appbuilder engine is
    :class:`FakeQaiBackend`."""

    @classmethod
    def qai_backend(cls):
        return FakeQaiBackend

    @classmethod
    def probe(cls) -> Availability:
        availability = super().probe()
        sdk, _ = cls.locate_sdk(None)
        if not availability.available or sdk is None:
            return availability  # unavailable, or the qai_appbuilder engine's (already FAKE) availability
        return Availability(True, reason=f"{availability.reason} ({LABEL})", simulated=True, real_npu=False,
                            auto_selectable=availability.auto_selectable, details=availability.details)

    def open(self, request):
        return LabelledSession(super().open(request))


class FakeAihubBackend(AihubBackend):
    """``aihub`` bound to the qai-hub TEST DOUBLE (this folder must be on ``sys.path``), waiting with
    the double's simulated clock."""

    @classmethod
    def load_client(cls) -> HubClient:
        module = _import_double("qai_hub", "the qai-hub TEST DOUBLE", backend="aihub")
        return HubClient(module, module.Client(), module.__version__, clock=module.farm.clock)

    @classmethod
    def probe(cls) -> Availability:
        availability = super().probe()
        if not availability.available:
            return availability
        return _emulation(availability, "qai_hub", "qai-hub", cls.load_client().version,
                          "an emulation of Qualcomm AI Hub; uploads the model and its inputs, selected only with "
                          "backend='aihub'")

    def open(self, request):
        return LabelledSession(super().open(request))


def plugin_distribution(directory, **plugins: str) -> str:
    """Write a minimal distribution (``onnxwrapper_test_plugins-0.dist-info``) into ``directory``
    whose entry points register ``plugins`` (``{name: "module:Class"}``) in the backend group, and
    return ``directory``. Put it first on a child's ``PYTHONPATH`` (with this folder): importlib
    metadata then lists these entry points before the installed ones, and the registry takes the
    first entry point of each name. The child's working directory must not be the repository:
    ``python -m`` puts it first on ``sys.path``, and its ``onnxwrapper.egg-info`` (editable install)
    would list the installed backends first."""
    info = os.path.join(os.fspath(directory), "onnxwrapper_test_plugins-0.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write("Metadata-Version: 2.1\nName: onnxwrapper-test-plugins\nVersion: 0\n")
    with open(os.path.join(info, "entry_points.txt"), "w", encoding="utf-8") as f:
        f.write(f"[{ENTRY_POINT_GROUP}]\n" + "".join(f"{n} = {v}\n" for n, v in plugins.items()))
    return os.fspath(directory)


@contextlib.contextmanager
def plugged_in(**plugins: str) -> Iterator[None]:
    """Install backend plugins ``{name: "module:Class"}`` in the entry-point group, ahead of the
    installed ones (as pluggy's tests monkeypatch ``importlib.metadata``), for the block; the
    process-wide registry re-reads the group on entry and on exit."""
    real = importlib_metadata.entry_points

    def entry_points(**params):
        found = real(**params)
        if params.get("group") != ENTRY_POINT_GROUP:
            return found
        fakes = [importlib_metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)
                 for name, value in plugins.items()]
        return importlib_metadata.EntryPoints(fakes + [ep for ep in found if ep.name not in plugins])

    importlib_metadata.entry_points = entry_points
    default_registry().reload()
    try:
        yield
    finally:
        importlib_metadata.entry_points = real
        default_registry().reload()
