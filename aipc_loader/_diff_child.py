"""Entry point of the per-backend child process of ``aipc diff`` (one process per backend run).

The loader owns it because a live run is the user's script under the loader's hot patch
(:func:`aipc_loader.run_script` / :func:`aipc_loader.run_module`), recorded with the diff's capture
writer. ``onnxwrapper.diff`` starts it by module name (``onnxwrapper.diff._runs.run_child``) and
imports nothing of the loader; this module builds on the diff's capture, runs and localize stages.

Usage (internal; the orchestrator builds these command lines)::

    python -P -m aipc_loader._diff_child --backend B --capture DIR [--backend-options JSON]
        [--max-bytes N] [--max-calls-per-model N] [--no-capture] [--sha256 HEX] -- script.py [args…]   # live
    python -m aipc_loader._diff_child ... -m module [args…]                   # live: run a module
    python -m aipc_loader._diff_child ... --replay REF_CAPTURE_DIR [--only KEYS.json]   # replay inputs
    python -m aipc_loader._diff_child ... --expose REQUEST.json                # localization round
    python -m aipc_loader._diff_child ... --model-request REQUEST.json         # a model run

Every mode writes ``DIR/status.json``: ``{"status": "ok" | "script_failed" | "unavailable" |
"error", "exit_code": int, "message": str}`` before exiting. A process killed by a signal writes
nothing more; the orchestrator then reports the signal. Exit code: the script's (live), 0/1
(replay, expose), 3 when the backend is unavailable, 4 on bad arguments.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import time
import traceback

import aipc_loader
from onnxwrapper import InferenceSession
from onnxwrapper._registry import default_registry
from onnxwrapper.diff._capture import DEFAULT_MAX_BYTES, CaptureWriter, read_capture, start_capture
from onnxwrapper.diff._localize import run_exposed
from onnxwrapper.diff._runs import batch_runner, replay_batch, serve_model_request, write_device_profiles, write_status
from onnxwrapper.errors import BackendError

EXIT_UNAVAILABLE = 3
EXIT_BAD_ARGS = 4


def _check_backend(name: str, options: dict) -> tuple[str | None, str]:
    """``(None, "")`` when usable, else ``(status, message)``."""
    registry = default_registry()
    try:
        cls = registry.get(name)
        availability = registry.probe(name)
    except BackendError as exc:
        return "unavailable", str(exc)
    if not availability.available:
        hint = f" To fix: {availability.install_hint}." if availability.install_hint else ""
        return "unavailable", f"backend '{name}' is not available here: {availability.reason}.{hint}"
    try:
        cls.validate_options(options)
    except BackendError as exc:
        return "error", str(exc)
    return None, ""


def _live(ns, options: dict) -> int:
    meta = {"mode": "live", "backend": ns.backend, "backend_options": options,
            "target": {"module": ns.module, "argv": list(ns.argv)}}
    handle = None
    undo = lambda: None  # noqa: E731
    if not ns.no_capture:
        handle = start_capture(ns.capture, max_bytes=ns.max_bytes, max_calls_per_model=ns.max_calls_per_model,
                               metadata=meta)
        # number sessions in creation order, as `aipc -v` does
        undo = aipc_loader.add_session_listener(handle.writer.announce_session)
    # this child runs in safe-path mode (python -P: nothing of its working directory is imported by
    # aipc itself); the script gets the sys.path plain python gives it, PYTHONSAFEPATH as the user set it
    safe = bool(os.environ.get("PYTHONSAFEPATH"))
    try:
        if ns.module:
            code = aipc_loader.run_module(ns.argv[0], list(ns.argv[1:]), backend=ns.backend, backend_options=options,
                                          safe_path=safe)
        else:
            code = aipc_loader.run_script(ns.argv[0], list(ns.argv[1:]), backend=ns.backend, backend_options=options,
                                          safe_path=safe, sha256=ns.sha256)
    finally:
        undo()
        if handle is not None:
            handle.stop()
    code = int(code or 0)
    write_status(ns.capture, "ok" if code == 0 else "script_failed", code,
                  "" if code == 0 else f"the script exited with status {code}",
                  calls=handle.writer.calls_recorded if handle is not None else 0)
    return code


def _replay(ns, options: dict) -> int:
    ref = read_capture(ns.replay)
    writer = CaptureWriter(ns.capture, max_bytes=ns.max_bytes, max_calls_per_model=ns.max_calls_per_model,
                           metadata={"mode": "replay", "backend": ns.backend, "backend_options": options,
                                     "replayed_from": os.path.abspath(ns.replay),
                                     "target": ref.metadata.get("target")})
    only = None
    if ns.only:
        with open(ns.only, encoding="utf-8") as f:
            only = {tuple(k) for k in json.load(f)}
    sessions: dict[int, object] = {}
    errors: list[str] = []
    failed_sessions: set[int] = set()
    batched: dict[int, list] = {}  # sessions whose backend runs many feeds at once (run_batch): their calls
    try:
        for call in ref.calls:
            if call.method == "run_with_iobinding" or call.session in failed_sessions:
                continue
            if only is not None and (call.session, call.index) not in only:
                continue
            sess = sessions.get(call.session)
            if sess is None:
                try:
                    source = ref.models[call.model].model_source()
                    sess = InferenceSession(source, backend=ns.backend, backend_options=options)
                except Exception as exc:  # report per model, keep replaying the others
                    failed_sessions.add(call.session)
                    errors.append(f"session {call.session} ({call.model}): {type(exc).__name__}: {exc}")
                    traceback.print_exc()
                    continue
                sessions[call.session] = sess
            if batch_runner(sess) is not None:
                batched.setdefault(call.session, []).append(call)
                continue
            feeds = call.inputs()
            start = time.perf_counter()
            try:
                outputs = sess.run(list(call.output_names) or None, feeds)
            except Exception as exc:
                errors.append(f"session {call.session} call {call.index}: {type(exc).__name__}: {exc}")
                traceback.print_exc()
                continue
            writer.observe(session=sess, method="run", output_names=list(call.output_names), input_feed=feeds,
                           outputs=outputs, seconds=time.perf_counter() - start, call_key=(call.session, call.index))
        for ordinal, calls in batched.items():
            for call, feeds, outputs, seconds, exc in replay_batch(sessions[ordinal], calls):
                if exc is not None:
                    errors.append(f"session {call.session} call {call.index} (batched): {type(exc).__name__}: {exc}")
                    continue
                writer.observe(session=sessions[ordinal], method="run", output_names=list(call.output_names),
                               input_feed=feeds, outputs=outputs, seconds=seconds, call_key=(call.session, call.index))
        write_device_profiles(ns.capture, sessions, {c.session: c.model for c in ref.calls})
    finally:
        writer.close()
    if errors:
        write_status(ns.capture, "script_failed", 1, "; ".join(errors[:5]), calls=writer.calls_recorded)
        return 1
    write_status(ns.capture, "ok", 0, calls=writer.calls_recorded)
    return 0


def _expose(ns, options: dict) -> int:
    with open(ns.expose, encoding="utf-8") as f:
        request = json.load(f)
    try:
        run_exposed(request, ns.backend, options)
    except Exception as exc:
        traceback.print_exc()
        write_status(ns.capture, "script_failed", 1, f"{type(exc).__name__}: {exc}")
        return 1
    write_status(ns.capture, "ok", 0)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m aipc_loader._diff_child", add_help=True)
    p.add_argument("--backend", required=True)
    p.add_argument("--capture", required=True, help="output directory of this run")
    p.add_argument("--backend-options", default="{}", help="JSON object")
    p.add_argument("--max-bytes", type=int, default=None)
    p.add_argument("--max-calls-per-model", type=int, default=None)
    p.add_argument("--no-capture", action="store_true", help="live mode: run the script without recording")
    p.add_argument("--replay", default=None, help="reference capture to replay")
    p.add_argument("--only", default=None, help="JSON file: [[session, index], …] of the calls to replay")
    p.add_argument("--expose", default=None, help="localization request JSON")
    p.add_argument("--model-request", default=None, help="model run request JSON (onnxwrapper.diff._runs._model_child)")
    p.add_argument("--sha256", default=None, help="live mode: run the script only if its bytes have this digest")
    p.add_argument("-m", dest="module", action="store_true", help="argv[0] is a module name")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one backend as described in the module docstring; returns the exit code."""
    faulthandler.enable()  # a native crash (SIGSEGV in a backend) prints the Python stack to stderr
    ns = _parser().parse_args(argv)
    if ns.argv and ns.argv[0] == "--":
        ns.argv = ns.argv[1:]
    ns.max_bytes = ns.max_bytes if ns.max_bytes is not None else DEFAULT_MAX_BYTES
    try:
        options = json.loads(ns.backend_options)
        if not isinstance(options, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        write_status(ns.capture, "error", EXIT_BAD_ARGS, f"--backend-options: {exc}")
        return EXIT_BAD_ARGS
    status, message = _check_backend(ns.backend, options)
    if status is not None:
        print(f"aipc diff: {message}", file=sys.stderr)
        write_status(ns.capture, status, EXIT_UNAVAILABLE if status == "unavailable" else EXIT_BAD_ARGS, message)
        return EXIT_UNAVAILABLE if status == "unavailable" else EXIT_BAD_ARGS
    if ns.expose:
        return _expose(ns, options)
    if ns.model_request:
        return serve_model_request(ns.model_request, ns.backend, options, ns.capture, write_status)
    if ns.replay:
        return _replay(ns, options)
    if not ns.argv:
        write_status(ns.capture, "error", EXIT_BAD_ARGS, "no script or module to run")
        return EXIT_BAD_ARGS
    try:
        return _live(ns, options)
    except Exception as exc:  # the loader itself failed (the script's own errors are its exit code)
        traceback.print_exc()
        write_status(ns.capture, "error", 1, f"could not run the script: {type(exc).__name__}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
