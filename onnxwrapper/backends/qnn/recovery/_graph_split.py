"""Rungs 3 and 4 of the recovery ladder: compile a graph the HTP cannot finalize whole as several QNN
contexts, and run on the CPU only what fails even alone.

The static model's nodes (``Constant`` nodes aside, in graph order, which is a topological order)
are cut into contiguous ranges; a contiguous range of a topologically sorted graph only reads graph
inputs, constants and outputs of earlier ranges, so each range is a model of its own
(:func:`onnxwrapper.repair.part_model`). The whole graph failed, so it is halved; each half is
compiled by the normal pipeline (its own cache entry and context binary, compiled from bytes so
that the parts' ``EPContext`` nodes get distinct names, as the repair stitching does); a half that
fails is halved again (bisection). A single node that still fails, or a range the QNN EP takes no
node of, becomes a CPU range. Then the ranges are assembled into **one** EPContext model
(:func:`onnxwrapper.backends.qnn.pipeline._stitch.write_stitched`): the ``EPContext`` nodes of every NPU
range, each pointing at its own context binary, and the CPU ranges' nodes as ordinary ONNX nodes,
run by one onnxruntime session that hands the tensors across (as for repair recipes with CPU
subgraphs, :mod:`onnxwrapper.backends.qnn.pipeline._stitch`).

At most :data:`MAX_COMPILES` compiles are tried per model; ranges still failing then run on the CPU
whole. In strict mode a range that would run on the CPU raises instead (the caller's typed error).
The plan — the ranges and their kinds — is returned so that the cache can replay it without
failing again (:mod:`onnxwrapper.backends.qnn.recovery._recovery`).

Merging neighbouring NPU ranges after the bisection was measured and is not done: on the fp32 U-Net
stand-in it cost 26 % more compiles for 7 % fewer partitions and no change in run time (measured
on the simulator; docs/backends/qnn.md).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import onnx

from onnxwrapper.backends.qnn.compile import CTX_NAME, complete_epcontext, recoverable
from onnxwrapper.backends.qnn.pipeline import (CacheStore, Compiled, EpContextFromOnnx, merge_reports, self_contained,
                                               write_stitched)
from onnxwrapper.errors import PartitionError
from onnxwrapper.kernel import ArtifactCache, ModelSource, NodeAssignment, PartitionReport, make_key
from onnxwrapper.repair import ModelPart, boundary_types, part_model, read_names, replica_copies, replicated_nodes

__all__ = ["MAX_COMPILES", "SplitRange", "GraphSplit", "range_parts"]

#: most compiles one graph split tries before the ranges still failing run on the CPU whole
MAX_COMPILES = 64
#: part of the cache keys of parts and assembled models; bump when what is built changes
SPLIT_FORMAT = "qnn-graph-split-v3"
CPU_EP = "CPUExecutionProvider"
_NONE_TAKEN = "the QNN EP takes none of its nodes"


@dataclass(frozen=True)
class SplitRange:
    """``order[lo:hi]`` of the model's non-constant nodes, run on ``kind`` (``"npu"``/``"cpu"``);
    ``reason``: why a CPU range is on the CPU."""

    lo: int
    hi: int
    kind: str
    reason: str = ""

    def to_dict(self) -> dict:
        """JSON-ready ``{"lo", "hi", "kind", "reason"}``."""
        return {"lo": self.lo, "hi": self.hi, "kind": self.kind, "reason": self.reason}


def _order(model: onnx.ModelProto, replicated: set | None = None) -> list[int]:
    """The indices of the nodes the ranges cut: all but the replicated ones (constants and the shape
    and scalar computations on them, :func:`onnxwrapper.repair.replicated_nodes`), which every range
    reading them gets its own copy of. A scalar or shape value crossing from one compiled QNN part to
    another fails: ORT constant-folds a range made only of such nodes into an initializer, and the next
    part's ``EPContext`` node then reads an initializer where its QNN graph has an input (measured on
    silero-vad's op15 model: "The count of graph inputs should be at least the count of tensor_wrapper")."""
    replicated = replicated_nodes(model) if replicated is None else replicated
    return [i for i in range(len(model.graph.node)) if i not in replicated]


