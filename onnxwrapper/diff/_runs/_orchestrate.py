"""Running: one child process per backend run (QNN configuration is process-global, and a native
crash of one backend must not take the others' results with it).

Each child is ``python -P -m aipc_loader._diff_child`` (safe-path mode, started in its own run folder
except for a live run of the script: :mod:`onnxwrapper.diff._runs._child_env`) with its stdout/stderr written to
``<capture dir>/stdout.txt`` and ``stderr.txt``; its outcome is read from ``status.json`` and its
return code. A negative return code is a signal (POSIX; on Windows an NTSTATUS crash code such as
0xC0000005, named: ``ACCESS_VIOLATION (0xC0000005)``): the run is reported as ``crashed`` with the
signal's name, and the calls it recorded before dying stay usable. Children run in their own
process group (POSIX session; Windows process group, stopped as a process tree with ``taskkill /T``)
so a timeout can stop the script and whatever it started.

Every run that did not end normally gets a one-line ``cause`` for the report: the signal and the
script's Python frame at the crash, the exception (type and message, from the traceback the
script printed) and the script line it came from, the exit status, or the time limit.

Files the script writes and the user names (``aipc diff --compare-output FILE``) are copied after
each run into ``<run dir>/files/`` when the run (re)wrote them (their size or modification time
changed), so every backend's version can be compared; a file the run did not write is recorded
as ``None``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field

from onnxwrapper.diff._runs._backend_run import BackendRun
from onnxwrapper.diff._runs._child_env import child_cwd, child_environment, module_command
from onnxwrapper.diff._runs._status import read_status
from onnxwrapper.kernel import crash_name as process_crash_name
from onnxwrapper.kernel import kill_process_tree, new_session_kwargs

__all__ = ["Target", "run_child", "crash_name", "exception_cause", "kill_child", "log_tail"]

_TAIL_LINES = 6
_CAUSE_CHARS = 300


@dataclass(frozen=True)
class Target:
    """What to run: ``argv[0]`` is a script path (or a module name when ``module``), the rest its
    arguments; ``cwd`` the working directory (default: the caller's); ``sha256``: when set, the
    script must have this content digest — each child checks the very bytes it runs, and refuses
    to run other ones (a script swapped after ``aipc fix --confirm`` checked it)."""

    argv: tuple
    module: bool = False
    cwd: str | None = None
    env: dict = field(default_factory=dict)
    sha256: str | None = None

    def to_dict(self) -> dict:
        """``argv``, ``module`` and ``cwd`` as JSON-ready data (the manifest's ``target``; not ``env``)."""
        return {"argv": list(self.argv), "module": self.module, "cwd": self.cwd}


def log_tail(path: str, lines: int = _TAIL_LINES) -> str:
    """The last ``lines`` non-blank lines of the log file at ``path`` (a child's stderr; its last 8 KiB
    are read), ``""`` when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    keep = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return "\n".join(keep)


def _crash_stack(path: str, frames: int = 4) -> str:
    """The innermost frames faulthandler printed for a native crash (the child enables it)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    blocks = []
    for i, line in enumerate(lines):
        if "most recent call first" in line:
            body = []
            for ln in lines[i + 1:]:
                if not ln.strip().startswith("File "):
                    break
                body.append(ln.strip())
            blocks.append((line.lstrip().startswith("Current thread"), body))
    # the crashing Python thread when known; else (a native thread crashed) the script's main thread
    chosen = ([b for cur, b in blocks if cur] or [b for _, b in blocks if any("_child.py" in f for f in b)]
              or [b for _, b in blocks])
    return "\n".join(chosen[0][:frames]) if chosen else ""


def crash_name(returncode: int | None) -> str | None:
    """The signal (POSIX) or NTSTATUS crash (Windows) a return code means, e.g. ``"SIGSEGV"`` or
    ``"ACCESS_VIOLATION (0xC0000005)"``; ``None`` for a normal exit (:func:`onnxwrapper.kernel.crash_name`)."""
    return process_crash_name(returncode)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _CAUSE_CHARS else text[:_CAUSE_CHARS - 1] + "…"


def exception_cause(stderr_text: str, script: str | None = None) -> str | None:
    """One line for the last Python traceback in ``stderr_text``: ``"Type: message (in
    script.py line N)"`` naming the script's innermost frame when ``script`` (its path) appears in
    the traceback, else the innermost frame; ``None`` when there is no traceback."""
    lines = stderr_text.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    frames, exc = [], None
    for ln in lines[starts[-1] + 1:]:
        m = re.match(r'\s+File "([^"]+)", line (\d+)', ln)
        if m:
            frames.append((m.group(1), m.group(2)))
        elif ln and not ln[0].isspace():
            exc = ln.strip()
            break
    if exc is None:
        return None
    base = os.path.basename(script) if script else None
    own = [f for f in frames if base and os.path.basename(f[0]) == base]
    where = own[-1] if own else (frames[-1] if frames else None)
    return _short(exc) + (f" (in {os.path.basename(where[0])} line {where[1]})" if where else "")


def _crash_cause(signal_name: str, stack: str) -> str:
    first = stack.splitlines()[0].strip() if stack else ""
    m = re.match(r'File "([^"]+)", line (\d+) in (\S+)', first)
    return f"killed by {signal_name}" + (f" in {os.path.basename(m.group(1))} line {m.group(2)} ({m.group(3)})"
                                           if m else "")


def _file_state(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _collect_files(files, cwd: str | None, directory: str, before: dict) -> dict:
    """Copy the named files the run (re)wrote into ``<directory>/files/``; ``{name: copy or None}``."""
    result = {}
    for k, name in enumerate(files):
        path = os.path.join(cwd or os.getcwd(), name)
        state = _file_state(path)
        if state is None or state == before.get(name):
            result[name] = None
            continue
        rel = os.path.join("files", f"{k}-{os.path.basename(name) or 'file'}")
        os.makedirs(os.path.join(directory, "files"), exist_ok=True)
        try:
            shutil.copyfile(path, os.path.join(directory, rel))
            result[name] = rel
        except OSError:
            result[name] = None
    return result


def run_child(backend: str, options: dict | None, directory: str, *, target: Target | None = None,
              replay: str | None = None, only: str | None = None, expose: str | None = None,
              model_request: str | None = None, timeout: float | None = None,
              max_bytes: int | None = None, max_calls_per_model: int | None = None,
              env: dict | None = None, echo=None, files=(), capture: bool = True,
              on_start=None) -> BackendRun:
    """Run one backend in a child process and describe how it went.

    Args:
        backend: backend name; options: its backend options (JSON-serializable).
        directory: the run's capture directory (created; must not hold a capture yet).
        target: the script/module to run (live mode). replay: reference capture to replay instead;
            only: a JSON file listing the ``[session, index]`` keys to replay (default all).
        expose: a localization request file to serve instead.
        model_request: a model-run request file to serve instead (:mod:`onnxwrapper.diff._runs._model_child`).
        timeout: seconds before the child's process group is killed (``None`` = no limit).
        max_bytes / max_calls_per_model: capture limits.
        env: extra environment variables of the child (added to this process's environment; in
            live mode ``target.env`` is added too).
        echo: optional callable receiving the child's stdout text after it ends.
        files: paths (relative to the target's working directory) of files the script writes,
            copied into ``directory/files/`` when this run wrote them (module docstring).
        capture: record the run calls (live mode); ``False`` runs the script only (for a second
            run of the reference that tells volatile printed numbers apart).
        on_start: optional callable receiving the child's ``subprocess.Popen`` once it started
            (so that a caller running several children at once can stop them: :func:`kill_child`).

    Returns:
        A :class:`~onnxwrapper.diff.BackendRun`; never raises for a failing child.
    """
    options = dict(options or {})
    directory = os.path.abspath(directory)  # the child runs in it: every path it gets is absolute
    os.makedirs(directory, exist_ok=True)
    expose, model_request, replay, only = (os.path.abspath(p) if p else p for p in (expose, model_request, replay, only))
    cmd = module_command("aipc_loader._diff_child", "--backend", backend, "--capture", directory,
                         "--backend-options", json.dumps(options))
    if max_bytes is not None:
        cmd += ["--max-bytes", str(int(max_bytes))]
    if max_calls_per_model is not None:
        cmd += ["--max-calls-per-model", str(int(max_calls_per_model))]
    if not capture:
        cmd += ["--no-capture"]
    if expose:
        cmd += ["--expose", expose]
    elif model_request:
        cmd += ["--model-request", model_request]
    elif replay:
        cmd += ["--replay", replay] + (["--only", only] if only else [])
    elif target is not None:
        cmd += (["--sha256", target.sha256] if target.sha256 and not target.module else [])
        cmd += (["-m"] if target.module else []) + ["--", *map(str, target.argv)]
    child_env = child_environment(env, target.env if target else None)
    out_path, err_path = os.path.join(directory, "stdout.txt"), os.path.join(directory, "stderr.txt")
    run = BackendRun(backend=backend, options=options, capture_dir=directory, stdout=out_path, stderr=err_path)
    live = target is not None and not (expose or model_request or replay)
    cwd = target.cwd if target else None
    before = {name: _file_state(os.path.join(cwd or os.getcwd(), name)) for name in files}
    start = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    cwd=child_cwd(directory, cwd, live=live), env=child_env, **new_session_kwargs())
        except OSError as exc:
            run.status, run.returncode, run.message = "error", None, f"could not start the child process: {exc}"
            return run
        if on_start is not None:
            on_start(proc)
        try:
            run.returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_child(proc)
            run.seconds = time.perf_counter() - start
            run.status, run.returncode = "timeout", proc.returncode
            run.message = f"timed out after {timeout:g} s; the run was stopped"
            run.cause = f"timed out after {timeout:g} s"
            _finish_calls(run)
            return run
        except KeyboardInterrupt:
            kill_child(proc)
            raise
    run.seconds = time.perf_counter() - start
    status = read_status(directory)
    _finish_calls(run)
    if files:
        run.files = _collect_files(files, cwd, directory, before)
    if echo is not None:
        try:
            with open(out_path, encoding="utf-8", errors="replace") as f:
                echo(f.read())
        except OSError:
            pass
    crash = crash_name(run.returncode)
    if crash is not None:
        run.status, run.signal = "crashed", crash
        when = "after the script completed" if status and status.get("status") == "ok" else "during the run"
        run.message = (f"crashed with {run.signal} {when}; the {run.calls} call(s) recorded before the crash "
                       f"are kept")
        stack = _crash_stack(err_path)
        if stack:
            run.message += f"\nPython stack at the crash (innermost first):\n{stack}"
        run.cause = _crash_cause(run.signal, stack)
        return run
    if status is None:
        run.status = "error"
        run.message = f"the child process ended (exit {run.returncode}) without a status: {log_tail(err_path)}"
        run.cause = _short(f"the child process ended (exit {run.returncode}) without a status: "
                           f"{log_tail(err_path, 1)}")
        return run
    run.status = status.get("status", "error")
    if run.status != "ok":
        tail = log_tail(err_path)
        run.message = status.get("message") or f"exit status {run.returncode}"
        if tail and run.status in ("script_failed", "error"):
            run.message += f"\n{tail}"
        run.cause = _failure_cause(run, status, err_path, target)
    return run


def _failure_cause(run: BackendRun, status: dict, err_path: str, target: Target | None) -> str:
    """The one-line cause of a run that ended without a crash (see the module docstring)."""
    if run.status == "script_failed":
        try:
            with open(err_path, encoding="utf-8", errors="replace") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 65536))
                text = f.read()
        except OSError:
            text = ""
        cause = exception_cause(text, target.argv[0] if target and not target.module else None)
        if cause is not None:
            run.exception = True
            return cause
        last = log_tail(err_path, 1)
        return _short(f"exited with status {run.returncode}" + (f": {last}" if last else ""))
    return _short((status.get("message") or run.status).splitlines()[0])


def _finish_calls(run: BackendRun) -> None:
    try:
        with open(os.path.join(run.capture_dir, "calls.jsonl"), "rb") as f:
            run.calls = sum(1 for line in f if line.endswith(b"\n"))
    except OSError:
        run.calls = 0


def kill_child(proc: subprocess.Popen) -> None:
    """Stop a child of :func:`run_child` and every process it started (its process group on POSIX,
    its process tree on Windows: :func:`onnxwrapper.kernel.kill_process_tree`); returns when it has
    ended (at most 10 s later). Harmless when it already ended."""
    kill_process_tree(proc)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
