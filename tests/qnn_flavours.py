"""The two modules a qnn fidelity test runs its assertions against: ONNX Runtime + the QNN plugin EP
(what a script that uses onnxruntime-qnn itself gets) and onnxwrapper's ``qnn`` backend.

Both expose ``InferenceSession(model, sess_options=None, providers=None, provider_options=None,
**kwargs)``, ``SessionOptions`` and ``RunOptions``, and ``name``. ``OrtQnn`` registers the plugin
EP and gives every session without EP devices the QNN EP with onnxwrapper's default QNN EP options
(``SessionOptions.add_provider_for_devices``; on the x86-64 simulator ``soc_model=60, htp_arch=73``,
FP16), modifying the caller's ``SessionOptions`` as such a script would; both use the same QNN
configuration, which is process-global.
"""

from __future__ import annotations

import contextlib
import functools

import onnxruntime
import pytest

import onnxwrapper


@functools.lru_cache(maxsize=1)
def default_qnn_ep_options() -> dict:
    """The QNN EP options of an onnxwrapper qnn session without backend options, on this host."""
    from onnxwrapper.backends.qnn import QnnBackend
    from onnxwrapper.backends.qnn.settings._settings import resolve_settings

    return dict(resolve_settings(QnnBackend().config, {}, real_npu=QnnBackend.probe().real_npu).ep_options)


class OrtQnn:
    """onnxruntime with the QNN plugin EP (no onnxwrapper)."""

    name = "onnxruntime+qnn"
    SessionOptions = onnxruntime.SessionOptions
    RunOptions = onnxruntime.RunOptions
    #: ``set_providers`` re-creates the session with explicit providers over SessionOptions that already
    #: name the QNN EP (how this flavour registers it), and ORT warns about that
    SET_PROVIDERS_WARNING = "SessionOptions has already been configured with providers"

    @staticmethod
    def InferenceSession(model, sess_options=None, providers=None, provider_options=None, **kwargs):
        from onnxwrapper.backends.qnn.platform._runtime import ensure_registered

        so = sess_options if sess_options is not None else onnxruntime.SessionOptions()
        if not so.has_providers():
            so.add_provider_for_devices(ensure_registered(), default_qnn_ep_options())
        return onnxruntime.InferenceSession(model, so, providers, provider_options, **kwargs)


class OnnxwrapperQnn:
    """onnxwrapper's qnn backend (``backend="qnn"``)."""

    name = "onnxwrapper"
    SessionOptions = onnxwrapper.SessionOptions
    RunOptions = onnxwrapper.RunOptions
    SET_PROVIDERS_WARNING = None  # the qnn backend re-creates its session without a warning

    @staticmethod
    def InferenceSession(model, sess_options=None, providers=None, provider_options=None, **kwargs):
        kwargs.setdefault("backend", "qnn")
        return onnxwrapper.InferenceSession(model, sess_options, providers, provider_options, **kwargs)


FLAVOURS = {OrtQnn.name: OrtQnn, OnnxwrapperQnn.name: OnnxwrapperQnn}


def set_providers_warning(flavour):
    """A context expecting the warning ``flavour``'s ``set_providers`` gives (onnxwrapper's: none)."""
    if flavour.SET_PROVIDERS_WARNING is None:
        return contextlib.nullcontext()
    return pytest.warns(UserWarning, match=flavour.SET_PROVIDERS_WARNING)
