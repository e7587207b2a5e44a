"""``aipc fix``: from a failing diff to a verified repair recipe (docs/repair.md).

For each (backend run, model) of a diff directory whose outputs failed on values:

1. the localization — read from the diff's ``report.json``, or run now (``--localize``'s rounds);
2. the candidates, cheapest and most exact first (:mod:`onnxwrapper.repair.fix._candidates`):
   exact rewrites, kernel-avoiding rewrites, the culprit on the CPU, higher precision;
3. each candidate is verified by replaying the model's recorded calls on the backend with the
   candidate's recipe and judging them with the diff's own tolerances
   (:mod:`onnxwrapper.repair.fix._verify`); the unrepaired model is replayed the same way first (the
   baseline: the failure must reproduce, and it is what the costs are measured against);
4. the first candidate that passes (every one with ``try_all``) goes into the recipe file, keyed by
   the model's sha256, with how it was verified and what it costs (NPU nodes, seconds per call).

Then, for a script diff, the script runs again under ``aipc diff`` with the recipe applied
(``repairs={"file": …, "required": False}``) to confirm the app-level result. A diff directory
made from a model instead of a script works the same (its captures have the same format); only
the confirmation run is skipped. The backend must take the ``repairs`` option (``qnn`` does).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable, Iterable, Mapping

import onnx

from onnxwrapper._registry import default_registry
from onnxwrapper.diff._api import check, run
from onnxwrapper.diff._capture import (MANIFEST, local_record, malformed, read_capture, read_manifest, read_saved_report,
                                       unused_stem)
from onnxwrapper.diff._judge import Tolerance, Tolerances
from onnxwrapper.diff._localize import localize_failures
from onnxwrapper.diff._report import sanitize
from onnxwrapper.errors import RecipeError
from onnxwrapper.repair.fix._app_level import fix_app_level
from onnxwrapper.repair.fix._candidates import REMEDIES, candidates_for
from onnxwrapper.repair.fix._confirm import ConfirmCommand, confirm_command
from onnxwrapper.repair.fix._explain import clamp_notes, why_not_repaired
from onnxwrapper.repair.fix._ranges import reference_ranges
from onnxwrapper.repair.fix._result import FixResult, ModelFix
from onnxwrapper.repair.fix._verify import Trial, run_trial
from onnxwrapper.repair.recipe import ModelRecipe, RecipeBook, apply_recipe, scaled_tensors

__all__ = ["fix", "tolerances_from_dict"]

_RANGE_CALLS = 8
_SPREAD_CALLS = 24


def tolerances_from_dict(doc: Mapping | None) -> Tolerances:
    """The :class:`~onnxwrapper.diff.Tolerances` of a report's ``tolerances`` object (its inverse of
    ``Tolerances.to_dict``)."""
    doc = doc or {}

    def tol(d):
        return Tolerance(**{k: v for k, v in d.items() if k in Tolerance.__dataclass_fields__})
    default = tol(doc["default"]) if doc.get("default") else None
    overrides = [(p, tol(c) if isinstance(c, Mapping) and "preset" in c else dict(c))
                 for p, c in doc.get("overrides") or ()]
    return Tolerances(default=default, overrides=overrides, changes=dict(doc.get("changes") or {}))


def _saved_report(directory: str) -> dict:
    return read_saved_report(directory)  # checked: the folder may come from elsewhere


def _higher_precision(backend: str) -> str | None:
    """``"fp32"`` when the backend has a ``precision`` option that accepts it and is not a real NPU
    (the QNN HTP runs FP32 graphs in FP16 on devices; only its x86-64 simulator computes FP32)."""
    try:
        cls = default_registry().get(backend)
        if "precision" not in cls.options or default_registry().probe(backend).real_npu:
            return None
        cls.validate_options({"precision": "fp32"})
        return "fp32"
    except Exception:  # noqa: BLE001 - no higher precision known for this backend
        return None


def _takes_repairs(backend: str) -> bool:
    try:
        return "repairs" in default_registry().get(backend).options
    except Exception:  # noqa: BLE001
        return False


def fix(directory, *, backends: Iterable[str] | None = None, remedies: Iterable[str] = REMEDIES,
        output=None, max_calls: int | None = None, try_all: bool = False, confirm=None,
        localize: bool = True, cwd=None, timeout: float | None = None, env: Mapping[str, str] | None = None,
        progress: Callable | None = None) -> FixResult:
    """Repair the failing models of a diff directory (module docstring).

    Args:
        directory: a diff directory (``aipc diff``'s, or a model diff's).
        backends: run labels to repair (default: every run that failed on values).
        remedies: kinds to try, in this order: ``exact``, ``kernel``, ``known``, ``cpu``, ``precision``.
        output: the recipe file to write (default ``<directory>/repairs.json``).
        max_calls: replay at most this many calls per model (the worst failing call first).
        try_all: verify every candidate, not only up to the first that passes.
        confirm: the confirmation run, script diffs only (:mod:`onnxwrapper.repair.fix._confirm`):
            ``None``/``False`` none (default: a diff folder never chooses what runs); a command
            line ``["script.py", "arg", …]`` (or ``["-m", "pkg", …]``) that you name; ``True`` /
            ``"recorded"``: the diff's recorded command, only for a folder made on this machine by
            you (a private record of its ``diff.json``) and when the script at the recorded path
            has the sha256 the diff recorded.
        localize: localize failing models the diff did not localize (``False``: candidates from the
            value ranges only — exact rewrites, the out-of-range region on the CPU, precision).
        cwd: working directory of a confirmation command you name (and of the recorded one when the
            diff recorded none) (default:
            the current directory, as for ``aipc diff``).
        timeout: seconds per child process. env: extra environment of the child processes.
        progress: ``progress(stage: str)`` callback.

    Returns:
        :class:`~onnxwrapper.diff.FixResult` (``exit_status`` 0 when every failing model got a
        verified recipe and the confirmation, if run, passed).

    Raises:
        FileNotFoundError: not a diff directory, or a script of ``confirm`` that does not exist.
            ValueError: an unknown remedy kind or a malformed
            ``confirm``. MalformedFileError: a ``diff.json``, ``report.json`` or capture of the
            folder that is not what its format says (the folder may come from elsewhere).
    """
    started = time.perf_counter()
    directory = os.path.abspath(os.fspath(directory))
    remedies = tuple(remedies)
    unknown = [r for r in remedies if r not in REMEDIES]
    if unknown:
        raise ValueError(f"unknown remedy kind(s) {', '.join(unknown)}; expected some of {', '.join(REMEDIES)}")
    say = progress or (lambda _stage: None)
    try:  # the confirmation command first: a bad one is an error before any work
        target = read_manifest(directory, MANIFEST).get("target")
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{directory} is not an aipc diff directory (no {MANIFEST}).") from exc
    confirmation = confirm_command(target, confirm, os.fspath(cwd) if cwd else None, local_record(directory))
    result_check = check(directory)
    saved = _saved_report(directory)
    tolerances = tolerances_from_dict(saved.get("tolerances"))
    result_check.tolerances = tolerances
    failing = sorted({(s.backend, s.model) for s in result_check.outputs if s.kind in ("tolerance", "nonfinite")})
    if backends is not None:
        failing = [f for f in failing if f[0] in set(backends)]
    locs = {(d.get("backend"), d.get("model")): d for d in saved.get("localizations") or () if d.get("cause")}
    result = FixResult(directory=directory, remedies=remedies)
    if localize and any(f not in locs for f in failing):
        say("localizing the failing models")
        for loc in localize_failures(result_check, timeout=timeout, env=dict(env or {})):
            locs.setdefault((loc.backend, loc.model), loc.to_dict())
    runs = result_check.runs
    if result_check.reference not in runs or not runs[result_check.reference].capture_dir:
        raise malformed(os.path.join(directory, MANIFEST), "reference",
                        f"{result_check.reference!r} names no run with a capture", "the label of one of the runs")
    reference = read_capture(runs[result_check.reference].capture_dir)
    root = unused_stem(os.path.join(directory, "fix"))
    for label, model in failing:
        run_ = runs[label]
        mf = ModelFix(backend=label, model=model, sha256=reference.models[model].sha256,
                      localization=locs.get((label, model)))
        result.models.append(mf)
        if not _takes_repairs(run_.backend):
            mf.notes.append(f"backend '{run_.backend}' has no 'repairs' option: it cannot apply a recipe")
            continue
        begun = time.perf_counter()
        _fix_model(mf, run_, reference, result_check, tolerances, remedies, os.path.join(root, label, model),
                   max_calls, try_all, timeout, env, say)
        mf.seconds = time.perf_counter() - begun
    if not failing:
        _fix_app(result, result_check, reference, directory, backends, remedies, root, confirmation[0], timeout, env,
                 say, try_all)
    chosen = {m.sha256: m.recipe for m in result.models if m.recipe is not None}
    if chosen:
        book = RecipeBook(chosen)
        result.recipe_path = book.save(output or os.path.join(directory, "repairs.json"))
    if chosen and result.confirmation is None:
        _confirm(result, directory, runs, result_check.reference, {m.backend for m in result.models if m.recipe},
                 confirmation, timeout, env, say)
    result.seconds = time.perf_counter() - started
    return result


def _fix_model(mf: ModelFix, run_, reference, result_check, tolerances, remedies, workdir, max_calls, try_all,
               timeout, env, say) -> None:
    info = reference.models[mf.model]
    proto = onnx.load_model_from_string(_model_bytes(info.model_source()))
    worst = [s.worst for s in result_check.outputs if s.backend == mf.backend and s.model == mf.model
             and s.worst is not None and not s.passed]
    first = {(w.session, w.index) for w in worst}
    calls = [c for c in reference.calls if c.model == mf.model and c.method != "run_with_iobinding"]
    calls.sort(key=lambda c: ((c.session, c.index) not in first, c.seq))
    calls = calls[:max_calls] if max_calls else calls
    mf.calls = [(c.session, c.index) for c in calls]
    precision = next((s.precision for s in result_check.outputs if s.backend == mf.backend and s.model == mf.model),
                     "fp16")
    say(f"{mf.backend} {mf.model}: candidates")
    # value ranges: the worst calls first, then calls spread over the recording (the loudest and the
    # quietest inputs bound the power-of-two scales: an upscale for a quiet call must not overflow a loud one)
    spread = calls[_RANGE_CALLS::max(1, (len(calls) - _RANGE_CALLS) // _SPREAD_CALLS)][:_SPREAD_CALLS]
    feeds = [c.inputs() for c in calls[:_RANGE_CALLS] + spread]
    candidates, notes = candidates_for(proto, mf.localization, feeds, precision, remedies=remedies,
                                       higher_precision=_higher_precision(run_.backend))
    mf.notes += notes
    common = dict(label=mf.backend, backend=run_.backend, options=dict(run_.options), reference=reference,
                  model=mf.model, calls=mf.calls, tolerances=tolerances, timeout=timeout, env=dict(env or {}))
    say(f"{mf.backend} {mf.model}: baseline (no repair)")
    mf.baseline = run_trial(Trial("baseline", "the model as it is", directory=os.path.join(workdir, "baseline")),
                            nodes=len(proto.graph.node), **common)
    name = os.path.basename(info.path) if info.path else ""
    for k, cand in enumerate(candidates, 1):
        recipe = ModelRecipe(mf.sha256, name, mf.model, cand.rewrites, cand.cpu_subgraphs, cand.precision)
        trial = Trial(cand.kind, cand.title, recipe, cand.exactness, directory=os.path.join(workdir, f"candidate-{k}"))
        say(f"{mf.backend} {mf.model}: candidate {k}/{len(candidates)}: {cand.title}")
        mf.trials.append(run_trial(trial, nodes=_node_count(proto, recipe), **common))
        mf.notes += cand.notes
        if trial.passed and mf.recipe is None:
            mf.chosen = trial
            mf.recipe = _with_checks(_verified(recipe, trial, mf, run_), proto, feeds)
            if not try_all:
                break
    mf.notes += clamp_notes(mf.baseline, mf.trials)
    if mf.recipe is None:
        mf.notes += why_not_repaired(proto, mf.localization, mf.baseline, mf.trials)


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


def _model_bytes(source) -> bytes:
    if isinstance(source, bytes):
        return source
    with open(source, "rb") as f:
        return f.read()


def _verified(recipe: ModelRecipe, trial: Trial, mf: ModelFix, run_) -> ModelRecipe:
    base = mf.baseline
    verified = {"backend": run_.backend, "options": {k: v for k, v in run_.options.items()}, "calls": trial.calls,
                "worst_output": (trial.worst or {}).get("output"), "worst_snr_db": (trial.worst or {}).get("snr_db"),
                "bar_db": trial.bar_db, "npu_nodes": trial.npu_nodes, "total_nodes": trial.total_nodes,
                "seconds_per_call": trial.call_seconds,
                "unrepaired": {"worst_snr_db": (base.worst or {}).get("snr_db") if base else None,
                               "npu_nodes": base.npu_nodes if base else None,
                               "seconds_per_call": base.call_seconds if base else None}}
    note = f"{trial.kind}: {trial.title}" + (f" — {trial.exactness}" if trial.exactness else "")
    return dataclasses.replace(recipe, verified=sanitize(verified), note=note)


def _fix_app(result: FixResult, result_check, reference, directory, backends, remedies, root,
             command: ConfirmCommand | None, timeout, env, say, try_all) -> None:
    """App-level mismatches whose tensors all pass (:mod:`onnxwrapper.repair.fix._app_level`). Each candidate
    is judged by running the script again, so only with a command the user named or confirmed
    (:mod:`onnxwrapper.repair.fix._confirm`): a diff folder never chooses what runs."""
    runs = result_check.runs
    for label, app in sorted(result_check.app.items()):
        if app.status != "differs" or (backends is not None and label not in set(backends)):
            continue
        run_ = runs[label]
        if not _takes_repairs(run_.backend) or "cpu" not in remedies and "precision" not in remedies:
            continue
        if command is None:
            result.app_untried.append(label)
            continue
        begun = time.perf_counter()

        def run_script(path, _label=label):
            return _script_run(directory, runs, result_check.reference, {_label}, path, command, timeout, env)
        precision = _higher_precision(run_.backend) if "precision" in remedies else None
        mf = fix_app_level(result, result_check, reference, label, workdir=os.path.join(root, label, "app"),
                           higher_precision=precision, confirm=run_script, say=say, try_all=try_all)
        if mf is not None:
            mf.seconds = time.perf_counter() - begun
            result.models.append(mf)


def _confirm(result: FixResult, directory: str, runs, reference: str, labels, confirmation, timeout, env,
             say) -> None:
    command, note = confirmation
    result.notes.append(note)
    if command is None:
        return
    say(f"confirming: the script again, with the recipe: {command.shown()}")  # shown before it runs
    result.confirmation = _script_run(directory, runs, reference, labels, result.recipe_path, command, timeout, env)


def _script_run(directory: str, runs, reference: str, labels, recipe_path, command: ConfirmCommand, timeout, env):
    """``command`` (one the user named or confirmed) under ``aipc diff`` with ``recipe_path`` on the
    runs ``labels``, judged against ``reference`` as the diff was."""
    manifest = read_manifest(directory, MANIFEST)
    app = manifest.get("app") if isinstance(manifest.get("app"), dict) else {}
    # file names to compare are paths: taken only from a folder made here (docs/security.md)
    compare = [c for c in app.get("compare") or ("stdout",) if command.compare_files or c in ("stdout", "none")]
    backends = {reference: runs[reference].backend, **{lb: runs[lb].backend for lb in labels}}
    options = {lb: dict(runs[lb].options, repairs={"file": recipe_path, "required": False}) for lb in labels}
    options[reference] = dict(runs[reference].options)
    confirm_dir = unused_stem(os.path.join(directory, "fix-confirm"))
    return run(command.argv[0], command.argv[1:], module=command.module,
               backends=[f"{lb}={b}" for lb, b in backends.items()], reference=reference,
               backend_options=options, directory=confirm_dir, cwd=command.cwd, timeout=timeout,
               script_digest=command.sha256, env=dict(env or {}), compare_output=compare or ("stdout",),
               output_filter=app.get("filter"), output_rtol=app.get("rtol"), tolerances=tolerances_from_dict(_saved_report(directory).get("tolerances")))
