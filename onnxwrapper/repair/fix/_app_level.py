"""``aipc fix`` for an app-level mismatch whose tensors all pass: the decision-sensitive output.

A script can print something else on the NPU although every model output is within tolerance: a
small difference lands on the other side of a threshold or an argmax in the script's own code (a
Thai word segmenter: one line differs, every tensor passes). No tensor is wrong, so nothing is
localized; what can be done is to compute the output that decides *more exactly*. The decision-
sensitive output is:

* the first call fed other inputs than on the reference (a pipeline: an earlier model's output
  changed what a later one saw) — then the outputs of the model called last before it;
* else the output closest to failing (lowest SNR) of that backend.

Candidates, cheapest first: the subgraph producing that output on the CPU — its producer alone, the
last quarter of the nodes it depends on, all of them — then the model at the backend's higher
precision. Each is judged by the app's own output: the script runs again under ``aipc diff`` with
the candidate recipe (``repairs={"file": …, "required": False}``), and the first whose run passes at
both levels (app output identical, tensors within tolerance) is the recipe.
"""

from __future__ import annotations

import math
import os
import time

import onnx

from onnxwrapper.repair.fix._candidates import node_groups
from onnxwrapper.repair.fix._result import ModelFix
from onnxwrapper.repair.fix._verify import Trial
from onnxwrapper.patches import name_unnamed_nodes
from onnxwrapper.repair.recipe import ModelRecipe, RecipeBook

__all__ = ["decision_output", "app_candidates", "fix_app_level"]


def decision_output(result, label: str, reference) -> tuple[str, str] | None:
    """``(model key, output name)`` that decides ``label``'s app-level difference (module docstring)."""
    mine = [s for s in result.outputs if s.backend == label and s.worst is not None]
    if not mine:
        return None

    def snr(s):
        value = s.worst.metrics.get("snr_db", math.inf)
        return math.inf if value is None or (isinstance(value, float) and math.isnan(value)) else value
    differ = result.inputs_differ.get(label) or []
    if differ:
        by_key = reference.calls_by_key()
        first = by_key.get(tuple(differ[0]))
        if first is not None:
            earlier = [c for c in reference.calls if c.seq < first.seq and c.model != first.model]
            if earlier:
                model = earlier[-1].model
                outs = [s for s in mine if s.model == model]
                if outs:
                    low = min(outs, key=snr)
                    return low.model, low.output
    low = min(mine, key=snr)
    return low.model, low.output


def _cone(model: onnx.ModelProto, output: str) -> list:
    """Names of the nodes ``output`` depends on, in graph order."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    seen, todo = set(), [output]
    while todo:
        node = producer.get(todo.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        todo += [t for t in node.input if t]
    return [n.name for n in model.graph.node if n.name in seen and n.op_type != "Constant"]


def app_candidates(model: onnx.ModelProto, output: str, higher_precision: str | None) -> list:
    """``[(kind, title, cpu_subgraphs, precision)]``, cheapest first (module docstring)."""
    named = onnx.ModelProto()
    named.CopyFrom(model)
    name_unnamed_nodes(named)
    cone = _cone(named, output)
    result, seen = [], set()
    for size, what in ((1, "its producer"), (max(1, len(cone) // 4), "the last quarter of its subgraph"),
                       (len(cone), "its whole subgraph")):
        tail = tuple(cone[-size:])
        if not tail or tail in seen:
            continue
        seen.add(tail)
        result.append(("cpu", f"'{output}': {what} on the CPU ({len(tail)} node(s))", node_groups(named, tail), None))
    if higher_precision:
        result.append(("precision", f"the model at precision {higher_precision}", (), higher_precision))
    return result


def fix_app_level(fixes, result_check, reference, label: str, *, workdir: str, higher_precision, confirm, say,
                  try_all: bool = False) -> ModelFix | None:
    """Try the candidates of ``label``'s decision-sensitive output, each judged by the script's own output.

    Args:
        fixes: the :class:`~onnxwrapper.diff.FixResult` (its ``confirmation`` is set to the passing run).
        result_check: the diff's result. reference: the reference capture. label: the backend run.
        workdir: where candidate recipes go. higher_precision: the backend's higher precision or ``None``.
        confirm: ``confirm(recipe_path) -> DiffResult``: the script under ``aipc diff`` with that recipe.
        say: progress callback. try_all: judge every candidate.

    Returns:
        The :class:`ModelFix` (``recipe`` set when a candidate passed), or ``None`` when no output was
        compared for ``label``.
    """
    found = decision_output(result_check, label, reference)
    if found is None:
        return None
    key, output = found
    info = reference.models[key]
    source = info.model_source()
    data = source if isinstance(source, bytes) else open(source, "rb").read()
    proto = onnx.load_model_from_string(data)
    mf = ModelFix(backend=label, model=key, sha256=info.sha256)
    mf.notes.append(f"app level: the script's output differs while every tensor passes; decision-sensitive output: "
                    f"{key}/{output} (judged by the script's own output, not by replays)")
    name = os.path.basename(info.path) if info.path else ""
    os.makedirs(workdir, exist_ok=True)
    for k, (kind, title, groups, precision) in enumerate(app_candidates(proto, output, higher_precision), 1):
        recipe = ModelRecipe(info.sha256, name, key, (), groups, precision,
                             note=f"app level: {title} — exact (the CPU's or a higher precision's arithmetic)")
        path = RecipeBook({info.sha256: recipe}).save(os.path.join(workdir, f"candidate-{k}.json"))
        say(f"{label} {key}: app-level candidate {k}: {title}")
        start = time.perf_counter()
        run = confirm(path)
        trial = Trial(kind, title, recipe, "exact: the CPU's (or the higher precision's) arithmetic for that subgraph",
                      directory=os.path.dirname(path))
        trial.seconds = time.perf_counter() - start
        trial.status = "pass" if run.passed else "fail"
        trial.message = run.verdict_line()
        trial.total_nodes = len(proto.graph.node)
        trial.npu_nodes = trial.total_nodes - len(recipe.cpu_nodes)
        trial.cpu_nodes = list(recipe.cpu_nodes)
        mf.trials.append(trial)
        if run.passed and mf.recipe is None:
            mf.chosen, mf.recipe, fixes.confirmation = trial, recipe, run
            if not try_all:
                break
    return mf
