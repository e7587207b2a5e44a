"""``aipc fix``: from a failing diff to a verified repair recipe (docs/repair.md).

For each (backend run, model) of a diff directory whose outputs failed on values
(:mod:`onnxwrapper.repair.fix._model_fix`, each stage timed):

1. the localization — the diff's own (``aipc diff --localize``), reused, never repeated;
2. the candidates, cheapest and most exact first, from measurements on the CPU
   (:mod:`onnxwrapper.repair.fix._candidates`): exact rewrites, kernel-avoiding rewrites, the
   culprit on the CPU, CPU regions screened by an FP16 emulation; a simulator mode (``fp32``) only
   when asked for by name — by default every recipe runs on a device;
3. each candidate is verified by replaying the model's recorded calls on the backend with the
   candidate's recipe and judging them with the diff's own tolerances
   (:mod:`onnxwrapper.repair.fix._verify`); the unrepaired model is replayed the same way first (the
   baseline: the failure must reproduce, and it is what the costs are measured against); when
   nothing passes and the diff did not localize, the backend's localization, then its candidates;
4. the first candidate that passes (every one with ``try_all``) goes into the recipe file, keyed by
   the model's sha256, with how it was verified, what it costs (NPU nodes, seconds per call) and the
   targets it holds on.

Then, for a script diff and a command the user named or confirmed, the script runs again under
``aipc diff`` with the recipe applied (``repairs={"file": …, "required": False}``) to confirm the
app-level result; when the app's output still differs while every tensor passes, the app-level
search (:mod:`onnxwrapper.repair.fix._app_level`) finds the model whose NPU outputs flip it and the
smallest change inside it that makes the script agree. A diff directory made from a model instead
of a script works the same (its captures have the same format); only the script runs are skipped.
The backend must take the ``repairs`` option (``qnn`` does).
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterable, Mapping

from onnxwrapper._registry import default_registry
from onnxwrapper.diff._api import check, run
from onnxwrapper.diff._capture import (MANIFEST, local_record, malformed, read_capture, read_manifest, read_saved_report,
                                       unused_stem)
from onnxwrapper.diff._judge import Tolerance, Tolerances
from onnxwrapper.diff._localize import localize_failures
from onnxwrapper.repair.fix._app_level import search_app_level
from onnxwrapper.repair.fix._candidates import REMEDIES
from onnxwrapper.repair.fix._confirm import ConfirmCommand, confirm_command
from onnxwrapper.repair.fix._model_fix import fix_model as _fix_model
from onnxwrapper.repair.fix._result import FixResult, ModelFix
from onnxwrapper.repair.recipe import RecipeBook

__all__ = ["SIMULATOR_MODES", "fix", "tolerances_from_dict"]

#: modes of the x86-64 QNN HTP simulator that no device has, searched only when asked for by name
SIMULATOR_MODES = ("fp32",)


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


def _higher_precision(backend: str, simulator_modes) -> str | None:
    """``"fp32"`` when it is asked for by name (``simulator_modes``), the backend has a ``precision``
    option that accepts it, and is not a real NPU (the QNN HTP runs FP32 graphs in FP16 on devices;
    only its x86-64 simulator computes FP32). ``None`` otherwise: a device-valid search."""
    if "fp32" not in simulator_modes:
        return None
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
        progress: Callable | None = None, simulator_modes: Iterable[str] = ()) -> FixResult:
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
            has the sha256 the diff recorded. When it shows the app's output still differing while
            every tensor passes, the app-level search runs with the same command
            (:mod:`onnxwrapper.repair.fix._app_level`).
        localize: localize on the backend a failing model the diff did not localize, when no
            candidate from the CPU's measurements passes (``False``: never).
        cwd: working directory of a confirmation command you name (and of the recorded one when the
            diff recorded none) (default: the current directory, as for ``aipc diff``).
        timeout: seconds per child process. env: extra environment of the child processes.
        progress: ``progress(stage: str)`` callback.
        simulator_modes: modes of the x86-64 simulator that no device has, to search too (by name,
            from :data:`SIMULATOR_MODES`: ``"fp32"`` enables the ``precision`` candidates). Default
            none: every recipe found runs on a device (FP16, rewrites, CPU regions) and records
            ``targets: ["simulator", "device"]``.

    Returns:
        :class:`~onnxwrapper.diff.FixResult` (``exit_status`` 0 when every failing model got a
        verified recipe and the confirmation, if run, passed).

    Raises:
        FileNotFoundError: not a diff directory, or a script of ``confirm`` that does not exist.
            ValueError: an unknown remedy kind or simulator mode, or a malformed ``confirm``. MalformedFileError: a ``diff.json``, ``report.json`` or capture
            of the folder that is not what its format says (the folder may come from elsewhere).
    """
    started = time.perf_counter()
    directory = os.path.abspath(os.fspath(directory))
    remedies = tuple(remedies)
    unknown = [r for r in remedies if r not in REMEDIES]
    if unknown:
        raise ValueError(f"unknown remedy kind(s) {', '.join(unknown)}; expected some of {', '.join(REMEDIES)}")
    simulator_modes = tuple(simulator_modes)
    unknown = [m for m in simulator_modes if m not in SIMULATOR_MODES]
    if unknown:
        raise ValueError(f"unknown simulator mode(s) {', '.join(unknown)}; expected some of {', '.join(SIMULATOR_MODES)}")
    say = progress or (lambda _stage: None)
    try:  # the confirmation command first: a bad one is an error before any work
        target = read_manifest(directory, MANIFEST).get("target")
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"{directory} is not an aipc diff directory (no {MANIFEST}).") from exc
    command, note = confirm_command(target, confirm, os.fspath(cwd) if cwd else None, local_record(directory))
    result_check = check(directory)
    saved = _saved_report(directory)
    tolerances = tolerances_from_dict(saved.get("tolerances"))
    result_check.tolerances = tolerances
    failing = sorted({(s.backend, s.model) for s in result_check.outputs if s.kind in ("tolerance", "nonfinite")})
    if backends is not None:
        failing = [f for f in failing if f[0] in set(backends)]
    locs = {(d.get("backend"), d.get("model")): d for d in saved.get("localizations") or ()}
    result = FixResult(directory=directory, remedies=remedies, simulator_modes=simulator_modes)
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
                  max_calls=max_calls, try_all=try_all, timeout=timeout, env=env, say=say,
                  higher_precision=_higher_precision(run_.backend, simulator_modes), localize=localize)
        mf.seconds = time.perf_counter() - begun
    result.stage("model-level repairs", started)
    ctx = _AppContext(result, result_check, reference, directory, remedies, root, command, timeout, env, say, try_all,
                      simulator_modes)
    if not failing:
        _fix_app(ctx, result_check, backends)
    chosen = _book(result)
    if chosen:
        result.recipe_path = RecipeBook(chosen).save(output or os.path.join(directory, "repairs.json"))
    if chosen and result.confirmation is None:
        result.notes.append(note)
        if command is not None:
            begun = time.perf_counter()
            say(f"confirming: the script again, with the recipe: {command.shown()}")  # shown before it runs
            labels = {m.backend for m in result.models if m.recipe}
            result.confirmation = _script_run(directory, runs, result_check.reference, labels, result.recipe_path,
                                              command, timeout, env)
            result.stage("confirmation", begun)
            if not result.confirmation.passed and not result.confirmation.tensor_mismatch:
                _fix_app(ctx, result.confirmation, backends, book=chosen)
                chosen = _book(result)
                result.recipe_path = RecipeBook(chosen).save(output or os.path.join(directory, "repairs.json"))
    result.seconds = time.perf_counter() - started
    return result


