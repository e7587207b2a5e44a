"""Folding of ``If`` nodes whose condition a static specialization decides (the rewrite half of
:mod:`onnxwrapper.kernel.model._control_flow`).

:func:`bind_inputs` turns graph inputs into initializers (the values of control scalars such as
silero-vad's ``sr``); :func:`fold_ifs` then inlines, round by round, every top-level ``If`` whose
condition does not depend on input *values* (:func:`~onnxwrapper.kernel.model._control_flow.value_taint`):

1. the conditions are evaluated by one onnxruntime CPU run (``ORT_DISABLE_ALL``, no graph
   rewrite) of the smallest sub-model that computes them (their cone), fed with a feed of the
   specialization's shapes (its values cannot change a condition that does not depend on them);
2. each ``If`` is replaced by the nodes and initializers of the taken branch, plus an
   ``Identity`` from each branch output to the ``If`` output (names that would collide with the
   outer graph are renamed inside the branch first);
3. nested ``If`` nodes that became top-level are folded in the next round;
4. nodes and initializers nothing uses any more are removed, as is the (now stale) top-level
   ``value_info``; ORT infers it again.

Measured (onnxruntime 1.32, CPU EP, ``ORT_ENABLE_ALL``): the folded silero-vad op16 model at 576
samples / 16 kHz gives bit-identical outputs to the original; its 7 ``If`` nodes are inlined in
about 0.1 s; the QNN EP then takes all of its nodes.
"""

from __future__ import annotations

import logging
from typing import Mapping

import numpy as np

from onnxwrapper.kernel.model._control_flow import outer_refs, subgraphs, value_taint

__all__ = ["bind_inputs", "fold_ifs"]

_log = logging.getLogger("onnxwrapper")


def bind_inputs(model, values: Mapping[str, np.ndarray]):
    """A copy of ``model`` where each input in ``values`` is an initializer holding that value.

    Args:
        model: ``onnx.ModelProto`` (not modified). values: ``{input name: array}``, dtype as declared.

    Returns:
        A new ``onnx.ModelProto`` without those graph inputs.
    """
    import onnx
    from onnx import numpy_helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    if not values:
        return copy
    kept = [v for v in copy.graph.input if v.name not in values]
    del copy.graph.input[:]
    copy.graph.input.extend(kept)
    existing = {i.name for i in copy.graph.initializer}
    for name, value in values.items():
        if name in existing:
            continue
        copy.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return copy


def _cone(graph, names: set[str]) -> tuple[list, set[str]]:
    """The nodes (graph order) that ``names`` depend on, and every name they read."""
    needed = set(names)
    nodes = []
    for node in reversed(graph.node):
        if needed & {o for o in node.output if o}:
            nodes.append(node)
            needed |= {i for i in node.input if i}
            for sub in subgraphs(node):
                needed |= outer_refs(sub)
    nodes.reverse()
    return nodes, needed


