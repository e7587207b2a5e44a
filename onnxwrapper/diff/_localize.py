"""Localization: the first node (topological order) whose output breaks tolerance on a backend.

For one failing call of one model, intermediate tensors are exposed as extra graph outputs — in
memory: the rewritten model is serialized to bytes and handed to ``InferenceSession``, no file is
written next to the user's model — and the call's recorded inputs are run through the rewritten
model on the reference backend and on the backend under test, each in its own child process
(``python -m onnxwrapper.diff._child --expose``). Each exposed tensor is compared with the output's
tolerance; the first failing one in graph order names the node.

Strategy: when the candidate tensors (floating-point node outputs of the top-level graph) fit the
budget (``max_tensors`` tensors and ``max_bytes`` bytes, estimated from shape inference with the
call's input shapes) they are all exposed at once (``method="all"``). Otherwise the graph is
bisected: each round exposes up to ``max_tensors`` evenly spaced candidates of the current window,
and the window shrinks to the span between the last passing and the first failing sample. This
assumes an error, once introduced, stays visible downstream (the usual case; a later node can mask
it, e.g. a ReLU clipping a negative error).

Caveats stated in the report: exposing tensors can change how a backend partitions and fuses the
graph (Polygraphy warns the same for TensorRT) — on the QNN HTP simulator an exposed tensor is read
out before FP16 saturation, so an overflow shows up at the *consumer* of the overflowing tensor.
Therefore the reference values are also checked against the backend precision's range (|x| > 65504
for FP16, IEEE 754 binary16 max): those nodes are reported as ``suspects``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from onnxwrapper.diff._result import Localization
from onnxwrapper.diff._tolerance import Tolerance

__all__ = ["Candidate", "candidate_tensors", "expose_tensors", "run_exposed", "localize", "FP16_MAX"]

#: largest finite IEEE 754 binary16 value.
FP16_MAX = 65504.0
_FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16 (onnx.TensorProto enum)
_RANGE = {"fp16": FP16_MAX}


@dataclass(frozen=True)
class Candidate:
    """One exposable tensor: ``tensor`` produced by node number ``index`` (graph order)."""

    index: int
    tensor: str
    node: str
    op_type: str
    est_bytes: int | None = None


def _load(source):
    import onnx

    if isinstance(source, bytes):
        return onnx.load_model_from_string(source)
    return onnx.load(source, load_external_data=True)


def candidate_tensors(model, input_shapes: dict | None = None) -> list[Candidate]:
    """Floating-point node outputs of the top-level graph, in graph (= topological) order.

    Args:
        model: ``onnx.ModelProto``.
        input_shapes: ``{input name: shape tuple}`` used to make shape inference concrete for
            byte estimates; optional.

    Returns:
        Candidates; tensors whose type cannot be inferred are included (``est_bytes=None``).
    """
    import onnx

    types: dict[str, tuple[int, list]] = {}
    try:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        for inp in probe.graph.input:
            shape = (input_shapes or {}).get(inp.name)
            if shape is not None and inp.type.HasField("tensor_type"):
                dims = inp.type.tensor_type.shape.dim
                if len(dims) == len(shape):
                    for d, v in zip(dims, shape):
                        d.ClearField("dim_param")
                        d.dim_value = int(v)
        inferred = onnx.shape_inference.infer_shapes(probe)
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            tt = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            types[vi.name] = (tt.elem_type, dims)
    except Exception:  # inference is an optimisation of the budget only
        types = {}
    result = []
    for i, node in enumerate(model.graph.node):
        for out in node.output:
            if not out:
                continue
            elem, dims = types.get(out, (0, None))
            if elem and elem not in _FLOAT_TYPES:
                continue
            est = None
            if dims is not None and all(d is not None for d in dims):
                itemsize = 2 if elem in (10, 16) else 8 if elem == 11 else 4
                est = int(np.prod(dims, dtype=np.int64)) * itemsize if dims else itemsize
            result.append(Candidate(i, out, node.name or f"{node.op_type}_{i}", node.op_type, est))
    return result


def expose_tensors(source, names: list[str]) -> bytes:
    """The model with ``names`` appended as graph outputs, serialized in memory.

    Args:
        source: model path (external data is loaded) or serialized bytes.
        names: tensor names to expose; existing graph outputs are not duplicated.

    Raises:
        ValueError: the rewritten model would exceed protobuf's 2 GiB limit.
    """
    from onnx import helper

    model = _load(source)
    present = {o.name for o in model.graph.output}
    for name in names:
        if name not in present:
            model.graph.output.append(helper.make_empty_tensor_value_info(name))
            present.add(name)
    try:
        return model.SerializeToString()
    except ValueError as exc:
        raise ValueError(f"the model with exposed tensors cannot be serialized in memory ({exc}); "
                         f"models over 2 GiB cannot be localized this way.") from exc


def run_exposed(request: dict, backend: str, options: dict) -> None:
    """Child side of a round: run the rewritten model once and save the exposed tensors.

    ``request``: ``{"model": path, "expose": [names], "inputs": npz path, "output": npz path}``;
    the output .npz holds ``t<k>`` for ``expose[k]`` (tensors the backend could not return are absent).
    """
    from onnxwrapper import InferenceSession

    data = expose_tensors(request["model"], request["expose"])
    sess = InferenceSession(data, backend=backend, backend_options=options)
    with np.load(request["inputs"], allow_pickle=False) as npz:
        feeds = {name: npz[f"i{k}"] for k, name in enumerate(request["input_names"])}
    outs = sess.run(list(request["expose"]), feeds)
    arrays = {f"t{k}": np.asarray(v) for k, v in enumerate(outs) if isinstance(v, np.ndarray)}
    tmp = request["output"] + ".tmp"
    with open(tmp, "wb") as f:
        np.savez(f, allow_pickle=False, **arrays)
    os.replace(tmp, request["output"])


def _compare(ref: np.ndarray, got: np.ndarray, tol: Tolerance):
    from onnxwrapper.diff._compare import compare_arrays

    return compare_arrays(got, ref, tol)


def localize(*, model_source, model_key: str, inputs: dict, backend: str, backend_options: dict,
             reference: str, reference_options: dict, tolerance: Tolerance, precision: str, workdir: str,
             run_child, call=(0, 0), failing_outputs=(), max_tensors: int = 256,
             max_bytes: int = 512 * 1024 ** 2, max_rounds: int = 8, progress=None) -> Localization:
    """Find the first divergent node of one model for one call (see module docstring).

    Args:
        model_source: the user's model (path or bytes), from the reference capture.
        model_key: the capture's model key (for the report). inputs: ``{name: array}`` of the call.
        backend / backend_options: the backend under test; reference / reference_options: the reference.
        tolerance: applied to every exposed tensor. precision: preset name (selects the range check).
        workdir: directory for round files (requests, inputs, exposed outputs).
        run_child: ``run_child(backend, options, directory, request_path) -> BackendRun``.
        call: ``(session, index)`` of the call, for the report. failing_outputs: names of the failing
            graph outputs (to draw the chain). max_tensors / max_bytes: budget of one round.
        progress: optional ``progress(round, description)``.

    Returns:
        A :class:`~onnxwrapper.diff.Localization`; ``error`` is set when a round failed to run.
    """
    model = _load(model_source)
    shapes = {k: tuple(v.shape) for k, v in inputs.items()}
    cands = candidate_tensors(model, shapes)
    loc = Localization(backend=backend, model=model_key, call=tuple(call))
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
    verdicts: dict[str, tuple] = {}  # tensor -> (passed, metrics, failed, ref max|x|)

    def run_round(subset: list[Candidate]) -> str | None:
        loc.rounds += 1
        names = [c.tensor for c in subset]
        rdir = os.path.join(workdir, f"round{loc.rounds}")
        results = {}
        for side, name, opts in (("reference", reference, reference_options), ("backend", backend, backend_options)):
            sdir = os.path.join(rdir, side)
            os.makedirs(sdir, exist_ok=True)
            req = {"model": model_path, "expose": names, "inputs": inputs_path, "input_names": input_names,
                   "output": os.path.join(sdir, "exposed.npz")}
            req_path = os.path.join(sdir, "request.json")
            with open(req_path, "w", encoding="utf-8") as f:
                json.dump(req, f)
            if progress is not None:
                progress(loc.rounds, f"{len(names)} tensors on {name}")
            run = run_child(name, opts, sdir, req_path)
            if not run.ok:
                return f"{side} '{name}' failed in round {loc.rounds}: {run.message or run.status}"
            with np.load(req["output"], allow_pickle=False) as npz:
                results[side] = {n: npz[f"t{k}"] for k, n in enumerate(names) if f"t{k}" in npz}
        for c in subset:
            r, y = results["reference"].get(c.tensor), results["backend"].get(c.tensor)
            if r is None or y is None:
                continue
            comp = _compare(r, y, tolerance)
            rmax = float(np.nanmax(np.abs(r[np.isfinite(r)]))) if np.isfinite(r).any() else 0.0
            verdicts[c.tensor] = (comp.passed, comp.metrics, comp.failed, rmax)
        loc.tensors_compared = len(verdicts)
        return None

    def first_failing(window: list[Candidate]):
        for c in window:
            v = verdicts.get(c.tensor)
            if v is not None and not v[0]:
                return c
        return None

    total_bytes = sum(c.est_bytes or 0 for c in cands)
    if len(cands) <= max_tensors and total_bytes <= max_bytes:
        loc.method = "all"
        loc.error = run_round(cands) or ""
    else:
        loc.method = "bisect"
        window = cands
        while not loc.error and loc.rounds < max_rounds:
            sample = _sample(window, max_tensors, max_bytes)
            loc.error = run_round(sample) or ""
            bad = first_failing(sample)
            if loc.error or len(sample) == len(window):
                break
            pos = {c.tensor: i for i, c in enumerate(window)}
            if bad is None:
                lo = pos[sample[-1].tensor] + 1
                window = window[lo:]
            else:
                hi = pos[bad.tensor]
                before = [c for c in sample if pos[c.tensor] < hi]
                lo = pos[before[-1].tensor] + 1 if before else 0
                window = window[lo:hi + 1]
            if not window:
                break
    if loc.error:
        loc.message = f"localization incomplete: {loc.error}"
        return loc
    _finish(loc, model, cands, verdicts, precision, failing_outputs)
    return loc


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


def _entry(c: Candidate, verdict) -> dict:
    passed, metrics, failed, rmax = verdict
    keep = ("max_abs_error", "max_rel_error", "cosine_similarity", "snr_db", "nonfinite_mismatch")
    return {"node": c.node, "op_type": c.op_type, "tensor": c.tensor, "index": c.index, "passed": passed,
            "metrics": {k: metrics[k] for k in keep if k in metrics}, "failed": list(failed),
            "reference_max_abs": rmax}


def _finish(loc: Localization, model, cands, verdicts, precision: str, failing_outputs) -> None:
    by_tensor = {c.tensor: c for c in cands}
    first = next((c for c in cands if c.tensor in verdicts and not verdicts[c.tensor][0]), None)
    limit = _RANGE.get(precision)
    if limit is not None:
        for c in cands:
            v = verdicts.get(c.tensor)
            if v is not None and v[3] > limit:
                loc.suspects.append({"node": c.node, "op_type": c.op_type, "tensor": c.tensor,
                                     "max_abs": v[3], "limit": limit, "precision": precision})
    if first is None:
        loc.message = ("no exposed intermediate tensor breaks tolerance: the divergence appears only when the "
                       "graph runs unmodified (exposing outputs changed how the backend compiled it).")
        return
    loc.first = _entry(first, verdicts[first.tensor])
    # the chain: nodes downstream of the first failing tensor that lead to a failing output
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
    up, frontier = set(), [t for t in targets]
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
            c = by_tensor.get(out)
            if c is not None and out in verdicts:
                loc.chain.append(_entry(c, verdicts[out]))
            elif c is None and out:
                loc.chain.append({"node": node.name or f"{node.op_type}_{i}", "op_type": node.op_type,
                                  "tensor": out, "index": i, "passed": None, "metrics": {}, "failed": []})
    m = loc.first["metrics"]
    loc.message = (f"first divergent node: '{first.node}' ({first.op_type}), output '{first.tensor}': "
                   f"max |Δ| {m.get('max_abs_error', float('nan')):.3g}, cosine "
                   f"{m.get('cosine_similarity', float('nan')):.6f}; failed {', '.join(loc.first['failed'])}.")
    if loc.suspects:
        s = loc.suspects[0]
        loc.message += (f" Suspect: '{s['node']}' ({s['op_type']}) produces |x| up to {s['max_abs']:.4g} on the "
                        f"reference, beyond the {precision.upper()} range (±{s['limit']:g}): an overflow there "
                        f"reaches '{first.node}'.")
