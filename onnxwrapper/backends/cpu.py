"""Backend ``cpu``: plain ONNX Runtime, exactly as ``onnxruntime.InferenceSession`` behaves.

The user's model, session options, providers and keyword arguments reach ONNX Runtime unchanged,
so every behaviour (including ORT's own provider fallback: retry on CPU after a provider error
unless ``enable_fallback=0``) is ORT's. It is the reference backend for ``aipc diff``.
"""

from __future__ import annotations

from onnxwrapper.backends.base import Availability, Backend, OrtBackendSession, SessionRequest

__all__ = ["CpuBackend"]


class CpuBackend(Backend):
    """ONNX Runtime with the providers the user asked for (CPU by default); no options.

    ``probe()`` is always available: onnxruntime is a dependency of onnxwrapper.
    """

    name = "cpu"
    aliases = ("ort", "onnxruntime")
    execution_providers = ("CPUExecutionProvider",)
    options = {}

    @classmethod
    def probe(cls) -> Availability:
        """Always available; ``details`` carries the ONNX Runtime version."""
        import onnxruntime

        return Availability(True, reason="ONNX Runtime on the host CPU",
                            details={"onnxruntime": onnxruntime.__version__})

    def open(self, request: SessionRequest) -> OrtBackendSession:
        """Hand the request to ONNX Runtime unchanged (its errors are ORT's)."""
        return OrtBackendSession(request.path_or_bytes, request.sess_options, request.providers,
                                 request.provider_options, request.kwargs)
