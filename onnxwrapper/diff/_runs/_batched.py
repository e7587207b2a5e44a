"""Replaying recorded calls in batches, and the device profiles backends report (``aipc diff --replay``).

A backend session (``InferenceSession.backend_session``) may offer two optional, duck-typed
methods; the ``aihub`` backend has both (docs/backends/aihub.md), others need neither:

* ``run_batch(output_names, feeds) -> list[list[ndarray]]`` — many feeds at once, in as few device
  jobs as possible (``aihub``: one AI Hub inference job per model and input shape);
* ``device_profiles() -> list`` — what the device measured, as objects with ``to_dict()`` and
  ``summary()`` (``aihub``: latency, peak memory, layers per compute unit, per-layer detail).

In replay mode the child hands all recorded calls of such a session to ``run_batch`` at once
(:func:`replay_batch`), writes the profiles to ``<capture dir>/device_profiles.json``
(:func:`write_device_profiles`), and the reports list them as notes (:func:`device_notes`).
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable, Mapping

from onnxwrapper.diff._capture import atomic_write

__all__ = ["PROFILES_FILE", "batch_runner", "device_notes", "replay_batch", "write_device_profiles"]

PROFILES_FILE = "device_profiles.json"


def batch_runner(session) -> Callable | None:
    """The ``run_batch`` method of ``session``'s backend session, or ``None`` when it has none."""
    return getattr(getattr(session, "backend_session", None), "run_batch", None)


def replay_batch(session, calls) -> list[tuple]:
    """Run recorded ``calls`` of one session with one ``run_batch`` call.

    Returns:
        ``[(call, feed, outputs or None, seconds per call, exception or None)]`` in call order; when
        the batch fails every call carries the exception.
    """
    names = [o.name for o in session.get_outputs()]
    feeds = [call.inputs() for call in calls]
    start = time.perf_counter()
    try:
        results = batch_runner(session)(names, feeds)
    except Exception as exc:  # reported per call by the caller, the other sessions keep replaying
        return [(call, feed, None, 0.0, exc) for call, feed in zip(calls, feeds)]
    seconds = (time.perf_counter() - start) / max(1, len(calls))
    out = []
    for call, feed, outputs in zip(calls, feeds, results):
        wanted = list(call.output_names) or names
        missing = [n for n in wanted if n not in names]
        if missing:
            out.append((call, feed, None, seconds, KeyError(f"outputs {missing} are not outputs of the model")))
            continue
        out.append((call, feed, [outputs[names.index(n)] for n in wanted], seconds, None))
    return out


def write_device_profiles(directory: str, sessions: Mapping[int, object], models: Mapping[int, str]) -> str | None:
    """Write ``device_profiles.json`` (a list of ``{"session", "model", "summary", **profile}``)
    for the sessions whose backend reports device profiles; returns its path, or ``None`` when none
    does."""
    entries = []
    for ordinal, session in sessions.items():
        get = getattr(getattr(session, "backend_session", None), "device_profiles", None)
        if get is None:
            continue
        try:
            profiles = list(get())
        except Exception as exc:  # a profile problem must not fail the replay
            entries.append({"session": ordinal, "model": models.get(ordinal), "error": f"{type(exc).__name__}: {exc}"})
            continue
        for profile in profiles:
            entries.append({"session": ordinal, "model": models.get(ordinal), "summary": profile.summary(),
                            **profile.to_dict()})
    if not entries:
        return None
    path = os.path.join(directory, PROFILES_FILE)
    atomic_write(path, json.dumps(entries, indent=1, default=str).encode())
    return path


def device_notes(runs: Mapping[str, object]) -> list[str]:
    """One report note per device profile found in the runs' capture directories."""
    notes = []
    for label, run in runs.items():
        directory = getattr(run, "capture_dir", None)
        if not directory:
            continue
        try:
            with open(os.path.join(directory, PROFILES_FILE), encoding="utf-8") as f:
                entries = json.load(f)
        except (OSError, ValueError):
            continue
        for entry in entries:
            what = entry.get("summary") or f"no profile ({entry.get('error')})"
            notes.append(f"{label}: device profile of {entry.get('model')} (session {entry.get('session')}): {what}; "
                         f"per-layer detail in {os.path.join(directory, PROFILES_FILE)}")
    return notes
