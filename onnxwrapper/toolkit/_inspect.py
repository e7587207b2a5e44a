"""Model inspection: I/O with dynamic dims, opsets, op histogram, predicted partition, patches;
and what a raw QNN context binary holds.

:func:`inspect_model` is what ``aipc inspect MODEL.onnx`` prints (``--json``:
:meth:`Inspection.to_dict`). The partition comes from :mod:`onnxwrapper.toolkit._inspect_partition`:
a real QNN session in a child process (``source="session"``) or static rules (``"rules"``). When
CPU nodes can be patched, a second probe runs the QNN backend with its automatic patches
(backend option ``patches``) and reports the partition it then gets (``after_patches``).

:func:`inspect_binary` / :func:`format_binary` are ``aipc inspect MODEL.bin``: the graphs of a QNN
context binary with their input/output tensors (QNN names, shapes, data types, scale/offset of
quantized tensors), read with the QNN System library (``onnxwrapper/backends/qnn/binary/_binary.py``).

Static shapes: :func:`make_static` applies ``--shape NAME=d0,d1,…`` (via
:func:`onnxwrapper.kernel.model._shapes.specialize`, i.e. ``onnxruntime.tools.onnx_model_utils``) and named
free-dimension overrides ``--dim NAME=VALUE`` (``make_dim_param_fixed``), then re-runs onnx shape
inference. Nothing here writes next to the user's model.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import onnx
from onnx import helper
from onnxruntime.tools.onnx_model_utils import make_dim_param_fixed

from onnxwrapper.backends.qnn import read_binary_info
from onnxwrapper.kernel import dynamic_inputs, specialize
from onnxwrapper.patches import PatchMatch, find_patches, load_model_proto, name_unnamed_nodes
from onnxwrapper.toolkit._inspect_partition import (CPU_EP, OPTIMIZED, QNN_EP, NodePrediction, PartitionPrediction,
                                                    map_session, predict_partition_rules, probe_partition,
                                                    qnn_runs_here, rule_reason)

__all__ = ["TensorSummary", "NodePrediction", "PartitionPrediction", "Inspection", "inspect_model",
           "inspect_binary", "format_binary", "parse_shape_arg", "parse_dim_arg", "make_static",
           "predict_partition_rules", "probe_partition", "rule_reason", "QNN_EP", "CPU_EP", "OPTIMIZED"]


# -- static shapes ---------------------------------------------------------------------------------
def parse_shape_arg(text: str) -> tuple[str, list[int]]:
    """``"x=1,3,224,224"`` → ``("x", [1, 3, 224, 224])`` (``x`` may contain ``=``-free punctuation).

    Raises:
        ValueError: no ``=``, an empty name, or a dim that is not a positive integer.
    """
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise ValueError(f"--shape expects NAME=D0,D1,... (e.g. input=1,3,224,224), got {text!r}")
    try:
        values = [int(d) for d in re.split(r"[,x×]", dims.strip()) if d.strip()]
    except ValueError as exc:
        raise ValueError(f"--shape {text!r}: dims must be positive integers") from exc
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"--shape {text!r}: dims must be positive integers")
    return name, values


def parse_dim_arg(text: str) -> tuple[str, int]:
    """``"batch=1"`` → ``("batch", 1)``.

    Raises:
        ValueError: not ``NAME=POSITIVE_INT``.
    """
    name, sep, value = text.rpartition("=")
    if not sep or not name or not value.strip().isdigit() or int(value) <= 0:
        raise ValueError(f"--dim expects NAME=POSITIVE_INT (a named dynamic dim, e.g. batch=1), got {text!r}")
    return name, int(value)


def _dim_params(model: onnx.ModelProto) -> set[str]:
    names = set()
    for value in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        if value.type.HasField("tensor_type"):
            names.update(d.dim_param for d in value.type.tensor_type.shape.dim if d.dim_param)
    return names


def make_static(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]] | None = None,
                dims: Mapping[str, int] | None = None) -> onnx.ModelProto:
    """A copy of ``model`` with named dims fixed (``dims``) and input shapes fixed (``shapes``).

    Named dims are applied first (graph-wide, every tensor using that ``dim_param``), then
    per-input shapes, which may also fix unnamed dims and must agree with what is already fixed.

    Raises:
        ValueError: a dim name the model does not use (the message lists the names it uses).
        onnxruntime ``InvalidArgument``: from :func:`onnxwrapper.kernel.model._shapes.specialize` (unknown input,
            rank mismatch, contradiction with a fixed dim).
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    known = _dim_params(out)
    for name, value in (dims or {}).items():
        if name not in known:
            raise ValueError(f"--dim {name}={value}: the model has no dynamic dim named '{name}'; its named dims are: "
                             f"{', '.join(sorted(known)) or '(none)'}. Use --shape INPUT=... for unnamed dims.")
        make_dim_param_fixed(out.graph, name, int(value))
    if shapes:
        out = specialize(out, {k: list(v) for k, v in shapes.items()})
    return out


