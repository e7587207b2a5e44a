"""The repair search of one failing model (``aipc fix``): CPU work first, QNN compiles for verification.

Stages, each timed (``ModelFix.stages``) and stated in the search path (``ModelFix.path``):

1. **localization** — the diff's own (``aipc diff --localize``), reused as it is, even when it is
   incomplete (a localization is never run twice on the backend); none yet: deferred (step 5).
2. **candidates, on the CPU** — the reference's value ranges (overflow, underflow), the exact and
   kernel rewrites, and for FP16 drift the CPU regions found by the FP16 emulation
   (:mod:`onnxwrapper.repair.fix._candidates`); then each candidate's FP16 emulation (its recipe
   applied, its CPU groups in FP32). No compile.
3. **baseline** — the unrepaired model as the diff itself ran and judged it, on the reference's
   inputs (:func:`~onnxwrapper.repair.fix._verify.baseline_from_diff`: no run); replayed only when
   the diff's run was fed other inputs (a pipeline) — its compile is then the diff's cache entry.
4. **verification** — the candidates in order, each replayed on the backend with its recipe in a
   child process (one compile each); a candidate the emulation predicts more than :data:`SLACK_DB`
   below a bar is skipped (``skipped``, with the figure): no rewrite that assumes right kernels can
   pass where right kernels in FP16 do not, so compiles are spent on the few that may pass.
5. **deferred localization** — only when nothing passed and the diff did not localize: the
   backend's localization rounds, then the candidates it adds (kernel rewrites, the culprit on the
   CPU), verified the same way.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time

import onnx

from onnxwrapper.diff._capture import CaptureFormatError, read_capture
from onnxwrapper.diff._localize import localize_failures
from onnxwrapper.diff._report import sanitize
from onnxwrapper.errors import RecipeError
from onnxwrapper.repair.fix._candidates import candidates_for
from onnxwrapper.repair.fix._emulate import Emulator
from onnxwrapper.repair.fix._explain import clamp_notes, why_not_repaired
from onnxwrapper.repair.fix._ranges import reference_ranges
from onnxwrapper.repair.fix._verify import Trial, baseline_from_diff, run_trial
from onnxwrapper.repair.recipe import ModelRecipe, apply_recipe, recipe_targets, scaled_tensors

__all__ = ["SLACK_DB", "fix_model", "model_bytes"]

_RANGE_CALLS = 8
_SPREAD_CALLS = 24
#: a candidate whose FP16 emulation puts an output this far below its bar is not verified (half a bit)
SLACK_DB = 3.0
_EMULATED_FEEDS = 4


def model_bytes(source) -> bytes:
    """The bytes of a capture's model source (bytes, or a path)."""
    if isinstance(source, bytes):
        return source
    with open(source, "rb") as f:
        return f.read()


class _Stages:
    """Wall time per stage of one model's repair, appended to ``mf.stages`` as ``[name, seconds]``."""

    def __init__(self, mf) -> None:
        self.mf, self.start = mf, time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.mf.stages.append([name, round(now - self.start, 3)])
        self.start = now


def _capture(result_check, label: str):
    """The diff's capture of run ``label`` (``None`` when it has none or it cannot be read)."""
    run_ = result_check.runs.get(label)
    try:
        return read_capture(run_.capture_dir) if run_ is not None and run_.capture_dir else None
    except (CaptureFormatError, OSError):
        return None


def _bars(result_check, mf) -> dict:
    """``{output: SNR bar (dB)}`` of the model's outputs in the diff (its tolerances)."""
    bars = {}
    for s in result_check.outputs:
        if s.backend == mf.backend and s.model == mf.model and s.tolerance is not None:
            bar = getattr(s.tolerance, "min_snr_db", None)
            if isinstance(bar, (int, float)) and math.isfinite(bar):
                bars[s.output] = float(bar)
    return bars


def _key(cand) -> str:
    return json.dumps([[r.to_dict() for r in cand.rewrites], [list(g) for g in cand.cpu_subgraphs], cand.precision],
                      sort_keys=True)


def _emulate(candidates, proto, feeds, notes: list) -> None:
    """Fill in ``emulated`` of each candidate without one: its recipe applied, its CPU groups in FP32,
    the rest FP16-emulated on the CPU (:class:`~onnxwrapper.repair.fix._emulate.Emulator`; one CPU
    run each)."""
    try:
        emulator = Emulator(proto, feeds)
    except Exception as exc:  # noqa: BLE001 - a model the CPU EP cannot run: nothing is screened
        notes.append(f"FP16 emulation not run ({type(exc).__name__}: {str(exc)[:160]}): every candidate is verified")
        return
    for cand in candidates:
        if cand.emulated is not None:
            continue
        try:
            repaired = apply_recipe(proto, ModelRecipe("0" * 64, rewrites=cand.rewrites, cpu_subgraphs=cand.cpu_subgraphs))
            cand.emulated = emulator.snr(repaired.cpu_nodes, model=repaired.proto)
        except Exception:  # noqa: BLE001 - this candidate is verified unscreened
            cand.emulated = None


