"""Localizing every failing (backend, model) of a diff result: picks the call, runs the rounds in
child processes (:func:`onnxwrapper.diff._runs._orchestrate.run_child`) and appends the
:class:`~onnxwrapper.diff.Localization` (the search itself: :mod:`onnxwrapper.diff._localize._search`).

Round files go to ``<diff dir>/localize/<label>/<model>/``; a second localization of the same
diff directory (``--check DIR --localize``) uses a new ``localize-2`` … directory instead of
overwriting the first.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping

from onnxwrapper.diff._capture import read_capture, unused_stem
from onnxwrapper.diff._judge import DiffResult, Localization
from onnxwrapper.diff._localize._search import localize
from onnxwrapper.diff._runs import run_child

__all__ = ["localize_failures"]


def localize_failures(result: DiffResult, *, timeout: float | None = None, progress: Callable | None = None,
                      max_tensors: int = 256, max_bytes: int = 512 * 1024 ** 2,
                      env: Mapping[str, str] | None = None, only=None) -> list:
    """Localize every failing (backend, model) of ``result``; appends to ``result.localizations``.

    For each backend and model with an output that failed on values (``tolerance``/``nonfinite``),
    the call of that model with the worst failing output is re-run with intermediate tensors
    exposed, on the reference and on the backend (child processes), see :mod:`._localize`.

    Args:
        result: a result of :func:`run` or :func:`check` (needs its diff directory).
        timeout: seconds per child run. progress: as for :func:`run`.
        max_tensors / max_bytes: budget of one round (tensors, bytes); beyond it the graph is bisected.
        env: extra environment variables of the child processes.
        only: ``{(run label, model key)}`` to localize (default: every failing one).

    Returns:
        The new :class:`~onnxwrapper.diff.Localization` objects (also appended to ``result``).
    """
    if not result.directory or result.reference not in result.runs:
        return []
    ref_run = result.runs[result.reference]
    ref_cap = read_capture(ref_run.capture_dir)
    by_key = ref_cap.calls_by_key()
    targets: dict[tuple[str, str], list] = {}
    for summary in result.outputs:
        if summary.kind in ("tolerance", "nonfinite") and summary.worst is not None and (
                only is None or (summary.backend, summary.model) in only):
            targets.setdefault((summary.backend, summary.model), []).append(summary)
    done = []
    root = unused_stem(os.path.join(result.directory, "localize")) if targets else ""
    for (label, model), summaries in sorted(targets.items()):
        worst = min(summaries, key=lambda s: s.worst.metrics.get("snr_db", float("inf"))).worst
        call = by_key.get((worst.session, worst.index))
        run_ = result.runs.get(label)
        if call is None or run_ is None:
            continue
        workdir = os.path.join(root, label, model)

        def child(backend, options, sdir, req, _t=timeout):
            return run_child(backend, options, sdir, expose=req, timeout=_t, env=dict(env or {}))

        try:
            source = ref_cap.models[model].model_source()
            loc = localize(model_source=source, model_key=model, inputs=call.inputs(), backend=run_.backend,
                           backend_options=run_.options, reference=ref_run.backend,
                           reference_options=ref_run.options, tolerance=summaries[0].tolerance,
                           precision=summaries[0].precision, workdir=workdir, run_child=child,
                           call=(worst.session, worst.index), failing_outputs=[s.output for s in summaries],
                           max_tensors=max_tensors, max_bytes=max_bytes,
                           progress=(lambda r, d, _l=label: progress(f"localize {_l} round {r}: {d}", r, 0))
                           if progress else None)
        except (OSError, ValueError) as exc:
            loc = Localization(backend=label, model=model, error=str(exc), message=f"localization failed: {exc}")
        loc.backend = label
        result.localizations.append(loc)
        done.append(loc)
    return done
