"""TEST DOUBLE of what AI Hub's device farm does in an inference job (server side).

Contract mirrored (qai-hub 0.56 ``client.submit_inference_job`` docstring, ``InferenceJob``,
``util/dataset_entries_converters.py``, ``client._profile_pb_to_python_dict``):

* the dataset is ``{input name: [one array per sample]}``; its *ordered* keys are the schema and
  must match the target model's inputs (names and order); every list has the same length;
* outputs come back as ``{output name: [one array per sample]}`` in the target's output order,
  each array with the target's output dtype and full compiled shape (batch dim included);
* a mismatch (names, order, shape, dtype) fails the job with a message (the real wording is not
  public; the double's messages say what was wrong);
* with ``profile=True`` the job also yields ``download_profile()``'s dict: ``execution_summary``
  (times in microseconds, memory in bytes) and ``execution_detail`` (one dict per layer with
  ``name``, ``type``, ``compute_unit`` in ``NPU``/``GPU``/``CPU``, ``execution_time``,
  ``execution_cycles``).

Numbers: outputs are computed with onnxruntime on the CPU from the specialized ONNX model (real
numbers, not device numerics). Profile times are SYNTHETIC (a fixed cost per layer), never a
measurement.

The target's model runs on onnxruntime's CPU backend (:mod:`._runtime`).
"""

from __future__ import annotations

import numpy as np

from ._compile import CompileFailure, Target
from ._runtime import session_for

__all__ = ["run_target", "synth_profile"]

_NP = {"float16": np.float16, "float32": np.float32, "int32": np.int32, "int8": np.int8, "uint8": np.uint8,
       "int16": np.int16, "uint16": np.uint16, "int64": np.int64, "bool": np.bool_}


def _session(target: Target):
    return session_for(target.onnx_bytes)


def run_target(target: Target, entries, output_hook=None) -> dict:
    """Run every sample of ``entries`` through ``target``; returns ``{output name: [arrays]}``.

    Raises:
        CompileFailure: (used as "job failed") schema, shape or dtype mismatch, runtime error.
    """
    names = list(entries)
    expected = [t.name for t in target.inputs]
    if names != expected:
        raise CompileFailure(f"Dataset schema {names} does not match the model inputs {expected} (names and order).")
    counts = {len(v) for v in entries.values()}
    if len(counts) != 1:
        raise CompileFailure("Every dataset entry must have the same number of samples.")
    session = _session(target)
    outputs = {t.name: [] for t in target.outputs}
    for k in range(counts.pop()):
        feed = {}
        for spec, onnx_name in zip(target.inputs, target.onnx_inputs):
            arr = np.asarray(entries[spec.name][k])
            if arr.dtype != np.dtype(_NP[spec.dtype]) or tuple(arr.shape) != tuple(spec.shape):
                raise CompileFailure(f"Input '{spec.name}' sample {k}: got {arr.dtype}{list(arr.shape)}, the model "
                                     f"takes {spec.dtype}{list(spec.shape)}.")
            feed[onnx_name] = arr.astype(np.int64) if onnx_name in session.int64_inputs else arr
        try:
            results = session.run(list(target.onnx_outputs), feed)
        except Exception as exc:  # noqa: BLE001 - an execution error fails the job
            raise CompileFailure(f"Inference failed on the device: {exc}") from exc
        for spec, value in zip(target.outputs, results):
            value = np.ascontiguousarray(np.asarray(value).astype(_NP[spec.dtype]))
            if output_hook is not None:
                value = output_hook(spec.name, value)
            outputs[spec.name].append(value)
    return outputs


def synth_profile(target: Target, cpu_op_types, layer_time_us: int, iterations: int) -> dict:
    """``InferenceJob.download_profile()`` dict for ``target`` (synthetic timing, see the module docstring).

    Layers are the ONNX nodes; ``compute_unit`` is ``CPU`` for op types in ``cpu_op_types``, else
    ``NPU``. Keys as ``_profile_pb_to_python_dict`` builds them for ProfileDetail major_version 1,
    minor_version >= 2.
    """
    import onnx

    model = onnx.load_from_string(target.onnx_bytes)
    detail = []
    for i, node in enumerate(model.graph.node):
        unit = "CPU" if node.op_type in cpu_op_types else "NPU"
        layer = {"name": node.name or f"{node.op_type}_{i}", "type": node.op_type, "compute_unit": unit,
                 "execution_time": layer_time_us}
        if unit == "NPU":
            layer["execution_cycles"] = layer_time_us * 1000
        detail.append(layer)
    total = layer_time_us * max(1, len(detail))
    mem = 4 * 1024 * 1024
    summary = {"estimated_inference_time": total, "estimated_inference_peak_memory": mem,
               "first_load_time": 10 * total, "first_load_peak_memory": mem, "warm_load_time": 2 * total,
               "warm_load_peak_memory": mem, "compile_time": 0, "compile_peak_memory": 0}
    for stage in ("compile", "first_load", "warm_load", "inference"):
        summary[f"{stage}_memory_increase_range"] = (0, mem)
        summary[f"{stage}_memory_peak_range"] = (mem // 2, mem)
    summary.update({"all_compile_times": [0], "all_first_load_times": [10 * total],
                    "all_warm_load_times": [2 * total], "all_inference_times": [total] * max(1, iterations)})
    return {"execution_summary": summary, "execution_detail": detail}