# -- data ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorSummary:
    """A graph input or output: ``shape`` holds ints (fixed), strs (named dims) or ``None`` (unknown)."""

    name: str
    dtype: str
    shape: list | None
    dynamic: bool

    def to_dict(self) -> dict:
        """A JSON-safe dict: name, dtype, shape and whether any dim is dynamic."""
        return {"name": self.name, "dtype": self.dtype, "shape": self.shape, "dynamic": self.dynamic}




@dataclass
class Inspection:
    """Everything ``aipc inspect`` reports about one model."""

    model: str
    ir_version: int
    producer: str
    opsets: dict[str, int]
    inputs: list[TensorSummary]
    outputs: list[TensorSummary]
    op_histogram: dict[str, int]
    num_nodes: int
    initializer_bytes: int
    patches: list[PatchMatch] = field(default_factory=list)
    partition: PartitionPrediction | None = None
    constant_bytes: int = 0

    @property
    def weight_bytes(self) -> int:
        """Bytes of the model's weights: initializers plus the tensors of ``Constant`` nodes (some
        exporters, e.g. PaddlePaddle's, keep every weight in ``Constant`` nodes)."""
        return self.initializer_bytes + self.constant_bytes

    def __repr__(self) -> str:
        part = f"; partition {self.partition.headline()}" if self.partition else ""
        return (f"Inspection({self.model}: {self.num_nodes} nodes, {len(self.inputs)} input(s), "
                f"{len(self.outputs)} output(s){part})")

    def to_dict(self) -> dict:
        """JSON-ready dict (the ``--json`` output)."""
        return {"model": self.model, "ir_version": self.ir_version, "producer": self.producer, "opsets": self.opsets,
                "inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
                "op_histogram": self.op_histogram, "num_nodes": self.num_nodes,
                "initializer_bytes": self.initializer_bytes, "constant_bytes": self.constant_bytes,
                "weight_bytes": self.weight_bytes, "patches": [p.to_dict() for p in self.patches],
                "partition": self.partition.to_dict() if self.partition else None}

    def format_text(self, *, all_nodes: bool = False) -> str:
        """Human-readable report; ``all_nodes`` lists QNN nodes too (default: only the others)."""
        lines = [f"model: {self.model}", f"  IR {self.ir_version}, opsets "
                 + ", ".join(f"{d} {v}" for d, v in self.opsets.items())
                 + (f", producer {self.producer}" if self.producer else "")
                 + f", {self.num_nodes} nodes, weights {self.weight_bytes / 1e6:.2f} MB"
                 + (f" ({self.constant_bytes / 1e6:.2f} MB in Constant nodes)" if self.constant_bytes else "")]
        for title, tensors in (("inputs", self.inputs), ("outputs", self.outputs)):
            lines.append(f"{title}:")
            for t in tensors:
                shape = "?" if t.shape is None else "[" + ", ".join("?" if d is None else str(d) for d in t.shape) + "]"
                lines.append(f"  {t.name:<24} {t.dtype:<9} {shape}{'   dynamic' if t.dynamic else ''}")
        ops = ", ".join(f"{op}×{n}" if n > 1 else op for op, n in self.op_histogram.items())
        lines.append(f"ops ({len(self.op_histogram)} types): {ops}")
        p = self.partition
        if p is not None:
            lines += _partition_head(p, all_nodes)
            shown = [n for n in p.nodes if all_nodes or n.ep not in (QNN_EP, OPTIMIZED)]
            same = len({(n.ep, n.reason) for n in shown}) == 1 and len(shown) > 5 and not all_nodes
            for n in shown[:3] if same else shown:
                extra = f"  -> patch '{n.patch}'" if n.patch else ""
                lines.append(f"  {_short(n.ep):<7} {n.name:<28} {n.op_type:<14} {n.reason or ''}{extra}")
            if same:
                lines.append(f"  … and {len(shown) - 3} more nodes, same reason (--all-nodes lists them)")
            if p.after_patches is not None:
                applied = ", ".join(f"{r['patch']} ({r['node_name'] or 'unnamed'})" for r in p.applied_patches or ())
                lines.append(f"after patches ({applied or 'none applied'}; the QNN backend's session): "
                             + ", ".join(f"{_short(ep)} {n}" for ep, n in p.after_patches.items()))
        usable = [m for m in self.patches if m.applicable]
        lines.append(f"patches: {len(usable)} applicable" + ("" if usable else " (none)"))
        for m in self.patches:
            state = "applies" if m.applicable else f"cannot apply: {m.reason}"
            lines.append(f"  {m.patch:<10} {m.node_name:<28} {m.op_type:<10} {state}")
        return "\n".join(lines)


