"""Partition reports: which execution provider (EP) runs which node of a model.

ONNX Runtime's ``get_providers()`` lists every EP that was *registered* for a session, not the
ones that got nodes: with the QNN EP it says ``['QNNExecutionProvider', 'CPUExecutionProvider']``
even when QNN got zero nodes (measured on onnxruntime 1.31.1 + onnxruntime-qnn 2.7.0). The truth
is the session config ``session.record_ep_graph_assignment_info=1`` followed by
``InferenceSession.get_provider_graph_assignment_info()``, a list of ``OrtEpAssignedSubgraph``
(``ep_name``, ``get_nodes()`` → ``OrtEpAssignedNode(name, op_type, domain)``), one per partition.
:class:`PartitionReport` is that answer as plain, serializable data.

Limits: node names and the node list are ORT's *after* its graph transformations (e.g. the NHWC
``Transpose`` nodes the QNN EP's layout transformation inserts, ``*_token_*`` renames), not the
original ONNX node list. ORT does not expose why a node was not claimed by an EP; ``reason`` is
filled only where onnxwrapper knows it (see :func:`known_reason`).

When a backend rewrote nodes with operator patches (:mod:`onnxwrapper.patches`) before compiling,
:attr:`PartitionReport.patches` lists them (``PatchRecord.to_dict()`` dicts) and the node list is
that of the patched model.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

__all__ = ["NodeAssignment", "PartitionReport", "PartialOffloadWarning", "known_reason", "user_stacklevel"]

CPU_EP = "CPUExecutionProvider"

_DEFAULT_REASON = ("not claimed by the execution provider (unsupported op type, attribute, data type or "
                   "shape); run with SessionOptions.log_severity_level=0 to see ORT's per-node reason")


class PartialOffloadWarning(UserWarning):
    """Part of a model runs outside the requested backend's EP (usually on the CPU EP).

    Issued once per model and process by backends that allow partial offload (``strict=False``);
    filter it with ``warnings.simplefilter("error", PartialOffloadWarning)`` to make it fatal.
    """


#: packages whose frames a warning about the user's session is not attributed to
_INTERNAL_PACKAGES = ("onnxwrapper", "aipc_loader", "wrapt")


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn``, called in the function that warns, that attributes
    the warning to the first calling frame outside onnxwrapper (and the ``aipc`` hot patch, wrapt):
    the user's ``InferenceSession(...)`` or ``run(...)`` call, however deep the backend's code is.

    Why it walks the frames (``sys._getframe``): the depth between the user's call and a warning
    varies (a compile at the first ``run`` of a new shape, the hot patch's wrapt wrappers around
    the user's call), and only the frames know it. It reads module names to *attribute* a warning;
    nothing behaves differently depending on the caller.
    Python 3.12's ``warnings.warn(..., skip_file_prefixes=...)`` states this rule by the packages'
    folders, without a walk of our own; it replaces this function once the minimum Python is 3.12
    (it is 3.11)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        if not any(name == p or name.startswith(p + ".") for p in _INTERNAL_PACKAGES):
            return level
        frame, level = frame.f_back, level + 1
    return 1


def known_reason(op_type: str, domain: str, target_ep: str) -> str:
    """Best known explanation for a node that ``target_ep`` did not take.

    Args:
        op_type: ONNX op type, e.g. ``"Det"``. domain: op domain (``""`` = ai.onnx).
        target_ep: the EP that was expected to run the node, e.g. ``"QNNExecutionProvider"``.

    Returns:
        A one-line reason. Sources: QuantizeLinear/DequantizeLinear at graph inputs/outputs stay on
        CPU with the QNN EP's default ``offload_graph_io_quantization=1`` (measured: 2 CPU nodes in
        every QDQ model); custom domains have no QNN implementation; everything else is
        the generic "not claimed" reason because ORT does not report it.
    """
    if target_ep == "QNNExecutionProvider" and op_type in ("QuantizeLinear", "DequantizeLinear"):
        return ("graph input/output (de)quantization is offloaded to the CPU EP by the QNN EP option "
                "offload_graph_io_quantization=1 (its default); this is expected for QDQ models")
    if domain not in ("", "ai.onnx", "com.microsoft", "com.ms.internal.nhwc"):
        return f"custom domain '{domain}' has no implementation in {target_ep}"
    return _DEFAULT_REASON


@dataclass(frozen=True)
class NodeAssignment:
    """One node and the EP that runs it.

    Attributes:
        name: node name as ORT reports it (may be empty or renamed by ORT's transformations).
        op_type: ONNX op type. domain: op domain (``""`` for ai.onnx).
        ep: execution provider name, e.g. ``"QNNExecutionProvider"``.
        partition: index of the ORT subgraph (partition) the node belongs to, in ORT's order.
        reason: why the node is not on the target EP, where known; ``None`` for nodes on it.
    """

    name: str
    op_type: str
    domain: str
    ep: str
    partition: int = 0
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with the attribute names as keys."""
        return {"name": self.name, "op_type": self.op_type, "domain": self.domain, "ep": self.ep,
                "partition": self.partition, "reason": self.reason}


@dataclass(frozen=True)
class PartitionReport:
    """Which EP runs which node of one compiled model.

    Attributes:
        target_ep: the EP the backend wants every node on (``"QNNExecutionProvider"``).
        nodes: every node, in ORT's subgraph order.
        partition_eps: EP name of each ORT subgraph (``len`` = number of partitions).
        source: how the report was obtained: ``"compile"`` (assignment recorded while compiling,
            per original node), ``"artifact"`` (assignment of a loaded precompiled EPContext model:
            compiled parts appear as ``EPContext`` nodes), ``"cache"`` (stored at compile time),
            ``"predicted"`` (from the model's op types alone, e.g. a model no node of which the
            backend's EP has an implementation for: nothing was compiled), or
            ``"pending"`` (:meth:`pending`: nothing compiled yet — a dynamic-shape model before its
            first run; no nodes, :meth:`summary` says so).
        note: free text for listings (e.g. the model name or the specialization shapes).
        patches: operator patches applied to the model before this partition was made, as
            ``onnxwrapper.patches.PatchRecord.to_dict()`` dicts (keys ``patch``, ``node_name``,
            ``op_type``, ``summary``, ``added_nodes``, …); empty when the model ran unpatched.
        recovery: the steps a backend took after the compile of the model as given failed, in
            order, as JSON-ready dicts (keys ``rung``, ``result`` — ``"failed"`` or ``"compiled"``
            —, ``error``, ``seconds``, and per rung e.g. ``options``, ``batch``, ``parts``,
            ``cpu_nodes``); empty when the first compile worked.
        buckets: for a dynamic-shape session whose calls were padded into shape buckets, one dict per
            compiled size used (``shapes``, ``calls`` served, ``distinct_shapes`` served; the last one
            also ``saved``: the compiles the buckets saved); empty otherwise.
    """

    target_ep: str
    nodes: tuple[NodeAssignment, ...] = ()
    partition_eps: tuple[str, ...] = ()
    source: str = "compile"
    note: str = ""
    patches: tuple[Mapping[str, Any], ...] = ()
    recovery: tuple[Mapping[str, Any], ...] = ()
    buckets: tuple[Mapping[str, Any], ...] = ()

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def from_assignment(cls, subgraphs: Iterable, target_ep: str, *, source: str = "compile",
                        note: str = "") -> "PartitionReport":
        """Build from ``get_provider_graph_assignment_info()`` output.

        Args:
            subgraphs: iterable of objects with ``ep_name`` and ``get_nodes()`` (ORT's
                ``OrtEpAssignedSubgraph``) or of ``(ep_name, [(name, op_type, domain), …])`` tuples.
            target_ep: the EP expected to run every node.
        """
        nodes: list[NodeAssignment] = []
        eps: list[str] = []
        for index, sub in enumerate(subgraphs):
            if isinstance(sub, tuple):
                ep, raw_nodes = sub
                triples = [tuple(n) for n in raw_nodes]
            else:
                ep = sub.ep_name
                triples = [(n.name, n.op_type, n.domain) for n in sub.get_nodes()]
            eps.append(ep)
            for name, op_type, domain in triples:
                reason = None if ep == target_ep else known_reason(op_type, domain, target_ep)
                nodes.append(NodeAssignment(name, op_type, domain, ep, index, reason))
        return cls(target_ep, tuple(nodes), tuple(eps), source, note)

    @classmethod
    def from_session(cls, session, target_ep: str, *, source: str = "compile", note: str = "") -> "PartitionReport":
        """Read the assignment of an ``onnxruntime.InferenceSession`` created with
        ``session.record_ep_graph_assignment_info=1``.

        Raises:
            onnxruntime ``Fail``: the config entry was not set for that session.
        """
        return cls.from_assignment(session.get_provider_graph_assignment_info(), target_ep,
                                   source=source, note=note)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PartitionReport":
        """Inverse of :meth:`to_dict` (extra keys are ignored)."""
        nodes = tuple(NodeAssignment(n["name"], n["op_type"], n["domain"], n["ep"], int(n.get("partition", 0)),
                                     n.get("reason")) for n in data.get("nodes", ()))
        return cls(data["target_ep"], nodes, tuple(data.get("partition_eps", ())), data.get("source", "compile"),
                   data.get("note", ""), tuple(dict(p) for p in data.get("patches", ())),
                   tuple(dict(r) for r in data.get("recovery", ())), tuple(dict(b) for b in data.get("buckets", ())))

    @classmethod
    def pending(cls, target_ep: str, note: str = "") -> "PartitionReport":
        """The report of a session that has compiled nothing yet: a model with dynamic input shapes
        is compiled per input shape at its first ``run()`` (the QNN HTP needs static shapes), so
        before that no node is assigned to any EP. ``note`` says which inputs are dynamic."""
        return cls(target_ep, (), (), "pending", note)

    def with_source(self, source: str, note: str | None = None) -> "PartitionReport":
        """A copy with another :attr:`source` (and :attr:`note`)."""
        return replace(self, source=source, note=self.note if note is None else note)

    def with_recovery(self, steps: Iterable[Mapping[str, Any]]) -> "PartitionReport":
        """A copy whose :attr:`recovery` is ``steps``."""
        return replace(self, recovery=tuple(dict(s) for s in steps))

    def recovery_summary(self) -> str:
        """One phrase for :attr:`recovery`, e.g. ``"recovered by graph split (4 parts, 2 nodes on the CPU)
        after QNN_COMMON_ERROR_MEM_ALLOC 1002"``; ``""`` without recovery."""
        if not self.recovery:
            return ""
        last = self.recovery[-1]
        first_error = next((s.get("error") for s in self.recovery if s.get("error")), None)
        detail = last.get("detail")
        text = f"recovered by {last.get('rung')}" + (f" ({detail})" if detail else "")
        return text + (f" after {first_error}" if first_error else "")

    def with_buckets(self, buckets: Iterable[Mapping[str, Any]]) -> "PartitionReport":
        """A copy whose :attr:`buckets` are ``buckets``."""
        return replace(self, buckets=tuple(dict(b) for b in buckets))

    def buckets_summary(self) -> str:
        """One phrase for :attr:`buckets`, e.g. ``"shape buckets: 12 shapes in 40 calls served by 4 compiled
        sizes (8 compiles saved)"``; ``""`` without buckets."""
        if not self.buckets:
            return ""
        shapes = sum(int(b.get("distinct_shapes", 0)) for b in self.buckets)
        calls = sum(int(b.get("calls", 0)) for b in self.buckets)
        saved = int(self.buckets[-1].get("saved", shapes - len(self.buckets)))
        return (f"shape buckets: {shapes} shapes in {calls} calls served by {len(self.buckets)} compiled "
                f"size{'s' if len(self.buckets) != 1 else ''} ({saved} compile{'s' if saved != 1 else ''} saved)")

    def with_patches(self, patches: Iterable[Any]) -> "PartitionReport":
        """A copy whose :attr:`patches` are ``patches`` (``PatchRecord`` objects or their dicts)."""
        return replace(self, patches=tuple(dict(p.to_dict() if hasattr(p, "to_dict") else p) for p in patches))

    # -- queries ---------------------------------------------------------------------------------
    @property
    def counts(self) -> dict[str, int]:
        """Number of nodes per EP, target EP first, e.g. ``{"QNNExecutionProvider": 3, "CPUExecutionProvider": 1}``."""
        counter = Counter(n.ep for n in self.nodes)
        ordered = {self.target_ep: counter.pop(self.target_ep)} if self.target_ep in counter else {}
        ordered.update(sorted(counter.items()))
        return ordered

    @property
    def num_partitions(self) -> int:
        """Number of ORT subgraphs (partitions), all EPs together."""
        return len(self.partition_eps)

    @property
    def target_nodes(self) -> int:
        """Number of nodes on :attr:`target_ep`."""
        return sum(1 for n in self.nodes if n.ep == self.target_ep)

    @property
    def offloaded_nodes(self) -> list[NodeAssignment]:
        """Nodes that run somewhere else than :attr:`target_ep` (usually the CPU EP)."""
        return [n for n in self.nodes if n.ep != self.target_ep]

    @property
    def cpu_nodes(self) -> list[tuple[str, str]]:
        """``(node name, op type)`` of every node not on :attr:`target_ep` (the format of
        :attr:`onnxwrapper.errors.PartitionError.cpu_nodes`)."""
        return [(n.name, n.op_type) for n in self.offloaded_nodes]

    @property
    def fully_offloaded(self) -> bool:
        """True when every node runs on :attr:`target_ep` (and there is at least one node)."""
        return bool(self.nodes) and not self.offloaded_nodes

    @property
    def providers(self) -> list[str]:
        """EPs that actually run nodes, target EP first: the truthful ``get_providers()``."""
        return list(self.counts)

    def summary(self) -> str:
        """One line, e.g. ``"QNNExecutionProvider 4/5 nodes, CPUExecutionProvider 1 (Det), 3 partitions"``;
        with patches ``"…, 1 partition, patched: mod (node m)"``; the note follows in brackets. A
        :meth:`pending` report: ``"QNNExecutionProvider: not compiled yet — compiled per input shape at
        the first run() [note]"``."""
        if self.source == "pending":
            return (f"{self.target_ep}: not compiled yet — compiled per input shape at the first run()"
                    + (f" [{self.note}]" if self.note else ""))
        total = len(self.nodes)
        parts = []
        for ep, count in self.counts.items():
            if ep == self.target_ep:
                parts.append(f"{ep} {count}/{total} nodes")
            else:
                ops = Counter(n.op_type for n in self.nodes if n.ep == ep)
                listed = ", ".join(f"{op}" if c == 1 else f"{op}×{c}" for op, c in sorted(ops.items()))
                parts.append(f"{ep} {count} ({listed})")
        if self.target_ep not in self.counts:
            parts.insert(0, f"{self.target_ep} 0/{total} nodes")
        text = ", ".join(parts) + f", {self.num_partitions} partition{'s' if self.num_partitions != 1 else ''}"
        if self.patches:
            text += ", patched: " + ", ".join(f"{p.get('patch')} (node {p.get('node_name') or '<unnamed>'})"
                                              for p in self.patches)
        if self.recovery:
            text += ", " + self.recovery_summary()
        if self.buckets:
            text += "; " + self.buckets_summary()
        return f"{text} [{self.note}]" if self.note else text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: target_ep, source, note, counts, num_partitions, partition_eps, nodes, patches
        (and recovery and buckets, when there were any)."""
        data = {"target_ep": self.target_ep, "source": self.source, "note": self.note, "counts": self.counts,
                "num_partitions": self.num_partitions, "partition_eps": list(self.partition_eps),
                "nodes": [n.to_dict() for n in self.nodes], "patches": [dict(p) for p in self.patches]}
        if self.recovery:
            data["recovery"] = [dict(r) for r in self.recovery]
        if self.buckets:
            data["buckets"] = [dict(b) for b in self.buckets]
        return data

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return f"<PartitionReport {self.summary()} (source {self.source})>"

