"""One EPContext model from NPU, CPU, NPU … parts: how a recipe's CPU subgraphs run behind one session.

The model (already rewritten by the recipe) is split at its CPU nodes
(:func:`onnxwrapper.repair.split_stages`); each NPU part is compiled by the normal QNN pipeline to
its own EPContext model and context binary (cached like any compile); then the parts are assembled
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
import tempfile
import time
from typing import Mapping

import onnx

from onnxwrapper.backends.qnn._compile import CTX_NAME
from onnxwrapper.backends.qnn._pipeline import CacheStore, Compiled, EpContextFromOnnx
from onnxwrapper.errors import ArtifactError, BackendOptionError, PartitionError
from onnxwrapper.kernel import (ArtifactCache, ModelSource, NodeAssignment, PartitionReport, dynamic_inputs, make_key,
                                specialize)
from onnxwrapper.patches import name_unnamed_nodes
from onnxwrapper.repair import assemble, boundary_types, part_model, split_stages

__all__ = ["CPU_REASON", "StitchedEpContext", "inlined_cpu_nodes", "merge_reports", "write_stitched", "compile_repaired"]

EP = "QNNExecutionProvider"
CPU_EP = "CPUExecutionProvider"
CPU_REASON = "repair recipe: runs on the CPU (the QNN result of this subgraph failed verification; see the recipe)"
_EMPTY_REASON = "repair recipe: the QNN EP took no node of this part, so it runs on the CPU"
#: part of the cache keys of parts and assembled models; bump when what is built changes
STITCH_FORMAT = "qnn-stitched-v2"


def merge_reports(proto: onnx.ModelProto, parts, reports: Mapping[int, PartitionReport], *, source: str,
                  note: str) -> PartitionReport:
    """The partition of the assembled model: NPU parts' nodes as their compiles assigned them, CPU
    parts' nodes on the CPU EP with the recipe as the reason, one partition index per ORT subgraph."""
    nodes, eps, patches = [], [], []
    for part in parts:
        if part.stage in reports:
            rep = reports[part.stage]
            base = len(eps)
            nodes += [dataclasses.replace(n, partition=n.partition + base) for n in rep.nodes]
            eps += list(rep.partition_eps)
            patches += [dict(p) for p in rep.patches]
        else:
            reason = CPU_REASON if part.kind == "cpu" else _EMPTY_REASON
            for i in part.nodes:
                n = proto.graph.node[i]
                nodes.append(NodeAssignment(n.name, n.op_type, n.domain, CPU_EP, len(eps), reason))
            eps.append(CPU_EP)
    return PartitionReport(EP, tuple(nodes), tuple(eps), source, note, tuple(patches))


