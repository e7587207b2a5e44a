"""A raw QNN context binary as an EPContext ONNX model ORT's QNN EP can load (one graph of it).

* :func:`epcontext_model` — an EPContext ONNX model (``com.microsoft.EPContext``, embed mode 0,
  ``source="QNNExecutionProvider"``) that makes ORT's QNN EP run one graph of the binary, with
  the names, order and types of the ONNX model that describes it (or the binary's own).
* :func:`wrap_raw_binary` — that wrapper, cached in the artifact cache, for one graph.

The graphs and tensors come from :func:`~onnxwrapper.backends.qnn.binary._binary.read_binary_info`.
Quantized graph IO is not supported here (:class:`~onnxwrapper.errors.ArtifactError`).
"""

from __future__ import annotations

import hashlib
import os
import shutil

import onnx
from onnx import helper as h

from onnxwrapper.backends import _foreign_io as fio
from onnxwrapper.backends._foreign_io import sanitize_qnn_name
from onnxwrapper.backends.qnn.binary._binary import BinaryInfo, GraphInfo, read_binary_info
from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel import ArtifactCache, make_key

__all__ = ["epcontext_model", "wrap_raw_binary"]

_ONNX_TYPES = {"float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7, "bool_": 9,
               "float16": 10, "float64": 11, "uint32": 12, "uint64": 13}


def _copy_in(binary: str, folder: str) -> str:
    """Copy ``binary`` into ``folder`` (ORT only accepts a relative ep_cache_context without ``..``)
    and return its name there. A copy, not a link: the artifact cache never follows a symbolic link
    (it would take the entry for corrupt and rebuild it on every open), and a hard link would let a
    change of the user's file change the cached entry behind its checksums."""
    name = os.path.basename(binary)
    try:
        shutil.copyfile(binary, os.path.join(folder, name))
    except OSError as exc:
        raise ArtifactError(f"Cannot copy the context binary {binary} into the cache folder {folder}: {exc}",
                            path=binary) from exc
    return name


def epcontext_model(binary: str, graph: GraphInfo, folder: str, *, onnx_model=None, name_map=None,
                    build_id: str = "") -> str:
    """Write an EPContext model running ``graph`` of ``binary`` with ORT's QNN EP; return its path.

    The EPContext node lists the graph's tensors in QNN order (the QNN EP binds them by position;
    verified with onnxruntime-qnn 2.7.0), its ``name``/``partition_name`` is the QNN graph name and
    ``ep_cache_context`` is the binary, copied into ``folder`` (embed mode 0). With ``onnx_model``
    the model's inputs/outputs carry the ONNX names, order, element types and dims (matched with
    :func:`onnxwrapper.backends._foreign_io.plan_io`: exact, sanitized or ``name_map`` names);
    without it, the QNN names and types.

    Raises:
        ArtifactError: names/dims/types that do not match, or quantized IO (not supported here).
    """

    def natives(tensors):
        return [fio.NativeTensor(t.name, t.shape, fio.native_type(t.dtype, binary)) for t in tensors]

    if onnx_model is not None:
        ins, outs, _meta, unknown = fio.onnx_io(onnx_model)
    else:
        quantized = [t.name for t in graph.inputs + graph.outputs if t.dtype not in _ONNX_TYPES]
        if quantized:
            raise ArtifactError(f"Graph '{graph.name}' of {binary} has quantized IO {quantized}; give the ONNX model "
                                f"it was compiled from to describe it.", path=binary)
        ins, outs, unknown = fio.node_args_from_native(natives(graph.inputs)), \
            fio.node_args_from_native(natives(graph.outputs)), set()
    plans = [fio.plan_io(args, natives(tensors), direction=d, mode="native", name_map=name_map, where=binary,
                         unknown_shapes=unknown)
             for args, tensors, d in ((ins, graph.inputs, "input"), (outs, graph.outputs, "output"))]
    for plan in plans:
        odd = [p.onnx.name for p in plan.tensors if p.cast != "same" or p.native.type.quantized]
        if odd:
            raise ArtifactError(f"{plan.direction}s {odd} of graph '{graph.name}' in {binary} have compiled types the "
                                f"QNN EP cannot take from this ONNX interface (quantized or int64 stored as int32); "
                                f"use backend='qai' or recompile with --preserve_io.", path=binary)
    if len(plans[1].tensors) != plans[1].native_count:
        raise ArtifactError(f"Graph '{graph.name}' of {binary} has outputs the ONNX model does not declare.", path=binary)
    by_index = [sorted(plan.tensors, key=lambda p: p.index) for plan in plans]
    node = h.make_node("EPContext", [p.onnx.name for p in by_index[0]], [p.onnx.name for p in by_index[1]],
                       name=graph.name, domain="com.microsoft", main_context=1, embed_mode=0,
                       ep_cache_context=_copy_in(binary, folder), partition_name=graph.name,
                       source="QNNExecutionProvider", ep_sdk_version=build_id)

    def value_info(p):
        return h.make_tensor_value_info(p.onnx.name, onnx.helper.np_dtype_to_tensor_dtype(p.dtype), list(p.shape))

    g = h.make_graph([node], graph.name, [value_info(p) for p in plans[0].tensors],
                     [value_info(p) for p in plans[1].tensors])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)], ir_version=10,
                         producer_name="onnxwrapper")
    path = os.path.join(folder, os.path.splitext(os.path.basename(binary))[0] + "_ctx.onnx")
    onnx.save(model, path)
    return path


