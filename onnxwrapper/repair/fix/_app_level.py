"""``aipc fix`` at app level: the script's output differs while every tensor passes — searched to the end.

A script can print something else on the NPU although every model output is within tolerance: a
small difference lands on the other side of a threshold or an argmax in the script's own code (a
Thai word segmenter: one line differs, every tensor passes). It happens in the diff itself, or
after the model-level repairs, in the confirmation run (the model that failed is repaired, another
model's FP16 result still flips a decision). Every step here is judged by the app's own output: the
script runs again under ``aipc diff`` with a recipe file (``repairs={"file": …, "required":
False}``), and a step passes when that run passes at both levels.

1. **Which model flips it.** Each model of the run in turn — the decision-sensitive one first (below),
   then by its lowest SNR — runs entirely on the CPU while every other model keeps the NPU and the
   recipes found so far (the reverse of replaying one model's NPU outputs into a CPU run). The first
   whose run passes is the model whose NPU outputs flip the app's output; that run is also the
   fallback recipe (the whole model on the CPU).
2. **The decision-sensitive region inside it.** Its decision-sensitive output is the output read
   just before the first call fed other inputs than on the reference (a pipeline: this model's
   output changed what a later one saw), else its output closest to failing. Candidates, cheapest
   first, each on top of the model's recipe so far: the subgraph on the CPU — its producer, the last
   quarter of the nodes it depends on —; a kernel-avoiding rewrite at every node of that output's
   subgraph it applies to (none that would more than double the model); an exact upscale
   (``rescale``) of FP16 underflow there; all of the subgraph on the CPU; the model at a simulator
   precision when asked for by name. The first whose run passes is the recipe; when none does, the
   whole model on the CPU (step 1) is.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import onnx

from onnxwrapper.patches import GraphView, list_patches, name_unnamed_nodes
from onnxwrapper.repair.fix._candidates import node_groups
from onnxwrapper.repair.fix._emulate import control_nodes
from onnxwrapper.repair.fix._regions import upstream_nodes
from onnxwrapper.repair.fix._result import ModelFix
from onnxwrapper.repair.fix._underflow import exact_underflow_rewrites
from onnxwrapper.repair.fix._verify import Trial
from onnxwrapper.repair.recipe import ModelRecipe, RecipeBook, Rewrite, apply_recipe, recipe_targets

__all__ = ["app_candidates", "decision_output", "search_app_level"]

_NOT_KERNEL = {"rescale", "clamp_fp16"}


def _snr(s) -> float:
    value = s.worst.metrics.get("snr_db", math.inf) if s.worst is not None else math.inf
    return math.inf if value is None or (isinstance(value, float) and math.isnan(value)) else value


def decision_output(result, label: str, reference, model: str | None = None) -> tuple[str, str] | None:
    """``(model key, output name)`` that decides ``label``'s app-level difference (module docstring),
    among the outputs of ``model`` when given."""
    mine = [s for s in result.outputs if s.backend == label and s.worst is not None and (model is None or s.model == model)]
    if not mine:
        return None
    differ = result.inputs_differ.get(label) or []
    if differ:
        first = reference.calls_by_key().get(tuple(differ[0]))
        if first is not None:
            earlier = [c for c in reference.calls if c.seq < first.seq and c.model != first.model]
            outs = [s for s in mine if earlier and s.model == earlier[-1].model]
            if outs:
                low = min(outs, key=_snr)
                return low.model, low.output
    low = min(mine, key=_snr)
    return low.model, low.output


def _cone(model: onnx.ModelProto, output: str) -> list:
    """Names of the nodes ``output`` depends on, in graph order — those that compute a float (shape
    and control computations are copied into each part by the split, and a specialization may fold
    them away: a recipe never names them)."""
    control = control_nodes(model)
    return [n.name for n in upstream_nodes(model, [output]) if n.name not in control]


def app_candidates(model: onnx.ModelProto, output: str, higher_precision: str | None, feeds_list=(),
                   recipe: ModelRecipe | None = None) -> list:
    """``[(kind, title, rewrites, cpu_subgraphs, precision)]`` for ``output``, cheapest first (module
    docstring, step 2), each including ``recipe``'s rewrites and CPU groups (the model's repair so far;
    node names are those after its rewrites)."""
    base = recipe.rewrites if recipe is not None else ()
    groups0 = tuple(recipe.cpu_subgraphs) if recipe is not None else ()
    named = apply_recipe(model, ModelRecipe("0" * 64, rewrites=base)).proto if base else _named(model)
    cone = _cone(named, output)
    regions, seen = [], set()
    for size, what in ((1, "its producer"), (max(1, len(cone) // 4), "the last quarter of its subgraph"),
                       (len(cone), "its whole subgraph")):
        tail = tuple(cone[-size:])
        if not tail or tail in seen:
            continue
        seen.add(tail)
        regions.append(("cpu", f"'{output}': {what} on the CPU ({len(tail)} node(s))", base,
                        groups0 + node_groups(named, tail), None))
    rewrites = _kernel_steps(named, cone, output, base, groups0)
    if feeds_list:
        try:
            under, _why = exact_underflow_rewrites(model, list(feeds_list), base)
        except Exception:  # noqa: BLE001 - a model the CPU EP cannot run with every tensor exposed
            under = []
        if under:
            rewrites.append(("exact", f"{len(under)} exact upscale(s) of FP16 underflow", base + tuple(under), groups0,
                             None))
    result = regions[:-1] + rewrites + regions[-1:]  # the whole subgraph on the CPU last: it costs the most NPU
    if higher_precision:
        result.append(("precision", f"the model at precision {higher_precision} (a simulator mode)", base, groups0,
                       higher_precision))
    return result


def _kernel_steps(named: onnx.ModelProto, cone: list, output: str, base: tuple, groups0: tuple) -> list:
    """A kernel-avoiding rewrite at every node of ``cone`` it applies to, per rewrite — unless it would
    more than double the model (``conv_taps`` on an STFT's 256-tap ``Conv``: a compile past its budget).
    Nodes the model's recipe already runs on the CPU (``groups0``) are left alone: no HTP kernel runs
    them, and a rewrite would replace nodes the recipe's CPU subgraphs name (silero-vad's ``/stft/Pow``:
    the candidate was refused with "puts nodes on the CPU that the model does not have")."""
    view, nodes = GraphView(named), {n.name: n for n in named.graph.node}
    done = {(r.rewrite, r.node) for r in base}
    on_cpu = {n for group in groups0 for n in group}
    steps = []
    for patch in list_patches():
        if patch.name in _NOT_KERNEL:
            continue
        hits = tuple(Rewrite(patch.name, n) for n in cone if (patch.name, n) not in done and n not in on_cpu
                     and patch.targets(nodes[n]) and patch.matches(nodes[n], view))
        if not hits:
            continue
        try:
            grown = len(apply_recipe(named, ModelRecipe("0" * 64, rewrites=hits)).proto.graph.node) - len(named.graph.node)
        except Exception:  # noqa: BLE001 - a rewrite that does not apply here is not a step
            continue
        if grown <= max(64, len(named.graph.node)):
            steps.append(("kernel", f"{patch.name} at the {len(hits)} node(s) of '{output}''s subgraph it applies to",
                          base + hits, groups0, None))
    return steps


def _named(model: onnx.ModelProto) -> onnx.ModelProto:
    named = onnx.ModelProto()
    named.CopyFrom(model)
    name_unnamed_nodes(named)
    return named


class _Judge:
    """Runs the script with a recipe book and records the run as a trial of ``mf``."""

    def __init__(self, mf: ModelFix, book: dict, workdir: str, confirm, say, total_nodes: int) -> None:
        self.mf, self.book, self.workdir, self.confirm, self.say = mf, book, workdir, confirm, say
        self.total_nodes = total_nodes
        self.runs: dict = {}

    def __call__(self, kind: str, title: str, recipe: ModelRecipe):
        key = recipe.digest()
        k = len(self.mf.trials) + 1
        trial = Trial(kind, title, recipe, "exact rewrites, or the CPU's arithmetic for that subgraph",
                      directory=os.path.join(self.workdir, f"candidate-{k}"))
        start = time.perf_counter()
        if key in self.runs:  # the same recipe as an earlier step: judged once
            run = self.runs[key]
            trial.message = "the same recipe as an earlier step (judged once): " + run.verdict_line()
        else:
            os.makedirs(trial.directory, exist_ok=True)
            path = RecipeBook({**self.book, recipe.sha256: recipe}).save(os.path.join(trial.directory, "recipe.json"))
            self.say(f"{self.mf.backend} {self.mf.model}: app-level step {k}: {title}")
            run = self.runs[key] = self.confirm(path)
            trial.message = run.verdict_line()
        trial.seconds = time.perf_counter() - start
        trial.status = "pass" if run.passed else "fail"
        trial.total_nodes = self.total_nodes
        trial.npu_nodes = self.total_nodes - len(recipe.cpu_nodes)
        trial.cpu_nodes = list(recipe.cpu_nodes)
        self.mf.trials.append(trial)
        return trial, run


def _models(result, label: str, reference) -> list:
    """The model keys of ``label``'s run, the decision-sensitive one first, then by lowest SNR."""
    called = list(dict.fromkeys(c.model for c in reference.calls))
    low = {}
    for s in result.outputs:
        if s.backend == label:
            low[s.model] = min(low.get(s.model, math.inf), _snr(s))
    found = decision_output(result, label, reference)
    order = sorted(called, key=lambda m: (found is None or m != found[0], low.get(m, math.inf)))
    return order


