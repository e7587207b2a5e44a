"""FP16 underflow as a cause: values below FP16's normal range that feed an operation that needs them.

IEEE 754 binary16 keeps 11 significant bits down to its smallest normal number, 2⁻¹⁴ ≈ 6.1e-5;
below it a value is subnormal (fewer bits, down to 2⁻²⁴ ≈ 6e-8) or zero. Measured on the QNN HTP
simulator (onnxruntime-qnn 2.7.0, FP16): the power spectrum of a constant-Q filter bank, whose
quiet bins reach 3e-13, is read back as exact zeros, and the ``Log`` of it returns −7.6 where the
reference is −21 to −29 — the app's answer changes (an audio-to-MIDI transcriber finds 6 notes
instead of 9). Such a tensor can still pass the SNR bar itself (its energy is in its large
values); what breaks is the operation it feeds: a logarithm, a division by it, a reciprocal, a
square root, a power below 1 or a normalization (its variance).

Exact zeros are not underflow: FP16 represents zero exactly, so only non-zero reference values
below 2⁻¹⁴ count.

:func:`underflow_stats` counts, for one exposed tensor, the reference values below the range and
how many of them the backend lost (its value off by more than FP16's budget, 2⁻⁵, relative to the
element). :func:`find_underflow` names the cause: the first node below the bar (or the first that
saturates) is such a sensitive operation, one of its sensitive inputs holds values below the range
that the backend lost to underflow (its value there is off and itself below the range: flushed to
zero or a subnormal), and most of the node's error (its energy, :data:`EXPLAINED`) is at those
positions — so a node that is wrong for another reason (a kernel that returns −4 where the
reference is 0 or 1e-10, and a square root saturating there) is not blamed on underflow. A tensor
whose reference values are *all* below the range and that falls below the bar itself is named
too. :func:`underflow_notes` lists every measured tensor with values below the range that feeds a
sensitive operation, for the report.
"""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

__all__ = ["FP16_MIN_NORMAL", "SENSITIVE_OPS", "constant_arrays", "find_underflow", "sensitive_consumers", "underflow_message",
           "underflow_notes", "underflow_stats", "with_underflow"]

#: IEEE 754 binary16's smallest normal number, 2⁻¹⁴ ≈ 6.1e-5
FP16_MIN_NORMAL = 2.0 ** -14
#: the inputs (by position) whose small values an operation needs: ``{op_type: positions}``
SENSITIVE_OPS = {"Log": (0,), "Reciprocal": (0,), "Sqrt": (0,), "Div": (1,), "Pow": (0,), "ReduceLogSum": (0,),
                 "LayerNormalization": (0,), "InstanceNormalization": (0,), "GroupNormalization": (0,),
                 "LpNormalization": (0,), "RMSNormalization": (0,), "SimplifiedLayerNormalization": (0,)}
#: the share of a sensitive node's error energy that must sit where its input underflows
EXPLAINED = 0.5
#: at most this many tensors in the report's list
MAX_NOTES = 20


def _pow_exponent(node, constants: dict) -> float | None:
    value = constants.get(node.input[1]) if len(node.input) > 1 else None
    if value is None or np.size(value) != 1:
        return None
    return float(np.asarray(value).reshape(-1)[0])


def _sensitive_slots(node, constants: dict) -> tuple:
    """The input positions of ``node`` whose small values it needs (a ``Pow`` only with an exponent
    below 1 or not constant)."""
    if node.op_type == "Pow":
        exponent = _pow_exponent(node, constants)
        if exponent is not None and exponent >= 1:
            return ()
    return tuple(i for i in SENSITIVE_OPS.get(node.op_type, ()) if i < len(node.input) and node.input[i])


def sensitive_consumers(model, tensor: str, constants: dict | None = None) -> list:
    """The nodes of ``model``'s top-level graph that read ``tensor`` where its small values matter
    (:data:`SENSITIVE_OPS`; a ``Pow`` only with an exponent below 1 or not constant), in graph order.

    Args:
        model: an ``onnx.ModelProto``. tensor: a tensor name. constants: ``{name: array}`` of the
            constant inputs known (``Pow`` exponents); default: the model's initializers.
    """
    constants = constants if constants is not None else constant_arrays(model)
    return [n for n in model.graph.node if any(n.input[i] == tensor for i in _sensitive_slots(n, constants))]


