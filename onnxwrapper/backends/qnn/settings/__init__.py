"""The ``qnn`` backend's options and what they become for one session: the options table
(``QnnBackend.options``: documentation, converters, defaults, among them the ``patches`` and
``repairs`` converters) and its resolution, joined with the raw QNN EP options of the request,
into :class:`QnnSettings` and the :class:`QnnSetup` of a session or ``compile_model`` call.
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.settings._options import OPTIONS, convert_repairs
from onnxwrapper.backends.qnn.settings._settings import QnnSettings, QnnSetup, qnn_setup, request_ep_options

__all__ = [
    "OPTIONS",
    "QnnSettings",
    "QnnSetup",
    "convert_repairs",
    "qnn_setup",
    "request_ep_options",
]
