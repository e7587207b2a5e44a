"""TEST DOUBLE support: the CPU onnxruntime model that stands in for a compiled target on the "device".

It is built through ``onnxruntime.backend.prepare`` (onnxruntime's own backend API), not with
``onnxruntime.InferenceSession(...)`` called from this package: under ``aipc``'s import hot patch
an ``InferenceSession`` created by a non-onnxruntime module while an onnxwrapper session runs
(e.g. an ``aihub`` session compiling a new shape in ``aipc diff`` live mode) would itself be
redirected to the backend under test, while onnxruntime's internal callers are left alone
(aipc_loader's documented rule). ``prepare`` takes every available execution provider except those
listed in ``$ORT_ONNX_BACKEND_EXCLUDE_PROVIDERS`` (onnxruntime/backend/backend.py): the double lists
all but the CPU EP there while it prepares (a process that registered the QNN EP would otherwise
run the "device" on the HTP simulator). Models are cached by content (LRU of 32).
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict

__all__ = ["CpuModel", "session_for"]

_MODELS: "OrderedDict[str, CpuModel]" = OrderedDict()
_MAX_MODELS = 32


class CpuModel:
    """One ONNX model on onnxruntime's CPU backend: ``input_names``/``output_names`` in graph order,
    ``int64_inputs``, ``run(output_names, feed) -> list``."""

    def __init__(self, onnx_bytes: bytes) -> None:
        import warnings

        import onnx

        with warnings.catch_warnings():  # onnxruntime.backend imports onnx.version (deprecated in onnx)
            warnings.simplefilter("ignore", DeprecationWarning)
            import onnxruntime.backend

        model = onnx.load_from_string(onnx_bytes)
        initializers = {i.name for i in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in initializers]
        self.input_names = [i.name for i in inputs]
        self.int64_inputs = {i.name for i in inputs if i.type.tensor_type.elem_type == onnx.TensorProto.INT64}
        self.output_names = [o.name for o in model.graph.output]
        key = "ORT_ONNX_BACKEND_EXCLUDE_PROVIDERS"
        saved = os.environ.get(key)
        os.environ[key] = ",".join(p for p in onnxruntime.get_available_providers() if p != "CPUExecutionProvider")
        try:
            self._rep = onnxruntime.backend.prepare(onnx_bytes, device="CPU")
        finally:
            if saved is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = saved

    @property
    def providers(self) -> list:
        """The execution providers of the underlying session (``["CPUExecutionProvider"]``)."""
        return self._rep._session.get_providers()

    def run(self, output_names, feed) -> list:
        """Outputs ``output_names`` (``None``: all, in graph order) for ``feed`` ``{name: array}``."""
        outputs = dict(zip(self.output_names, self._rep.run([feed[n] for n in self.input_names])))
        return [outputs[n] for n in (output_names or self.output_names)]


def session_for(onnx_bytes: bytes) -> CpuModel:
    """The :class:`CpuModel` of ``onnx_bytes`` (cached by content)."""
    key = hashlib.sha256(onnx_bytes).hexdigest()
    model = _MODELS.get(key)
    if model is None:
        model = _MODELS[key] = CpuModel(onnx_bytes)
        while len(_MODELS) > _MAX_MODELS:
            _MODELS.popitem(last=False)
    else:
        _MODELS.move_to_end(key)
    return model
