"""Partition prediction for ``aipc inspect``: which QNN EP / CPU EP each model node lands on, and why.

Two sources, named in :attr:`PartitionPrediction.source`:

* ``"session"`` — the truth: :func:`probe_partition` creates a QNN session (through
  ``onnxwrapper.InferenceSession`` with ``backend="qnn"``, backend option ``patches=False`` unless
  asked otherwise, an empty temporary compile cache) in a **child process** (the QNN configuration
  is process-global, and the child's stderr carries ORT's verbose per-node validation log);
  :func:`map_session` maps its :meth:`get_partition` back to the model's nodes. Reasons for CPU
  nodes are the QNN EP's own ``REASON :`` lines (``Validation FAILED …``).
* ``"rules"`` — when the QNN backend cannot run here: :func:`predict_partition_rules`, a static
  prediction from the op types the QNN EP has builders for (onnxruntime
  ``core/providers/qnn/builder/op_builder_factory.cc``) plus the rejections measured with
  onnxruntime-qnn 2.7.0 (see :func:`rule_reason`). It can be wrong where the EP checks
  attributes, types or shapes; the session probe is authoritative.

Run as ``python -m onnxwrapper.toolkit._inspect_partition OPTIONS_JSON`` it is the probe's child (model
bytes on stdin, one result line on stdout).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import onnx
import onnxruntime

import onnxwrapper
from onnxwrapper._registry import default_registry
from onnxwrapper.backends.qnn import QNN_OP_TYPES, qnn_rejection_reason
from onnxwrapper.errors import PartitionError
from onnxwrapper.kernel import PartitionReport, is_static
from onnxwrapper.patches import PatchMatch

__all__ = ["NodePrediction", "PartitionPrediction", "predict_partition_rules", "probe_partition", "map_session",
           "qnn_runs_here", "rule_reason", "QNN_OP_TYPES", "QNN_EP", "CPU_EP", "OPTIMIZED"]

QNN_EP = "QNNExecutionProvider"
CPU_EP = "CPUExecutionProvider"
OPTIMIZED = "optimized"


# -- data ------------------------------------------------------------------------------------------
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
        """A JSON-safe dict of the node's prediction."""
        return {"index": self.index, "name": self.name, "op_type": self.op_type, "domain": self.domain,
                "ep": self.ep, "reason": self.reason, "patch": self.patch}


@dataclass
class PartitionPrediction:
    """The partition the backend would make. ``source``: ``"session"`` or ``"rules"`` (see module doc).

    Attributes:
        backend / options: what was asked. nodes: one per model node, in graph order.
        counts: model nodes per EP. num_partitions: ORT subgraphs (session source only, else ``None``).
        after_patches: counts per EP of the QNN backend's session with its automatic patches
            (``None`` if not probed). applied_patches: the patches that session applied
            (``PatchRecord.to_dict()`` dicts; ``None`` if not probed).
        note: extra facts (e.g. "dynamic input shapes: …").
        session: ``source == "session"``: the probed session's own partition
            (``PartitionReport.to_dict()``) — ORT's nodes after its graph transformations, exactly
            what ``InferenceSession.get_partition()`` reports at these shapes (the headline); the
            per-model-node mapping (:attr:`nodes`) can count fewer nodes on QNN, because ORT fuses
            nodes and its layout transformation adds ``Transpose`` nodes.
        shapes: the input shapes the partition is for (``{name: [dims]}``).
        dynamic_inputs: inputs whose dims are not fixed (``{name: dims}``): then nothing was
            measured — a QNN session compiles one specialization per input shape at run time — and
            the counts are the rules' prediction for any fixed shape.
    """

    backend: str
    options: dict
    source: str
    nodes: list[NodePrediction]
    num_partitions: int | None = None
    after_patches: dict | None = None
    note: str = ""
    applied_patches: list | None = None
    session: dict | None = None
    shapes: dict | None = None
    dynamic_inputs: dict | None = None

    @property
    def counts(self) -> dict[str, int]:
        """``{execution provider: node count}``, QNN first, then CPU, then the others."""
        order = {QNN_EP: 0, CPU_EP: 1}
        return dict(sorted(Counter(n.ep for n in self.nodes).items(), key=lambda kv: (order.get(kv[0], 2), kv[0])))

    def to_dict(self) -> dict:
        """A JSON-safe dict of the prediction (the ``--json`` output), counts and headline included."""
        return {"backend": self.backend, "options": self.options, "source": self.source,
                "measured": self.source == "session", "headline": self.headline(), "counts": self.counts,
                "num_partitions": self.num_partitions, "session": self.session, "shapes": self.shapes,
                "dynamic_inputs": self.dynamic_inputs, "after_patches": self.after_patches,
                "applied_patches": self.applied_patches, "note": self.note,
                "nodes": [n.to_dict() for n in self.nodes]}

    def headline(self) -> str:
        """The partition in one line, saying what was measured: the session's own summary (the
        numbers ``get_partition().summary()`` gives at these shapes), or the rules' counts of model
        nodes marked as a prediction."""
        if self.session is not None:
            return PartitionReport.from_dict(self.session).with_source("compile", note="").summary()
        counts = ", ".join(f"{ep.replace('ExecutionProvider', '')} {n}" for ep, n in self.counts.items())
        if self.source == "session":
            return f"{counts} of {len(self.nodes)} model nodes (the QNN EP took no node)"
        return f"{counts} of {len(self.nodes)} model nodes (predicted by static rules, not measured)"

    def __repr__(self) -> str:
        return f"PartitionPrediction({self.backend}, {self.source}: {self.headline()})"