def _partition_head(p: PartitionPrediction, all_nodes: bool) -> list[str]:
    """The partition's headline: what was measured (a session, at which shapes) or predicted."""
    opts = ", ".join(f"{k}={v}" for k, v in p.options.items())
    what = f"{p.backend}{' ' + opts if opts else ''}"
    shapes = ", ".join(f"{n}={'x'.join(map(str, d))}" for n, d in (p.shapes or {}).items())
    if p.dynamic_inputs:
        dyn = "; ".join(f"{n} [{', '.join('?' if not isinstance(x, int) or x < 0 else str(x) for x in d)}]"
                        for n, d in p.dynamic_inputs.items())
        lines = [f"partition ({what}): not measured — dynamic input shapes ({dyn}); the QNN backend compiles one "
                 f"specialization per input shape at the first run. Give --shape/--dim to measure one.",
                 f"  static rules predict, at any fixed shape: {p.headline()}"]
    elif p.source == "session":
        lines = [f"partition ({what}; measured: a QNN session{' at ' + shapes if shapes else ''}, as get_partition() "
                 f"reports it): {p.headline()}"]
        model_counts = ", ".join(f"{_short(ep)} {n}" for ep, n in p.counts.items())
        session_total = sum((p.session or {}).get("counts", {}).values())
        differs = (" (the session counts ORT's nodes: it fuses and folds nodes, and its layout transformation "
                   "adds Transposes)" if session_total != len(p.nodes) else "")
        lines.append(f"  the model's own {len(p.nodes)} nodes: {model_counts}{differs}")
        if p.counts.get(OPTIMIZED) and not all_nodes:
            lines.append(f"  ({p.counts[OPTIMIZED]} model nodes fused, folded or eliminated by ORT before "
                         f"partitioning are not listed; --all-nodes lists them)")
    else:
        lines = [f"partition ({what}; from rules: predicted, not measured): {p.headline()}"]
    if p.note:
        lines.append(f"  note: {p.note}")
    return lines


def _short(ep: str) -> str:
    return ep.replace("ExecutionProvider", "") if ep.endswith("ExecutionProvider") else ep


