"""Keep the QNN backend of a process initialised: one tiny QNN session that lives as long as the process.

While a QNN session exists the QNN HTP backend stays initialised, and every later session of the
process — a compile in a worker, the load of a compiled EPContext model in the user's process — skips
its initialisation (measured on the x86-64 simulator, light squeezenet: a compile 98 → 57 ms; the
first EPContext load of a process 110–190 ms → about 30 ms). The tiny session (one ``Relu``) is
created with the caller's QNN EP options, which carry an explicit ``soc_model`` as every session of
the backend does, so it changes no other session's numerics.
"""

from __future__ import annotations

import threading
from typing import Mapping

__all__ = ["warm_qnn_backend"]

_warm: list = []
_lock = threading.Lock()


def warm_qnn_backend(ep_options: Mapping[str, str]) -> bool:
    """Create, once per process, the tiny QNN session of the module docstring with ``ep_options``
    (QNN EP options, explicit ``soc_model`` included). Returns whether one exists now; never raises
    (it is a speed-up only: sessions work without it)."""
    with _lock:
        if _warm:
            return _warm[0] is not None
        try:
            from onnxwrapper.backends.qnn.platform import ensure_registered

            devices = ensure_registered()  # first: the registration alone is ≈ 0.15 s, and every session needs it
            import onnx
            from onnx import helper

            from onnxwrapper.backends.qnn.compile._compile import build_session_options, create_qnn_session

            graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "warm",
                                      [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                                      [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
            so = build_session_options(None, ep_options, devices)
            so.log_severity_level = 3
            _warm.append(create_qnn_session(model.SerializeToString(), so))
        except Exception:  # noqa: BLE001 - only a speed-up
            _warm.append(None)
        return _warm[0] is not None
