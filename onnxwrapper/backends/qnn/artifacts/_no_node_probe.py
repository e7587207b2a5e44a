"""Find out once whether the QNN EP takes any node of a model, cheaply, and remember it by model digest.

A classical-ML model (a tree ensemble: ``TreeEnsembleClassifier`` → ``Cast`` → ``ZipMap``, as
skl2onnx exports it) has nodes the QNN EP has a builder for (the ``Cast``) next to nodes it has none
for, so the static op table (:func:`~onnxwrapper.backends.qnn._op_support.predicted_no_node`) cannot
rule it out. Compiling the whole model to learn that the EP takes none of it cost a real tabular
app (a 194 MB ensemble handed over as bytes) a compile per input shape, "compiling … for the QNN
HTP" lines and a CPU session per shape: 48–57 s against 8.5–9.8 s plain.

:func:`probe_no_node` compiles only the *candidates* — the nodes of op types the EP has a builder
for — cut out as a model of their own (their other inputs become graph inputs typed by onnx's shape
inference, dynamic dims bound to 1), in the compile worker. The EP decides each node's support from
the node itself (its op, attributes and tensor types), so a candidate it refuses alone it refuses
in the whole model. When it takes none, the whole model gets the no-node verdict: one ORT CPU
session, dynamic shapes and all (:class:`~onnxwrapper.backends.qnn.session.QnnCpuSession`). The
verdict is kept in the compile cache under the model's digest and the compile options
(:func:`~onnxwrapper.backends.qnn.session.model_verdict`), so the next process opens the CPU session
before importing onnx or parsing the model.

The probe runs only where it is cheap and decisive: some node has no builder, at most
:data:`MAX_CANDIDATES` candidates, their initializers at most :data:`MAX_PROBE_BYTES`, and every
cut tensor typed. Otherwise the model is compiled as always, and a specialization the EP takes no
node of gives the same model-level verdict (:func:`~onnxwrapper.backends.qnn.session.remember_verdict`),
so other shapes are not tried.

A model that looks like classical ML (an ``ai.onnx.ml`` op in its bytes) is judged, on its first
open, by :func:`first_no_node`: the whole finding — the parse, the static op table, the probe —
happens in the compile worker (:func:`no_node_job`), which records the verdict, while the user's
process creates the model's ORT CPU session; the user's process then neither imports onnx nor parses
the model. Parsing a 20 MB ensemble in the user's process holds the GIL for 0.1–0.16 s, which ORT's
session creation in the other thread waits for (measured on the 2-core x86-64 host).
"""

from __future__ import annotations

import logging
import tempfile
from typing import Any, Mapping

from onnxwrapper.backends.qnn.artifacts._cache_hit import is_raw_binary, model_label
from onnxwrapper.backends.qnn.compile import compile_seconds, default_compile_memory_mb, metadata_model
from onnxwrapper.backends.qnn.model import is_epcontext_model, structure_key
from onnxwrapper.backends.qnn.platform import session_options_from_state, session_options_state
from onnxwrapper.backends.qnn.session import remember_verdict
from onnxwrapper.backends.qnn.settings import qnn_setup, request_ep_options
from onnxwrapper.errors import PartitionError
from onnxwrapper.kernel import ArtifactCache, ModelSource, NodeAssignment, PartitionReport, fix_free_dimensions

__all__ = ["MAX_CANDIDATES", "MAX_PROBE_BYTES", "first_no_node", "no_node_job", "probe_no_node"]

_log = logging.getLogger("onnxwrapper.qnn")
_CPU_EP = "CPUExecutionProvider"
#: the most candidate nodes a probe compiles (beyond it the model is compiled as always)
MAX_CANDIDATES = 16
#: the most initializer bytes a probe model carries
MAX_PROBE_BYTES = 16 * 2**20


def _candidates(proto) -> list:
    from onnxwrapper.backends.qnn._op_support import QNN_OP_TYPES  # imports onnx: only where a model is parsed

    return [n for n in proto.graph.node if n.domain in ("", "ai.onnx") and n.op_type in QNN_OP_TYPES
            and not (n.op_type == "Constant" and not n.input)]


