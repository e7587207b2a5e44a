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

#: ``y = Relu(x)``, ``x``/``y`` float[1, 4], opset 17, IR 9: the serialized ONNX model of
#: ``onnx.helper.make_model(make_graph([make_node("Relu", ["x"], ["y"])], "warm", …))`` — kept as bytes so
#: that warming a process does not import onnx (0.2 s) where nothing else needs it
_RELU_MODEL = (b'\x08\t\x12\x0bonnxwrapper:>\n\x0c\n\x01x\x12\x01y"\x04Relu\x12\x04warmZ\x13\n\x01x\x12\x0e\n\x0c\x08\x01'
               b'\x12\x08\n\x02\x08\x01\n\x02\x08\x04b\x13\n\x01y\x12\x0e\n\x0c\x08\x01\x12\x08\n\x02\x08\x01\n\x02\x08\x04B\x04'
               b'\n\x00\x10\x11')


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
            from onnxwrapper.backends.qnn.compile._compile import build_session_options, create_qnn_session

            so = build_session_options(None, ep_options, devices)
            so.log_severity_level = 3
            _warm.append(create_qnn_session(_RELU_MODEL, so))
        except Exception:  # noqa: BLE001 - only a speed-up
            _warm.append(None)
        return _warm[0] is not None
