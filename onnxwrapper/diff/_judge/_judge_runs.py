"""Judging the runs of a diff folder: every run's capture against the reference run's, into one
:class:`~onnxwrapper.diff.DiffResult` (``aipc diff``, ``aipc diff --check``, ``aipc diff --model``)."""

from __future__ import annotations

import os

from onnxwrapper.diff._capture import Capture, CaptureFormatError, read_capture
from onnxwrapper.diff._judge._compare import compare_captures
from onnxwrapper.diff._judge._result import DiffResult
from onnxwrapper.diff._judge._tolerance import Tolerances
from onnxwrapper.diff._runs import device_notes

__all__ = ["judge_runs"]


def judge_runs(directory: str, manifest: dict, runs: dict, tolerances: Tolerances, progress) -> DiffResult:
    """Judge the runs of a diff folder: each run's capture against the reference run's.

    Args:
        directory: the diff folder. manifest: its ``diff.json`` (``reference``, ``mode``,
            ``backends``, ``target``). runs: ``{label: BackendRun}`` (the automatic replays and the
            second reference run among them). tolerances: the tolerances to judge with.
        progress: ``progress(stage, done, total)`` or ``None``.

    Returns:
        The :class:`~onnxwrapper.diff.DiffResult` of the tensor level (the app level is judged
        separately); a run whose capture is missing or unreadable is left out, and a reference
        without one gives a result with a note and nothing compared.
    """
    reference = manifest["reference"]
    caps: dict[str, Capture] = {}
    for label, r in runs.items():
        if r.capture_dir and os.path.exists(os.path.join(r.capture_dir, "capture.json")):
            try:
                caps[label] = read_capture(r.capture_dir)
            except CaptureFormatError:
                pass
    replay_of = {lb: r.replay_of for lb, r in runs.items() if r.replay_of}
    others = {lb: c for lb, c in caps.items() if lb != reference and lb not in replay_of and not runs[lb].rerun_of}
    replayed = {replay_of[lb]: c for lb, c in caps.items() if lb in replay_of}
    cb = (lambda d, t: progress("compare", d, t)) if progress else None
    if reference in caps:
        result = compare_captures(caps[reference], others, tolerances=tolerances,
                                  mode=manifest.get("mode", "live"), progress=cb, reference_label=reference,
                                  incomplete={lb for lb, r in runs.items() if not r.complete and not r.replay_of},
                                  replayed=replayed)
    else:
        result = DiffResult(reference=reference, backends=list(others), mode=manifest.get("mode", "live"),
                            tolerances=tolerances)
        result.notes.append(f"the reference run '{reference}' left no readable capture: nothing was compared.")
    result.reference = reference
    result.backends = [lb for lb in manifest.get("backends", runs) if lb != reference]
    result.runs = runs
    result.directory = directory
    result.script = {**manifest.get("target", {}), "mode": manifest.get("mode", "live")}
    result.notes.extend(device_notes(runs))
    result.notes.extend(f"{lb}: {r.retried}" for lb, r in runs.items() if getattr(r, "retried", ""))
    if caps.get(reference) is not None and not caps[reference].calls and runs.get(reference) and runs[reference].ok:
        result.notes.append("the script made no InferenceSession run call on the reference: nothing was compared "
                            "(does it create its sessions through onnxruntime / onnxwrapper?).")
    return result