# -- static facts ----------------------------------------------------------------------------------
def _tensor(value: onnx.ValueInfoProto) -> TensorSummary:
    t = value.type.tensor_type if value.type.HasField("tensor_type") else None
    if t is None:
        return TensorSummary(value.name, str(value.type.WhichOneof("value")), None, True)
    dtype = helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else "?"
    if not t.HasField("shape"):
        return TensorSummary(value.name, dtype, None, True)
    dims = [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
    return TensorSummary(value.name, dtype, dims, any(not isinstance(d, int) for d in dims))


def _model_facts(model: onnx.ModelProto, label: str) -> Inspection:
    inits = {i.name for i in model.graph.initializer}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - declared outputs are still shown
        inferred = model
    return Inspection(
        model=label, ir_version=int(model.ir_version),
        producer=" ".join(x for x in (model.producer_name, model.producer_version) if x),
        opsets={(i.domain or "ai.onnx"): int(i.version) for i in model.opset_import},
        inputs=[_tensor(v) for v in model.graph.input if v.name not in inits],
        outputs=[_tensor(v) for v in inferred.graph.output],
        op_histogram=dict(Counter(n.op_type for n in model.graph.node).most_common()),
        num_nodes=len(model.graph.node),
        initializer_bytes=sum(len(i.raw_data) or onnx.numpy_helper.to_array(i).nbytes for i in model.graph.initializer
                              if i.data_location != onnx.TensorProto.EXTERNAL),
        constant_bytes=sum(len(a.t.raw_data) or onnx.numpy_helper.to_array(a.t).nbytes for n in model.graph.node
                           if n.op_type == "Constant" for a in n.attribute if a.name == "value"))


def inspect_model(model: Any, *, backend: str | None = None, backend_options: Mapping[str, Any] | None = None,
                  shapes: Mapping[str, Sequence[int]] | None = None, dims: Mapping[str, int] | None = None,
                  probe: bool | None = None, probe_patched: bool = True) -> Inspection:
    """Inspect ``model`` and, with ``backend="qnn"``, predict its partition.

    Args:
        model: path, bytes or ``onnx.ModelProto`` (never modified; nothing is written next to it).
        backend: ``"qnn"`` to predict the QNN partition, ``"cpu"`` (everything on CPU) or ``None``.
        backend_options: ``backend_options`` for the QNN session probe (``target``, ``precision``…).
        shapes / dims: static shapes to apply first (see :func:`make_static`).
        probe: create a real QNN session (child process) — default: when the QNN backend runs here;
            ``False`` forces the static rules.
        probe_patched: after a session probe with CPU nodes that patches can rewrite, probe the
            patched model too and report its counts in ``after_patches``.

    Raises:
        ValueError / onnxruntime ``InvalidArgument``: bad ``shapes``/``dims`` (see :func:`make_static`).
        RuntimeError: the session probe failed.
    """
    label = os.fspath(model) if isinstance(model, (str, os.PathLike)) else "<in-memory model>"
    proto = load_model_proto(model)
    if shapes or dims:
        proto = make_static(proto, shapes, dims)
    name_unnamed_nodes(proto)
    result = _model_facts(proto, label)
    result.patches = find_patches(proto)
    if backend is None:
        return result
    options = dict(backend_options or {})
    if backend == "cpu":
        nodes = [NodePrediction(i, n.name, n.op_type, n.domain, CPU_EP) for i, n in enumerate(proto.graph.node)]
        result.partition = PartitionPrediction("cpu", options, "rules", nodes)
        return result
    if backend != "qnn":
        raise ValueError(f"inspect predicts partitions for backend 'qnn' or 'cpu', not {backend!r}")
    use_session = qnn_runs_here() if probe is None else probe
    if not use_session:
        result.partition = predict_partition_rules(proto, options=options, patches=result.patches,
                                                   assume_static=True)
        pending = dynamic_inputs(proto)
        result.partition.dynamic_inputs = {k: list(v) for k, v in pending.items()} or None
        return result

    pending = dynamic_inputs(proto)
    if pending:
        pred = predict_partition_rules(proto, options=options, patches=result.patches, assume_static=True)
        pred.dynamic_inputs = {k: list(v) for k, v in pending.items()}
        result.partition = pred
        return result
    by_path = (isinstance(model, (str, os.PathLike)) and not (shapes or dims)
               and any(n.op_type == "EPContext" for n in proto.graph.node))
    partition, reasons, error = probe_partition(proto, dict(options, patches=False),
                                                path=os.fspath(model) if by_path else None)
    pred = map_session(proto, partition, reasons, error, result.patches, options)
    pred.shapes = {t.name: list(t.shape or []) for t in result.inputs}
    fixable = {n.name for n in pred.nodes if n.ep == CPU_EP and n.patch}
    if probe_patched and fixable:
        # what the QNN backend does with its automatic patches (backend option `patches`)
        after, _, after_error = probe_partition(proto, dict(options, patches=options.get("patches", True)))
        if after is None:
            pred.after_patches = {CPU_EP: len(proto.graph.node)}
            pred.note = after_error
        else:
            pred.after_patches = dict(after.get("counts") or {})
            pred.applied_patches = list(after.get("patches") or [])
            if not pred.applied_patches:
                pred.note = ("the QNN backend could not use the patched model (see its WARNING log); sessions run "
                             "this model unpatched")
    result.partition = pred
    return result


def inspect_binary(path) -> dict:
    """What the QNN context binary at ``path`` holds, as a JSON-ready dict: ``path``, ``bytes``,
    ``build_id``, ``soc_version``, ``graphs`` (name, inputs, outputs; each tensor with QNN ``name``,
    ``shape``, ``dtype`` — e.g. ``float32`` or quantized ``ufp8`` — and ``scale``/``offset`` for
    per-tensor quantized tensors, real = scale · (q + offset)).

    Raises:
        FileNotFoundError: no such file. ArtifactError: not a context binary the QNN System library reads.
    """

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    info = read_binary_info(path).to_dict()
    return {"path": info.pop("path"), "bytes": os.path.getsize(path), **info}


def format_binary(info: Mapping[str, Any]) -> str:
    """Human-readable :func:`inspect_binary` result (one block per graph)."""
    lines = [f"context binary: {info['path']} ({info['bytes'] / 1e6:.2f} MB)",
             f"  QNN build {info['build_id'] or '?'}" + (f", SoC {info['soc_version']}" if info["soc_version"] else "")
             + (f", compiled for soc_model {info['soc_model']}" if info.get("soc_model") else "")
             + f", {len(info['graphs'])} graph{'s' if len(info['graphs']) != 1 else ''}"]
    for index, graph in enumerate(info["graphs"]):
        lines.append(f"graph {index}: {graph['name']}")
        for title in ("inputs", "outputs"):
            lines.append(f"  {title}:")
            for t in graph[title]:
                quant = f"  scale {t['scale']:.6g} offset {t['offset']}" if t["scale"] is not None else ""
                shape = "[" + ", ".join(map(str, t["shape"])) + "]"
                lines.append(f"    {t['name']:<28} {t['dtype']:<9} {shape}{quant}")
    return "\n".join(lines)