# -- rules -----------------------------------------------------------------------------------------
def rule_reason(node: onnx.NodeProto, model: onnx.ModelProto, dynamic: bool) -> str | None:
    """Static reason why the QNN EP would not take ``node`` (``None``: predicted on QNN); the QNN
    backend's own table, :func:`onnxwrapper.backends.qnn.qnn_rejection_reason`.

    An ``EPContext`` node (``com.microsoft``; what ``aipc compile`` writes) *is* a compiled QNN
    graph when its ``source`` attribute names the QNN EP: it runs on QNN (ONNX Runtime's EPContext
    contrib-op specification: ``source`` is the EP that generated the context)."""
    if node.op_type == "EPContext" and node.domain == "com.microsoft":
        source = next((a.s.decode(errors="replace") for a in node.attribute if a.name == "source"), "")
        if not source or "QNN" in source.upper():
            return None
        return f"an EPContext node compiled by {source}, not by the QNN EP"
    return qnn_rejection_reason(node, model, dynamic)


def predict_partition_rules(model: onnx.ModelProto, *, backend: str = "qnn", options: Mapping | None = None,
                            patches: Sequence[PatchMatch] = (), assume_static: bool = False) -> PartitionPrediction:
    """Static partition prediction (see module doc); ``model`` must have named nodes.
    ``assume_static``: predict the partition of a static specialization of a dynamic model (what
    the QNN backend compiles at run time) instead of the dynamic model itself (all on CPU)."""

    dynamic = not is_static(model) and not assume_static
    by_index = {m.node_index: m.patch for m in patches if m.applicable}
    outputs = {o.name for o in model.graph.output}
    nodes = []
    for i, node in enumerate(model.graph.node):
        gone = _removed_by_ort(node, outputs, static=not dynamic)
        if gone:
            nodes.append(NodePrediction(i, node.name, node.op_type, node.domain, OPTIMIZED, gone))
            continue
        reason = rule_reason(node, model, dynamic)
        nodes.append(NodePrediction(i, node.name, node.op_type, node.domain, CPU_EP if reason else QNN_EP, reason,
                                    by_index.get(i) if reason else None))
    note = "dynamic input shapes" if dynamic else ""
    return PartitionPrediction(backend, dict(options or {}), "rules", nodes, note=note)


