"""What the QNN EP compiles for one specialization: fixed input shapes, bound control inputs, folded ``If``\\ s.

The QNN EP needs static shapes and never takes control-flow nodes (``If``/``Loop``/``Scan`` and their
bodies stay on the CPU EP, measured on onnxruntime-qnn 2.7.0). A *specialization* of a model is
identified by its :class:`Signature`: the shapes of its dynamic inputs and the values of its
control scalars (rank-0 int/bool inputs that decide an ``If``,
:func:`onnxwrapper.kernel.control_scalars`, e.g. silero-vad's ``sr``). :func:`specialize_for_qnn`
makes the model for it:

1. control scalars become initializers holding the signature's values
   (:func:`onnxwrapper.kernel.bind_inputs`); they leave the graph inputs, so the runner drops them
   from the feed;
2. the input shapes are fixed (:func:`onnxwrapper.kernel.specialize`);
3. every ``If`` whose condition no longer depends on input values is inlined
   (:func:`onnxwrapper.kernel.fold_ifs`), with one ORT CPU evaluation of the conditions on the
   feed (or, without one, on :func:`example_feed`).

``Loop`` trip counts are not bound (the QNN EP takes nothing inside a ``Loop`` anyway, and each count
would be another compile); ``If`` nodes with data-dependent conditions stay (and run on CPU).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from onnxwrapper.kernel import (bind_inputs, control_scalars, fold_ifs, has_control_flow, input_dims, shapes_note,
                                specialize)

__all__ = ["Signature", "signature_of", "control_value", "example_feed", "specialize_for_qnn", "control_inputs"]


def control_value(value) -> bool | int | float:
    """The Python scalar of a rank-0 feed value (numpy array, numpy scalar, OrtValue, list)."""
    if hasattr(value, "numpy") and hasattr(value, "_get_c_value"):  # onnxruntime.OrtValue
        value = value.numpy()
    item = np.asarray(value).reshape(-1)[0].item()
    return item if isinstance(item, (bool, int, float)) else float(item)


class Signature(NamedTuple):
    """One specialization: ``shapes`` of the dynamic inputs and ``values`` of the control scalars
    (an immutable ``NamedTuple``; not hashable, as its fields are dicts: :attr:`key` is).

    Attributes:
        shapes: ``{input name: tuple of ints}``. values: ``{control input name: Python scalar}``.
    """

    shapes: Mapping[str, tuple]
    values: Mapping[str, Any]

    @property
    def key(self) -> tuple:
        """Hashable identity (sorted)."""
        return tuple(sorted(self.shapes.items())), tuple(sorted(self.values.items()))

    def note(self) -> str:
        """E.g. ``"input=1x576, sr=16000"`` for logs and reports."""
        parts = [shapes_note(self.shapes)] if self.shapes else []
        parts += [f"{name}={value}" for name, value in sorted(self.values.items())]
        return ", ".join(parts)


def signature_of(shapes_of: Mapping[str, Sequence[int]], values_of: Mapping[str, Any],
                 dynamic_names: Sequence[str], control_names: Sequence[str]) -> Signature:
    """The :class:`Signature` of a feed from its shapes and its control-input values."""
    return Signature({n: tuple(int(d) for d in shapes_of[n]) for n in dynamic_names if n in shapes_of},
                     {n: control_value(values_of[n]) for n in control_names if n in values_of})


def control_inputs(model) -> list[str]:
    """The model's control scalars (:func:`onnxwrapper.kernel.control_scalars`); ``[]`` without ``If``."""
    return control_scalars(model) if has_control_flow(model) else []


def example_feed(model, shapes: Mapping[str, Sequence[int]] | None = None) -> dict[str, np.ndarray]:
    """A feed for the graph inputs of ``model`` (declared static dims, or ``shapes``): zeros for floats,
    ones for integers (no integer division by zero), ``False`` for bools. Inputs with unknown dims or
    types are left out."""
    inits = {i.name for i in model.graph.initializer}
    dims = input_dims(model)
    feed = {}
    for value in model.graph.input:
        if value.name in inits or not value.type.HasField("tensor_type"):
            continue
        shape = shapes.get(value.name) if shapes and value.name in shapes else dims.get(value.name)
        if shape is None or any(not isinstance(d, int) for d in shape):
            continue
        dtype = _np_dtype(value.type.tensor_type.elem_type)
        if dtype is None or dtype.kind not in "biuf":
            continue
        fill = 1 if dtype.kind in "iu" else 0
        feed[value.name] = np.full(tuple(shape), fill, dtype=dtype)
    return feed


def _np_dtype(elem_type: int) -> np.dtype | None:
    import onnx  # imported here: sessions import this module, and a cache hit needs no onnx

    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return None


def specialize_for_qnn(model, signature: Signature, feed: Mapping[str, Any] | None = None, *,
                       external_data_dir: str | None = None) -> tuple[Any, int]:
    """The static model the QNN EP compiles for ``signature`` (see the module docstring).

    Args:
        model: the original ``onnx.ModelProto`` (not modified).
        signature: shapes of the dynamic inputs, values of the control scalars.
        feed: the run's feed (numpy arrays), used to evaluate ``If`` conditions; ``None`` →
            :func:`example_feed` (the conditions that are folded do not depend on input values).
        external_data_dir: folder of the model's external data.

    Returns:
        ``(onnx.ModelProto, number of If nodes inlined)``; ``model`` itself when nothing changes.
    """
    current = model
    if signature.values:
        values = {}
        for name, value in signature.values.items():
            declared = next(v for v in model.graph.input if v.name == name).type.tensor_type.elem_type
            values[name] = np.asarray(value, dtype=_np_dtype(declared))
        current = bind_inputs(current, values)
    if signature.shapes:
        current = specialize(current, signature.shapes)
    if not has_control_flow(current):
        return current, 0
    names = {v.name for v in current.graph.input}
    given = {k: v for k, v in (feed or {}).items() if k in names and isinstance(v, np.ndarray)}
    if len(given) < len([n for n in names if n not in {i.name for i in current.graph.initializer}]):
        given = dict(example_feed(current), **given)
    return fold_ifs(current, given, external_data_dir=external_data_dir)
