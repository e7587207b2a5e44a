"""The recovery ladder: what the QNN backend does when the HTP compiler fails on a graph or runs past
its budget, instead of crashing the user's app.

A compile of the model as given that fails recoverably
(:func:`~onnxwrapper.backends.qnn.compile._compile_errors.recoverable`: QNN's graph errors such as ``QNN_COMMON_ERROR_MEM_ALLOC 1002`` when finalizing, a compile past its
budget, a compiler dead of ``std::bad_alloc``) enters the ladder; each rung is tried in order and the
first that compiles is used:

1. **options** — only what measurably helps (measured on the simulator, onnxruntime-qnn 2.7.0):
   ``vtcm_mb=8`` when the failure is ``MEM_ALLOC`` and a tensor of the graph has a row (innermost
   dim) larger than the 4 MiB VTCM budget (an fp32 ``[1, 2²¹]`` intermediate fails, and compiles
   with it); on a device, the VTCM size QNN reports for it, when larger than 4 MB (not verified
   on hardware). ``htp_graph_finalization_optimization_mode`` 1–3 and ``enable_htp_spill_fill_buffer=1``
   rescued none of the failures measured (fp32 kernels missing, the long-row failure, the 1-D
   U-Net stand-in) and changed no compile time beyond noise, so they are not tried.
2. **batch split** — only where :func:`~onnxwrapper.backends.qnn.recovery._batch_proof.batch_plan` proves
   from the graph that no op mixes samples along the batch: the model is compiled for a smaller
   batch and each call runs as several calls (:mod:`onnxwrapper.backends.qnn.recovery._batch_split`).
3. **graph split** — the graph as several QNN contexts stitched into one session, bisected until
   each part finalizes (:mod:`onnxwrapper.backends.qnn.recovery._graph_split`);
4. **cpu** — a node that fails even alone runs on ORT's CPU EP (when no part compiles at all, the
   whole model does, as for a model the QNN EP takes no node of): the session's
   :class:`~onnxwrapper.kernel.PartialOffloadWarning` gives the node count and the reason (the
   partition summary says "recovered by graph split … after QNN_…"). Under ``strict=True`` this
   rung raises :class:`~onnxwrapper.errors.CompileFailedError` naming the model, the shapes, the
   rung and the largest tensor of the failing nodes.

What was taken — also that no part compiled (rung ``cpu``: the replay raises the same
``PartitionError``, or under strict the ``CompileFailedError``, without compiling) — is recorded
twice: in the compiled model's partition report (:attr:`~onnxwrapper.kernel.PartitionReport.recovery`,
shown by ``get_partition()``, ``aipc -v`` and the diff report) and in the compile cache (a :class:`~onnxwrapper.backends.qnn.compile.CompileMemo`
next to the would-be entry of the failed compile), so a later session goes straight to the rung that
worked and never retries what failed.

Every compile path goes through this one ladder (:func:`recovering_step`): sessions (static models
and each shape specialization), sessions with a repair recipe (its rewritten model, or each NPU part
of a recipe with CPU subgraphs), :func:`~onnxwrapper.backends.qnn.precompile` and
:func:`~onnxwrapper.backends.qnn.compile_model`. Where the result must keep the model's input
shapes — a part of a stitched model, an EPContext artifact written for deployment — the batch split
is skipped (recorded with the reason) and the graph split writes the stitched model.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Mapping

import numpy as np
import onnx

from onnxwrapper.backends.qnn.artifacts import first_failure_token
from onnxwrapper.backends.qnn.compile import (CompileMemo, qnn_error, recoverable, take_first_failure, total_budget,
                                              typed_failure)
from onnxwrapper.backends.qnn.model import VTCM_BUDGET_MB
from onnxwrapper.backends.qnn.pipeline import Compiled, EpContextFromOnnx
from onnxwrapper.backends.qnn.recovery._batch_proof import BatchPlan, batch_plan
from onnxwrapper.backends.qnn.recovery._batch_split import chunk_sizes, rebatch
from onnxwrapper.backends.qnn.recovery._graph_split import GraphSplit, SplitRange
from onnxwrapper.backends.qnn.settings import QnnSettings, QnnSetup
from onnxwrapper.errors import CompileBudgetError, PartitionError
from onnxwrapper.kernel import PartitionReport, make_key

__all__ = ["RecoveringCompile", "batch_split_of", "largest_tensor", "option_candidates", "recovering_step"]

_log = logging.getLogger("onnxwrapper.qnn")
_MIB = 1024 * 1024


def _tensor_sizes(proto) -> list[tuple[int, str, str, list]]:
    """``[(bytes, tensor, element type name, dims)]`` of every statically shaped tensor of ``proto``."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception:  # noqa: BLE001 - best effort: the declared shapes still count
        inferred = proto
    out = []
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if None in dims:
            continue
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        except (KeyError, TypeError, ValueError):
            continue
        out.append((int(np.prod(dims, dtype=np.int64)) * dtype.itemsize, vi.name, dtype.name, dims))
    return out