def range_parts(model: onnx.ModelProto, ranges: Sequence[SplitRange]) -> list[ModelPart]:
    """The :class:`~onnxwrapper.repair.ModelPart` of each range (stage = its position), with the
    tensors it reads from graph inputs or earlier ranges, those later ranges or the graph outputs
    need, and the replicated nodes it reads as its copies (``ModelPart.copies``)."""
    graph = model.graph
    replicated = replicated_nodes(model)
    order = _order(model, replicated)
    constants = {o for i in replicated for o in graph.node[i].output if o}
    inits = {t.name for t in graph.initializer} - {i.name for i in graph.input}
    part_of = {order[k]: index for index, r in enumerate(ranges) for k in range(r.lo, r.hi)}
    readers: dict[str, set] = {}
    for i, index in part_of.items():
        for t in read_names(graph.node[i]):
            readers.setdefault(t, set()).add(index)
    outputs = {o.name for o in graph.output}
    parts = []
    for index, r in enumerate(ranges):
        members = [order[k] for k in range(r.lo, r.hi)]
        produced = {o for i in members for o in graph.node[i].output if o}
        # each range gets its own copy of the replicated nodes it reads (they are in no range); what
        # those copies read from the graph inputs (a scalar, an input's shape) is the range's input too
        copies = replica_copies(graph, replicated, [t for i in members for t in read_names(graph.node[i])])
        inputs: list[str] = []
        for i in copies + members:
            for t in read_names(graph.node[i]):
                if t not in produced and t not in inits and t not in constants and t not in inputs:
                    inputs.append(t)
        outs = [o for i in members for o in graph.node[i].output if o and (o in outputs or readers.get(o, set()) - {index})]
        parts.append(ModelPart(r.kind, index, tuple(members), tuple(inputs), tuple(outs), tuple(copies)))
    return parts


class GraphSplit:
    """Compile a static model as NPU ranges (+ CPU ranges for what fails alone); see the module docstring.

    Args:
        setup: the session's registered ``QnnSetup``. model_key: the model's cache identity.
        strict: no CPU range allowed (``on_cpu`` is called and must raise).
        on_cpu: ``on_cpu(nodes, reason)`` called in strict mode for the nodes of a range about to go
            to the CPU (it raises the typed error); ``None`` outside strict mode.
    """

    def __init__(self, setup, model_key: str, *, strict: bool = False,
                 on_cpu: Callable[[list, str], None] | None = None) -> None:
        self.setup, self.model_key, self.strict, self.on_cpu = setup, model_key, strict, on_cpu
        self.compiles = 0

    def _key(self, shapes, extra) -> str:
        return make_key({"format": SPLIT_FORMAT, "model": self.model_key, **extra,
                         "shapes": {k: list(v) for k, v in sorted((shapes or {}).items())}})

    def _compile(self, proto, types, r: SplitRange, shapes, note: str) -> Compiled | str:
        """The range compiled, or the reason it cannot run on the NPU."""
        part = range_parts(proto, [SplitRange(0, r.lo, "npu"), r, SplitRange(r.hi, len(_order(proto)), "npu")])[1]
        pm = part_model(proto, part, types)
        data = pm.SerializeToString()
        setup = self.setup.with_source(ModelSource(None, data))
        store = CacheStore(setup, pm, self._key(shapes, {"range": [r.lo, r.hi]}), rung="graph split")
        self.compiles += 1
        try:
            compiled = EpContextFromOnnx(store)(data, pm, None, f"{note} nodes {r.lo + 1}-{r.hi}")
            off = len(compiled.report.offloaded_nodes)
            if self.strict and off:  # strict: a part is only good when all of it runs on the NPU
                return f"the QNN EP leaves {off} of its nodes on the CPU"
            return compiled
        except PartitionError:
            return _NONE_TAKEN
        except Exception as exc:  # noqa: BLE001 - a failure the ladder handles: bisect, or the CPU
            if not recoverable(exc):
                raise
            name = getattr(exc, "error_name", None)
            return f"{name} {getattr(exc, 'error_code', None) or ''}".strip() if name else str(exc)[:200]

    def _solve(self, proto, types, lo: int, hi: int, shapes, note: str, reason: str, done: dict) -> list[SplitRange]:
        """The ranges of ``order[lo:hi]``, which failed whole with ``reason``: its halves, compiled or
        bisected again; a single node that fails goes to the CPU."""
        if hi - lo == 1:
            return [self._cpu(proto, SplitRange(lo, hi, "cpu", reason))]
        mid = (lo + hi) // 2
        out: list[SplitRange] = []
        for a, b in ((lo, mid), (mid, hi)):
            if self.compiles >= MAX_COMPILES:
                out.append(self._cpu(proto, SplitRange(a, b, "cpu", f"{reason}; not split further: {MAX_COMPILES} "
                                                                    f"compiles tried")))
                continue
            result = self._compile(proto, types, SplitRange(a, b, "npu"), shapes, note)
            if isinstance(result, Compiled):
                done[(a, b)] = result
                out.append(SplitRange(a, b, "npu"))
            elif result == _NONE_TAKEN:
                out.append(self._cpu(proto, SplitRange(a, b, "cpu", result)))
            else:
                out += self._solve(proto, types, a, b, shapes, note, result, done)
        return out

    def _cpu(self, proto, r: SplitRange) -> SplitRange:
        if self.strict and self.on_cpu is not None:
            order = _order(proto)
            nodes = [proto.graph.node[order[k]] for k in range(r.lo, r.hi)]
            self.on_cpu(nodes, r.reason)
        return r

    def __call__(self, proto, shapes, note: str, reason: str,
                 plan: Sequence[SplitRange] | None = None) -> tuple[Compiled, list[SplitRange]]:
        """Split, compile and assemble ``proto`` (static shapes); ``plan``: the ranges of an earlier
        split to compile again (cache hits) instead of bisecting; ``reason``: why the whole failed.

        Returns:
            ``(Compiled of the assembled EPContext model, ranges)``.

        Raises:
            What ``on_cpu`` raises (strict mode); ORT's and the pipeline's non-recoverable errors.
        """
        start = time.perf_counter()
        proto = self_contained(proto, self.setup.source.directory)
        total = len(_order(proto))
        all_parts = range_parts(proto, [SplitRange(k, k + 1, "npu") for k in range(total)])
        types = boundary_types(proto, all_parts)
        done: dict = {}
        if plan is None:
            ranges = self._solve(proto, types, 0, total, shapes, note, reason, done)
        else:
            ranges = []
            for r in plan:
                result = self._compile(proto, types, r, shapes, note) if r.kind == "npu" else r.reason
                if isinstance(result, Compiled):
                    done[(r.lo, r.hi)] = result
                    ranges.append(r)
                else:
                    ranges.append(self._cpu(proto, SplitRange(r.lo, r.hi, "cpu", result)))
        ranges = _merge_cpu(ranges)
        parts = range_parts(proto, ranges)
        compiled = {p.stage: done[(r.lo, r.hi)] for p, r in zip(parts, ranges) if r.kind == "npu"}
        key = self._key(shapes, {"ranges": [r.to_dict() for r in ranges],
                                 "parts": {str(k): c.key for k, c in sorted(compiled.items())}})
        reports = {k: c.report for k, c in compiled.items()}

        def build(directory: str) -> dict:
            bins = write_stitched(directory, CTX_NAME, proto, parts, {k: c.ctx_path for k, c in compiled.items()},
                                  types, lambda stage, n: f"part{stage}_{n}_qnn.bin")
            _keep_part_types(os.path.join(directory, CTX_NAME), [c.ctx_path for c in compiled.values()])
            report = _with_reasons(merge_reports(proto, parts, reports, source="compile", note=note), proto, parts,
                                   ranges)
            return {"ctx": CTX_NAME, "bin": bins[0] if bins else None, "bins": bins, "partition": report.to_dict()}

        entry = ArtifactCache(self.setup.settings.cache_dir).get_or_create(key, build, complete_epcontext)
        reused = all(c.reused for c in compiled.values()) and entry.hit
        report = PartitionReport.from_dict(entry.meta["partition"])
        if reused:
            report = report.with_source("cache")
        seconds = time.perf_counter() - start
        return Compiled(entry.file(CTX_NAME), report, (), reused, 0.0 if reused else seconds, entry.key, entry.path,
                        dict(entry.meta)), ranges