def _screened(cand, bars: dict) -> str:
    """Why the FP16 emulation rules ``cand`` out (``""``: verify it): an output predicted more than
    :data:`SLACK_DB` below its bar. The emulation assumes every kernel right and rounds tensors, not
    the arithmetic inside an operator, so it is a screen with slack, not a verdict."""
    if not cand.emulated or cand.precision:
        return ""
    low = [(o, v, bars.get(o)) for o, v in cand.emulated.items() if bars.get(o) is not None and v < bars[o] - SLACK_DB]
    if not low:
        return ""
    o, v, bar = min(low, key=lambda x: x[1] - x[2])
    return (f"not verified: the FP16 emulation on the CPU predicts '{o}' at {v:.1f} dB < bar {bar:.1f} dB "
            f"(no compile spent)")


def fix_model(mf, run_, reference, result_check, tolerances, remedies, workdir, *, max_calls, try_all, timeout, env,
              say, higher_precision, localize: bool) -> None:
    """Search a recipe for ``mf`` (a :class:`~onnxwrapper.repair.fix._result.ModelFix` whose
    ``localization`` is the diff's, or ``None``) by the stages of the module docstring; fills in its
    baseline, trials, chosen recipe, notes, path and stages.

    Args:
        run_: the diff's run of the backend. reference: the reference capture. result_check: the
            diff's result. tolerances: its tolerances. remedies: the kinds to try. workdir: the trials'
            folder. max_calls / try_all / timeout / env / say: as for :func:`~onnxwrapper.repair.fix.fix`.
        higher_precision: a simulator mode asked for by name (``"fp32"``) or ``None`` (device-valid).
        localize: localize on the backend when nothing passed and the diff did not.
    """
    stages = _Stages(mf)
    info = reference.models[mf.model]
    proto = onnx.load_model_from_string(model_bytes(info.model_source()))
    loc = mf.localization
    if loc and loc.get("cause"):
        mf.path.append(f"localization: the diff's (reused, not repeated): {loc.get('cause')}"
                       + (f" at '{(loc.get('culprit') or {}).get('node')}'" if loc.get("culprit") else ""))
    elif loc:
        mf.path.append(f"localization: the diff's was incomplete ({str(loc.get('error') or loc.get('message'))[:160]});"
                       f" not repeated on the backend — candidates from the CPU's measurements")
        loc = None
    else:
        mf.path.append("localization: none in the diff; the CPU's measurements first (value ranges, FP16 emulation), "
                       "the backend's rounds only if no candidate passes")
    stages.done("localization (read)")
    worst = [s.worst for s in result_check.outputs if s.backend == mf.backend and s.model == mf.model
             and s.worst is not None and not s.passed]
    first = {(w.session, w.index) for w in worst}
    calls = [c for c in reference.calls if c.model == mf.model and c.method != "run_with_iobinding"]
    calls.sort(key=lambda c: ((c.session, c.index) not in first, c.seq))
    calls = calls[:max_calls] if max_calls else calls
    mf.calls = [(c.session, c.index) for c in calls]
    precision = next((s.precision for s in result_check.outputs if s.backend == mf.backend and s.model == mf.model),
                     "fp16")
    bars = _bars(result_check, mf)
    say(f"{mf.backend} {mf.model}: candidates (on the CPU)")
    # value ranges: the worst calls first, then calls spread over the recording (the loudest and the
    # quietest inputs bound the power-of-two scales: an upscale for a quiet call must not overflow a loud one)
    spread = calls[_RANGE_CALLS::max(1, (len(calls) - _RANGE_CALLS) // _SPREAD_CALLS)][:_SPREAD_CALLS]
    feeds = [c.inputs() for c in calls[:_RANGE_CALLS] + spread]
    candidates, notes = candidates_for(proto, loc, feeds, precision, remedies=remedies,
                                       higher_precision=higher_precision, bars=bars)
    mf.notes += notes
    _emulate(candidates, proto, feeds[:_EMULATED_FEEDS], mf.notes)
    mf.path.append(f"candidates on the CPU: {len(candidates)} ("
                   + (", ".join(dict.fromkeys(c.kind for c in candidates)) or "none") + ")")
    stages.done("candidates on the CPU (value ranges, rewrites, FP16 emulation)")
    common = dict(label=mf.backend, backend=run_.backend, options=dict(run_.options), reference=reference,
                  model=mf.model, calls=mf.calls, tolerances=tolerances, timeout=timeout, env=dict(env or {}))
    mf.baseline = baseline_from_diff(result_check, mf.backend, mf.model, _capture(result_check, mf.backend), mf.calls)
    if mf.baseline is not None:
        mf.path.append("baseline: the diff's own run of the model (same inputs as the reference), not replayed")
        stages.done("baseline (read from the diff)")
    else:
        say(f"{mf.backend} {mf.model}: baseline (no repair)")
        mf.baseline = run_trial(Trial("baseline", "the model as it is", directory=os.path.join(workdir, "baseline")),
                                nodes=len(proto.graph.node), **common)
        stages.done("baseline replay")
    name = os.path.basename(info.path) if info.path else ""
    tried: set = set()
    _verify_all(mf, candidates, proto, name, feeds, bars, workdir, common, try_all, say, tried, stages)
    if mf.recipe is None and loc is None and localize and mf.baseline.status == "fail":
        say(f"{mf.backend} {mf.model}: no candidate from the CPU passed: localizing on the backend")
        found = localize_failures(result_check, timeout=timeout, env=dict(env or {}), only={(mf.backend, mf.model)})
        stages.done("localization on the backend (deferred)")
        loc = next((d.to_dict() for d in found if d.cause), None)
        mf.localization = loc or (found[0].to_dict() if found else None)
        mf.path.append(f"localization on the backend (deferred): {(loc or {}).get('cause') or 'no cause found'}")
        if loc:
            more, notes = candidates_for(proto, loc, feeds, precision, remedies=remedies,
                                         higher_precision=higher_precision, bars=bars)
            more = [c for c in more if _key(c) not in tried]
            mf.notes += [n for n in notes if n not in mf.notes]
            _emulate(more, proto, feeds[:_EMULATED_FEEDS], mf.notes)
            mf.path.append(f"candidates it adds: {len(more)}")
            _verify_all(mf, more, proto, name, feeds, bars, workdir, common, try_all, say, tried, stages)
    mf.notes += clamp_notes(mf.baseline, mf.trials)
    if mf.recipe is None:
        mf.notes += why_not_repaired(proto, mf.localization, mf.baseline, mf.trials)
    mf.path.append("result: " + (f"{mf.chosen.kind} — {mf.chosen.title}" if mf.chosen is not None else
                                 "no candidate passed"))


def _verify_all(mf, candidates, proto, name, feeds, bars, workdir, common, try_all, say, tried, stages) -> None:
    for cand in candidates:
        if mf.recipe is not None and not try_all:
            return
        tried.add(_key(cand))
        k = len(mf.trials) + 1
        recipe = ModelRecipe(mf.sha256, name, mf.model, cand.rewrites, cand.cpu_subgraphs, cand.precision,
                             targets=recipe_targets(cand.precision))
        trial = Trial(cand.kind, cand.title, recipe, cand.exactness, directory=os.path.join(workdir, f"candidate-{k}"),
                      emulated=cand.emulated)
        mf.notes += cand.notes
        skip = _screened(cand, bars)
        if skip:
            trial.status, trial.message = "skipped", skip
            mf.trials.append(trial)
            continue
        say(f"{mf.backend} {mf.model}: candidate {k}: {cand.title}")
        mf.trials.append(run_trial(trial, nodes=_node_count(proto, recipe), **common))
        stages.done(f"candidate {k} ({cand.kind})")
        if trial.passed and mf.recipe is None:
            mf.chosen = trial
            mf.recipe = _with_checks(_verified(recipe, trial, mf, common), proto, feeds)


def _with_checks(recipe: ModelRecipe, proto, feeds) -> ModelRecipe:
    """``recipe`` with the reference's peak of every tensor its rescales scale (``checks.peaks``),
    over the same calls ``feeds`` the candidates were chosen from, which backends check where they
    apply it (:func:`onnxwrapper.repair.check_recipe`)."""
    scaled = scaled_tensors(proto, recipe)
    if not scaled:
        return recipe
    ranges, _order = reference_ranges(proto, feeds)
    return dataclasses.replace(recipe, checks={"peaks": {t: float(ranges[t]) for t in scaled if t in ranges}})


def _node_count(proto, recipe: ModelRecipe) -> int | None:
    try:
        return len(apply_recipe(proto, recipe).proto.graph.node)
    except RecipeError:
        return None


def _verified(recipe: ModelRecipe, trial: Trial, mf, common: dict) -> ModelRecipe:
    base = mf.baseline
    verified = {"backend": common["backend"], "options": dict(common["options"]), "calls": trial.calls,
                "worst_output": (trial.worst or {}).get("output"), "worst_snr_db": (trial.worst or {}).get("snr_db"),
                "bar_db": trial.bar_db, "npu_nodes": trial.npu_nodes, "total_nodes": trial.total_nodes,
                "seconds_per_call": trial.call_seconds,
                "unrepaired": {"worst_snr_db": (base.worst or {}).get("snr_db") if base else None,
                               "npu_nodes": base.npu_nodes if base else None,
                               "seconds_per_call": base.call_seconds if base else None}}
    note = f"{trial.kind}: {trial.title}" + (f" — {trial.exactness}" if trial.exactness else "")
    return dataclasses.replace(recipe, verified=sanitize(verified), note=note)
