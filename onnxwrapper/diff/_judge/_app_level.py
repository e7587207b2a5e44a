"""Judging the app level of a diff: each backend's stdout, exit status and named files against the
reference run's (comparison rules in :mod:`onnxwrapper.diff._judge._app_output`).

Fills ``DiffResult.app`` with one :class:`~onnxwrapper.diff.AppComparison` per compared backend.
Not compared: replay mode (the script ran on the reference only), ``compare=("none",)``, and runs
that did not complete (the verdict is then incomplete anyway); a model run (``mode == "model"``)
has no app level at all (``DiffResult.app`` stays empty). The relative tolerance of printed
numbers defaults to the relative error the backend's tensors are allowed — the loosest among its
outputs' tolerances: ``10^(-SNR bar/20)`` (FP16 0.0443, FP32 1.27e-4, quantized 0.1) or a user's
``rtol`` — so a printed number is held to the budget of the tensors it comes from.
"""

from __future__ import annotations

import math
import os

from onnxwrapper.diff._capture import malformed
from onnxwrapper.diff._judge._app_output import OutputItem, compare_bytes, compare_texts, volatile_mask
from onnxwrapper.diff._judge._result import AppComparison
from onnxwrapper.diff._judge._tolerance import error_budget, precision_for
from onnxwrapper.diff._judge._verdict import explain_app_difference
from onnxwrapper.kernel import NotRegularFileError, read_regular

__all__ = ["MAX_APP_OUTPUT_BYTES", "judge_app", "needs_rerun", "STDOUT", "NONE"]

STDOUT, NONE = "stdout", "none"
#: the largest app output (a run's ``stdout.txt``, a compared file) read for the comparison: the runs
#: of a received diff folder are untrusted, and a comparison reads each output whole
MAX_APP_OUTPUT_BYTES = 256 << 20


def _read(path: str | None) -> bytes | None:
    """The bytes of one app output, ``None`` when there is none.

    Raises:
        MalformedFileError: not a regular file (a FIFO, a device) or more than
            :data:`MAX_APP_OUTPUT_BYTES` (filter the output, or compare a file the app writes).
    """
    if not path or not os.path.lexists(path) or os.path.isdir(path):
        return None  # no output (a folder is not compared)
    try:
        return read_regular(path, MAX_APP_OUTPUT_BYTES)
    except FileNotFoundError:
        return None  # a dangling link: no output, as a missing file
    except NotRegularFileError as exc:
        raise malformed(path, None, exc.strerror, f"an app output: a regular file of at most "
                        f"{MAX_APP_OUTPUT_BYTES >> 20} MiB") from exc


def _text(path: str | None) -> str:
    data = _read(path)
    return data.decode("utf-8", "replace") if data is not None else ""


def _file(run, name: str) -> bytes | None:
    rel = (run.files or {}).get(name)
    return _read(os.path.join(run.capture_dir, rel)) if rel and run.capture_dir else None


def _relative_budget(tol) -> float:
    """The relative error a tolerance allows: ``10^(-SNR bar/20)`` and/or its finite ``rtol``."""
    budgets = []
    if tol.min_snr_db is not None:
        budgets.append(10.0 ** (-float(tol.min_snr_db) / 20.0))
    if tol.check != "none" and math.isfinite(tol.rtol):
        budgets.append(float(tol.rtol))
    return max(budgets) if budgets else 0.0


def _rtol(result, label: str, run) -> float:
    """The loosest relative budget among the backend's outputs (so a user's looser ``--tol``
    loosens the printed numbers too); the precision's error budget when nothing was compared."""
    budgets = [_relative_budget(s.tolerance) for s in result.outputs if s.backend == label]
    if budgets and max(budgets) > 0.0:
        return max(budgets)
    return error_budget(precision_for(run.backend, run.options))


def judge_app(result, *, compare=(STDOUT,), filter_regex: str | None = None, rtol: float | None = None) -> None:
    """Compare every live backend run's observable result with the reference's; fills ``result.app``.

    Args:
        result: a :class:`~onnxwrapper.diff.DiffResult` with its runs (stdout paths, file copies).
        compare: what to compare: ``"stdout"``, file names (as given to the script's working
            directory), or ``("none",)``.
        filter_regex: keep only the lines it matches (stdout and text files).
        rtol: relative tolerance of printed numbers; ``None`` = the backend's error budget.
    """
    result.app = {}
    if (result.script or {}).get("mode") == "model":
        return  # a model run (aipc run MODEL.onnx, aipc diff --model) has no script output to compare
    runs = result.runs
    ref = runs.get(result.reference)
    rerun = next((r for r in runs.values() if r.rerun_of == result.reference), None)
    replay = (result.script or {}).get("mode") == "replay"
    labels = [lb for lb, r in runs.items() if lb != result.reference and not r.replay_of and not r.rerun_of]
    for label in labels:
        run = runs[label]
        app = AppComparison(backend=label, reference=result.reference, filter=filter_regex)
        result.app[label] = app
        if replay:
            app.reason = "replay mode runs the script on the reference only"
            continue
        if NONE in compare or not compare:
            app.reason = "--compare-output none"
            continue
        if ref is None or not ref.complete or not run.complete:
            app.reason = "a run did not complete"
            continue
        app.rtol = _rtol(result, label, run) if rtol is None else float(rtol)
        sides = (result.reference, label)
        app.items.append(OutputItem(what="exit status", identical=ref.returncode == run.returncode,
                                    exact=ref.returncode == run.returncode,
                                    detail="" if ref.returncode == run.returncode else
                                    f"{ref.returncode} on {result.reference}, {run.returncode} on {label}"))
        for what in compare:
            if what == STDOUT:
                ref_text = _text(ref.stdout)
                mask = (volatile_mask(ref_text, _text(rerun.stdout), filter_regex)
                        if rerun is not None and rerun.complete else None)
                app.items.append(compare_texts(STDOUT, ref_text, _text(run.stdout), rtol=app.rtol,
                                               filter_regex=filter_regex, mask=mask, labels=sides))
            else:
                ref_data = _file(ref, what)
                mask = None
                if rerun is not None and rerun.complete and ref_data is not None:
                    again = _file(rerun, what)
                    if again is not None:
                        try:
                            mask = volatile_mask(ref_data.decode("utf-8"), again.decode("utf-8"), filter_regex)
                        except UnicodeDecodeError:
                            mask = None
                app.items.append(compare_bytes(f"file {what}", ref_data, _file(run, what), rtol=app.rtol,
                                               filter_regex=filter_regex, mask=mask, labels=sides))
        app.status = "identical" if all(i.identical for i in app.items) else "differs"
        if app.status == "differs":
            app.explanation = explain_app_difference(result, label)


def needs_rerun(result) -> bool:
    """True when an app-level comparison differs and the reference has not been run a second
    time yet (its second run tells volatile numbers such as timings apart)."""
    has_rerun = any(r.rerun_of == result.reference for r in result.runs.values())
    return not has_rerun and any(
        a.status == "differs" and any(not i.identical and i.what != "exit status" for i in a.items)
        for a in result.app.values())
