"""Model inspection: I/O with dynamic dims, opsets, op histogram, predicted partition, patches.

:func:`inspect_model` is what ``aipc inspect`` prints (``--json``: :meth:`Inspection.to_dict`).
The partition has two sources, named in :attr:`PartitionPrediction.source`:

* ``"session"`` — the truth: a QNN session is created (through ``onnxwrapper.InferenceSession``
  with ``backend="qnn"``, patches off, an empty temporary compile cache) in a **child process**
  (the QNN configuration is process-global, and the child's stderr carries ORT's verbose per-node
  validation log) and its :meth:`get_partition` is mapped back to the model's nodes. Reasons
  for CPU nodes are the QNN EP's own ``REASON :`` lines (``Validation FAILED …``).
* ``"rules"`` — when the QNN backend cannot run here: a static prediction from the op types the
  QNN EP has builders for (onnxruntime ``core/providers/qnn/builder/op_builder_factory.cc``) plus
  the rejections measured with onnxruntime-qnn 2.7.0 (see :func:`rule_reason`). It can be wrong
  where the EP checks attributes, types or shapes; the session probe is authoritative.

Static shapes: :func:`make_static` applies ``--shape NAME=d0,d1,…`` (via
:func:`onnxwrapper._shapes.specialize`, i.e. ``onnxruntime.tools.onnx_model_utils``) and named
free-dimension overrides ``--dim NAME=VALUE`` (``make_dim_param_fixed``), then re-runs onnx shape
inference. Nothing here writes next to the user's model.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import onnx
from onnx import helper

from onnxwrapper.patches import PatchMatch, find_patches, load_model_proto, name_unnamed_nodes

__all__ = ["TensorSummary", "NodePrediction", "PartitionPrediction", "Inspection", "inspect_model",
           "parse_shape_arg", "parse_dim_arg", "make_static", "predict_partition_rules", "probe_partition",
           "rule_reason", "QNN_EP", "CPU_EP", "OPTIMIZED"]

QNN_EP = "QNNExecutionProvider"
CPU_EP = "CPUExecutionProvider"
OPTIMIZED = "optimized"

#: op types with a QNN EP op builder (ORT's op_builder_factory.cc, stored version of ORT main).
QNN_OP_TYPES = frozenset("""
Abs Add And ArgMax ArgMin Asin Atan AveragePool BatchNormalization Cast Ceil Clip Concat Conv ConvTranspose Cos
CumSum DepthToSpace DequantizeLinear Div Einsum Elu Equal Exp Expand Flatten Floor Gather GatherElements GatherND
Gelu Gemm GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual GridSample HardSigmoid HardSwish
InstanceNormalization LRN LSTM LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax LpNormalization
MatMul Max MaxPool Mean Min Mod Mul Neg Not Or PRelu Pad Pow QuantizeLinear RMSNormalization RandomUniformLike
Reciprocal ReduceL2 ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum Relu Reshape Resize Round STFT
ScatterElements ScatterND Sigmoid Sign Sin Slice Softmax SpaceToDepth Split Sqrt Squeeze Sub Sum Tanh
ThresholdedRelu Tile TopK Transpose Unsqueeze Upsample Where
""".split())

_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}


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
        onnxruntime ``InvalidArgument``: from :func:`onnxwrapper._shapes.specialize` (unknown input,
            rank mismatch, contradiction with a fixed dim).
    """
    from onnxruntime.tools.onnx_model_utils import make_dim_param_fixed

    from onnxwrapper._shapes import specialize

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
        return {"name": self.name, "dtype": self.dtype, "shape": self.shape, "dynamic": self.dynamic}


@dataclass(frozen=True)
class NodePrediction:
    """Where one node of the model runs.

    Attributes:
        index / name / op_type / domain: the node (unnamed nodes get ``<op_type>_<index>``).
        ep: ``"QNNExecutionProvider"``, ``"CPUExecutionProvider"`` or ``"optimized"`` (fused into a
            neighbour, folded or eliminated by ORT's graph optimizations before partitioning, e.g. a
            bias ``Add`` fused into its ``Conv``; it runs as part of that node).
        reason: why it is not on QNN (``None`` when it is).
        patch: registry name of a patch that can rewrite it, or ``None``.
    """

    index: int
    name: str
    op_type: str
    domain: str
    ep: str
    reason: str | None = None
    patch: str | None = None

    def to_dict(self) -> dict:
        return {"index": self.index, "name": self.name, "op_type": self.op_type, "domain": self.domain,
                "ep": self.ep, "reason": self.reason, "patch": self.patch}


