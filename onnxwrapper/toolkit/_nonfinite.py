"""Non-finite accounting for the three-way check: which run produced NaN/Inf, where, and why.

A quantized model can go non-finite *inside* and still return finite outputs: ORT CPU's QDQ run of
a LayerNorm whose variance was quantized to 0 divides by 0, and the next ``QuantizeLinear``
saturates the ±Inf to the ends of its 8-bit range (NaN to the zero point). Counting NaN/Inf at the
outputs alone therefore misses it; the outputs are just wrong. So the CPU runs are also scanned:
every floating-point node output of the top-level graph is exposed as an extra graph output (in
memory, :func:`onnxwrapper.diff.expose_tensors`) and its NaN, ±Inf, zero and negative
elements are counted, sample by sample (arrays are dropped after counting).

* :func:`scan_run` — per-tensor counts of one CPU run over all samples;
* :func:`introduced` — the tensors where a run (the QDQ model on the CPU) has more non-finite
  elements than the float model at the same tensor name (onnxruntime.quantization keeps the float
  nodes' output names), each with its *origin* flag (all of its producer's inputs are finite: the
  NaN/Inf start there) and a *cause*: a ``Div``/``Reciprocal`` whose divisor holds zeros (``a value
  quantized to 0`` when that divisor is a ``DequantizeLinear`` output), a ``Log`` of 0, a ``Sqrt``
  or ``Log`` of a negative value, else overflow or propagation.

The QNN run cannot be scanned (a compiled context binary exposes only its outputs): its count is
the outputs' (see :mod:`onnxwrapper.toolkit._three_way`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime

from onnxwrapper.diff import candidate_tensors, expose_tensors

__all__ = ["TensorCounts", "TensorNonFinite", "RunScan", "scan_run", "introduced"]

#: estimated bytes of exposed tensors per session run; more are split over several runs.
MAX_EXPOSED_BYTES = 512 << 20


@dataclass
class TensorCounts:
    """Element counts of one tensor summed over the samples: ``nan``, ``inf`` (±), ``zero``, ``negative``."""

    nan: int = 0
    inf: int = 0
    zero: int = 0
    negative: int = 0

    @property
    def nonfinite(self) -> int:
        return self.nan + self.inf

    def add(self, array: np.ndarray) -> None:
        with np.errstate(invalid="ignore"):
            self.nan += int(np.count_nonzero(np.isnan(array)))
            self.inf += int(np.count_nonzero(np.isinf(array)))
            self.zero += int(np.count_nonzero(array == 0))
            self.negative += int(np.count_nonzero(array < 0))


@dataclass(frozen=True)
class TensorNonFinite:
    """A tensor with more NaN/Inf in one run than in the float model.

    Attributes:
        tensor / node / op_type: the tensor and the node producing it.
        nan / inf: element counts over all samples (run), beyond none in the float model's tensor
            of that name when ``float_nonfinite`` is 0.
        float_nonfinite: NaN+Inf count of the float model's tensor of that name (0 when absent).
        origin: every input of ``node`` is finite in this run: the NaN/Inf start here.
        cause: e.g. ``"division by zero: divisor Sqrt.5_DequantizeLinear_Output holds 75 zeros (a value
            quantized to 0)"``; ``""`` when none of the known causes applies (overflow, propagation).
    """

    tensor: str
    node: str
    op_type: str
    nan: int
    inf: int
    float_nonfinite: int = 0
    origin: bool = False
    cause: str = ""

    @property
    def nonfinite(self) -> int:
        return self.nan + self.inf

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "node": self.node, "op_type": self.op_type, "nan": self.nan, "inf": self.inf,
                "float_nonfinite": self.float_nonfinite, "origin": self.origin, "cause": self.cause}

    def describe(self) -> str:
        """``"Div.31 (Div): 9,120 NaN/Inf — division by zero: …"``."""
        text = f"{self.tensor} ({self.op_type}): {self.nonfinite:,} NaN/Inf"
        return text + (f" — {self.cause}" if self.cause else "")


@dataclass
class RunScan:
    """Per-tensor counts of one CPU run (``tensors``: name → :class:`TensorCounts`), the model's
    node table for attribution, and ``samples`` scanned."""

    tensors: dict[str, TensorCounts] = field(default_factory=dict)
    producers: dict[str, onnx.NodeProto] = field(default_factory=dict)
    samples: int = 0
    nonfinite_initializers: set[str] = field(default_factory=set)

    def nonfinite_total(self) -> int:
        """NaN+Inf elements summed over every scanned tensor (a NaN that propagates counts again)."""
        return sum(c.nonfinite for c in self.tensors.values())


def _load(model: Any) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_model_from_string(bytes(model))
    return onnx.load(model)


def scan_run(model: Any, feeds: Sequence[Mapping[str, np.ndarray]], *,
             max_exposed_bytes: int = MAX_EXPOSED_BYTES) -> RunScan:
    """Run ``model`` on the CPU EP for every feed with its intermediate tensors exposed and count them.

    Args:
        model: path, bytes or ``onnx.ModelProto`` (not modified; the exposed copy is serialized in memory).
        feeds: the samples (``{input name: array}``), as the three-way check runs them.
        max_exposed_bytes: tensors whose estimated size (shape inference at the first feed's shapes)
            adds up beyond this are exposed over several runs.

    Returns:
        :class:`RunScan` over all floating-point node outputs of the top-level graph (graph outputs
        included).

    Raises:
        Whatever onnxruntime raises for the model or the feeds.
    """
    proto = _load(model)
    shapes = {k: tuple(np.shape(v)) for k, v in (feeds[0].items() if feeds else ())}
    candidates = candidate_tensors(proto, shapes)
    chunks: list[list[str]] = [[]]
    size = 0
    for cand in candidates:
        est = cand.est_bytes or 0
        if chunks[-1] and size + est > max_exposed_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(cand.tensor)
        size += est
    scan = RunScan(producers={o: n for n in proto.graph.node for o in n.output if o}, samples=len(feeds),
                   nonfinite_initializers={i.name for i in proto.graph.initializer if _nonfinite_initializer(i)})
    data = proto.SerializeToString()
    for names in chunks:
        if not names:
            continue
        session = onnxruntime.InferenceSession(expose_tensors(data, names), providers=["CPUExecutionProvider"])
        for feed in feeds:
            for name, value in zip(names, session.run(names, dict(feed))):
                array = np.asarray(value)
                if array.dtype.kind == "f":
                    scan.tensors.setdefault(name, TensorCounts()).add(array)
        del session
    return scan


def _nonfinite_initializer(tensor: onnx.TensorProto) -> bool:
    if tensor.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE) \
            or onnx.external_data_helper.uses_external_data(tensor) or int(np.prod(tensor.dims or [1])) > 4096:
        return False
    return not bool(np.isfinite(onnx.numpy_helper.to_array(tensor)).all())


def _float_name(name: str) -> str:
    """The float model's name of a QDQ-model tensor: onnxruntime.quantization renames the float
    producer of a graph output to ``<output>_QuantizeLinear_Input`` (``qdq_quantizer.py``)."""
    suffix = "_QuantizeLinear_Input"
    return name[: -len(suffix)] if name.endswith(suffix) else name


def introduced(run: RunScan, reference: RunScan | None) -> list[TensorNonFinite]:
    """Tensors with more NaN/Inf in ``run`` than in ``reference`` (the float model), in graph order.

    Args:
        run: the scan of the run under suspicion (the QDQ model on the CPU).
        reference: the float model's scan; ``None`` counts every non-finite tensor of ``run``.

    Returns:
        One :class:`TensorNonFinite` per such tensor, with ``origin`` and ``cause`` set.
    """
    order = {name: i for i, name in enumerate(run.producers)}
    found = []
    for name, counts in run.tensors.items():
        base = reference.tensors.get(_float_name(name)) if reference else None
        base_nonfinite = base.nonfinite if base else 0
        if counts.nonfinite <= base_nonfinite:
            continue
        node = run.producers.get(name)
        inputs = [i for i in (node.input if node is not None else ()) if i]
        origin = all(run.tensors.get(i) is None or run.tensors[i].nonfinite == 0 for i in inputs)
        found.append(TensorNonFinite(name, node.name if node is not None else "", node.op_type if node is not None
                                     else "", counts.nan, counts.inf, base_nonfinite, origin,
                                     _cause(node, run, reference) if origin and node is not None else ""))
    found.sort(key=lambda t: order.get(t.tensor, len(order)))
    return found


def _cause(node: onnx.NodeProto, run: RunScan, reference: RunScan | None) -> str:
    def quantized(tensor: str) -> str:
        """`` (a value quantized to 0)`` when ``tensor`` is dequantized from a float tensor that has
        fewer zeros in the float model."""
        dq = run.producers.get(tensor)
        q = run.producers.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
        if q is None or q.op_type != "QuantizeLinear":
            return ""
        source = reference.tensors.get(_float_name(q.input[0])) if reference else None
        zeros = run.tensors[tensor].zero
        return " (a value quantized to 0)" if source is None or source.zero < zeros else ""

    if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) > 1 \
            and node.input[1] in run.nonfinite_initializers:
        return (f"its scale {node.input[1]} is not finite (the calibration data of this tensor held NaN/±Inf, "
                f"so its range was)")

    if node.op_type in ("Div", "Reciprocal"):
        divisor = node.input[1] if node.op_type == "Div" else node.input[0]
        counts = run.tensors.get(divisor)
        if counts is not None and counts.zero:
            return f"division by zero: divisor {divisor} holds {counts.zero:,} zeros{quantized(divisor)}"
    if node.op_type == "Log":
        counts = run.tensors.get(node.input[0])
        if counts is not None and counts.zero:
            return f"log of zero: {node.input[0]} holds {counts.zero:,} zeros{quantized(node.input[0])}"
    if node.op_type in ("Sqrt", "Log", "Pow"):
        counts = run.tensors.get(node.input[0])
        if counts is not None and counts.negative:
            return f"{node.op_type} of negative values: {node.input[0]} holds {counts.negative:,}"
    return ""
