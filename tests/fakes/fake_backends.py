"""FAKE backend plugins for tests: the real backend classes bound to test doubles through their
documented injection seams, registered through the entry-point group ``onnxwrapper.backends``
like any third-party backend (see :func:`plugged_in`). Production code knows nothing of them.

* :class:`FakeQaiBackend` — :class:`~onnxwrapper.backends.qai.QaiBackend` whose
  :meth:`~onnxwrapper.backends.qai.QaiBackend.load_sdk` returns the FAKE ``qai_appbuilder``
  package of this folder (it enforces qai_appbuilder 2.51's signatures and native quirks);
* :class:`FakeSnpeBackend` — :class:`~onnxwrapper.backends.snpe.SnpeBackend` whose SDK (found as
  usual, e.g. the fake tree of ``fake_qairt.make_fake_sdk`` in ``QAIRT_SDK_ROOT``) is labelled
  FAKE and whose ``qai_appbuilder`` engine is :class:`FakeQaiBackend`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from typing import Iterator

import importlib_metadata

from onnxwrapper._registry import ENTRY_POINT_GROUP, default_registry
from onnxwrapper.backends.qai import QaiBackend, QaiSdk
from onnxwrapper.backends.snpe import SnpeBackend
from onnxwrapper.errors import BackendUnavailableError


class FakeQaiBackend(QaiBackend):
    """``qai`` bound to the FAKE qai_appbuilder (this folder must be on ``sys.path``)."""

    @classmethod
    def load_sdk(cls) -> QaiSdk:
        try:
            module = importlib.import_module("qai_appbuilder")
        except ImportError as exc:  # the seam's contract: unavailable, with a reason
            raise BackendUnavailableError(f"the FAKE qai_appbuilder is not importable ({exc})", backend="qai",
                                          reason=f"the FAKE qai_appbuilder is not importable ({exc})") from exc
        return QaiSdk(module, module.__version__, real_device=False, tag="FAKE")


class FakeSnpeBackend(SnpeBackend):
    """``snpe`` whose SDK is labelled FAKE and whose qai_appbuilder engine is :class:`FakeQaiBackend`."""

    @classmethod
    def locate_sdk(cls, root):
        sdk, why = super().locate_sdk(root)
        return (None if sdk is None else dataclasses.replace(sdk, real_device=False, tag="FAKE")), why

    @classmethod
    def qai_backend(cls):
        return FakeQaiBackend


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
