"""The child side of a model run (``aipc run MODEL.onnx``, ``aipc diff --model``): one backend, one
process, the same capture format as a script run.

The parent (:func:`onnxwrapper.diff.run_model`) writes a request JSON — ``{"model": path,
"inputs": tensor file, "warm_up": N}`` — and starts ``python -m aipc_loader._diff_child --backend B
--capture DIR --model-request REQUEST.json`` (:func:`onnxwrapper.diff._runs._orchestrate.run_child`).
This module then:

1. creates ``onnxwrapper.InferenceSession(model, backend=B, backend_options=…)`` (timed: for the
   QNN backend this includes the compile, or the cache lookup);
2. runs the first iteration's feed ``warm_up`` times, not recorded (for a dynamic-shape model on
   QNN the first run compiles the shape's specialization: a warm-up keeps it out of the timings);
3. runs every iteration once, timing ``session.run`` alone (``time.perf_counter``), and records
   each call with :class:`~onnxwrapper.diff.CaptureWriter` as session 1, call ``k``;
4. writes ``status.json`` with ``session_seconds``, ``warm_up``, ``providers`` and ``partition``
   (``get_partition().summary()``, or ``None``), besides the usual status fields.

A failure to create the session or to run it ends the run with status ``error`` and a one-line
message naming the step; the calls recorded before stay usable.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from onnxwrapper import InferenceSession
from onnxwrapper.diff._capture import CaptureWriter, read_tensors

__all__ = ["serve_model_request"]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}"


def serve_model_request(request_path: str, backend: str, options: dict, capture_dir: str, write_status) -> int:
    """Run the request at ``request_path`` on ``backend`` (module docstring); returns the exit code
    (0, or 1 after a failure). ``write_status(directory, status, exit_code, message, **extra)`` is
    the child's status writer."""
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    feeds = read_tensors(request["inputs"], role="inputs").inputs
    warm_up = int(request.get("warm_up") or 0)
    extra = {"warm_up": warm_up, "session_seconds": None, "providers": [], "partition": None, "iterations": 0}
    writer = CaptureWriter(capture_dir, metadata={"mode": "model", "backend": backend, "backend_options": options,
                                                  "model": os.path.abspath(request["model"])})
    step = "creating the session"
    try:
        start = time.perf_counter()
        session = InferenceSession(request["model"], backend=backend, backend_options=options)
        extra["session_seconds"] = time.perf_counter() - start
        step = "warm-up run"
        for _ in range(warm_up if feeds else 0):
            session.run(None, feeds[0])
        for k, feed in enumerate(feeds):
            step = f"iteration {k}"
            start = time.perf_counter()
            outputs = session.run(None, feed)
            seconds = time.perf_counter() - start
            writer.observe(session=session, method="run", output_names=None, input_feed=feed, outputs=outputs,
                           seconds=seconds, call_key=(1, k))
            extra["iterations"] = k + 1
        extra["providers"] = list(session.get_providers())
        partition = session.get_partition()
        extra["partition"] = partition.summary() if partition is not None else None
    except Exception as exc:  # reported as the run's cause; the parent keeps the other backends' results
        traceback.print_exc()
        writer.close()
        message = f"{step} failed: {_one_line(exc)}"
        print(f"aipc: {backend}: {message}", file=sys.stderr)
        write_status(capture_dir, "error", 1, message, calls=writer.calls_recorded, **extra)
        return 1
    writer.close()
    write_status(capture_dir, "ok", 0, calls=writer.calls_recorded, **extra)
    return 0
