"""Child process of ``aipc fix``: replay one model's recorded calls on a backend, with or without a recipe.

Usage (internal; :mod:`onnxwrapper.repair.fix._verify` builds the command line)::

    python -m onnxwrapper.repair.fix._child REQUEST.json

``REQUEST.json``: ``{"backend", "options", "reference" (capture dir), "model" (model key),
"calls" ([[session, index], …]), "capture" (output dir)}``. The calls are run with the reference's
recorded inputs, one ``onnxwrapper.InferenceSession(model, backend=…, backend_options=options)``
per recorded session, and recorded into ``capture`` under the reference's call keys (so
:func:`~onnxwrapper.diff.compare_captures` matches them); ``capture/fix.json`` gets the
sessions' partition reports (``get_partition()``, after the first call: dynamic-shape models
compile then) and seconds: opening each session, the first call of each input shape (it may
compile), the other calls — when there are none, the last call of each session runs once more,
timed and not recorded; ``capture/status.json`` says how it ended (the format of ``aipc diff``'s child).
One process per run: the QNN configuration is process-global, and a native crash must not take
``aipc fix`` down with it.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import time
import traceback

from onnxwrapper import InferenceSession
from onnxwrapper.diff._capture import CaptureWriter, read_capture
from onnxwrapper.diff._runs import write_status


def _replay(request: dict) -> int:
    out = request["capture"]
    ref = read_capture(request["reference"])
    wanted = {tuple(k) for k in request["calls"]}
    writer = CaptureWriter(out, metadata={"mode": "replay", "backend": request["backend"],
                                          "backend_options": request["options"],
                                          "replayed_from": os.path.abspath(request["reference"])})
    sessions: dict[int, object] = {}
    last: dict[int, object] = {}
    seen: set = set()
    facts = {"open_seconds": {}, "call_seconds": [], "first_call_seconds": [], "partitions": {}}
    try:
        for call in ref.calls:
            if (call.session, call.index) not in wanted or call.model != request["model"]:
                continue
            sess = sessions.get(call.session)
            if sess is None:
                start = time.perf_counter()
                sess = InferenceSession(ref.models[call.model].model_source(), backend=request["backend"],
                                        backend_options=request["options"])
                facts["open_seconds"][str(call.session)] = time.perf_counter() - start
                sessions[call.session] = sess
            feeds = call.inputs()
            start = time.perf_counter()
            outputs = sess.run(list(call.output_names) or None, feeds)
            seconds = time.perf_counter() - start
            # the first call of a new input shape may include compiling it (dynamic-shape models)
            signature = (call.session, call.input_signature)
            facts["first_call_seconds" if signature not in seen else "call_seconds"].append(seconds)
            seen.add(signature)
            last[call.session] = call
            if str(call.session) not in facts["partitions"] or facts["partitions"][str(call.session)] is None:
                report = sess.get_partition() if hasattr(sess, "get_partition") else None
                facts["partitions"][str(call.session)] = report.to_dict() if report is not None else None
            writer.observe(session=sess, method="run", output_names=list(call.output_names), input_feed=feeds,
                           outputs=outputs, seconds=seconds, call_key=(call.session, call.index))
        if not facts["call_seconds"]:
            for number, call in last.items():  # one timing run per session, compiled already
                start = time.perf_counter()
                sessions[number].run(list(call.output_names) or None, call.inputs())
                facts["call_seconds"].append(time.perf_counter() - start)
    except Exception as exc:  # reported to the parent: the candidate does not run
        traceback.print_exc()
        writer.close()
        write_status(out, "script_failed", 1, f"{type(exc).__name__}: {exc}", calls=writer.calls_recorded)
        return 1
    writer.close()
    with open(os.path.join(out, "fix.json"), "w", encoding="utf-8") as f:
        json.dump(facts, f, indent=1)
    write_status(out, "ok", 0, calls=writer.calls_recorded)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the request named by ``argv[0]``; returns the exit code (0 ok, 1 failed, 4 bad request)."""
    faulthandler.enable()
    argv = sys.argv[1:] if argv is None else argv
    try:
        with open(argv[0], encoding="utf-8") as f:
            request = json.load(f)
    except (IndexError, OSError, ValueError) as exc:
        print(f"aipc fix: bad request: {exc}", file=sys.stderr)
        return 4
    return _replay(request)


if __name__ == "__main__":
    sys.exit(main())
