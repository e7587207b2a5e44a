"""One EPContext model from NPU, CPU, NPU … parts: how a recipe's CPU subgraphs run behind one session.

The model (already rewritten by the recipe) is split at its CPU nodes
(:func:`onnxwrapper.repair.split_stages`); each NPU part is compiled by the normal QNN pipeline to
its own EPContext model and context binary, cached like any compile under its own content — the part
model's bytes, the QNN options, the session's configuration and the versions
(:func:`part_store`), never the recipe — so a part that two recipes (two ``aipc fix`` candidates,
a recipe and its edit, a repaired session and a later one) cut alike is compiled once, and its cache
hit is checked against the part's own provenance record; then the parts are assembled
(:func:`onnxwrapper.repair.assemble`) into one EPContext model: the ``EPContext`` nodes of every
NPU part, each pointing at its own context binary, and the CPU nodes as ordinary ONNX nodes.
One onnxruntime session with the QNN EP runs it — the QNN EP takes the ``EPContext`` nodes, the
CPU EP the rest, and onnxruntime hands the tensors across (measured, onnxruntime 1.32 +
onnxruntime-qnn 2.7.0: a stitched ``Mul`` (QNN) → ``Pow`` (CPU) → ``Add`` (QNN) model runs with the
graph assignment ``QNN: EPContext, QNN: EPContext, CPU: Pow``).

A part the QNN EP takes no node of runs on the CPU too. The partition report lists every node of
the original model: those of the NPU parts as their compiles assigned them, the CPU parts' nodes on
``CPUExecutionProvider`` with the reason "repair recipe".
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import Mapping

import onnx

from onnxwrapper.backends.qnn.compile import CTX_NAME, complete_epcontext, stamp
from onnxwrapper.backends.qnn.pipeline._pipeline import CacheStore, Compiled, EpContextFromOnnx, model_key
from onnxwrapper.backends.qnn.session import RECIPE_CPU_REASON as CPU_REASON
from onnxwrapper.errors import ArtifactError, PartitionError
from onnxwrapper.kernel import ArtifactCache, ModelSource, NodeAssignment, PartitionReport, make_key
from onnxwrapper.patches import name_unnamed_nodes
from onnxwrapper.repair import assemble, boundary_types, part_model, split_stages

__all__ = ["CPU_REASON", "PART_KEEPS_SHAPES", "StitchedEpContext", "copy_epcontext", "inlined_cpu_nodes",
           "merge_reports", "part_store", "plain_step", "self_contained", "split_parts", "write_stitched"]

EP = "QNNExecutionProvider"
CPU_EP = "CPUExecutionProvider"
_EMPTY_REASON = "repair recipe: the QNN EP took no node of this part, so it runs on the CPU"
_FAILED_REASON = "repair recipe: the QNN HTP could compile no piece of this part, so it runs on the CPU"
#: part of the cache keys of assembled models; bump when what is assembled changes (a part's key is
#: its content's, :func:`part_store`)
STITCH_FORMAT = "qnn-stitched-v4"
#: why the recovery ladder does not batch-split a part of a stitched model
PART_KEEPS_SHAPES = "a part of a stitched model keeps the model's shapes"


def merge_reports(proto: onnx.ModelProto, parts, reports: Mapping[int, PartitionReport], *, source: str,
                  note: str, failed: Mapping[int, PartitionReport] | None = None) -> PartitionReport:
    """The partition of the assembled model: NPU parts' nodes as their compiles assigned them, CPU
    parts' nodes on the CPU EP with the recipe as the reason, one partition index per ORT subgraph.

    ``failed``: the reports of NPU parts that compiled to nothing (every node on the CPU), with the
    recovery ladder's steps when it tried them. The recovery steps of the parts (``reports`` and
    ``failed``) become the merged report's, each with ``"part": "k/n"``.
    """
    nodes, eps, patches, recovery = [], [], [], []
    failed = failed or {}
    for part in parts:
        rep = reports.get(part.stage, failed.get(part.stage))
        if rep is not None:
            recovery += [dict(step, part=f"{part.stage + 1}/{len(parts)}") for step in rep.recovery]
        if part.stage in reports:
            base = len(eps)
            nodes += [dataclasses.replace(n, partition=n.partition + base) for n in rep.nodes]
            eps += list(rep.partition_eps)
            patches += [dict(p) for p in rep.patches]
        else:
            reason = CPU_REASON if part.kind == "cpu" else _EMPTY_REASON
            if rep is not None and rep.recovery:
                reason = f"{_FAILED_REASON} ({rep.recovery_summary()})"
            for i in part.nodes:
                n = proto.graph.node[i]
                nodes.append(NodeAssignment(n.name, n.op_type, n.domain, CPU_EP, len(eps), reason))
            eps.append(CPU_EP)
    return PartitionReport(EP, tuple(nodes), tuple(eps), source, note, tuple(patches), tuple(recovery))


def _relink(ctx: onnx.ModelProto, ctx_path: str, directory: str, name_for, copied: dict, bins: list) -> None:
    """Copy the context binaries the ``EPContext`` nodes of ``ctx`` (read from ``ctx_path``) reference
    into ``directory`` as ``name_for(n)`` (n: the binary's index in ``bins``) and point the nodes at
    the copies (in place); a binary already in ``copied`` is copied once."""
    for node in ctx.graph.node:
        embedded = any(a.name == "embed_mode" and a.i == 1 for a in node.attribute)
        for a in node.attribute:
            if node.op_type != "EPContext" or a.name != "ep_cache_context" or embedded:
                continue
            src = os.path.join(os.path.dirname(ctx_path), a.s.decode())
            if src not in copied:
                if not os.path.isfile(src):
                    raise ArtifactError(f"The context binary {src} of a compiled part is missing.", path=src)
                copied[src] = name_for(len(bins))
                bins.append(copied[src])
                shutil.copyfile(src, os.path.join(directory, copied[src]))
            a.s = copied[src].encode()


def _save(model: onnx.ModelProto, directory: str, ctx_name: str) -> None:
    tmp = os.path.join(directory, ctx_name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(model.SerializeToString())
    os.replace(tmp, os.path.join(directory, ctx_name))


def write_stitched(directory: str, ctx_name: str, proto: onnx.ModelProto, parts, ctx_paths: Mapping[int, str],
                   types: dict, bin_name) -> list:
    """Write the assembled EPContext model ``directory/ctx_name`` and copy each NPU part's context
    binaries next to it (``bin_name(stage, n)`` names the n-th binary); returns the binary names.

    Raises:
        ArtifactError: a part's context binary is missing.
    """
    built, bins, copied = {}, [], {}
    for part in parts:
        if part.stage in ctx_paths:
            ctx = onnx.load(ctx_paths[part.stage], load_external_data=False)
            _relink(ctx, ctx_paths[part.stage], directory, lambda n, stage=part.stage: bin_name(stage, n), copied,
                    bins)
            built[part.stage] = ctx
    _save(assemble(proto, parts, built, types), directory, ctx_name)
    return bins


def copy_epcontext(ctx_path: str, directory: str, ctx_name: str, bin_name, record=None) -> list:
    """Copy the EPContext model ``ctx_path`` (one context binary or several: a stitched model) into
    ``directory/ctx_name``, its binaries named ``bin_name(n)``, stamped with the provenance record
    ``record`` when given (:func:`~onnxwrapper.backends.qnn.compile.stamp`); returns the binary names.

    Raises:
        ArtifactError: a context binary is missing.
    """
    ctx = onnx.load(ctx_path, load_external_data=False)
    bins: list = []
    _relink(ctx, ctx_path, directory, bin_name, {}, bins)
    if record is not None:
        stamp(ctx, record, os.path.join(directory, bins[0]) if bins else None)
    _save(ctx, directory, ctx_name)
    return bins


def self_contained(proto: onnx.ModelProto, directory: str | None) -> onnx.ModelProto:
    """``proto`` with tensors stored as external data loaded into it (parts are compiled from bytes)."""
    from onnx.external_data_helper import _get_all_tensors, load_external_data_for_model, uses_external_data

    if directory and any(uses_external_data(t) for t in _get_all_tensors(proto)):
        proto = onnx.ModelProto.FromString(proto.SerializeToString())
        load_external_data_for_model(proto, directory)
    return proto


def part_store(setup, part: onnx.ModelProto) -> tuple[bytes, CacheStore]:
    """``(bytes, store)`` to compile one part model ``part`` (:func:`onnxwrapper.repair.part_model`) into
    the compile cache under the key of its own content, as any model: the part's bytes (and what the
    user's SessionOptions add, :func:`~onnxwrapper.backends.qnn.model.model_key`), the QNN options,
    the session configuration, the versions, the patches. Whichever recipe or specialization cut the
    part, the same bytes find the same entry, and the entry's provenance record names the part's
    content hash (a hit of another part's files is refused and rebuilt,
    :mod:`onnxwrapper.backends.qnn.compile._cache_provenance`). A part is a self-contained static
    model (external data loaded, shapes and control values bound), so its bytes are all it is.

    The part is compiled from bytes without a model folder: onnxruntime then names its QNN
    partitions by a hash of the part's own tensor names, so the parts of one assembled model get
    distinct ``EPContext`` node names (with a folder they all hash to the same name and cannot share
    one model; measured, onnxruntime 1.32 + onnxruntime-qnn 2.7.0).
    """
    data = part.SerializeToString()
    source = ModelSource(None, data)
    return data, CacheStore(setup.with_source(source), part, model_key(source, setup.user_so))


def split_parts(proto, cpu_nodes):
    """``(parts, boundary types)`` of ``proto`` split at ``cpu_nodes`` (:func:`onnxwrapper.repair.split_stages`)."""
    parts = split_stages(proto, cpu_nodes)
    return parts, boundary_types(proto, parts)


def inlined_cpu_nodes(spec: onnx.ModelProto, original: onnx.ModelProto, cpu_nodes) -> tuple:
    """The recipe's CPU nodes in ``spec``, a specialization of ``original`` whose ``If`` nodes were
    inlined (:func:`onnxwrapper.kernel.fold_ifs`): a CPU node still in ``spec`` stays; a CPU ``If``
    that was inlined becomes the nodes of its taken branch (the ``Identity`` nodes named
    ``<output>__if_inlined`` and the new nodes they read from, up to the tensors that exist in
    ``original``); a CPU node the specialization folded away (a constant of the bound control values)
    is dropped. ``spec``'s unnamed nodes must have been named.
    """
    names = {n.name for n in spec.graph.node}
    old_names = {n.name for n in original.graph.node}
    old_tensors = {o for n in original.graph.node for o in n.output} | {i.name for i in original.graph.input}
    ifs = {n.name: n for n in original.graph.node if n.op_type == "If"}
    producer = {o: n for n in spec.graph.node for o in n.output if o}
    # a name of ``original`` missing from ``spec`` and not an ``If``: folded by the specialization (it
    # computed a constant from the bound control values, e.g. ``Equal(sr, 16000)``): nothing to place;
    # a name ``original`` never had is kept, and split_stages says so
    result = [n for n in cpu_nodes if n in names or (n not in ifs and n not in old_names)]
    by_name = {n.name: n for n in spec.graph.node}
    for name in cpu_nodes:
        if name in names or name not in ifs:
            continue
        frontier = [producer[o].name for o in ifs[name].output
                    if o in producer and producer[o].name == f"{o}__if_inlined"]
        seen = set()
        while frontier:
            current = frontier.pop()
            if current in seen or current in old_names:
                continue
            seen.add(current)
            for t in by_name[current].input:
                if t and t not in old_tensors and t in producer:
                    frontier.append(producer[t].name)
        result += [n.name for n in spec.graph.node if n.name in seen]
    return tuple(dict.fromkeys(result))


def plain_step(store, *, batch_split: str | None = None) -> EpContextFromOnnx:
    """The compile step over ``store`` without recovery (the default ``step_for``; the session passes
    :func:`onnxwrapper.backends.qnn.recovery.recovering_step`)."""
    return EpContextFromOnnx(store)


class StitchedEpContext:
    """Compile step (called like ``EpContextFromOnnx``) of a session whose recipe has CPU subgraphs.

    Args:
        setup: the session's registered ``QnnSetup``. cpu_nodes: the recipe's CPU node names.
        model_key: the repaired model's cache identity (content hash + recipe digest).
        original: the repaired model before specialization (to find the nodes of an inlined CPU
            ``If``: :func:`inlined_cpu_nodes`); ``None``: names are taken as they are.
        step_for: ``step_for(store, batch_split=reason)`` → the compile step of one NPU part (the
            recovery ladder's, from the caller; a part must keep its shapes, so ``reason`` says why
            it is not batch-split). Default :func:`plain_step`.
    """

    def __init__(self, setup, cpu_nodes, model_key: str, original: onnx.ModelProto | None = None, *,
                 step_for=plain_step) -> None:
        self.setup, self.cpu_nodes, self.model_key, self.original = setup, tuple(cpu_nodes), model_key, original
        self.step_for = step_for

    def __call__(self, model_input, proto, shapes=None, note: str = "", values=None) -> Compiled:
        """Split ``proto`` (static shapes), compile its NPU parts, assemble them in a cache entry.

        Args:
            values: bound control-input values when ``proto`` is a specialization whose ``If`` nodes
                were inlined (they enter the cache keys; a CPU ``If`` becomes its taken branch's nodes).

        Raises:
            ValueError: a part boundary has no known type. The pipeline's errors for a part.
        """
        start = time.perf_counter()
        proto = self_contained(proto, self.setup.source.directory)
        cpu_nodes = self.cpu_nodes
        if values or any(n.op_type == "If" for n in proto.graph.node) or self.original is not None:
            proto = onnx.ModelProto.FromString(proto.SerializeToString())
            name_unnamed_nodes(proto)
            cpu_nodes = inlined_cpu_nodes(proto, self.original if self.original is not None else proto,
                                          self.cpu_nodes)
        parts, types = split_parts(proto, cpu_nodes)
        bound = {k: v for k, v in sorted((values or {}).items())}
        compiled: dict[int, Compiled] = {}
        failed: dict[int, PartitionReport] = {}
        for part in parts:
            if part.kind != "npu":
                continue
            pm = part_model(proto, part, types)
            data, store = part_store(self.setup, pm)  # keyed by the part's content, not the recipe
            step = self.step_for(store, batch_split=PART_KEEPS_SHAPES)
            try:
                compiled[part.stage] = step(data, pm, None, f"{note} part {part.stage + 1}/{len(parts)}")
            except PartitionError as exc:  # the QNN EP takes none of its nodes (or no piece compiles): CPU
                if exc.report is not None and exc.report.recovery:
                    failed[part.stage] = exc.report
        reports = {k: c.report for k, c in compiled.items()}
        if not compiled:
            # no NPU part: an assembled model without EPContext nodes would be compiled by the QNN EP
            # as a whole (measured: a recipe putting a one-node model's MatMul on the CPU still ran it
            # on the HTP); the caller runs the model on ORT's CPU EP instead
            report = merge_reports(proto, parts, {}, source="compile", note=note, failed=failed)
            raise PartitionError(f"The repair recipe runs every node of {note or 'the model'} on the CPU.",
                                 backend="qnn", cpu_nodes=report.cpu_nodes, report=report)
        key = make_key({"format": STITCH_FORMAT, "stitched": self.model_key, "cpu": list(cpu_nodes),
                        "values": bound, "parts": {str(k): c.key for k, c in sorted(compiled.items())},
                        "shapes": {k: list(v) for k, v in sorted((shapes or {}).items())}})
        reused = all(c.reused for c in compiled.values())

        def build(directory: str) -> dict:
            bins = write_stitched(directory, CTX_NAME, proto, parts, {k: c.ctx_path for k, c in compiled.items()},
                                  types, lambda stage, n: f"part{stage}_{n}_qnn.bin")
            report = merge_reports(proto, parts, reports, source="compile", note=note, failed=failed)
            return {"ctx": CTX_NAME, "bin": bins[0] if bins else None, "bins": bins, "partition": report.to_dict()}

        entry = ArtifactCache(self.setup.settings.cache_dir).get_or_create(key, build, complete_epcontext)
        report = PartitionReport.from_dict(entry.meta["partition"])
        if entry.hit and reused:
            report = report.with_source("cache")
        seconds = time.perf_counter() - start
        return Compiled(entry.file(CTX_NAME), report, (), entry.hit and reused, 0.0 if reused else seconds,
                        entry.key, entry.path, dict(entry.meta))