def _typing_model(proto):
    """A light copy of ``proto`` for typing its tensors: dynamic input dims bound to 1, attributes that
    hold data (more than :data:`_DATA_ELEMENTS` values: a tree ensemble's node tables) dropped, large
    initializers declared as typed inputs instead of copied. onnx's shape inference types a 20 MB tree
    ensemble's tensors in milliseconds this way, instead of 0.3 s per pass over the whole model."""
    import onnx

    light = onnx.ModelProto()
    light.ir_version = proto.ir_version
    light.opset_import.extend(proto.opset_import)
    graph = light.graph
    for value in proto.graph.input:
        copy = graph.input.add()
        copy.CopyFrom(value)
        if copy.type.HasField("tensor_type"):
            for dim in copy.type.tensor_type.shape.dim:
                if not (dim.HasField("dim_value") and dim.dim_value > 0):
                    dim.Clear()
                    dim.dim_value = 1
    for init in proto.graph.initializer:
        if len(init.raw_data) + 4 * (len(init.float_data) + len(init.int64_data) + len(init.int32_data)) <= 4096:
            graph.initializer.add().CopyFrom(init)
        else:
            graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    for node in proto.graph.node:
        copy = graph.node.add()
        copy.op_type, copy.domain, copy.name = node.op_type, node.domain, node.name
        copy.input.extend(node.input)
        copy.output.extend(node.output)
        for attr in node.attribute:
            size = len(attr.floats) + len(attr.ints) + len(attr.strings) + len(attr.t.raw_data) // 4
            if size <= _DATA_ELEMENTS:
                copy.attribute.add().CopyFrom(attr)
    graph.output.extend(proto.graph.output)
    return light


#: attributes with more values than this hold data, not what decides a tensor's type or shape
_DATA_ELEMENTS = 4096