@dataclass
class PartitionPrediction:
    """The partition the backend would make. ``source``: ``"session"`` or ``"rules"`` (see module doc).

    Attributes:
        backend / options: what was asked. nodes: one per model node, in graph order.
        counts: nodes per EP. num_partitions: ORT subgraphs (session source only, else ``None``).
        after_patches: counts per EP once the applicable patches are applied (``None`` if not probed).
        note: extra facts (e.g. "dynamic input shapes: …").
    """

    backend: str
    options: dict
    source: str
    nodes: list[NodePrediction]
    num_partitions: int | None = None
    after_patches: dict | None = None
    note: str = ""

    @property
    def counts(self) -> dict[str, int]:
        order = {QNN_EP: 0, CPU_EP: 1}
        return dict(sorted(Counter(n.ep for n in self.nodes).items(), key=lambda kv: (order.get(kv[0], 2), kv[0])))

    def to_dict(self) -> dict:
        return {"backend": self.backend, "options": self.options, "source": self.source, "counts": self.counts,
                "num_partitions": self.num_partitions, "after_patches": self.after_patches, "note": self.note,
                "nodes": [n.to_dict() for n in self.nodes]}


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

    def to_dict(self) -> dict:
        """JSON-ready dict (the ``--json`` output)."""
        return {"model": self.model, "ir_version": self.ir_version, "producer": self.producer, "opsets": self.opsets,
                "inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
                "op_histogram": self.op_histogram, "num_nodes": self.num_nodes,
                "initializer_bytes": self.initializer_bytes, "patches": [p.to_dict() for p in self.patches],
                "partition": self.partition.to_dict() if self.partition else None}

    def format_text(self, *, all_nodes: bool = False) -> str:
        """Human-readable report; ``all_nodes`` lists QNN nodes too (default: only the others)."""
        lines = [f"model: {self.model}", f"  IR {self.ir_version}, opsets "
                 + ", ".join(f"{d} {v}" for d, v in self.opsets.items())
                 + (f", producer {self.producer}" if self.producer else "")
                 + f", {self.num_nodes} nodes, initializers {self.initializer_bytes / 1e6:.2f} MB"]
        for title, tensors in (("inputs", self.inputs), ("outputs", self.outputs)):
            lines.append(f"{title}:")
            for t in tensors:
                shape = "?" if t.shape is None else "[" + ", ".join("?" if d is None else str(d) for d in t.shape) + "]"
                lines.append(f"  {t.name:<24} {t.dtype:<9} {shape}{'   dynamic' if t.dynamic else ''}")
        ops = ", ".join(f"{op}×{n}" if n > 1 else op for op, n in self.op_histogram.items())
        lines.append(f"ops ({len(self.op_histogram)} types): {ops}")
        p = self.partition
        if p is not None:
            counts = ", ".join(f"{_short(ep)} {n}" for ep, n in p.counts.items())
            parts = (f", {p.num_partitions} partition{'s' if p.num_partitions != 1 else ''}"
                     if p.num_partitions is not None else "")
            opts = ", ".join(f"{k}={v}" for k, v in p.options.items())
            lines.append(f"partition ({p.backend}{' ' + opts if opts else ''}; from {p.source}): {counts}{parts}")
            if p.note:
                lines.append(f"  note: {p.note}")
            if p.counts.get(OPTIMIZED) and not all_nodes:
                lines.append(f"  ({p.counts[OPTIMIZED]} nodes fused, folded or eliminated by ORT before partitioning "
                             f"are not listed; --all-nodes lists them)")
            shown = [n for n in p.nodes if all_nodes or n.ep not in (QNN_EP, OPTIMIZED)]
            same = len({(n.ep, n.reason) for n in shown}) == 1 and len(shown) > 5 and not all_nodes
            for n in shown[:3] if same else shown:
                extra = f"  -> patch '{n.patch}'" if n.patch else ""
                lines.append(f"  {_short(n.ep):<7} {n.name:<28} {n.op_type:<14} {n.reason or ''}{extra}")
            if same:
                lines.append(f"  … and {len(shown) - 3} more nodes, same reason (--all-nodes lists them)")
            if p.after_patches is not None:
                lines.append("after patches (nodes of the patched session): "
                             + ", ".join(f"{_short(ep)} {n}" for ep, n in p.after_patches.items()))
        usable = [m for m in self.patches if m.applicable]
        lines.append(f"patches: {len(usable)} applicable" + ("" if usable else " (none)"))
        for m in self.patches:
            state = "applies" if m.applicable else f"cannot apply: {m.reason}"
            lines.append(f"  {m.patch:<10} {m.node_name:<28} {m.op_type:<10} {state}")
        return "\n".join(lines)


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
                              if i.data_location != onnx.TensorProto.EXTERNAL))


