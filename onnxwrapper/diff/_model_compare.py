"""Judging model runs (Polygraphy's ``Comparator.compare_accuracy``): the runs of
:func:`onnxwrapper.diff.run_model` against each other and against **golden outputs** saved
elsewhere — another machine, a real device, the training framework — with the verdicts,
tolerances, reports and exit statuses of ``aipc diff`` (:class:`~onnxwrapper.diff.DiffResult`).

Golden outputs become one more capture in the run directory (label ``golden`` by default), written
with the same writer as a real run: iteration ``k`` is session 1, call ``k``, fed this run's inputs.
Their precision: the backend and options the file records (``--save-outputs`` writes them), else
FP32 (a framework's outputs); ``tolerances`` / ``--preset`` change that. A file that records the
inputs it was made from must match this run's inputs — otherwise the comparison would be
meaningless, and it is refused with the fix (load the inputs from that file).

With golden outputs as the reference, ``localize=True`` runs the reference side of localization on
the ``cpu`` backend when the file does not name a backend that runs here.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import numpy as np

from onnxwrapper._registry import default_registry
from onnxwrapper.diff._capture import (MANIFEST, CaptureWriter, TensorSet, read_tensors, received_options, relative_run,
                                       write_manifest)
from onnxwrapper.diff._judge import NONE, DiffResult, as_tolerances, judge_app, judge_runs
from onnxwrapper.diff._localize import localize_failures
from onnxwrapper.diff._runs import BackendRun, ModelRuns, model_facts

__all__ = ["compare_model_runs"]


class _RecordedSession:
    """What the capture writer needs to know about the session that produced golden outputs."""

    def __init__(self, model_path: str, backend: str, options: Mapping[str, Any], facts) -> None:
        self._ow_model_source = SimpleNamespace(path_or_bytes=model_path)
        self._ow_backend = SimpleNamespace(config=dict(options))
        self.backend_name = backend
        self._facts = facts

    def get_inputs(self):
        return list(self._facts.inputs)

    def get_outputs(self):
        return list(self._facts.outputs)

    def get_providers(self) -> list[str]:
        return []


def _golden_items(golden) -> dict[str, Any]:
    if golden is None:
        return {}
    if isinstance(golden, Mapping):
        return dict(golden)
    if isinstance(golden, (list, tuple)) and golden and not isinstance(golden[0], Mapping):
        items = {}
        for k, g in enumerate(golden):
            items["golden" if k == 0 else f"golden{k + 1}"] = g
        return items
    return {"golden": golden}


def _read_golden(source, facts, label: str) -> TensorSet:
    if isinstance(source, TensorSet):
        return source
    if isinstance(source, (str, os.PathLike)):
        return read_tensors(source, role="outputs", input_specs=facts.inputs, output_specs=facts.outputs,
                            model_key=facts.key, model_sha256=facts.sha256)
    return TensorSet(outputs=[dict(o) for o in source], source=f"<{label}>")


def _same_inputs(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    if a.keys() != b.keys():
        return False
    return all(np.asarray(a[n]).shape == np.asarray(b[n]).shape and
               np.array_equal(np.asarray(a[n]), np.asarray(b[n]), equal_nan=np.asarray(a[n]).dtype.kind in "fc")
               for n in a)


def _write_golden(runs: ModelRuns, label: str, data: TensorSet, facts, notes: list[str]) -> BackendRun:
    where = data.source or label
    iterations = len(runs.inputs)
    if len(data.outputs) < iterations:
        raise ValueError(f"{where} holds {len(data.outputs)} iteration(s) of outputs, the run made {iterations}: "
                         f"run as many iterations as the golden file holds (or load its inputs)")
    declared = [o.name for o in facts.outputs]
    unknown = sorted(set(data.outputs[0]) - set(declared))
    if unknown:
        raise ValueError(f"{where}: output(s) {', '.join(unknown)} are not outputs of the model (its outputs: "
                         f"{', '.join(declared)})")
    if data.inputs:
        for k in range(iterations):
            if k >= len(data.inputs) or not _same_inputs(data.inputs[k], runs.inputs.iterations[k]):
                raise ValueError(f"{where} was made from other inputs than this run's (iteration {k} differs): "
                                 f"load the inputs from it (--load-inputs {where}, or "
                                 f"onnxwrapper.diff.load_inputs({where!r}, model)) so both sides see the same data")
    else:
        notes.append(f"{label}: {where} records no inputs: it is assumed to come from the same inputs as this run")
    missing = [n for n in declared if n not in data.outputs[0]]
    if missing:
        notes.append(f"{label}: {where} holds no {', '.join(missing)}; not compared")
    meta = data.metadata or {}
    backend = str(meta.get("backend") or "golden")
    # a tensor file from elsewhere sets no path, library or limit of a run (docs/security.md)
    options = (received_options(meta.get("backend_options") or {})[0] if isinstance(meta.get("backend_options"), dict)
               else {}) if meta.get("backend") else {"precision": "fp32"}
    capture_dir = os.path.join(runs.directory, label)
    writer = CaptureWriter(capture_dir, store_models="none", background=False,
                           metadata={"mode": "golden", "source": os.path.abspath(where) if os.path.exists(where)
                                     else where, "origin": meta})
    session = _RecordedSession(runs.model, backend, options, facts)
    try:
        for k in range(iterations):
            outs = data.outputs[k]
            names = [n for n in declared if n in outs]
            writer.observe(session=session, method="run", output_names=names, input_feed=runs.inputs.iterations[k],
                           outputs=[outs[n] for n in names], seconds=0.0, call_key=(1, k))
    finally:
        writer.close()
    return BackendRun(backend=backend, options=options, label=label, capture_dir=capture_dir, calls=iterations,
                      message=f"golden outputs from {where}")


def compare_model_runs(runs: ModelRuns, *, reference: str | None = None, golden=None, tolerances=None,
                       localize: bool = False, timeout: float | None = None,
                       progress: Callable | None = None) -> DiffResult:
    """Judge ``runs`` (from :func:`onnxwrapper.diff.run_model`) and golden outputs.

    Args:
        runs: the model runs.
        reference: the label every other run is compared with; default the first golden, else
            ``cpu`` when it ran, else the first run.
        golden: outputs saved elsewhere: a path (any form :func:`onnxwrapper.diff.read_tensors`
            reads; a file written by ``save_outputs`` also records its inputs and producer), a list of
            ``{output name: array}`` (one per iteration), or ``{label: either}`` for several.
        tolerances: :class:`~onnxwrapper.diff.Tolerance` / :class:`~onnxwrapper.diff.Tolerances`
            (default: precision-aware, as ``aipc diff``).
        localize: name the cause inside a failing model (:func:`onnxwrapper.diff.localize_failures`).
        timeout / progress: as for :func:`onnxwrapper.diff.run`.

    Returns:
        A :class:`~onnxwrapper.diff.DiffResult` (``mode == "model"``; ``timings`` per run); its
        ``exit_status`` is 0 / 1 / 2 as for ``aipc diff``.

    Raises:
        ValueError: fewer than two sides to compare, an unknown reference, golden outputs that do
            not fit the model or were made from other inputs.
        FileNotFoundError: a golden file does not exist.
    """
    facts = model_facts(runs.model)
    notes: list[str] = []
    goldens = _golden_items(golden)
    clash = sorted(set(goldens) & set(runs.runs))
    if clash:
        raise ValueError(f"golden label(s) {', '.join(clash)} are run labels too; name them otherwise")
    all_runs: dict[str, BackendRun] = {}
    for label, source in goldens.items():
        all_runs[label] = _write_golden(runs, label, _read_golden(source, facts, label), facts, notes)
    all_runs.update(runs.runs)
    if reference is None:
        reference = next(iter(goldens), None) or ("cpu" if "cpu" in runs.runs else next(iter(runs.runs)))
    if reference not in all_runs:
        raise ValueError(f"reference '{reference}' is none of the runs ({', '.join(all_runs)})")
    if len(all_runs) < 2:
        raise ValueError("nothing to compare: give a second backend or golden outputs (--load-outputs)")
    with open(os.path.join(runs.directory, MANIFEST), encoding="utf-8") as f:
        manifest = json.load(f)
    manifest["reference"] = reference
    manifest["backends"] = {**{lb: r.backend for lb, r in all_runs.items() if lb in goldens}, **runs.labels}
    manifest["goldens"] = list(goldens)
    manifest["runs"] = {lb: relative_run(r, runs.directory) for lb, r in all_runs.items()}
    write_manifest(runs.directory, manifest)
    result = judge_runs(runs.directory, manifest, all_runs, as_tolerances(tolerances), progress)
    judge_app(result, compare=(NONE,))  # a model run: leaves result.app empty
    result.timings = {lb: t.to_dict() for lb, t in runs.timings.items()}
    result.notes[:0] = list(runs.inputs.notes) + notes
    if localize and result.mismatch:
        _localize(result, goldens, timeout, progress)
    return result


def _localize(result: DiffResult, goldens: Mapping, timeout, progress) -> None:
    ref = result.runs[result.reference]
    stand_in = None
    if result.reference in goldens:
        try:
            runnable = default_registry().probe(ref.backend).available
        except Exception:  # noqa: BLE001 - "golden" or a backend unknown here
            runnable = False
        if not runnable:
            stand_in = ref
            result.runs[result.reference] = BackendRun(**{**ref.to_dict(), "backend": "cpu", "options": {}})
            result.notes.append(f"localization ran the reference side ({result.reference}) on the cpu backend: "
                                f"golden outputs cannot be re-run")
    try:
        localize_failures(result, timeout=timeout, progress=progress)
    finally:
        if stand_in is not None:
            result.runs[result.reference] = stand_in
