"""Rung 2 of the recovery ladder: run a batch-N call as several calls of a smaller compiled batch.

Only for a graph :func:`~onnxwrapper.backends.qnn.recovery._batch_proof.batch_plan` proves keeps its
samples apart. The graph is rebatched (:func:`rebatch`: its batched inputs and outputs declared with
the smaller batch) and compiled; :class:`BatchSplitRunner` then runs each call as ``N / chunk``
calls of that session and concatenates the outputs along their batch axes (:func:`chunk_sizes`:
the chunk divides N, so every call has the compiled shape).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import onnx

from onnxwrapper.backends.qnn.recovery._batch_proof import BatchPlan

__all__ = ["BatchSplitRunner", "chunk_sizes", "rebatch"]


def chunk_sizes(batch: int) -> list[int]:
    """The smaller batches to try for ``batch``, largest first: its largest divisor ≤ batch/2 (when
    it is above 1), then 1."""
    half = next((d for d in range(batch // 2, 1, -1) if batch % d == 0), None)
    return ([half] if half else []) + [1]


def rebatch(model: onnx.ModelProto, plan: BatchPlan, chunk: int) -> onnx.ModelProto:
    """A copy of ``model`` whose batched inputs and outputs are declared with batch ``chunk``
    (value_info dropped; onnxruntime infers the rest)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for vi in copy.graph.input:
        if vi.name in plan.inputs:
            vi.type.tensor_type.shape.dim[plan.inputs[vi.name]].dim_value = chunk
    for vi in copy.graph.output:
        if vi.name in plan.outputs:
            vi.type.tensor_type.shape.dim[plan.outputs[vi.name]].dim_value = chunk
    del copy.graph.value_info[:]
    return copy


class BatchSplitRunner:
    """Runs a batch-N call as ``N / chunk`` calls of ``session`` (compiled for batch ``chunk``) and
    concatenates the outputs along their batch axes; duck-types the ORT session methods the QNN
    backend calls (``run``, ``run_with_ort_values``, ``run_async``, ``get_outputs``).

    Args:
        session: ORT session of the rebatched model. plan: the :class:`BatchPlan`. chunk: its batch.
    """

    def __init__(self, session, plan: BatchPlan, chunk: int) -> None:
        self.session, self.plan, self.chunk = session, plan, chunk
        self.names = [o.name for o in session.get_outputs()]

    def get_outputs(self):
        """The session's outputs (their batch dim is the chunk's)."""
        return self.session.get_outputs()

    def run(self, output_names, input_feed: Mapping[str, Any], run_options=None) -> list:
        """As ``InferenceSession.run``: numpy arrays of the whole batch."""
        names = list(output_names) if output_names else self.names
        batch = next(np.shape(input_feed[n])[0] for n in self.plan.inputs if n in input_feed)
        pieces: list[list] = []
        for start in range(0, batch, self.chunk):
            feed = {name: (value[start:start + self.chunk] if name in self.plan.inputs else value)
                    for name, value in input_feed.items()}
            pieces.append(self.session.run(names, feed, run_options))
        return [np.concatenate([p[k] for p in pieces], axis=self.plan.outputs.get(name, 0))
                for k, name in enumerate(names)]

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None) -> list:
        """As ``InferenceSession.run_with_ort_values`` (through numpy)."""
        from onnxruntime import OrtValue  # the ORT class the caller's OrtValues are

        feed = {name: value.numpy() for name, value in input_dict_ort_values.items()}
        return [OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a)) for a in self.run(output_names, feed, run_options)]

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None) -> None:
        """As ``InferenceSession.run_async``, run in the calling thread (the callback gets the outputs)."""
        try:
            outputs, error = self.run(output_names, input_feed, run_options), ""
        except Exception as exc:  # noqa: BLE001 - ORT reports errors through the callback
            outputs, error = None, str(exc)
        callback(outputs, user_data, error)