# -- rules -----------------------------------------------------------------------------------------
def _einsum_native(equation: str) -> bool:
    """The four equation shapes the QNN EP maps to MatMul (its einsum_op_builder.cc)."""
    eq = equation.replace(" ", "")
    if "->" not in eq or eq.count(",") != 1:
        return False
    lhs, out = eq.split("->")
    a, b = lhs.split(",")
    if min(len(a), len(b), len(out)) < 2 or not (a + b + out).isalpha() or not (a + b + out).islower():
        return False
    if len(a) == len(b) == len(out) and a[:-2] == b[:-2] == out[:-2]:
        m, k, k2, n = a[-2], a[-1], b[-2], b[-1]
        if out[-2] == m and ((k2 == k and out[-1] == n) or (n == k and out[-1] == k2)):
            return True  # MatMul / MatMul with transposed second input
    if len(a) == len(b) == len(out) == 4 and a[0] == b[0] == out[0]:
        if a[3] == out[3] and a[1] == b[3] and b[1] == out[1]:
            return True  # transpose-all
    return (len(a), len(b), len(out)) == (4, 3, 4) and a[2] == out[2] and a[3] == b[2] and b[1] == out[3] \
        and a[0] == out[0] and a[1] == out[1] == b[0]


def rule_reason(node: onnx.NodeProto, model: onnx.ModelProto, dynamic: bool) -> str | None:
    """Static reason why the QNN EP would not take ``node`` (``None``: predicted on QNN)."""
    if dynamic:
        return "dynamic input shapes: the QNN EP takes no node of such a graph (fix shapes with --shape/--dim)"
    if node.domain not in ("", "ai.onnx"):
        return f"custom domain '{node.domain}' has no QNN EP implementation"
    if node.op_type not in QNN_OP_TYPES:
        return f"Operators of type `{node.op_type}` are not supported by QNN EP."
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Mod" and int(attrs.get("fmod", 0)) == 1:
        return "QNN Mod Op only support fmod == 0 for now."
    if node.op_type in ("MaxPool", "AveragePool") and len(attrs.get("kernel_shape", [])) == 3:
        return "the QNN EP supports 1-D and 2-D pooling only (3-D kernel)"
    if node.op_type == "Einsum":
        eq = attrs.get("equation", b"")
        eq = eq.decode() if isinstance(eq, bytes) else str(eq)
        if len(node.input) != 2 or not _einsum_native(eq):
            return f"Einsum unsupported equation: {eq}"
    return None


def predict_partition_rules(model: onnx.ModelProto, *, backend: str = "qnn", options: Mapping | None = None,
                            patches: Sequence[PatchMatch] = ()) -> PartitionPrediction:
    """Static partition prediction (see module doc); ``model`` must have named nodes."""
    from onnxwrapper._shapes import is_static

    dynamic = not is_static(model)
    by_index = {m.node_index: m.patch for m in patches if m.applicable}
    nodes = []
    for i, node in enumerate(model.graph.node):
        reason = rule_reason(node, model, dynamic)
        nodes.append(NodePrediction(i, node.name, node.op_type, node.domain, CPU_EP if reason else QNN_EP, reason,
                                    by_index.get(i) if reason else None))
    note = "dynamic input shapes" if dynamic else ""
    return PartitionPrediction(backend, dict(options or {}), "rules", nodes, note=note)