def constant_arrays(model) -> dict:
    """``{name: array}`` of ``model``'s initializers (``None`` for one numpy cannot hold)."""
    return {i.name: _array(i) for i in model.graph.initializer}


def _tiny(r: np.ndarray) -> np.ndarray:
    mag = np.abs(r.astype(np.float64, copy=False))
    return (mag > 0) & (mag < FP16_MIN_NORMAL)


def _lost(r: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mask of the values below the range that the backend lost *to underflow*: ``y`` off by more
    than 2⁻⁵ of ``r`` and still below the range itself (flushed to zero, or a subnormal with a few
    bits) — a backend value far from it (a kernel's −4 where the reference is 1e-10) is wrong for
    another reason."""
    rr, yy = r.astype(np.float64, copy=False), y.astype(np.float64, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
        return _tiny(r) & (np.abs(yy - rr) > 2.0 ** -5 * np.abs(rr)) & (np.abs(yy) < FP16_MIN_NORMAL)


def underflow_stats(r: np.ndarray, y: np.ndarray) -> dict | None:
    """``{below, zeros, size, smallest, lost}`` of one tensor: reference values ``r`` that are not
    zero and below :data:`FP16_MIN_NORMAL` in magnitude, exact zeros (not counted as underflow),
    elements, the smallest non-zero magnitude, and how many of those below the range the backend
    ``y`` lost to underflow (off by more than 2⁻⁵ of the value, and itself below the range);
    ``None`` when no value is below the range (or the arrays are not float arrays of one shape)."""
    if r.dtype.kind != "f" or y.shape != r.shape or not r.size:
        return None
    tiny = _tiny(r)
    below = int(np.count_nonzero(tiny))
    if not below:
        return None
    return {"below": below, "zeros": int(np.count_nonzero(r == 0)), "size": int(r.size),
            "smallest": float(np.abs(r[tiny]).min()), "lost": int(np.count_nonzero(_lost(r, y)))}


def with_underflow(verdict: dict, r: np.ndarray, y: np.ndarray) -> dict:
    """``verdict`` (a localization's ``NodeVerdict``) with ``underflow`` set to :func:`underflow_stats`
    of the reference ``r`` and the backend ``y`` when the reference has values below the range."""
    stats = underflow_stats(r, y)
    if stats is not None:
        verdict["underflow"] = stats
    return verdict


def _explained(u_ref: np.ndarray, u_y: np.ndarray, y: np.ndarray, r: np.ndarray) -> float:
    """The share of the output's error energy ``Σ(y − r)²`` (non-finite errors counted as 1e30 each)
    at the positions where the backend lost the input's values to underflow (:func:`_lost` of
    ``u_ref``, ``u_y``, broadcast to the output's shape); 0 when the shapes do not broadcast or there
    is no error. Energy, not a count: values flushed to zero that change a square root by 1e-4 do
    not explain a square root saturating elsewhere."""
    if u_y.shape != u_ref.shape:
        return 0.0
    try:
        lost = np.broadcast_to(_lost(u_ref, u_y), r.shape)
    except ValueError:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(y.astype(np.float64) - r.astype(np.float64))
    err = np.where(np.isfinite(err), err, 1e30) ** 2
    total = float(err.sum())
    return float(err[lost].sum()) / total if total > 0 else 0.0


def find_underflow(verdicts: dict, graph, model, suspects, value, measure=None) -> dict | None:
    """The FP16 underflow that explains the failure, or ``None`` (module docstring).

    Args:
        verdicts: ``{tensor: NodeVerdict}`` (with ``underflow`` stats where the reference has values
            below the range). graph: the localization's ``Graph``. model: the ``onnx.ModelProto``.
        suspects: output tensors of the nodes to look at, in order (the first node below the bar,
            the first that saturates). value: ``value(tensor, side)`` → the saved array or ``None``.
        measure: ``measure(node)`` exposes the node's inputs that were not measured yet, or ``None``.

    Returns:
        ``{tensor, node, op_type, consumer, consumer_op, output, explained, below, zeros, size,
        smallest, lost}`` — ``tensor`` holds the values below the range, ``consumer`` is the node
        that needs them (``""`` when the tensor falls below the bar itself).
    """
    constants = constant_arrays(model)
    for out in suspects:
        node = graph.nodes.get(out)
        if node is None:
            continue
        own = verdicts.get(out, {}).get("underflow")
        if own and own["lost"] and verdicts[out]["reference_max_abs"] < FP16_MIN_NORMAL:
            return _found(out, verdicts, "", "", out, 1.0)
        slots = _sensitive_slots(node, constants)
        if not slots:
            continue
        if measure is not None:
            measure(node)
        y, r = value(out, "backend"), value(out, "reference")
        if y is None or r is None or y.shape != r.shape:
            continue
        for slot in slots:
            name = node.input[slot]
            stats = verdicts.get(name, {}).get("underflow")
            u_ref = value(name, "reference") if stats and stats["lost"] else None
            u_y = value(name, "backend") if u_ref is not None else None
            if u_y is None:
                continue
            share = _explained(u_ref, u_y, y, r)
            if share >= EXPLAINED:
                return _found(name, verdicts, node.name or node.op_type, node.op_type, out, share)
    return None


def _array(initializer) -> np.ndarray | None:
    try:
        return numpy_helper.to_array(initializer)
    except Exception:  # noqa: BLE001 - an initializer numpy cannot hold: not a usable exponent
        return None


def _found(tensor: str, verdicts: dict, consumer: str, consumer_op: str, out: str, share: float) -> dict:
    v = verdicts[tensor]
    return {"tensor": tensor, "node": v["node"], "op_type": v["op_type"], "consumer": consumer,
            "consumer_op": consumer_op, "output": out, "explained": share, **v["underflow"]}


def underflow_notes(verdicts: dict, graph, model) -> list:
    """``[{node, op_type, tensor, below, zeros, size, smallest, lost, feeds: [{node, op_type}]}]``:
    the measured tensors upstream of the failing outputs with reference values below FP16's normal
    range that feed a sensitive operation, in graph order (at most :data:`MAX_NOTES`)."""
    constants = constant_arrays(model)
    notes = []
    for t in graph.order:
        stats = verdicts.get(t, {}).get("underflow")
        if not stats or t not in graph.upstream:
            continue
        feeds = [{"node": n.name or n.op_type, "op_type": n.op_type} for n in sensitive_consumers(model, t, constants)]
        if feeds:
            notes.append({"node": verdicts[t]["node"], "op_type": verdicts[t]["op_type"], "tensor": t, **stats,
                          "feeds": feeds})
        if len(notes) >= MAX_NOTES:
            break
    return notes


def underflow_message(found: dict, verdicts: dict, bar: float) -> str:
    """The report's sentence for the underflow ``found`` by :func:`find_underflow`."""
    share = found["below"] / max(1, found["size"] - found["zeros"])
    head = (f"FP16 underflow at '{found['node']}' ({found['op_type']}): {found['below']} of the {found['size']} "
            f"reference values of its output '{found['tensor']}' ({100 * share:.0f} % of the non-zero ones) are below "
            f"FP16's smallest normal number {FP16_MIN_NORMAL:.2g} (the smallest {found['smallest']:.2g}; "
            f"{found['zeros']} exact zero(s) are not counted: FP16 holds zero), and the backend lost "
            f"{found['lost']} of them (flushed to zero or kept with a few bits)")
    failed = verdicts.get(found["output"], {}).get("failed") or []
    where = f" ({'; '.join(failed)})" if failed else f" (bar {bar:.1f} dB)"
    if found["consumer"]:
        head += (f". They feed {found['consumer_op']} '{found['consumer']}', whose output fails{where}, "
                 f"{100 * found['explained']:.0f} % of its error at those positions")
    else:
        head += f"; the tensor itself fails{where}"
    return (head + ". Scale the values up before that operation (aipc fix tries an exact power-of-two upscale), "
            "compute that part on the CPU, or run it at precision=fp32.")