def search_app_level(fixes, result, reference, label: str, *, book: dict, workdir: str, higher_precision, confirm,
                     say, try_all: bool = False, feeds_of=None) -> ModelFix | None:
    """The app-level search of ``label`` (module docstring), on top of the recipes ``book``.

    Args:
        fixes: the :class:`~onnxwrapper.repair.fix.FixResult` (its ``confirmation`` becomes the passing run).
        result: the diff (or confirmation) result whose app output differs while its tensors pass.
        reference: the reference capture. book: ``{sha256: ModelRecipe}`` found so far (model level).
        workdir: where the steps' recipe files go. higher_precision: a simulator mode asked for by name.
        confirm: ``confirm(recipe_path) -> DiffResult``: the script under ``aipc diff`` with that file.
        say: progress callback. try_all: judge every step of the model found.
        feeds_of: ``feeds_of(model key) -> [feeds]``: recorded inputs (for the underflow search).

    Returns:
        A :class:`ModelFix` for the model found (``recipe`` set when a step passed; its ``path`` lists
        the steps), or ``None`` when ``label`` compared no output.
    """
    models = _models(result, label, reference)
    if not models:
        return None
    mf = ModelFix(backend=label, model=models[0], sha256=reference.models[models[0]].sha256)
    mf.notes.append("app level: the script's output differs while every tensor passes (judged by the script's own "
                    "output, not by replays)")
    found = None
    for key in models:  # step 1: which model's NPU outputs flip the app's output
        info = reference.models[key]
        proto = _named(onnx.load_model_from_string(_bytes(info.model_source())))
        mf.model, mf.sha256 = key, info.sha256
        judge = _Judge(mf, book, os.path.join(workdir, key), confirm, say, len(proto.graph.node))
        control = control_nodes(proto)
        every = tuple(n.name for n in proto.graph.node if n.op_type != "Constant" and n.name not in control)
        prior = book.get(info.sha256)
        if prior is not None and ((not prior.rewrites and set(every) <= set(prior.cpu_nodes))
                                  or (prior.verified or {}).get("npu_nodes") == 0):
            mf.path.append(f"'{key}' runs on the CPU already (its recipe): not the one")
            continue
        whole = ModelRecipe(info.sha256, os.path.basename(info.path or ""), key, (), (every,), None,
                            targets=recipe_targets(None))
        trial, run = judge("cpu", f"which model flips it: '{key}' entirely on the CPU, every other model on the NPU",
                           whole)
        mf.path.append(f"'{key}' entirely on the CPU: {'the app output agrees' if trial.passed else 'still differs'}")
        if trial.passed:
            found = (key, info, proto, judge, trial, run)
            break
    if found is None:
        mf.notes.append("no single model's NPU outputs flip the app's output: each one alone on the CPU still differs")
        return mf
    key, info, proto, judge, whole_trial, whole_run = found
    output = (decision_output(result, label, reference, key) or (key, proto.graph.output[0].name))[1]
    mf.path.append(f"decision-sensitive output of '{key}': '{output}'")
    prior = book.get(info.sha256)
    steps = app_candidates(proto, output, higher_precision, (feeds_of(key) if feeds_of else ())[:8], prior)
    chosen = None
    for kind, title, rewrites, groups, precision in steps:
        recipe = ModelRecipe(info.sha256, os.path.basename(info.path or ""), key, tuple(rewrites), tuple(groups),
                             precision, targets=recipe_targets(precision),
                             note=f"app level: {title}")
        trial, run = judge(kind, title, recipe)
        mf.path.append(f"{title}: {'passes' if trial.passed else 'the app output still differs'}")
        if trial.passed and chosen is None:
            chosen = (trial, run)
            if not try_all:
                break
    if chosen is None:
        chosen = (whole_trial, whole_run)
        mf.path.append("no smaller region passed: the whole model on the CPU (step 1) is the recipe")
    trial, run = chosen
    mf.chosen, fixes.confirmation = trial, run
    mf.recipe = dataclasses.replace(trial.recipe, note=f"app level: {trial.title}",
                                    verified={"backend": label, "judged_by": "the script's own output",
                                              "verdict": run.verdict_line()})
    return mf


def _bytes(source) -> bytes:
    if isinstance(source, bytes):
        return source
    with open(source, "rb") as f:
        return f.read()