def _evaluate(model, conditions: list[str], feed: Mapping[str, np.ndarray], external_data_dir: str | None) -> dict:
    """``{condition name: bool}`` computed by onnxruntime (CPU EP) on the cone of ``conditions``."""
    import onnx
    from onnx import helper, numpy_helper
    from onnxruntime import GraphOptimizationLevel, SessionOptions
    # ORT's own class from its defining module: onnxruntime.InferenceSession may be hot-patched (aipc)
    from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    known = {name: bool(np.asarray(numpy_helper.to_array(inits[name])).reshape(-1)[0])
             for name in conditions if name in inits}
    wanted = [c for c in conditions if c not in known]
    if not wanted:
        return known
    nodes, needed = _cone(graph, set(wanted))
    inputs = [v for v in graph.input if v.name in needed and v.name not in inits]
    cone = helper.make_graph(nodes, graph.name or "cone", inputs,
                             [helper.make_tensor_value_info(c, onnx.TensorProto.BOOL, None) for c in wanted],
                             [i for name, i in inits.items() if name in needed])
    cone.sparse_initializer.extend(s for s in graph.sparse_initializer if s.values.name in needed)
    probe = helper.make_model(cone, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    probe.functions.extend(model.functions)
    so = SessionOptions()
    so.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    if external_data_dir:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", external_data_dir)
    session = InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    values = session.run(wanted, {v.name: feed[v.name] for v in inputs})
    known.update({name: bool(np.asarray(value).reshape(-1)[0]) for name, value in zip(wanted, values)})
    return known


def _rename(graph, mapping: Mapping[str, str]) -> None:
    """Rename values of ``graph`` and every reference in its subgraphs (ONNX forbids shadowing)."""
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in mapping:
                node.input[k] = mapping[name]
        for k, name in enumerate(node.output):
            if name in mapping:
                node.output[k] = mapping[name]
        for sub in subgraphs(node):
            _rename(sub, mapping)
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.name in mapping:
            value.name = mapping[value.name]
    for init in graph.initializer:
        if init.name in mapping:
            init.name = mapping[init.name]


def _defined(graph, skip=None) -> set[str]:
    """Every name ``graph`` defines, its subgraphs' included (``skip``: a node whose bodies to leave out)."""
    names = {v.name for v in graph.input} | {i.name for i in graph.initializer}
    names |= {s.values.name for s in graph.sparse_initializer}
    for node in graph.node:
        names.update(o for o in node.output if o)
        if node is not skip:
            for sub in subgraphs(node):
                names |= _defined(sub)
    return names


def _inline(graph, index: int, take_then: bool) -> None:
    """Replace the ``If`` at ``graph.node[index]`` by its taken branch (colliding names renamed first)."""
    import onnx
    from onnx import helper

    node = graph.node[index]
    attr = "then_branch" if take_then else "else_branch"
    branch = onnx.GraphProto()
    branch.CopyFrom(next(a.g for a in node.attribute if a.name == attr))
    taken = _defined(graph, skip=node)
    produced = _defined(branch)
    mapping = {}
    for name in sorted(produced & taken):
        k = 1
        while f"{name}__{k}" in taken or f"{name}__{k}" in produced:
            k += 1
        mapping[name] = f"{name}__{k}"
    if mapping:
        _rename(branch, mapping)
    new_nodes = list(branch.node)
    for outer, inner in zip(node.output, branch.output):
        if outer:
            new_nodes.append(helper.make_node("Identity", [inner.name], [outer], name=f"{outer}__if_inlined"))
    graph.initializer.extend(branch.initializer)
    graph.sparse_initializer.extend(branch.sparse_initializer)
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes[:index] + new_nodes + nodes[index + 1:])


def _prune(graph) -> None:
    """Remove nodes whose outputs nothing reads (repeatedly) and initializers nothing reads."""
    used = {o.name for o in graph.output}
    kept = []
    for node in reversed(graph.node):
        outputs = [o for o in node.output if o]
        if outputs and not used & set(outputs):
            continue
        kept.append(node)
        used |= {i for i in node.input if i}
        for sub in subgraphs(node):
            used |= outer_refs(sub)
    kept.reverse()
    del graph.node[:]
    graph.node.extend(kept)
    inputs = {v.name for v in graph.input}
    inits = [i for i in graph.initializer if i.name in used or i.name in inputs]
    del graph.initializer[:]
    graph.initializer.extend(inits)


def fold_ifs(model, feed: Mapping[str, np.ndarray], *, external_data_dir: str | None = None,
             max_rounds: int = 64) -> tuple[object, int]:
    """Inline every ``If`` whose condition does not depend on input values (see the module docstring).

    Args:
        model: ``onnx.ModelProto`` with static input shapes (not modified).
        feed: ``{input name: array}`` for the graph inputs, of the model's shapes (only those the
            conditions' cone reads are used).
        external_data_dir: folder of the model's external data, if it has any.
        max_rounds: bound on folding rounds (nesting depth).

    Returns:
        ``(model, number of If nodes inlined)``; the model itself when nothing was folded. When a
        condition cannot be evaluated (ORT refuses the cone) the ``If`` nodes of that round stay
        and a DEBUG line says why.
    """
    import onnx

    folded = 0
    current = model
    for _round in range(max_rounds):
        graph = current.graph
        tainted, _shaped = value_taint(graph, {v.name for v in graph.input})
        ifs = [k for k, n in enumerate(graph.node)
               if n.op_type == "If" and n.domain in ("", "ai.onnx") and n.input and n.input[0] not in tainted]
        if not ifs:
            break
        conditions = sorted({graph.node[k].input[0] for k in ifs})
        try:
            values = _evaluate(current, conditions, feed, external_data_dir)
        except Exception as exc:  # noqa: BLE001 - ORT's classes; the If stays and is compiled as it is
            _log.debug("onnxwrapper: could not evaluate If conditions %s (%s: %s); not folding them", conditions,
                       type(exc).__name__, exc)
            break
        if current is model:
            current = onnx.ModelProto()
            current.CopyFrom(model)
            graph = current.graph
        for k in reversed(ifs):
            _inline(graph, k, values[graph.node[k].input[0]])
            folded += 1
    if folded:
        _prune(current.graph)
        del current.graph.value_info[:]
    return current, folded
