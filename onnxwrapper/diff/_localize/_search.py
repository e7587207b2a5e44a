"""Localization: which node of a failing model is the cause, measured on the real backend.

For one failing call of one model, intermediate tensors are exposed as extra graph outputs — in
memory: the rewritten model is serialized to bytes and handed to ``InferenceSession``, no file is
written next to the user's model — and the call's recorded inputs are run through the rewritten
model on the reference backend and on the backend under test, each in its own child process
(``python -m aipc_loader._diff_child --expose``). Each exposed tensor is judged by a
scale-relative criterion — its SNR against the reference node's output must reach the SNR bar of
the run's precision (:mod:`onnxwrapper.diff._localize._cause`) — and the cause is named:
``overflow``, ``node`` (one node breaks), ``amplification`` or ``accumulation``.

Strategy: when the candidate tensors (floating-point node outputs of the top-level graph) fit the
budget (``max_tensors`` tensors and ``max_bytes`` bytes, estimated from shape inference with the
call's input shapes) they are all exposed at once (``method="all"``). Otherwise the graph is
bisected: each round exposes up to ``max_tensors`` evenly spaced candidates of the current window,
and the window shrinks to the span between the last passing and the first failing sample. This
assumes an error, once introduced, stays visible downstream. A round that fails on the backend —
the graph with that many exposed outputs may not compile (a 2000-node U-Net on QNN: "Failed to
finalize") — is measured again in halves, and later rounds expose that many tensors at most
(:data:`MIN_SPLIT`, :data:`MAX_SPLITS`). Then the inputs of the first node
below the bar are measured if they were not (one round), and that node is run **in isolation** —
a one-node model fed, on both sides, the values the backend fed it — (one round), which tells a
node that breaks from one that merely carries or amplifies upstream error.

Caveats stated in the report: exposing tensors can change how a backend partitions and fuses the
graph (Polygraphy warns the same for TensorRT) — on the QNN HTP simulator an exposed tensor is read
out before FP16 saturation, so an overflow shows up at the *consumer* of the overflowing tensor.
Therefore the reference values are also checked against FP16's range (|x| > 65504) and the
backend values for saturation; such a node is named as the overflow.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

from onnxwrapper.diff._judge import FP16_MAX, ArrayPair, Localization, Tolerance, compute_metrics, snr_bar_db
from onnxwrapper.diff._localize._cause import Graph, NodeVerdict, classify, isolated_model, pick_suspect
from onnxwrapper.diff._localize._expose import Candidate, candidate_tensors, expose_tensors, load_model, run_exposed
from onnxwrapper.diff._localize._underflow import find_underflow, underflow_notes, with_underflow

__all__ = ["Candidate", "candidate_tensors", "expose_tensors", "run_exposed", "localize", "FP16_MAX", "node_bar"]

#: a failing round is measured in halves (the graph with many exposed outputs may not compile) down
#: to this many tensors per round, at most MAX_SPLITS times per localization
MIN_SPLIT = 4
MAX_SPLITS = 6
_KEEP = ("max_abs_error", "scaled_max_error", "cosine_similarity", "snr_db", "nonfinite_mismatch",
         "fp16_saturated")


def node_bar(tolerance: Tolerance, precision: str) -> float:
    """The SNR bar (dB) every exposed tensor must reach: the output tolerance's ``min_snr_db``
    when it has one, else the default bar of ``precision`` (an absolute atol/rtol is never
    applied to intermediates: their scale differs from the outputs')."""
    return float(tolerance.min_snr_db) if tolerance.min_snr_db is not None else snr_bar_db(precision)


def _judge(c: Candidate, r: np.ndarray, y: np.ndarray, bar: float) -> NodeVerdict:
    finite = r[np.isfinite(r)] if r.dtype.kind == "f" else r
    rmax = float(np.max(np.abs(finite))) if finite.size else 0.0
    if r.shape != y.shape or r.dtype.kind not in "fiub":
        metrics, passed, failed = {}, False, [f"shape/dtype {y.shape}/{y.dtype} vs {r.shape}/{r.dtype}"]
    else:
        metrics = compute_metrics(ArrayPair(y, r, False))
        snr = metrics.get("snr_db", math.inf)
        failed = [] if snr >= bar else [f"SNR {snr:.1f} dB < {bar:.1f} dB"]
        if metrics.get("nonfinite_mismatch"):
            failed.append(f"{int(metrics['nonfinite_mismatch'])} NaN/Inf mismatch(es)")
        passed = not failed
    return with_underflow(NodeVerdict(node=c.node, op_type=c.op_type, tensor=c.tensor, index=c.index, passed=passed,
                                      metrics={k: metrics[k] for k in _KEEP if k in metrics}, failed=failed,
                                      reference_max_abs=rmax, saturated=int(metrics.get("fp16_saturated", 0))), r, y)


class _Rounds:
    """Runs expose rounds on both sides and keeps where each measured tensor's reference lives."""

    def __init__(self, workdir, model_path, inputs_path, input_names, reference, reference_options, backend,
                 backend_options, run_child, progress, loc) -> None:
        self.workdir, self.model_path, self.inputs_path, self.input_names = workdir, model_path, inputs_path, input_names
        self.sides = (("reference", reference, reference_options), ("backend", backend, backend_options))
        self.run_child, self.progress, self.loc = run_child, progress, loc
        self.files: dict[tuple[str, str], tuple[str, str]] = {}

    def run(self, names: list[str], model_path: str | None = None, inputs_path: str | None = None,
            input_names: list | None = None, tag: str = "") -> tuple[dict, str | None]:
        """``({side: {tensor: array}}, error)`` for one round exposing ``names``."""
        self.loc.rounds += 1
        rdir = os.path.join(self.workdir, f"round{self.loc.rounds}{tag}")
        results: dict[str, dict] = {}
        for side, name, opts in self.sides:
            sdir = os.path.join(rdir, side)
            os.makedirs(sdir, exist_ok=True)
            req = {"model": model_path or self.model_path, "expose": names, "inputs": inputs_path or self.inputs_path,
                   "input_names": input_names or self.input_names, "output": os.path.join(sdir, "exposed.npz")}
            req_path = os.path.join(sdir, "request.json")
            with open(req_path, "w", encoding="utf-8") as f:
                json.dump(req, f)
            if self.progress is not None:
                self.progress(self.loc.rounds, f"{len(names)} tensors on {name}")
            run = self.run_child(name, opts, sdir, req_path)
            if not run.ok:
                return {}, f"{side} '{name}' failed in round {self.loc.rounds}: {run.cause or run.message or run.status}"
            with np.load(req["output"], allow_pickle=False) as npz:
                results[side] = {n: npz[f"t{k}"] for k, n in enumerate(names) if f"t{k}" in npz}
            if not tag:
                for k, n in enumerate(names):
                    self.files[(side, n)] = (req["output"], f"t{k}")
        return results, None

    def value(self, tensor: str, side: str = "reference"):
        """The saved value of an exposed ``tensor`` on ``side`` (``None`` when not measured)."""
        path, key = self.files.get((side, tensor), (None, None))
        if path is None:
            return None
        with np.load(path, allow_pickle=False) as npz:
            return npz[key] if key in npz else None


def localize(*, model_source, model_key: str, inputs: dict, backend: str, backend_options: dict,
             reference: str, reference_options: dict, tolerance: Tolerance, precision: str, workdir: str,
             run_child, call=(0, 0), failing_outputs=(), max_tensors: int = 256,
             max_bytes: int = 512 * 1024 ** 2, max_rounds: int = 8, isolate: bool = True,
             progress=None) -> Localization:
    """Name the cause of one model's failure for one call (see the module docstring).

    Args:
        model_source: the user's model (path or bytes), from the reference capture.
        model_key: the capture's model key (for the report). inputs: ``{name: array}`` of the call.
        backend / backend_options: the backend under test; reference / reference_options: the reference.
        tolerance: the failing output's tolerance (its ``min_snr_db``, else the precision's default
            bar, applies to every exposed tensor: :func:`node_bar`). precision: preset name.
        workdir: directory for round files (requests, inputs, exposed outputs, isolated models).
        run_child: ``run_child(backend, options, directory, request_path) -> BackendRun``.
        call: ``(session, index)`` of the call, for the report. failing_outputs: names of the failing
            graph outputs (to draw the chain). max_tensors / max_bytes: budget of one round.
        isolate: run the suspect node alone on the inputs the backend fed it (one more round).
        progress: optional ``progress(round, description)``.

    Returns:
        A :class:`~onnxwrapper.diff.Localization`; ``error`` is set when a round failed to run.
    """
    model = load_model(model_source)
    shapes = {k: tuple(v.shape) for k, v in inputs.items()}
    cands = candidate_tensors(model, shapes)
    loc = Localization(backend=backend, model=model_key, call=tuple(call))
    loc.bar_db = bar = node_bar(tolerance, precision)
    os.makedirs(workdir, exist_ok=True)
    input_names = list(inputs)
    inputs_path = os.path.join(workdir, "inputs.npz")
    np.savez(inputs_path, allow_pickle=False, **{f"i{k}": inputs[n] for k, n in enumerate(input_names)})
    if isinstance(model_source, bytes):  # a private copy inside the diff directory, never next to the model
        model_path = os.path.join(workdir, "model.onnx")
        with open(model_path, "wb") as f:
            f.write(model_source)
    else:
        model_path = os.path.abspath(os.fspath(model_source))
    rounds = _Rounds(workdir, model_path, inputs_path, input_names, reference, reference_options, backend,
                     backend_options, run_child, progress, loc)
    verdicts: dict[str, NodeVerdict] = {}
    budget = {"tensors": max_tensors, "splits": 0}

    def measure(subset: list[Candidate]) -> str | None:
        results, error = rounds.run([c.tensor for c in subset])
        if error and len(subset) > MIN_SPLIT and budget["splits"] < MAX_SPLITS:
            # the graph with that many exposed outputs may not compile (a large U-Net on QNN: "Failed to
            # finalize"): fewer tensors per round, this round's tensors in halves
            budget["splits"] += 1
            budget["tensors"] = max(MIN_SPLIT, len(subset) // 2)
            loc.notes.append(f"round {loc.rounds} exposing {len(subset)} tensors failed ({error.splitlines()[0][:200]}); "
                             f"measuring them {budget['tensors']} per round")
            size = budget["tensors"]
            chunks = [subset[i:i + size] for i in range(0, len(subset), size)]
            errors = [measure(chunk) for chunk in chunks]
            return errors[0] if all(errors) else None
        for c in subset:
            r, y = results.get("reference", {}).get(c.tensor), results.get("backend", {}).get(c.tensor)
            if r is not None and y is not None:
                verdicts[c.tensor] = _judge(c, r, y, bar)
        loc.tensors_compared = len(verdicts)
        return error

    total_bytes = sum(c.est_bytes or 0 for c in cands)
    if len(cands) <= max_tensors and total_bytes <= max_bytes:
        loc.method = "all"
        loc.error = measure(cands) or ""
    else:
        loc.method = "bisect"
        loc.error = _bisect(cands, verdicts, measure, budget, max_bytes, max_rounds + MAX_SPLITS, loc) or ""
    if loc.error:
        loc.message = f"localization incomplete: {loc.error}"
        return loc
    _finish(loc, model, cands, verdicts, precision, failing_outputs, bar, rounds, inputs, isolate)
    return loc


def _bisect(cands, verdicts, measure, budget: dict, max_bytes, max_rounds, loc) -> str | None:
    window = cands
    while loc.rounds < max_rounds:
        sample = _sample(window, budget["tensors"], max_bytes)
        error = measure(sample)
        if error:
            return error
        bad = next((c for c in sample if c.tensor in verdicts and not verdicts[c.tensor]["passed"]), None)
        if len(sample) == len(window):
            return None
        pos = {c.tensor: i for i, c in enumerate(window)}
        if bad is None:
            window = window[pos[sample[-1].tensor] + 1:]
        else:
            hi = pos[bad.tensor]
            before = [c for c in sample if pos[c.tensor] < hi]
            window = window[(pos[before[-1].tensor] + 1 if before else 0):hi + 1]
        if not window:
            return None
    return None


def _sample(window: list[Candidate], max_tensors: int, max_bytes: int) -> list[Candidate]:
    if len(window) <= max_tensors and sum(c.est_bytes or 0 for c in window) <= max_bytes:
        return list(window)
    step = max(1, int(np.ceil(len(window) / max_tensors)))
    positions = list(range(step - 1, len(window), step))
    if not positions or positions[-1] != len(window) - 1:
        positions.append(len(window) - 1)
    picked, used = [], 0
    for pos in positions:
        c = window[pos]
        if c.est_bytes and used + c.est_bytes > max_bytes and picked:
            continue
        picked.append(c)
        used += c.est_bytes or 0
    return picked


def _wrong_elements(y: np.ndarray, r: np.ndarray, pos=None) -> np.ndarray:
    """Mask of elements (at flat positions ``pos``, default all) whose error is beyond FP16's
    budget relative to the element, with a floor of one FP16 rounding of the tensor's peak:
    ``|y − r| > 2⁻⁵·max(|r|, 2⁻¹¹·max|r|)`` (non-finite errors count)."""
    finite = r[np.isfinite(r)]
    floor = 2.0 ** -11 * float(np.max(np.abs(finite))) if finite.size else 0.0
    yy = y.reshape(-1).astype(np.float64) if pos is None else y.flat[pos].astype(np.float64)
    rr = r.reshape(-1).astype(np.float64) if pos is None else r.flat[pos].astype(np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(yy - rr)
        return ~np.isfinite(diff) | (diff > 2.0 ** -5 * np.maximum(np.abs(rr), floor))


def _isolate(loc, model, node, rounds: _Rounds, inputs: dict, workdir: str) -> tuple[float | None, int, int]:
    """``(SNR, saturated values, wrong elements)`` of ``node`` run alone, on both sides, on the
    values the backend fed it (the reference's where the backend's were not measured); ``(None, 0,
    0)`` when it cannot be isolated or the run failed. Same inputs on both sides: only the node's
    own error is left."""
    arrays = {}
    for name in node.input:
        if name in inputs:
            arrays[name] = inputs[name]
        elif name:
            v = rounds.value(name, "backend")
            v = v if v is not None else rounds.value(name)
            if v is not None:
                arrays[name] = v
    data = isolated_model(model, node, arrays)
    if data is None:
        return None, 0, 0
    path = os.path.join(workdir, "isolated.onnx")
    with open(path, "wb") as f:
        f.write(data)
    names = [n for n in node.input if n in arrays]
    ipath = os.path.join(workdir, "isolated_inputs.npz")
    np.savez(ipath, allow_pickle=False, **{f"i{k}": arrays[n] for k, n in enumerate(names)})
    outs = [o for o in node.output if o]
    results, error = rounds.run(outs, model_path=path, inputs_path=ipath, input_names=names, tag="-isolated")
    if error:
        loc.notes.append(f"isolation run failed: {error}")
        return None, 0, 0
    snrs, saturated, wrong = [], 0, 0
    for o in outs:
        r, y = results["reference"].get(o), results["backend"].get(o)
        if r is not None and y is not None and r.shape == y.shape and r.dtype.kind == "f":
            m = compute_metrics(ArrayPair(y, r, False))
            snrs.append(m.get("snr_db", math.inf))
            saturated += int(m.get("fp16_saturated", 0))
            wrong += int(np.count_nonzero(_wrong_elements(y, r)))
    return (min(snrs) if snrs else None), saturated, wrong


def _trace_saturation(tensor: str, graph, rounds: _Rounds, limit: int = 32) -> list[dict]:
    """Follow the saturated positions of ``tensor`` up through same-shaped inputs that are already
    wrong there; ``[{node, op_type, tensor, backend, reference, input_backend, input_reference}]``
    from the saturating tensor to the node where the wrong values start (the last entry)."""
    y, r = rounds.value(tensor, "backend"), rounds.value(tensor)
    if y is None or r is None or y.shape != r.shape:
        return []
    with np.errstate(invalid="ignore"):
        pos = np.flatnonzero((np.abs(y) >= FP16_MAX) & np.isfinite(r) & (np.abs(r) < FP16_MAX))
    if not pos.size:
        return []
    trace, current = [], tensor
    while len(trace) < limit:
        node = graph.nodes[current]
        entry = {"node": node.name or node.op_type, "op_type": node.op_type, "tensor": current,
                 "backend": float(y.flat[pos[0]]), "reference": float(r.flat[pos[0]])}
        trace.append(entry)
        nxt = None
        for name in node.input:
            yi, ri = rounds.value(name, "backend"), rounds.value(name)
            if yi is None or ri is None or yi.shape != y.shape or ri.dtype.kind != "f":
                continue
            entry.update(input_backend=float(yi.flat[pos[0]]), input_reference=float(ri.flat[pos[0]]))
            if np.any(_wrong_elements(yi, ri, pos)):
                nxt = name
                break
        if nxt is None or nxt not in graph.nodes:
            break
        current, y, r = nxt, yi, ri
    return trace


def _measure_inputs(loc, node, by_tensor, verdicts, exact, rounds, bar) -> None:
    """Expose the inputs of ``node`` that were not measured yet (bisection skipped them)."""
    missing = [c for c in (by_tensor.get(n) for n in node.input if n and n not in exact)
               if c is not None and c.tensor not in verdicts]
    if not missing:
        return
    results, error = rounds.run([c.tensor for c in missing])
    for c in missing:
        r, y = results.get("reference", {}).get(c.tensor), results.get("backend", {}).get(c.tensor)
        if r is not None and y is not None:
            verdicts[c.tensor] = _judge(c, r, y, bar)
    if error:
        loc.notes.append(f"could not measure the inputs of '{node.name}': {error}")


def _finish(loc, model, cands, verdicts, precision, failing_outputs, bar, rounds, inputs, isolate) -> None:
    by_tensor = {c.tensor: c for c in cands}
    graph = Graph(model, [c.tensor for c in cands], failing_outputs)
    loc.suspects = [{"node": v["node"], "op_type": v["op_type"], "tensor": t, "max_abs": v["reference_max_abs"],
                     "saturated": v.get("saturated", 0), "limit": FP16_MAX, "precision": precision}
                    for t, v in ((t, verdicts[t]) for t in graph.order if t in verdicts)
                    if precision == "fp16" and (v["reference_max_abs"] > FP16_MAX or v.get("saturated"))]
    loc.underflows = underflow_notes(verdicts, graph, model) if precision == "fp16" else []
    kind, suspect = pick_suspect(verdicts, graph, precision)
    isolated, saturated, wrong, trace = None, 0, 0, []
    under = find_underflow(verdicts, graph, model, [suspect] if kind in ("first", "saturation") and precision == "fp16"
                           else [], rounds.value, lambda node: _measure_inputs(
                               loc, node, by_tensor, verdicts, graph.exact, rounds, bar))
    if kind == "saturation" and under is None:
        trace = _trace_saturation(suspect, graph, rounds)
        suspect = trace[-1]["tensor"] if trace else suspect
    if kind in ("first", "saturation") and under is None:
        node = graph.nodes[suspect]
        _measure_inputs(loc, node, by_tensor, verdicts, graph.exact, rounds, bar)
        if isolate:
            isolated, saturated, wrong = _isolate(loc, model, node, rounds, inputs, rounds.workdir)
            loc.isolated_snr_db = isolated
    loc.cause, culprit, loc.message = classify(verdicts, graph, bar, precision, isolated, saturated + wrong, trace, under)
    loc.culprit = dict(culprit) if culprit is not None else None
    first = next((c for c in cands if c.tensor in verdicts and not verdicts[c.tensor]["passed"]), None)
    loc.first = dict(verdicts[first.tensor]) if first is not None else None
    loc.profile = [[verdicts[t]["node"], verdicts[t]["op_type"], verdicts[t]["metrics"].get("snr_db")]
                   for t in graph.order if t in verdicts][:2000]
    if first is not None:
        _chain(loc, model, first, by_tensor, verdicts, failing_outputs)


def _chain(loc, model, first, by_tensor, verdicts, failing_outputs) -> None:
    """The nodes downstream of the first failing tensor that lead to a failing output."""
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(model.graph.node):
        for t in node.input:
            consumers.setdefault(t, []).append(i)
    down, frontier = set(), [first.tensor]
    while frontier:
        t = frontier.pop()
        for i in consumers.get(t, ()):
            if i not in down:
                down.add(i)
                frontier.extend(o for o in model.graph.node[i].output if o)
    targets = set(failing_outputs) or {o.name for o in model.graph.output}
    up, frontier = set(), list(targets)
    producer = {o: i for i, n in enumerate(model.graph.node) for o in n.output}
    while frontier:
        t = frontier.pop()
        i = producer.get(t)
        if i is not None and i not in up:
            up.add(i)
            frontier.extend(model.graph.node[i].input)
    for i in sorted(down & up):
        node = model.graph.node[i]
        for out in node.output:
            if out in verdicts:
                loc.chain.append(dict(verdicts[out]))
            elif out and by_tensor.get(out) is None:
                loc.chain.append({"node": node.name or f"{node.op_type}_{i}", "op_type": node.op_type,
                                  "tensor": out, "index": i, "passed": None, "metrics": {}, "failed": []})