def _graph_for(info: BinaryInfo, model) -> GraphInfo:
    """The only graph, or the one whose input and output name sets are the ONNX model's
    (exactly or QNN-sanitized)."""
    if len(info.graphs) == 1:
        return info.graphs[0]

    inits = {i.name for i in model.graph.initializer}
    want = [{v.name for v in model.graph.input if v.name not in inits}, {v.name for v in model.graph.output}]
    for g in info.graphs:
        got = [{t.name for t in g.inputs}, {t.name for t in g.outputs}]
        if all(w == s or {sanitize_qnn_name(n) for n in w} == s for w, s in zip(want, got)):
            return g
    return info.graph(None)  # raises, listing the graphs


def wrap_raw_binary(binary: str, *, graph=None, onnx_model=None, cache_dir: str | None = None,
                    name_map=None) -> tuple[str, GraphInfo]:
    """The cached EPContext model running one graph of a raw context binary, and that graph.

    Args:
        binary: path of the ``.bin``.
        graph: graph name or index; default: the only graph, else the one whose IO names are
            ``onnx_model``'s (exactly or QNN-sanitized).
        onnx_model: ``onnx.ModelProto`` the binary was compiled from (names, order, types), or None.
        cache_dir: artifact cache root (default: the onnxwrapper cache).

    Raises:
        ArtifactError: unreadable binary, unknown/ambiguous graph, interface mismatch.
    """

    info = read_binary_info(binary)
    chosen = info.graph(graph) if graph is not None or onnx_model is None else _graph_for(info, onnx_model)
    stat = os.stat(binary)
    model_key = onnx_model.SerializeToString(deterministic=True) if onnx_model is not None else b""
    key = make_key({"kind": "raw-qnn-context-binary", "binary": os.path.abspath(binary), "size": stat.st_size,
                    "mtime_ns": stat.st_mtime_ns, "graph": chosen.name, "name_map": name_map or {},
                    "model": hashlib.sha256(model_key).hexdigest()})
    entry = ArtifactCache(cache_dir).get_or_create(
        key, lambda folder: {"ctx": os.path.basename(epcontext_model(binary, chosen, folder, onnx_model=onnx_model,
                                                                   name_map=name_map, build_id=info.build_id))})
    return entry.file(entry.meta["ctx"]), chosen