def _keep_part_types(ctx_path: str, part_paths) -> None:
    """Give the assembled model the types its parts' EPContext models declare for their own inner
    tensors (between an ``EPContext`` node and a CPU node of the same part, e.g. ``conv4_token_1``):
    without them onnxruntime cannot infer an ``EPContext`` output's type and refuses the model
    (measured, onnxruntime 1.32: "Op (EPContext) output arg (…) type inference failed")."""
    model = onnx.load(ctx_path, load_external_data=False)
    typed = {vi.name for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)}
    produced = {o for n in model.graph.node for o in n.output}
    for path in part_paths:
        for vi in onnx.load(path, load_external_data=False).graph.value_info:
            if vi.name in produced and vi.name not in typed:
                model.graph.value_info.append(vi)
                typed.add(vi.name)
    with open(ctx_path + ".tmp", "wb") as f:
        f.write(model.SerializeToString())
    os.replace(ctx_path + ".tmp", ctx_path)


def _merge_cpu(ranges: list[SplitRange]) -> list[SplitRange]:
    """Adjacent CPU ranges joined (one CPU part instead of several)."""
    merged: list[SplitRange] = []
    for r in ranges:
        if merged and r.kind == "cpu" and merged[-1].kind == "cpu":
            last = merged.pop()
            reason = last.reason if last.reason == r.reason else f"{last.reason}; {r.reason}"
            r = SplitRange(last.lo, r.hi, "cpu", reason)
        merged.append(r)
    return merged


def _with_reasons(report: PartitionReport, proto, parts, ranges) -> PartitionReport:
    """``report`` with the CPU ranges' nodes carrying why they run there."""
    reasons = {}
    for part, r in zip(parts, ranges):
        if r.kind == "cpu":
            for i in part.nodes:
                reasons[proto.graph.node[i].name] = f"graph split: the QNN HTP could not compile it ({r.reason})"
    nodes = tuple(NodeAssignment(n.name, n.op_type, n.domain, n.ep, n.partition, reasons.get(n.name, n.reason))
                  if n.ep == CPU_EP else n for n in report.nodes)
    return PartitionReport(report.target_ep, nodes, report.partition_eps, report.source, report.note, report.patches)