def _book(result: FixResult) -> dict:
    """``{sha256: recipe}`` of the recipes found, a later (app-level) recipe of a model replacing an
    earlier one (it includes the earlier one's rewrites and CPU groups)."""
    return {m.sha256: m.recipe for m in result.models if m.recipe is not None}


class _AppContext:
    """What the app-level search needs of :func:`fix` (one object instead of a dozen arguments)."""

    def __init__(self, result, result_check, reference, directory, remedies, root, command, timeout, env, say, try_all,
                 simulator_modes) -> None:
        self.result, self.result_check, self.reference, self.directory = result, result_check, reference, directory
        self.remedies, self.root, self.command, self.timeout, self.env = remedies, root, command, timeout, env
        self.say, self.try_all, self.simulator_modes = say, try_all, simulator_modes


def _fix_app(ctx: _AppContext, judged, backends, book: dict | None = None) -> None:
    """App-level mismatches whose tensors all pass, in the diff (``judged`` is its result) or in the
    confirmation run after the model-level repairs (``judged`` is that run; ``book`` the recipes so
    far) (:mod:`onnxwrapper.repair.fix._app_level`). Each step is judged by running the script again,
    so only with a command the user named or confirmed (:mod:`onnxwrapper.repair.fix._confirm`): a
    diff folder never chooses what runs."""
    runs = ctx.result_check.runs
    for label, app in sorted(judged.app.items()):
        if app.status != "differs" or (backends is not None and label not in set(backends)) or label not in runs:
            continue
        run_ = runs[label]
        if not _takes_repairs(run_.backend) or "cpu" not in ctx.remedies and "precision" not in ctx.remedies:
            continue
        if ctx.command is None:
            ctx.result.app_untried.append(label)
            continue
        begun = time.perf_counter()

        def run_script(path, _label=label):
            return _script_run(ctx.directory, runs, ctx.result_check.reference, {_label} | _labels(ctx.result), path,
                               ctx.command, ctx.timeout, ctx.env)

        def feeds_of(key):
            return [c.inputs() for c in ctx.reference.calls if c.model == key]
        precision = _higher_precision(run_.backend, ctx.simulator_modes) if "precision" in ctx.remedies else None
        mf = search_app_level(ctx.result, judged, ctx.reference, label, book=dict(book or {}),
                              workdir=os.path.join(ctx.root, label, "app"), higher_precision=precision,
                              confirm=run_script, say=ctx.say, try_all=ctx.try_all, feeds_of=feeds_of)
        if mf is not None:
            mf.seconds = time.perf_counter() - begun
            ctx.result.models.append(mf)
        ctx.result.stage(f"app-level search ({label})", begun)


def _labels(result: FixResult) -> set:
    return {m.backend for m in result.models if m.recipe is not None}


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
               output_filter=app.get("filter"), output_rtol=app.get("rtol"),
               tolerances=tolerances_from_dict(_saved_report(directory).get("tolerances")))
