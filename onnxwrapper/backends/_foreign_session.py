"""The foreign session: metadata from the ONNX model, ``run`` through the IO plans of
:mod:`onnxwrapper.backends._foreign_io`; shared by the ``qai`` and ``snpe`` backends. Its metadata
part (:class:`OpenedMetadata`) also serves the ``aihub`` backend's session."""

from __future__ import annotations

import abc
from typing import Mapping, Sequence

import numpy as np
from onnxruntime.capi import onnxruntime_pybind11_state as C

from onnxwrapper.backends._foreign_io import IoPlan, from_native, to_native
from onnxwrapper.backends.base import ForeignBackendSession

__all__ = ["ForeignSession", "OpenedMetadata"]


class OpenedMetadata(ForeignBackendSession):
    """A foreign session whose metadata is fixed when it opens: it reports what it was given.

    Args:
        inputs, outputs: reported NodeArgInfo lists. modelmeta: ModelMetadataInfo.
        providers: list of str. provider_options: ``{provider: {key: str}}``.
        sess_options: SessionOptions to report (``None``: a fresh default one).
    """

    def __init__(self, *, inputs, outputs, modelmeta, providers, provider_options, sess_options) -> None:
        self._inputs, self._outputs, self._meta = list(inputs), list(outputs), modelmeta
        self._providers, self._provider_options = list(providers), dict(provider_options)
        self._sess_options = sess_options
        self._closed = False

    def get_inputs(self) -> list:
        """The ONNX model's inputs (names, ORT types, shapes)."""
        return list(self._inputs)

    def get_outputs(self) -> list:
        """The ONNX model's outputs, in ONNX order."""
        return list(self._outputs)

    def get_modelmeta(self):
        """The ONNX model's metadata (ORT's ``ModelMetadata`` attributes)."""
        return self._meta

    def get_providers(self) -> list[str]:
        """What runs the graph, e.g. ``["QNNContextBinary(qai_appbuilder:HTP)"]``."""
        return list(self._providers)

    def get_provider_options(self) -> dict:
        """``{provider: {key: str}}``, copies."""
        return {k: dict(v) for k, v in self._provider_options.items()}

    def get_session_options(self):
        """The SessionOptions the session was opened with (a fresh default one if none)."""
        if self._sess_options is not None:
            return self._sess_options
        return super().get_session_options()


class ForeignSession(OpenedMetadata):
    """A planned foreign session: metadata from ONNX (or the artifact), ``run`` through the plans.

    Subclasses implement :meth:`_invoke` (one native call) and :meth:`_release`.

    Args:
        backend: backend name for errors. in_plan, out_plan: :class:`IoPlan`. The others: see
            :class:`OpenedMetadata`.
    """

    def __init__(self, *, backend: str, inputs, outputs, modelmeta, in_plan: IoPlan, out_plan: IoPlan,
                 providers, provider_options, sess_options) -> None:
        super().__init__(inputs=inputs, outputs=outputs, modelmeta=modelmeta, providers=providers,
                         provider_options=provider_options, sess_options=sess_options)
        self._backend = backend
        self._in, self._out = in_plan, out_plan
        self._by_output = {p.onnx.name: p for p in out_plan.tensors}

    def run(self, output_names, input_feed, run_options=None) -> list:
        """Run once: feeds → native buffers → one native call → outputs in the requested order.

        ``output_names``/``input_feed`` are resolved and validated against the ONNX inputs by the
        façade (one validator, :func:`onnxwrapper.kernel.validate_feed`); here each buffer is checked
        against the compiled graph's fixed dims (:func:`to_native`).

        Raises:
            InvalidArgument: feed dims the compiled graph cannot take. BackendRunError: the runtime failed.
        """
        if run_options is not None and getattr(run_options, "terminate", False):
            raise C.Fail("[ONNXRuntimeError] : 1 : FAIL : Exiting due to terminate flag being set to true.")
        buffers: list = [None] * self._in.native_count
        for p in self._in.tensors:
            buffers[p.index] = to_native(p, np.asarray(input_feed[p.onnx.name]), self._in.mode)
        wanted = [self._by_output[n] for n in output_names]
        raw = self._invoke(buffers, wanted)
        return [from_native(p, raw[p.index], self._out.mode, self._backend) for p in wanted]

    @abc.abstractmethod
    def _invoke(self, buffers: list, wanted: list) -> Mapping[int, object] | Sequence:
        """Run the compiled graph once on ``buffers`` (native order) and return the raw outputs,
        indexable by native output index (at least those of ``wanted``)."""

    def _release(self) -> None:
        """Free native resources (called once by :meth:`close`)."""

    def close(self) -> None:
        """Release the native resources (idempotent); the façade never runs a closed session."""
        if not self._closed:
            self._closed = True
            self._release()
