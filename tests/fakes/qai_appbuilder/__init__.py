"""FAKE for tests — this is NOT Qualcomm's qai_appbuilder.

A pure-Python stand-in for ``qai_appbuilder`` 2.51 (Windows on Snapdragon) so that onnxwrapper's
``qai`` backend can be tested on any host. It enforces the documented signatures and the native
quirks (shared research anchor_qai.md §A; see ``qnncontext.py`` and ``appbuilder.py``) and computes
results with ONNX Runtime CPU on the companion ONNX model named inside a fake artifact
(``fake_qnn_graph.py``). It lives under ``tests/`` and is never installed.

onnxwrapper's ``qai`` backend uses it only through the test plugin ``FakeQaiBackend``
(``tests/fakes/fake_backends.py``), which binds it with the backend's ``load_sdk`` seam.
"""

import sys

from . import _fake
from .qnncontext import (DataType, LogLevel, PerfProfile, ProfilingLevel, QNNConfig, QNNContext, Runtime,
                         release_all)

__version__ = "2.51.40"

# The real package aliases ``onnxruntime`` to its own wrapper when onnxruntime was not imported
# first (anchor_qai.md §A.1); reproduced so that tests notice if anything depends on import order.
sys.modules.setdefault("onnxruntime", sys.modules[__name__])

__all__ = ["DataType", "LogLevel", "PerfProfile", "ProfilingLevel", "QNNConfig", "QNNContext", "Runtime",
           "release_all"]