def _probe_model(proto, candidates):
    """The candidates as a model of their own, or ``None`` when a cut tensor cannot be typed."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(_typing_model(proto), strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - a model onnx cannot infer is compiled as always
        return None
    typed = {v.name: v for v in list(inferred.graph.input) + list(inferred.graph.value_info)
             + list(inferred.graph.output)}
    inits = {i.name: i for i in proto.graph.initializer}
    produced = {out for n in candidates for out in n.output}
    consumed_elsewhere = {i for n in proto.graph.node if n not in candidates for i in n.input}
    graph_outputs = {o.name for o in proto.graph.output}
    inputs, used_inits, seen = [], [], set()
    for node in candidates:
        for name in node.input:
            if not name or name in produced or name in seen:
                continue
            seen.add(name)
            if name in inits:
                used_inits.append(inits[name])
            elif name in typed and _static(typed[name]):
                inputs.append(typed[name])
            else:
                return None
    outputs = [typed[o] if o in typed else onnx.helper.make_empty_tensor_value_info(o)
               for n in candidates for o in n.output if o and (o in consumed_elsewhere or o in graph_outputs)]
    if not outputs or sum(len(i.raw_data) for i in used_inits) > MAX_PROBE_BYTES:
        return None
    graph = onnx.helper.make_graph(list(candidates), "qnn_probe", inputs, outputs, used_inits)
    return onnx.helper.make_model(graph, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)


def _static(value) -> bool:
    tensor = value.type.tensor_type if value.type.HasField("tensor_type") else None
    return (tensor is not None and tensor.elem_type != 0 and tensor.HasField("shape")
            and all(d.HasField("dim_value") and d.dim_value > 0 for d in tensor.shape.dim))


def probe_no_node(setup, proto, run=None) -> PartitionReport | None:
    """The no-node partition of ``proto`` (every node on ORT's CPU EP, source ``"predicted"``) when the
    QNN EP takes none of its candidates compiled alone (module docstring), else ``None`` (it takes
    some, or the probe does not apply or fails: compile as always).

    Args:
        setup: the session's registered ``QnnSetup``. proto: the model (``onnx.ModelProto``) with the
            user's free-dimension overrides applied. run: what runs the probe's ``CompileRequest``:
            the process's compile pool (default), or ``execute`` inside the compile worker itself."""
    candidates = _candidates(proto)
    nodes = [n for n in proto.graph.node if not (n.op_type == "Constant" and not n.input)]
    if not candidates or len(candidates) == len(nodes) or len(candidates) > MAX_CANDIDATES:
        return None
    model = _probe_model(proto, candidates)
    if model is None:
        return None
    try:
        with tempfile.TemporaryDirectory(prefix="onnxwrapper-probe-") as folder:
            (run or _pool_run)(_probe_request(setup, proto, model.SerializeToString(), folder))
        return None  # the EP took something
    except PartitionError as exc:
        if exc.report is None or exc.report.target_nodes:
            return None
    except Exception as exc:  # noqa: BLE001 - the probe is a shortcut; the normal path decides otherwise
        _log.debug("onnxwrapper qnn: no-node probe of %s failed (%s: %s)", setup.label, type(exc).__name__, exc)
        return None
    reason = "the QNN EP took none of the nodes it has an op builder for, compiled alone"
    assigned = tuple(NodeAssignment(n.name, n.op_type, n.domain, _CPU_EP, 0,
                                    reason if n in candidates else f"Operators of type `{n.op_type}` are not "
                                                                   f"supported by QNN EP.") for n in nodes)
    _log.info("onnxwrapper qnn: %s: the QNN EP takes none of its %d node(s) (%s); one ORT CPU session runs it",
              setup.label, len(nodes), reason)
    return PartitionReport("QNNExecutionProvider", assigned, (_CPU_EP,), "predicted", setup.label)


def _pool_run(request):
    from onnxwrapper.backends.qnn.workers import default_pool  # the worker layer: only when a probe runs

    return default_pool().run(request)


def _probe_request(setup, proto, model: bytes, folder: str):
    """The probe model's compile, with the session's options, into ``folder``."""
    from onnxwrapper.backends.qnn.workers import CompileRequest

    settings = setup.settings
    return CompileRequest(model, folder, dict(settings.ep_options), session_options_state(setup.user_so),
                          metadata_model(proto).SerializeToString(), setup.source.directory,
                          kwargs=dict(setup.kwargs), note=f"{setup.label} (probe)", label=setup.label,
                          budget_seconds=compile_seconds(settings.compile_timeout),
                          budget_mb=settings.compile_memory_mb or default_compile_memory_mb())


def no_node_job(config: Mapping[str, Any], raw_ep_options: Mapping[str, Any], model: str | bytes,
                so_state: Mapping[str, Any] | None, label: str, real_npu: bool) -> bool:
    """In the compile worker: parse ``model`` (a path or the model's bytes), decide whether the QNN EP
    takes none of its nodes (the static op table, else :func:`probe_no_node` compiled right here) and,
    when it takes none, remember the verdict in the compile cache
    (:func:`~onnxwrapper.backends.qnn.session.remember_verdict`) under the key the user's process
    looks up. Returns whether the verdict was recorded (``False``: the EP takes some node, or the
    probe does not apply)."""
    from onnxwrapper.backends.qnn._op_support import predicted_no_node
    from onnxwrapper.backends.qnn.workers import execute

    source = ModelSource.from_arg(model)
    proto = source.load_proto()
    if is_epcontext_model(proto):
        return False
    user_so = session_options_from_state(so_state) if so_state is not None else None
    setup = qnn_setup(config, raw_ep_options, source, user_so=user_so, kwargs={}, label=label,
                      real_npu=real_npu).register()
    fixed = fix_free_dimensions(proto, setup.user_so)
    report = predicted_no_node(fixed, label) or probe_no_node(setup, fixed, run=execute)
    if report is None:
        return False
    remember_verdict(ArtifactCache(setup.settings.cache_dir), structure_key(source, setup.user_so),
                     setup.settings.compile_options(), report)
    return True


def first_no_node(config: Mapping[str, Any], request, availability, source, user_so) -> bool:
    """Run :func:`no_node_job` on the process's compile pool for a model that looks like classical ML
    (module docstring). Returns whether the QNN EP takes none of the model's nodes and the verdict is
    in the compile cache now (then :func:`~onnxwrapper.backends.qnn.known_no_node` opens the CPU
    session); never raises (``False``: the full open path decides and reports, as without it)."""
    if config.get("repairs") is not None or is_raw_binary(source):
        return False
    from onnxwrapper.backends.qnn.artifacts._first_compile import run_job, writable

    try:
        settings = qnn_setup(config, request_ep_options(request), source, user_so=user_so, kwargs={},
                             label=model_label(source), real_npu=availability.real_npu).settings
        if not writable(ArtifactCache(settings.cache_dir).root):
            return False  # nowhere to record the verdict: the full path finds it in this process
        return bool(run_job(no_node_job, settings, config, request, availability, source, user_so,
                            compile_seconds(settings.compile_timeout)))
    except Exception as exc:  # noqa: BLE001 - a shortcut only; the full path meets any real problem
        _log.debug("onnxwrapper qnn: no-node verdict in the worker not used (%s: %s)", type(exc).__name__, exc)
        return False