# -- session probe ---------------------------------------------------------------------------------
_VALIDATION = re.compile(r"Validation FAILED for \d+ nodes in OrtNodeUnit \(.*?\) :\s*\n\s*Operator type: (\S+) "
                         r"Node name: (.*?) Node index: \d+\s*\n\s*REASON : (.*)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TOKEN = re.compile(r"(_token_\d+)+$")
_MARK = "ONNXWRAPPER_PROBE_RESULT "


def _child_main(argv: Sequence[str]) -> int:
    """Child side of :func:`probe_partition`: model bytes on stdin, options JSON in ``argv[0]``."""
    import tempfile

    import onnxruntime

    import onnxwrapper
    from onnxwrapper.errors import PartitionError

    opts = json.loads(argv[0])
    data = sys.stdin.buffer.read()
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 0
    with tempfile.TemporaryDirectory(prefix="onnxwrapper-inspect-") as cache:
        from onnxwrapper.backends.qnn import QnnBackend

        if "cache_dir" in QnnBackend.options:
            opts.setdefault("cache_dir", cache)
        if "patches" in QnnBackend.options:
            opts["patches"] = False
        opts["strict"] = False  # report CPU nodes instead of refusing them
        try:
            session = onnxwrapper.InferenceSession(data, so, backend="qnn", backend_options=opts)
            report = session.get_partition()
            result = {"partition": report.to_dict() if report is not None else None}
            del session
        except PartitionError as exc:
            result = {"partition": None, "cpu_nodes": list(exc.cpu_nodes), "error": str(exc)}
    sys.stdout.write(_MARK + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


def probe_partition(model: onnx.ModelProto, backend_options: Mapping[str, Any] | None = None, *,
                    timeout: float = 1800) -> tuple[dict | None, dict[str, str], str]:
    """Create a QNN session for ``model`` in a child process and return what it reports.

    Args:
        model: a model with named nodes (see :func:`onnxwrapper.patches.name_unnamed_nodes`).
        backend_options: ``backend_options`` of ``backend="qnn"`` (``target``, ``precision`` …).
        timeout: seconds before the child is killed.

    Returns:
        ``(partition dict or None, {node name: QNN EP reason}, error text)``; the partition is
        :meth:`onnxwrapper._partition.PartitionReport.to_dict` output, or ``None`` with the
        error (e.g. the QNN EP took no node: then every node is on CPU).

    Raises:
        RuntimeError: the child failed (its stderr tail is in the message).
    """
    cmd = [sys.executable, "-m", "onnxwrapper._inspect", json.dumps(dict(backend_options or {}))]
    proc = subprocess.run(cmd, input=model.SerializeToString(), capture_output=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    out = proc.stdout.decode(errors="replace")
    err = _ANSI.sub("", proc.stderr.decode(errors="replace"))
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith(_MARK)), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"the QNN partition probe failed (exit {proc.returncode}): {err.strip()[-2000:]}")
    result = json.loads(line[len(_MARK):])
    reasons = {m.group(2): m.group(3).strip() for m in _VALIDATION.finditer(err)}
    return result.get("partition"), reasons, result.get("error", "")


def _map_session(model: onnx.ModelProto, partition: dict | None, reasons: Mapping[str, str], error: str,
                 matches: Sequence[PatchMatch], options: Mapping) -> PartitionPrediction:
    """Session partition (ORT node names) → one prediction per model node."""
    by_index = {m.node_index: m.patch for m in matches if m.applicable}
    assigned: dict[str, str] = {}
    num = None
    if partition is not None:
        num = int(partition.get("num_partitions") or 0)
        for n in partition["nodes"]:
            name = n["name"]
            while name and name not in assigned and _TOKEN.search(name):
                name = _TOKEN.sub("", name)
            assigned.setdefault(name, n["ep"])
            if n["ep"] == QNN_EP:
                assigned[name] = QNN_EP  # a node split by the layout transform counts as QNN if any part is
    nodes = []
    for i, node in enumerate(model.graph.node):
        if partition is None:
            ep = CPU_EP
        else:
            ep = assigned.get(node.name, OPTIMIZED)
        reason = None
        if ep == CPU_EP:
            reason = reasons.get(node.name) or rule_reason(node, model, False) or error.split(". ")[0] or \
                "not claimed by the QNN EP (see ORT's verbose log)"
        elif ep == OPTIMIZED:
            reason = "fused, folded or eliminated by ORT's graph optimizations before partitioning"
        nodes.append(NodePrediction(i, node.name, node.op_type, node.domain, ep, reason,
                                    by_index.get(i) if ep == CPU_EP else None))
    return PartitionPrediction("qnn", dict(options), "session", nodes, num)


def _qnn_runs_here() -> bool:
    try:
        from onnxwrapper._registry import default_registry

        return bool(default_registry().probe("qnn").available)
    except Exception:  # noqa: BLE001 - any failure means "cannot probe"; rules are used instead
        return False


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
    use_session = _qnn_runs_here() if probe is None else probe
    if not use_session:
        result.partition = predict_partition_rules(proto, options=options, patches=result.patches)
        return result
    from onnxwrapper._shapes import dynamic_inputs

    pending = dynamic_inputs(proto)
    if pending:
        pred = predict_partition_rules(proto, options=options, patches=result.patches)
        pred.note = (f"dynamic input shapes {pending}: the QNN backend compiles one static specialization per feed "
                     f"shape at run time; give --shape/--dim to see its partition")
        result.partition = pred
        return result
    partition, reasons, error = probe_partition(proto, options)
    pred = _map_session(proto, partition, reasons, error, result.patches, options)
    fixable = {n.name for n in pred.nodes if n.ep == CPU_EP and n.patch}
    if probe_patched and fixable:
        from onnxwrapper.patches import apply_patches

        patched, _ = apply_patches(proto, only_for=fixable)
        after, _, after_error = probe_partition(patched, options)
        if after is not None:
            pred.after_patches = dict(after.get("counts") or {})
        else:
            pred.after_patches = {CPU_EP: len(patched.graph.node)}
            pred.note = after_error
    result.partition = pred
    return result


if __name__ == "__main__":  # the child process of probe_partition
    raise SystemExit(_child_main(sys.argv[1:]))