def write_stitched(directory: str, ctx_name: str, proto: onnx.ModelProto, parts, ctx_paths: Mapping[int, str],
                   types: dict, bin_name) -> list:
    """Write the assembled EPContext model ``directory/ctx_name`` and copy each NPU part's context
    binaries next to it (``bin_name(stage, n)`` names the n-th binary); returns the binary names.

    Raises:
        ArtifactError: a part's context binary is missing.
    """
    built, bins, copied = {}, [], {}
    for part in parts:
        if part.stage not in ctx_paths:
            continue
        ctx_path = ctx_paths[part.stage]
        ctx = onnx.load(ctx_path, load_external_data=False)
        for node in ctx.graph.node:
            embedded = any(a.name == "embed_mode" and a.i == 1 for a in node.attribute)
            for a in node.attribute:
                if node.op_type != "EPContext" or a.name != "ep_cache_context" or embedded:
                    continue
                src = os.path.join(os.path.dirname(ctx_path), a.s.decode())
                if src not in copied:
                    if not os.path.isfile(src):
                        raise ArtifactError(f"The context binary {src} of a compiled part is missing.", path=src)
                    copied[src] = bin_name(part.stage, len(bins))
                    bins.append(copied[src])
                    shutil.copyfile(src, os.path.join(directory, copied[src]))
                a.s = copied[src].encode()
        built[part.stage] = ctx
    stitched = assemble(proto, parts, built, types)
    tmp = os.path.join(directory, ctx_name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(stitched.SerializeToString())
    os.replace(tmp, os.path.join(directory, ctx_name))
    return bins


def _self_contained(proto: onnx.ModelProto, directory: str | None) -> onnx.ModelProto:
    """``proto`` with tensors stored as external data loaded into it (parts are compiled from bytes)."""
    from onnx.external_data_helper import _get_all_tensors, load_external_data_for_model, uses_external_data

    if directory and any(uses_external_data(t) for t in _get_all_tensors(proto)):
        proto = onnx.ModelProto.FromString(proto.SerializeToString())
        load_external_data_for_model(proto, directory)
    return proto


def _split(proto, cpu_nodes):
    parts = split_stages(proto, cpu_nodes)
    return parts, boundary_types(proto, parts)


def inlined_cpu_nodes(spec: onnx.ModelProto, original: onnx.ModelProto, cpu_nodes) -> tuple:
    """The recipe's CPU nodes in ``spec``, a specialization of ``original`` whose ``If`` nodes were
    inlined (:func:`onnxwrapper.kernel.fold_ifs`): a CPU node still in ``spec`` stays; a CPU ``If``
    that was inlined becomes the nodes of its taken branch (the ``Identity`` nodes named
    ``<output>__if_inlined`` and the new nodes they read from, up to the tensors that exist in
    ``original``). ``spec``'s unnamed nodes must have been named.
    """
    names = {n.name for n in spec.graph.node}
    old_names = {n.name for n in original.graph.node}
    old_tensors = {o for n in original.graph.node for o in n.output} | {i.name for i in original.graph.input}
    ifs = {n.name: n for n in original.graph.node if n.op_type == "If"}
    producer = {o: n for n in spec.graph.node for o in n.output if o}
    result = [n for n in cpu_nodes if n in names or n not in ifs]  # an unknown name: split_stages says so
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


class StitchedEpContext:
    """Compile step (called like ``EpContextFromOnnx``) of a session whose recipe has CPU subgraphs.

    Args:
        setup: the session's registered ``QnnSetup``. cpu_nodes: the recipe's CPU node names.
        model_key: the repaired model's cache identity (content hash + recipe digest).
        original: the repaired model before specialization (to find the nodes of an inlined CPU
            ``If``: :func:`inlined_cpu_nodes`); ``None``: names are taken as they are.
    """

    def __init__(self, setup, cpu_nodes, model_key: str, original: onnx.ModelProto | None = None) -> None:
        self.setup, self.cpu_nodes, self.model_key, self.original = setup, tuple(cpu_nodes), model_key, original

    def __call__(self, model_input, proto, shapes=None, note: str = "", values=None) -> Compiled:
        """Split ``proto`` (static shapes), compile its NPU parts, assemble them in a cache entry.

        Args:
            values: bound control-input values when ``proto`` is a specialization whose ``If`` nodes
                were inlined (they enter the cache keys; a CPU ``If`` becomes its taken branch's nodes).

        Raises:
            ValueError: a part boundary has no known type. The pipeline's errors for a part.
        """
        start = time.perf_counter()
        proto = _self_contained(proto, self.setup.source.directory)
        cpu_nodes = self.cpu_nodes
        if values or any(n.op_type == "If" for n in proto.graph.node) or self.original is not None:
            proto = onnx.ModelProto.FromString(proto.SerializeToString())
            name_unnamed_nodes(proto)
            cpu_nodes = inlined_cpu_nodes(proto, self.original if self.original is not None else proto,
                                          self.cpu_nodes)
        parts, types = _split(proto, cpu_nodes)
        bound = {k: v for k, v in sorted((values or {}).items())}
        compiled: dict[int, Compiled] = {}
        for part in parts:
            if part.kind != "npu":
                continue
            pm = part_model(proto, part, types)
            key = make_key({"format": STITCH_FORMAT, "part": part.stage, "model": self.model_key,
                            "cpu": list(cpu_nodes), "values": bound,
                            "shapes": {k: list(v) for k, v in sorted((shapes or {}).items())}})
            data = pm.SerializeToString()
            # compiled from bytes without a model folder: onnxruntime then names the QNN partitions by
            # a hash of the part's own tensor names, so the parts' EPContext nodes get distinct names
            # (with the folder they all hash to the same name and cannot share one model; measured)
            setup = self.setup.with_source(ModelSource(None, data))
            try:
                compiled[part.stage] = EpContextFromOnnx(CacheStore(setup, pm, key))(
                    data, pm, None, f"{note} part {part.stage + 1}/{len(parts)}")
            except PartitionError:
                continue  # the QNN EP takes none of its nodes: it runs on the CPU
        reports = {k: c.report for k, c in compiled.items()}
        if not compiled:
            # no NPU part: an assembled model without EPContext nodes would be compiled by the QNN EP
            # as a whole (measured: a recipe putting a one-node model's MatMul on the CPU still ran it
            # on the HTP); the caller runs the model on ORT's CPU EP instead
            report = merge_reports(proto, parts, {}, source="compile", note=note)
            raise PartitionError(f"The repair recipe runs every node of {note or 'the model'} on the CPU.",
                                 backend="qnn", cpu_nodes=report.cpu_nodes, report=report)
        key = make_key({"format": STITCH_FORMAT, "stitched": self.model_key, "cpu": list(cpu_nodes),
                        "values": bound, "parts": {str(k): c.key for k, c in sorted(compiled.items())},
                        "shapes": {k: list(v) for k, v in sorted((shapes or {}).items())}})
        reused = all(c.reused for c in compiled.values())

        def build(directory: str) -> dict:
            bins = write_stitched(directory, CTX_NAME, proto, parts, {k: c.ctx_path for k, c in compiled.items()},
                                  types, lambda stage, n: f"part{stage}_{n}_qnn.bin")
            report = merge_reports(proto, parts, reports, source="compile", note=note)
            return {"ctx": CTX_NAME, "bin": bins[0] if bins else None, "bins": bins, "partition": report.to_dict()}

        entry = ArtifactCache(self.setup.settings.cache_dir).get_or_create(key, build)
        report = PartitionReport.from_dict(entry.meta["partition"])
        if entry.hit and reused:
            report = report.with_source("cache")
        seconds = time.perf_counter() - start
        return Compiled(entry.file(CTX_NAME), report, (), entry.hit and reused, 0.0 if reused else seconds,
                        entry.key, entry.path, dict(entry.meta))


def compile_repaired(compile_model, model, output_path, backend_options, input_shapes, *, sess_options,
                     overwrite: bool, dlc_dir, source_model=None):
    """``compile_model`` with the ``repairs`` option: the recipe baked into the written EPContext model.

    Without CPU subgraphs the rewritten model is compiled as usual; with them, each NPU part is
    compiled and the parts are assembled into ``output_path`` with one context binary per part
    (``<stem>_qnn.bin`` for the first NPU part, ``<stem>_part<k>_qnn.bin`` for part ``k`` after it).
    ``CompileResult.patches`` lists the rewrites. ``source_model``: the model file the written
    artifact stands for (its provenance record names it; see ``compile_model``).

    Raises:
        RecipeMismatchError, RecipeError: as for sessions. BackendOptionError: dynamic dims left, or
        ``dlc_dir`` with CPU subgraphs. Everything ``compile_model`` raises.
    """
    from onnxwrapper.backends.qnn._repair import convert_repairs, prepare_repairs

    options = dict(backend_options or {})
    option = convert_repairs(options.pop("repairs"))
    source = (ModelSource(None, model.SerializeToString()) if isinstance(model, onnx.ModelProto)
              else ModelSource.from_arg(model))
    plan = prepare_repairs({"repairs": option, "strict": options.get("strict")}, source, source.load_proto())
    if plan is None:
        return compile_model(model, output_path, options, input_shapes, sess_options=sess_options,
                             overwrite=overwrite, dlc_dir=dlc_dir, source_model=source_model)
    if plan.repaired.precision:
        options["precision"] = plan.repaired.precision
    if not plan.cpu_nodes:
        result = compile_model(plan.proto, output_path, options, input_shapes, sess_options=sess_options,
                               overwrite=overwrite, dlc_dir=dlc_dir, source_model=source_model)
        patches = tuple(plan.records) + tuple(result.patches)
        return dataclasses.replace(result, patches=patches, partition=result.partition.with_patches(patches))
    if dlc_dir is not None:
        raise BackendOptionError("DLC export of a model split by a repair recipe's CPU subgraphs is not supported; "
                                 "export without --dlc, or use a recipe without CPU subgraphs.", backend="qnn")
    shapes = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    proto = specialize(plan.proto, shapes) if shapes else plan.proto
    if dynamic_inputs(proto):
        raise BackendOptionError(f"Inputs {sorted(dynamic_inputs(proto))} have dynamic dims: pass their static shapes "
                                 f"to compile a model split by a repair recipe.", backend="qnn")
    start = time.perf_counter()
    output_path = os.path.abspath(os.fspath(output_path))
    folder, ctx_name = os.path.split(output_path)
    stem = os.path.splitext(ctx_name)[0]
    parts, types = _split(proto, plan.cpu_nodes)
    results = {}
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".onnxwrapper-compile-") as tmp:
        for part in parts:
            if part.kind != "npu":
                continue
            try:
                results[part.stage] = compile_model(part_model(proto, part, types),
                                                    os.path.join(tmp, f"part{part.stage}_ctx.onnx"), options,
                                                    sess_options=sess_options, overwrite=True)
            except PartitionError:
                continue
        def bin_name(stage: int, n: int) -> str:
            name = f"{stem}_qnn.bin" if n == 0 else f"{stem}_part{stage}_qnn.bin"
            if os.path.exists(os.path.join(folder, name)) and not overwrite:
                raise ArtifactError(f"{os.path.join(folder, name)} exists already; pass overwrite=True to replace it.",
                                    path=os.path.join(folder, name))
            return name

        if os.path.exists(output_path) and not overwrite:
            raise ArtifactError(f"{output_path} exists already; pass overwrite=True to replace it.", path=output_path)
        bins = write_stitched(folder, ctx_name, proto, parts, {k: r.ctx_path for k, r in results.items()}, types,
                              bin_name)
    report = merge_reports(proto, parts, {k: r.partition for k, r in results.items()}, source="compile",
                           note=f"repaired: {plan.describe()}").with_patches(plan.records)
    first = next(iter(results.values()), None)
    if first is None:
        raise PartitionError("The QNN execution provider took no node of any part of the repaired model.",
                             backend="qnn", cpu_nodes=report.cpu_nodes)
    bin_paths = [os.path.join(folder, b) for b in bins]
    return dataclasses.replace(first, ctx_path=output_path, bin_path=bin_paths[0] if bin_paths else None,
                               ctx_bytes=os.path.getsize(output_path),
                               bin_bytes=sum(os.path.getsize(p) for p in bin_paths), partition=report,
                               seconds=time.perf_counter() - start, input_shapes=shapes or None,
                               patches=tuple(plan.records), dlc_paths=(), dlc_seconds=0.0)