def largest_tensor(proto, nodes=None) -> str | None:
    """The largest tensor of ``proto`` (among the outputs of ``nodes`` when given) with the op that
    makes it, e.g. ``"'c1' (Conv 'conv1'): float32 [3, 64, 7500], 5.5 MiB"``; ``None`` when unknown."""
    sizes = _tensor_sizes(proto)
    producers = {o: n for n in proto.graph.node for o in n.output}
    wanted = None if nodes is None else {o for n in nodes for o in n.output}
    sizes = [s for s in sizes if wanted is None or s[1] in wanted]
    if not sizes:
        return None
    size, name, dtype, dims = max(sizes)
    node = producers.get(name)
    made = f" ({node.op_type} '{node.name}')" if node is not None else " (a graph input)"
    return f"'{name}'{made}: {dtype} {dims}, {size / _MIB:.1f} MiB"


def option_candidates(exc: BaseException, proto, settings) -> list[dict[str, str]]:
    """The QNN EP options worth one more compile for failure ``exc`` of ``proto`` (module docstring):
    more VTCM than the graph has (4 MB unless ``vtcm_mb`` says otherwise, QNN HTP docs) — on the
    simulator 8 MB (measured to rescue a long fp32 row), on a device the size it reports
    (``settings.device_vtcm_mb``; nothing when unknown or not larger: more than the SoC has fails)."""
    name, _code = qnn_error(exc)
    vtcm = int(settings.ep_options.get("vtcm_mb", 0) or 0) or VTCM_BUDGET_MB
    ceiling = settings.device_vtcm_mb if settings.real_npu else 8
    if name != "QNN_COMMON_ERROR_MEM_ALLOC" or not ceiling or vtcm >= ceiling:
        return []
    def htp_bytes(dtype: str) -> int:  # as the HTP holds it: floats in FP16 or fp32, integers at most 4 bytes
        kind = np.dtype(dtype)
        return (2 if settings.precision == "fp16" else 4) if kind.kind == "f" else min(kind.itemsize, 4)

    rows = [dims[-1] * htp_bytes(dtype) for _size, _name, dtype, dims in _tensor_sizes(proto) if dims]
    return [{"vtcm_mb": str(ceiling)}] if rows and max(rows) > vtcm * _MIB else []


def batch_split_of(compiled: Compiled) -> tuple[BatchPlan, int] | None:
    """``(plan, chunk)`` when ``compiled`` is the smaller-batch model of a batch split, else ``None``."""
    record = compiled.meta.get("recovery") or {}
    if record.get("rung") != "batch split":
        return None
    plan = record["plan"]
    return BatchPlan(plan["batch"], plan["inputs"], plan["outputs"]), int(record["batch"])


def _with_options(setup: QnnSetup, extra: Mapping[str, str]) -> QnnSetup:
    s = setup.settings
    values = {name: getattr(s, name) for name in QnnSettings.__slots__}
    values["ep_options"] = dict(sorted({**s.ep_options, **extra}.items()))
    return QnnSetup(setup.source, QnnSettings(**values), setup.user_so, setup.kwargs, setup.label, setup.devices)


