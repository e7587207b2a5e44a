"""onnxruntime's telemetry: off, unless the user turns it on (``ONNXWRAPPER_ORT_TELEMETRY=1``).

What onnxruntime does (measured on the onnxruntime 1.32.0 wheel for x86-64 Linux, with ``strace``):
the library carries a telemetry client and the collector address
``https://mobile.events.data.microsoft.com/OneCollector/1.0``; about 20 s after ``import
onnxruntime`` — with or without a session — the process looks that host up (DNS queries), as it
does for every process that imports it. ``onnxruntime.disable_telemetry_events()`` called after the
import does not stop those lookups (measured); the environment variable ``ORT_DISABLE_TELEMETRY=1``
set before onnxruntime is imported does (measured: no network call at all). On Windows, official
builds send their events through the operating system's own telemetry (onnxruntime's privacy
notice, docs/Privacy.md of its repository); ``disable_telemetry_events()`` turns those off.

So aipc and onnxwrapper turn off what each can:

* the ``aipc`` command sets ``ORT_DISABLE_TELEMETRY=1`` for itself before it imports onnxruntime
  (:func:`aipc_loader._env.keep_ort_telemetry_off`): the script it runs and every child process
  inherit it;
* :func:`quiet_ort_telemetry`, called when a backend is made for a session (``Backend.__init__``), calls
  ``onnxruntime.disable_telemetry_events()`` once per process — in a script that imports
  onnxruntime itself this is all that can still be done; set ``ORT_DISABLE_TELEMETRY=1`` before
  the import (or run the script under ``aipc``) to stop the rest.

``ONNXWRAPPER_ORT_TELEMETRY=1`` (:data:`ENV_ORT_TELEMETRY`) leaves onnxruntime's telemetry as
onnxruntime has it. Nothing happens at import time.
"""

from __future__ import annotations

import os
import threading
from typing import Mapping

__all__ = ["ENV_ORT_TELEMETRY", "ORT_TELEMETRY_OFF_VARIABLE", "ort_telemetry_wanted", "quiet_ort_telemetry"]

#: set to 1 (true, yes, on) to leave onnxruntime's telemetry on
ENV_ORT_TELEMETRY = "ONNXWRAPPER_ORT_TELEMETRY"
#: onnxruntime's own switch, read when onnxruntime is imported
ORT_TELEMETRY_OFF_VARIABLE = "ORT_DISABLE_TELEMETRY"
_done = False
_lock = threading.Lock()


def ort_telemetry_wanted(environ: Mapping[str, str] | None = None) -> bool:
    """True when the user turned onnxruntime's telemetry on (:data:`ENV_ORT_TELEMETRY` is 1, true,
    yes or on, any case)."""
    value = (os.environ if environ is None else environ).get(ENV_ORT_TELEMETRY, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def quiet_ort_telemetry() -> bool:
    """Call ``onnxruntime.disable_telemetry_events()`` once per process, unless the user wants the
    telemetry (module docstring). Returns True when it was called by this call. Never raises."""
    global _done
    with _lock:
        if _done or ort_telemetry_wanted():
            return False
        _done = True
    try:
        import onnxruntime  # imported already by whoever creates a session

        onnxruntime.disable_telemetry_events()
    except Exception:  # noqa: BLE001 - an onnxruntime without the call: nothing to turn off
        return False
    return True