def _removed_by_ort(node: onnx.NodeProto, graph_outputs: set, static: bool) -> str | None:
    """Why ORT's graph optimizations (ORT_ENABLE_ALL, before partitioning) remove ``node``, if they do:
    ``Constant`` becomes an initializer; ``Identity`` is eliminated unless it yields a graph output
    (IdentityElimination); ``Shape``/``Size`` of a static tensor are constant-folded."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Constant":
        return "a constant: ORT makes it an initializer before partitioning"
    if node.op_type == "Identity" and not set(node.output) & graph_outputs:
        return "eliminated by ORT before partitioning"
    if static and node.op_type in ("Shape", "Size"):
        return "constant-folded by ORT: the shapes are fixed"
    return None


# -- session probe ---------------------------------------------------------------------------------
_VALIDATION = re.compile(r"Validation FAILED for \d+ nodes in OrtNodeUnit \(.*?\) :\s*\n\s*Operator type: (\S+) "
                         r"Node name: (.*?) Node index: \d+\s*\n\s*REASON : (.*)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TOKEN = re.compile(r"(_token_\d+)+$")
_MARK = "ONNXWRAPPER_PROBE_RESULT "


def _child_main(argv: Sequence[str]) -> int:
    """Child side of :func:`probe_partition`: options JSON in ``argv[0]``; the model path in
    ``argv[1]``, else the model bytes on stdin."""
    opts = json.loads(argv[0])
    data = argv[1] if len(argv) > 1 else sys.stdin.buffer.read()
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 0
    with tempfile.TemporaryDirectory(prefix="onnxwrapper-inspect-") as cache:
        opts.setdefault("cache_dir", cache)
        opts.setdefault("patches", False)  # the model as it is, unless the parent asks for the patched session
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
                    timeout: float = 1800, path: str | None = None) -> tuple[dict | None, dict[str, str], str]:
    """Create a QNN session for ``model`` in a child process and return what it reports.

    Args:
        model: a model with named nodes (see :func:`onnxwrapper.patches.name_unnamed_nodes`).
        backend_options: ``backend_options`` of ``backend="qnn"`` (``target``, ``precision`` …).
        timeout: seconds before the child is killed.
        path: open the model file at ``path`` instead (it must be ``model``'s file): an EPContext
            model names its context binary relative to its own folder, which ONNX Runtime only
            resolves for a model opened by path.

    Returns:
        ``(partition dict or None, {node name: QNN EP reason}, error text)``; the partition is
        :meth:`onnxwrapper.kernel.session._partition.PartitionReport.to_dict` output, or ``None`` with the
        error (e.g. the QNN EP took no node: then every node is on CPU).

    Raises:
        RuntimeError: the child failed (its stderr tail is in the message).
    """
    # -P (safe-path mode): the probe imports nothing from the working directory (docs/security.md)
    cmd = [sys.executable, "-P", "-m", "onnxwrapper.toolkit._inspect_partition",
           json.dumps(dict(backend_options or {}))]
    cmd += [os.path.abspath(path)] if path else []
    proc = subprocess.run(cmd, input=None if path else model.SerializeToString(), capture_output=True,
                          timeout=timeout, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    out = proc.stdout.decode(errors="replace")
    err = _ANSI.sub("", proc.stderr.decode(errors="replace"))
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith(_MARK)), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"the QNN session probe failed: {_last_error(err, proc.returncode)} (--no-probe "
                           f"predicts the partition from static rules instead)")
    result = json.loads(line[len(_MARK):])
    reasons = {m.group(2): m.group(3).strip() for m in _VALIDATION.finditer(err)}
    return result.get("partition"), reasons, result.get("error", "")


def _last_error(stderr: str, returncode: int) -> str:
    """The exception line a failed child printed last (``InvalidGraph: …``), without its module path."""
    for line in reversed(stderr.splitlines()):
        m = re.match(r"^([A-Za-z_][\w.]*(?:Error|Exception|Fail|InvalidGraph|InvalidArgument|NoSuchFile|"
                     r"RuntimeException|NotImplemented|EPFail)\w*): (.*)$", line.strip())
        if m:
            return f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}"
    tail = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return f"exit status {returncode}" + (f": {tail[-1]}" if tail else "")


def map_session(model: onnx.ModelProto, partition: dict | None, reasons: Mapping[str, str], error: str,
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
    return PartitionPrediction("qnn", dict(options), "session", nodes, num, session=partition)


def qnn_runs_here() -> bool:
    """True when the ``qnn`` backend is available in this environment (then the probe can run)."""
    try:

        return bool(default_registry().probe("qnn").available)
    except Exception:  # noqa: BLE001 - any failure means "cannot probe"; rules are used instead
        return False


if __name__ == "__main__":  # the child process of probe_partition
    raise SystemExit(_child_main(sys.argv[1:]))
