"""What a feed may cost before the QNN backend compiles a specialization for it.

Measured on the HTP simulator (onnxruntime-qnn 2.7.0, a ``Relu`` on ``[1, n]``): graph finalize
fails (``QNN_COMMON_ERROR_MEM_ALLOC 1002``) for a tensor whose *innermost* extent exceeds the VTCM
budget — FP16 up to 2²¹ elements (4 MiB) finalizes, 2²² does not; fp32 up to 2²⁰; ``vtcm_mb=8``
moves the limit up, ``vtcm_mb=2`` down; ``htp_arch``, finalization mode 3 and spill-fill do not.
Tiled layouts are fine (``[1, 3, 2048, 2048]``, ``[4096, 1024]`` compile in 0.2–0.3 s). Before it
fails, the compiler spends time and memory in proportion to the tensor: 1×2²³ floats fail after
6 s, 2×2²⁶ after 44 s and 1.2 GiB, and 2×2³⁰ (a broadcast view, 8 GiB logical) aborts the process
with ``std::bad_alloc`` after 46 s, where ORT on CPU returns or raises at once.

:func:`check_feed_cost` therefore refuses at once, with
:class:`~onnxwrapper.errors.BackendCapabilityError`:

* an input whose last dimension × HTP element size exceeds the VTCM budget (4 MiB, or the
  ``vtcm_mb`` QNN EP option when given): element size 2 bytes for float inputs in FP16, 4 in fp32;
  integers at most 4 (the QNN EP computes int64 as int32);
* a feed whose logical size (broadcast views counted in full: that is what the compiler allocates)
  exceeds the backend option ``max_feed_mb`` (default 1024 MiB).

The innermost rule is a property of the simulator and of HTP VTCM sizing measured on rank-2 inputs;
it is applied on the simulator only (``settings.real_npu`` False): a device has its own VTCM size
(2–16 MB by SoC) and its compiler tiles against that, so there the device decides.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from onnxwrapper.errors import BackendCapabilityError

__all__ = ["VTCM_BUDGET_MB", "DEFAULT_MAX_FEED_MB", "htp_element_size", "check_feed_cost", "check_feed_rows",
           "feed_rows"]

#: the VTCM budget the simulator finalizes against without a ``vtcm_mb`` option (measured)
VTCM_BUDGET_MB = 4
#: default of the ``max_feed_mb`` backend option
DEFAULT_MAX_FEED_MB = 1024
_MIB = 1024 * 1024


def htp_element_size(elem_type: int, precision: str) -> int:
    """Bytes per element of an input of ONNX element type ``elem_type`` on the HTP."""
    import onnx  # imported here: the backend's options import this module, and a cache hit needs no onnx

    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return 4
    if dtype.kind == "f":
        return 2 if precision == "fp16" or dtype.itemsize == 2 else 4
    return min(dtype.itemsize, 4)


def _mib(n: int) -> str:
    return f"{n / _MIB:.1f} MiB" if n < 1024 * _MIB else f"{n / (1024 * _MIB):.1f} GiB"


def feed_rows(model, shapes: Mapping[str, Sequence[int]], precision: str) -> list[tuple[str, list[int], int, int]]:
    """``[(input name, dims, bytes per element in the feed, bytes per element on the HTP)]`` of
    ``shapes`` (``{input name: shape}``) for ``model`` (``onnx.ModelProto``, the input element
    types; an unknown type counts 0 bytes in the feed and 4 on the HTP) and ``precision``."""
    import onnx  # imported here: see htp_element_size

    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.input if v.type.HasField("tensor_type")}
    rows = []
    for name, shape in shapes.items():
        elem = types.get(name, onnx.TensorProto.FLOAT)
        try:
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)).itemsize
        except (KeyError, TypeError, ValueError):
            itemsize = 0
        rows.append((name, [int(d) for d in shape], itemsize, htp_element_size(elem, precision)))
    return rows


def check_feed_cost(model, shapes: Mapping[str, Sequence[int]], settings, label: str) -> None:
    """Refuse shapes the HTP compiler cannot take, before compiling (see the module docstring).

    Args:
        model: ``onnx.ModelProto`` (the input element types). shapes: ``{input name: shape}`` of the
            inputs to check (a feed's, or a static model's declared ones).
        settings: ``QnnSettings`` (precision, ``vtcm_mb``, ``max_feed_mb``). label: model name.

    Raises:
        BackendCapabilityError: a row larger than the VTCM budget, or more than ``max_feed_mb``.
    """
    check_feed_rows(feed_rows(model, shapes, settings.precision), settings, label)


def check_feed_rows(rows, settings, label: str) -> None:
    """:func:`check_feed_cost` on :func:`feed_rows` output (e.g. recorded for a model earlier).

    Raises:
        BackendCapabilityError: a row larger than the VTCM budget, or more than ``max_feed_mb``.
    """
    vtcm = int(settings.ep_options.get("vtcm_mb", 0) or 0) or VTCM_BUDGET_MB
    limit = int(getattr(settings, "max_feed_mb", DEFAULT_MAX_FEED_MB)) * _MIB
    total = 0
    parts = []
    for name, dims, itemsize, htp_size in rows:
        dims = [int(d) for d in dims]
        total += int(np.prod(dims, dtype=np.int64)) * int(itemsize)
        parts.append(f"{name}: {'x'.join(map(str, dims)) or 'scalar'}")
        row = (dims[-1] if dims else 1) * int(htp_size)
        if row > vtcm * _MIB and not getattr(settings, "real_npu", False):  # the simulator's budget
            raise BackendCapabilityError(
                f"Input '{name}' of {label} has shape {tuple(dims)}: rows of {dims[-1]} elements are {_mib(row)} on "
                f"the HTP ({settings.precision}), more than its {vtcm} MiB VTCM budget, so the QNN compiler cannot "
                f"finalize the graph (measured: it fails with QNN_COMMON_ERROR_MEM_ALLOC after seconds to minutes). "
                f"Reshape the input so that its last dimension is smaller, raise the budget with "
                f"provider_options={{'vtcm_mb': N}} on a device that has it, or use backend='cpu'.", backend="qnn")
    if total > limit:
        raise BackendCapabilityError(
            f"The feed of {label} is {_mib(total)} ({', '.join(parts)}), more than max_feed_mb="
            f"{limit // _MIB}: the QNN compiler's time and memory grow with the tensors it compiles (measured: an 8 "
            f"GiB feed aborts the compiler with std::bad_alloc after 46 s). Feed smaller inputs, raise the backend "
            f"option max_feed_mb, or use backend='cpu'.", backend="qnn")