def _batch_of(proto) -> int:
    dims = [d.dim_value for vi in proto.graph.input[:1] for d in vi.type.tensor_type.shape.dim[:1]]
    return int(dims[0]) if dims and dims[0] else 0


def _error_text(exc: BaseException) -> str:
    name, code = qnn_error(exc)
    name = getattr(exc, "error_name", None) or name
    return f"{name} {code}" if name and code is not None else (name or type(exc).__name__)


def recovering_step(store, *, batch_split: str | None = None) -> "RecoveringCompile":
    """The compile step over ``store`` (a ``CacheStore``, or a ``FolderStore`` for ``compile_model``)
    with the recovery ladder around it: ``RecoveringCompile(EpContextFromOnnx(store), store, …)``.
    ``batch_split``: ``None`` allows the batch split; a reason (text) skips it."""
    return RecoveringCompile(EpContextFromOnnx(store), store, batch_split=batch_split)


class RecoveringCompile:
    """A compile step (called like ``EpContextFromOnnx``) with the recovery ladder around ``inner``.

    Args:
        inner: ``EpContextFromOnnx`` over ``store`` (or a step compiling into it, e.g. a repaired one).
        store: a ``CacheStore`` (its cache keeps the recovery memo and the graph split's parts) or a
            ``FolderStore`` (``compile_model``: the options rung compiles into its folder, the graph
            split's parts and the memo go to the compile cache of its settings).
        batch_split: ``None`` (default) allows rung 2; a reason skips it — where the compiled model
            must keep the model's input shapes (a part of a stitched model, a deployable artifact).
    """

    def __init__(self, inner, store, *, batch_split: str | None = None) -> None:
        self.inner, self.store, self.setup = inner, store, store.setup
        self.no_batch_split = batch_split

    def _step(self, step, model_input, proto, shapes, note, values) -> Compiled:
        if values:
            return step(model_input, proto, shapes, note, values)
        return step(model_input, proto, shapes, note)

    def __call__(self, model_input, proto, shapes=None, note: str = "", values=None) -> Compiled:
        """Compile as given; on a recoverable failure, the ladder (module docstring); all of it within
        the model's total ``compile_budget`` (:func:`~onnxwrapper.backends.qnn.compile.total_budget`).

        Raises:
            CompileBudgetError: ``budget == "total"``: the compiles together went past ``compile_budget``.
            CompileFailedError: strict mode and only the CPU rung is left (or the ladder found
                nothing, which cannot happen outside strict mode). PartitionError: no part of the
                model compiled (every node would run on the CPU). The inner step's other errors.
        """
        label = note or self.setup.label  # what messages name (compile_model's note is empty for a static model)
        with total_budget(self.setup.settings.compile_budget, label, shapes):
            return self._recovering(model_input, proto, shapes, note, values, label)

    def _recovering(self, model_input, proto, shapes, note, values, label) -> Compiled:
        key = self.store.key(shapes, [], values)
        memo = CompileMemo(self.store.cache, {"qnn-recovery": key}, "recovery", unless_entry=key)
        known = memo.known()
        if isinstance(known, dict) and known.get("rung") and not (known["rung"] == "batch split"
                                                                  and self.no_batch_split):
            try:
                return self._replay(known, model_input, proto, shapes, label, values)
            except Exception as exc:  # noqa: BLE001 - a replay that fails runs the ladder again
                if not recoverable(exc):
                    raise
                _log.info("onnxwrapper qnn: the recorded recovery of %s failed (%s); trying the ladder again",
                          label, _error_text(exc))
        start = time.perf_counter()
        source = self.setup.source
        earlier = (take_first_failure(first_failure_token(source.path, self.setup.settings))
                   if source.path is not None and not shapes and not values else None)
        try:
            if isinstance(earlier, CompileBudgetError) and earlier.budget == "total":
                raise earlier
            if earlier is not None:  # the worker's first compile of this very graph failed: no second try
                first = earlier
            else:
                return self._step(self.inner, model_input, proto, shapes, note, values)
        except Exception as exc:  # noqa: BLE001 - only recoverable failures enter the ladder
            if not recoverable(exc):
                raise
            first = exc
        steps = [{"rung": "as given", "result": "failed", "error": _error_text(first),
                  "seconds": round(time.perf_counter() - start, 2)}]
        try:
            compiled, record = self._ladder(first, steps, model_input, proto, shapes, label, values)
        except PartitionError as exc:  # no part compiled: remembered too, so the next compile does not retry
            if exc.report is not None and exc.report.recovery:
                memo.remember({"rung": "cpu", "steps": list(exc.report.recovery), "partition": exc.report.to_dict()})
            raise
        memo.remember(record)
        return compiled

    # -- the rungs -----------------------------------------------------------------------------------
    def _ladder(self, first, steps, model_input, proto, shapes, note, values):
        settings = self.setup.settings
        for extra in option_candidates(first, proto, settings):
            detail = ", ".join(f"{k}={v}" for k, v in extra.items())
            result = self._try(steps, "options", detail, lambda: self._options(extra, model_input, proto, shapes, note,
                                                                                values))
            if result is not None:
                return self._done(result, steps, note, {"rung": "options", "options": extra})
        batch = _batch_of(proto)
        plan = (self.no_batch_split or batch_plan(proto, batch)) if batch > 1 else f"the batch is {batch or 'unknown'}"
        if isinstance(plan, str):
            steps.append({"rung": "batch split", "result": "skipped", "detail": plan})
        else:
            for chunk in chunk_sizes(batch):
                result = self._try(steps, "batch split", f"{batch // chunk}× batch {chunk}",
                                   lambda: self._batch(plan, chunk, proto, shapes, note, values))
                if result is not None:
                    return self._done(result, steps, note, {"rung": "batch split", "batch": chunk,
                                                            "plan": plan.to_dict()})
        return self._split(first, steps, proto, shapes, note, values, None)

    def _try(self, steps, rung: str, detail: str, attempt):
        start = time.perf_counter()
        try:
            compiled = attempt()
        except Exception as exc:  # noqa: BLE001 - a rung that fails recoverably lets the next one try
            if not recoverable(exc):
                raise
            steps.append({"rung": rung, "detail": detail, "result": "failed", "error": _error_text(exc),
                          "seconds": round(time.perf_counter() - start, 2)})
            return None
        steps.append({"rung": rung, "detail": detail, "result": "compiled",
                      "seconds": round(time.perf_counter() - start, 2)})
        return compiled

    def _options(self, extra, model_input, proto, shapes, note, values) -> Compiled:
        detail = ", ".join(f"{k}={v}" for k, v in extra.items())
        store = self.store.with_setup(_with_options(self.setup, extra), rung=f"options: {detail}")
        return self._step(EpContextFromOnnx(store), model_input, proto, shapes, note, values)

    def _batch(self, plan: BatchPlan, chunk: int, proto, shapes, note, values) -> Compiled:
        sub = rebatch(proto, plan, chunk)
        sub_shapes = {vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim) for vi in sub.graph.input
                      if vi.name in plan.inputs}
        sub_shapes = {**(shapes or {}), **sub_shapes}
        return self._step(self.inner, lambda: sub.SerializeToString(), sub, sub_shapes,
                          f"{note} (batch split: {plan.batch // chunk}× batch {chunk})", values)

    def _split(self, first, steps, proto, shapes, note, values, ranges):
        def refuse(nodes, reason: str) -> None:
            names = ", ".join(f"{n.name or n.output[0]} ({n.op_type})" for n in nodes[:8])
            raise typed_failure(first, label=note, shapes=shapes, rung="graph split",
                                largest=largest_tensor(proto, nodes),
                                hint=f"Split into parts, {len(nodes)} node(s) still fail alone ({names}: {reason}); "
                                     f"strict=True forbids running them on the CPU. Drop strict, feed smaller "
                                     f"shapes, or use another precision or target.") from first

        splitter = self._splitter(values, refuse)
        start = time.perf_counter()
        compiled, ranges = splitter(proto, shapes, note, _error_text(first), plan=ranges)
        cpu = sum(r.hi - r.lo for r in ranges if r.kind == "cpu")
        npu = [r for r in ranges if r.kind == "npu"]
        rung = "graph split" if npu else "cpu"
        detail = f"{len(npu)} QNN context{'s' if len(npu) != 1 else ''}, {splitter.compiles} compiles" + (
            f", {cpu} node{'s' if cpu != 1 else ''} failing alone on the CPU" if cpu else "")
        steps.append({"rung": rung, "detail": detail, "result": "compiled", "cpu_nodes": cpu, "parts": len(ranges),
                      "seconds": round(time.perf_counter() - start, 2)})
        if not npu:  # nothing for the NPU: ORT's CPU session of the model runs it (the no-node verdict, cached)
            report = compiled.report.with_recovery(steps)
            raise PartitionError(f"The QNN HTP could compile no part of {note} ({report.recovery_summary()}).",
                                 backend="qnn", cpu_nodes=report.cpu_nodes, report=report)
        return self._done(compiled, steps, note, {"rung": rung, "ranges": [r.to_dict() for r in ranges]})

    def _splitter(self, values, on_cpu) -> GraphSplit:
        """The graph split of the store's model (with ``values`` bound); ``on_cpu`` refuses under strict."""
        model_key = make_key({"model": self.store.model_hash, "values": repr(sorted((values or {}).items()))})
        return GraphSplit(self.setup, model_key, strict=self.setup.settings.strict, on_cpu=on_cpu)

    def _done(self, compiled: Compiled, steps, note: str, record: dict):
        report = compiled.report.with_recovery(steps)
        record = dict(record, steps=steps)
        level = logging.INFO if report.offloaded_nodes else logging.WARNING  # CPU nodes: the session warns
        _log.log(level, "onnxwrapper qnn: %s: %s", note, report.recovery_summary())
        return dataclasses.replace(compiled, report=report, meta=dict(compiled.meta, recovery=record)), record

    def _replay(self, record: dict, model_input, proto, shapes, note, values) -> Compiled:
        steps = [dict(s) for s in record.get("steps", ())]
        rung = record["rung"]
        _log.info("onnxwrapper qnn: %s failed to compile before; using the recorded recovery (%s)", note, rung)
        if rung == "cpu":  # no part compiled before: every node on the CPU (strict: the typed error)
            report = PartitionReport.from_dict(record["partition"]).with_source("cache")
            first = steps[0].get("error", "") if steps else ""
            if self.setup.settings.strict:
                self._strict_replay(note, shapes, first)(report.cpu_nodes, "no part of the graph compiles")
            raise PartitionError(f"The QNN HTP could compile no part of {note} ({report.recovery_summary()}; "
                                 f"recorded in the compile cache).", backend="qnn", cpu_nodes=report.cpu_nodes,
                                 report=report)
        if rung == "options":
            compiled = self._options(record["options"], model_input, proto, shapes, note, values)
        elif rung == "batch split":
            plan = record["plan"]
            compiled = self._batch(BatchPlan(plan["batch"], plan["inputs"], plan["outputs"]), int(record["batch"]),
                                   proto, shapes, note, values)
        else:
            ranges = [SplitRange(r["lo"], r["hi"], r["kind"], r.get("reason", "")) for r in record["ranges"]]
            first = steps[0].get("error", "") if steps else ""
            splitter = self._splitter(values, self._strict_replay(note, shapes, first))
            compiled, _ranges = splitter(proto, shapes, note, first, plan=ranges)
        report = compiled.report.with_recovery(steps)
        return dataclasses.replace(compiled, report=report, meta=dict(compiled.meta, recovery=record))

    def _strict_replay(self, note, shapes, error: str):
        def refuse(nodes, reason: str) -> None:
            raise typed_failure(RuntimeError(error), label=note, shapes=shapes, rung="graph split",
                                hint=f"{len(nodes)} node(s) fail alone ({reason}; recorded in the compile cache); "
                                     f"strict=True forbids running them on the CPU.")
        return refuse

