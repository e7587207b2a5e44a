"""The reference's value ranges: how large every intermediate tensor of a model gets on the CPU.

``aipc fix`` needs them to find the FP16 overflows of a model (tensors beyond ±65504, IEEE 754
binary16's largest finite value) and to choose power-of-two scales that bring them back into range
(:mod:`onnxwrapper.repair.fix._rescale`). The model is run in this process with onnxruntime's own
CPU execution provider — never a backend — on the recorded inputs of the failing calls, with every
floating-point node output exposed as an extra graph output (in memory, as localization does).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

from onnxwrapper.diff._localize import candidate_tensors

__all__ = ["FP16_LIMIT", "reference_ranges", "out_of_range"]

#: IEEE 754 binary16's largest finite value
FP16_LIMIT = 65504.0


def reference_ranges(model: onnx.ModelProto, feeds_list, floors: dict | None = None,
                     observe=None) -> tuple[dict, list]:
    """``({tensor: max |finite value|}, tensors in graph order)`` over the calls ``feeds_list``.

    Args:
        model: the model (not modified). feeds_list: ``[{input name: array}, …]``.
        floors: filled with ``{tensor: the smallest non-zero per-call peak}`` when given (how small a
            tensor gets in the quietest call: below FP16's smallest normal number, 2^-14, it keeps
            few significant bits).
        observe: called as ``observe(tensor, array)`` with every float value measured (how the
            values of a tensor are spread, e.g. below FP16's normal range: ``aipc fix``'s underflow search).

    Raises:
        Whatever onnxruntime raises for the model on its CPU EP.
    """
    cands = candidate_tensors(model)
    names = list(dict.fromkeys(c.tensor for c in cands))
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    for name in names:
        if name not in present:
            exposed.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    sess = InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    ranges = dict.fromkeys(names, 0.0)
    for feeds in feeds_list:
        for name, value in zip(names, sess.run(names, feeds)):
            arr = np.asarray(value)
            if arr.dtype.kind != "f" or not arr.size:
                continue
            if observe is not None:
                observe(name, arr)
            finite = np.abs(arr[np.isfinite(arr)]).astype(np.float64)
            if finite.size:
                peak = float(finite.max())
                ranges[name] = max(ranges[name], peak)
                if floors is not None and peak > 0:
                    floors[name] = min(floors.get(name, math.inf), peak)
    return ranges, names


def out_of_range(ranges: dict, order: list, limit: float = FP16_LIMIT) -> list:
    """The tensors of ``order`` whose reference magnitude exceeds ``limit`` (FP16's range), in order."""
    return [t for t in order if ranges.get(t, 0.0) > limit and math.isfinite(ranges[t])]
