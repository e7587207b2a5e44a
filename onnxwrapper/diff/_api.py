"""The Python API of ``aipc diff``: run a script per backend, judge, localize; re-check saved runs.

``aipc diff`` is a thin layer over these functions (each CLI option maps to an argument here).
A diff directory holds ``diff.json`` (the manifest: target, mode, reference, runs) and one capture
directory per run label; :func:`check` re-judges it with other tolerances without running again.
"""

from __future__ import annotations

import datetime as _dt
import os
import tempfile
from typing import Callable, Iterable, Mapping

from onnxwrapper._registry import default_registry
from onnxwrapper.diff._capture import (DEFAULT_MAX_BYTES, MANIFEST, MANIFEST_FORMAT, Capture, parse_size, read_capture,
                                       read_manifest, received_options, relative_run, script_sha256, unused_stem,
                                       write_manifest)
from onnxwrapper.diff._judge import (NONE, STDOUT, DiffResult, as_tolerances, compare_captures, judge_app, judge_runs,
                                     needs_rerun)
from onnxwrapper.diff._localize import localize_failures
from onnxwrapper.diff._report import prewarm as prewarm_report
from onnxwrapper.diff._runs import BackendRun, RunPlan, Target, check_backend_options, parse_backends, run_child

__all__ = ["run", "check", "compare", "default_directory", "report_paths"]

def report_paths(directory: str, check: bool = False) -> tuple[str, str]:
    """``(json path, html path)`` of a report in ``directory``: ``report.json``/``report.html``
    for a run; for a re-check (``--check``) new ``report-check-<UTC date-time>[-n]`` files, so the
    original run's report is kept."""
    if not check:
        return os.path.join(directory, "report.json"), os.path.join(directory, "report.html")
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    stem = unused_stem(os.path.join(directory, f"report-check-{stamp}"), (".json", ".html"))
    return stem + ".json", stem + ".html"


def default_directory(base: str | None = None, command: str = "diff") -> str:
    """``<base or cwd>/aipc-<command>-<UTC date-time>`` (made unique with a suffix when the name is
    taken, also by a symbolic link that points nowhere).

    The one rule of every aipc command that writes a run folder (``aipc diff``, ``aipc diff
    --model``, ``aipc run MODEL.onnx``, ``aipc capture``) when no folder is given: a new folder
    in the working directory, named after the command (docs/loader.md, "Where results go").

    Args:
        base: the parent folder. Defaults to the working directory.
        command: the command's name in the folder's name (``"diff"``, ``"run"``, ``"capture"``).
    """
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = os.path.join(base or os.getcwd(), f"aipc-{command}-{stamp}")
    candidate, n = path, 1
    while os.path.lexists(candidate):  # a dangling symbolic link is taken too: never written through
        n += 1
        candidate = f"{path}-{n}"
    return candidate


def run(target, args: Iterable[str] = (), *, module: bool = False, backends="cpu,qnn", reference: str = "cpu",
        replay: bool = False, auto_replay: bool = True, backend_options: Mapping[str, Mapping] | None = None,
        tolerances=None,
        localize: bool = False, directory=None, timeout: float | None = None,
        max_bytes: int | str = DEFAULT_MAX_BYTES, max_calls_per_model: int | None = None, cwd=None,
        env: Mapping[str, str] | None = None, progress: Callable | None = None,
        echo: Callable | None = None, compare_output: Iterable[str] = (STDOUT,), output_filter: str | None = None,
        output_rtol: float | None = None, jobs: int | None = None, script_digest: str | None = None) -> DiffResult:
    """Run a script (or module) once per backend, each in its own process, and compare with the reference.

    Args:
        target: script path (or module name with ``module=True``). args: its arguments.
        backends: ``"cpu,qnn"`` or a list; entries ``label=backend`` allow two runs of one backend.
            The reference is added when missing. Defaults to ``"cpu,qnn"``.
        reference: label of the reference run. Defaults to ``"cpu"``.
        replay: run the script on the reference only and feed its recorded inputs to the other
            backends (exact for scripts whose inputs depend on randomness, time or earlier outputs).
        auto_replay: live mode only — when a backend's calls were fed other inputs than the
            reference's (e.g. a pipeline whose later inputs depend on earlier outputs), re-run just
            those calls on the reference's inputs in one more child process (run label
            ``<label>+replay``) and judge them on that. Defaults to True.
        backend_options: ``{label: {option: value}}`` (e.g. ``{"qnn": {"precision": "fp32"}}``).
        tolerances: a :class:`~onnxwrapper.diff.Tolerance` for every output, or
            :class:`~onnxwrapper.diff.Tolerances`; default precision-aware presets.
        localize: name the cause inside each failing model — the node that breaks, an FP16 overflow
            or saturation, or error accumulating (see :func:`localize_failures`).
        directory: the diff directory (created); default a new ``aipc-diff-*`` temporary directory.
        timeout: seconds per backend run; ``None`` = no limit.
        max_bytes / max_calls_per_model: capture limits per run (``"2G"`` style accepted).
        cwd / env: working directory and extra environment variables of the script.
        progress: ``progress(stage: str, done: int, total: int)`` callback (the CLI's tqdm bars).
        echo: ``echo(label, stdout_text)`` called after each run with the script's standard output.
        compare_output: the app-level comparison (:mod:`onnxwrapper.diff._judge._app_level`):
            ``"stdout"`` (default), names of files the script writes (relative to ``cwd``), or
            ``("none",)``.
        output_filter: regular expression; only matching lines of the compared text take part.
        output_rtol: relative tolerance of printed numbers (default: the run's tensor error
            budget; 0 = exact).
        jobs: how many backend runs may go at once (independent runs overlap; a replay starts as
            soon as the runs it needs have ended); ``None``: as many as this host has processors
            and memory for (:mod:`onnxwrapper.diff._runs._schedule`), ``1``: one after another. The
            results do not depend on it; each run keeps its own wall time.
        script_digest: run the script only when its bytes have this hex sha256: each child checks
            the very bytes it compiles and refuses other ones (``aipc fix --confirm``: a script
            swapped after its digest was checked never runs).

    Returns:
        :class:`~onnxwrapper.diff.DiffResult` (``exit_status`` 0/1/2).

    Raises:
        onnxwrapper.BackendNotFoundError, onnxwrapper.BackendOptionError, ValueError: bad backend
            list, options or arguments (usage errors, found before any child starts).
        FileNotFoundError: the script does not exist.
    """
    compare_output = _app_items(compare_output)
    labels = parse_backends(backends)
    if reference not in labels:
        labels = {reference: default_registry().resolve(reference), **labels}
    options = {label: dict((backend_options or {}).get(label) or {}) for label in labels}
    unknown = set(backend_options or {}) - set(labels)
    if unknown:
        raise ValueError(f"backend options given for {', '.join(sorted(unknown))}, which is not among the "
                         f"backends ({', '.join(labels)}).")
    check_backend_options(labels, options)  # a bad option is an error before any child starts
    if not module and not os.path.isfile(os.path.join(cwd or "", os.fspath(target))):
        raise FileNotFoundError(f"script not found: {target}")
    max_bytes = parse_size(max_bytes)
    directory = os.path.abspath(directory or tempfile.mkdtemp(prefix="aipc-diff-"))
    os.makedirs(directory, exist_ok=True)
    tgt = Target(argv=(os.fspath(target), *map(str, args)), module=module,
                 cwd=os.fspath(cwd) if cwd else None, env=dict(env or {}), sha256=script_digest)
    manifest = {"format": MANIFEST_FORMAT, "version": 1, "mode": "replay" if replay else "live",
                "reference": reference, "backends": labels, "runs": {},
                "target": {**tgt.to_dict(), "sha256": None if module else script_sha256(tgt.argv[0], tgt.cwd)},
                "app": {"compare": list(compare_output), "filter": output_filter, "rtol": output_rtol}}
    files = [w for w in compare_output if w not in (STDOUT, NONE)]
    write_manifest(directory, manifest)

    def record(label: str, r: BackendRun) -> None:
        manifest["runs"][label] = relative_run(r, directory)
        write_manifest(directory, manifest)

    plan = RunPlan(directory, labels, reference, options, tgt, replay=replay, auto_replay=auto_replay,
                   timeout=timeout, max_bytes=max_bytes, max_calls_per_model=max_calls_per_model, files=files,
                   echo=echo, record=record)
    prewarm_report()  # the HTML report's matplotlib import overlaps the runs
    runs = plan.run(jobs, progress)
    manifest["jobs"] = plan.jobs
    manifest["runs"] = {label: manifest["runs"][label] for label in runs}  # the plan's order
    write_manifest(directory, manifest)
    order = plan.order
    if progress:
        progress("runs done", len(runs), len(runs))
    result = judge_runs(directory, manifest, runs, as_tolerances(tolerances), progress)
    judge_app(result, compare=compare_output, filter_regex=output_filter, rtol=output_rtol)
    if not replay and needs_rerun(result):
        # a second reference run, unrecorded, tells volatile printed numbers (timings) apart
        name = f"{reference}+rerun"
        if progress:
            progress(f"run {name}", len(order), len(order) + 1)
        rr = run_child(labels[reference], options[reference], os.path.join(directory, name), target=tgt,
                       timeout=timeout, env=tgt.env, files=files, capture=False)
        rr.label, rr.rerun_of = name, reference
        runs[name] = rr
        manifest["runs"][name] = relative_run(rr, directory)
        write_manifest(directory, manifest)
        judge_app(result, compare=compare_output, filter_regex=output_filter, rtol=output_rtol)
    if localize:
        localize_failures(result, timeout=timeout, progress=progress, env=tgt.env)
    return result


def _app_items(compare_output) -> tuple:
    items = (compare_output,) if isinstance(compare_output, str) else tuple(compare_output or ())
    items = tuple(os.fspath(i) for i in items)
    if NONE in items and len(items) > 1:
        raise ValueError(f"compare_output: 'none' cannot be combined with other items ({', '.join(items)}).")
    return items or (NONE,)


def check(directory, *, tolerances=None, localize: bool = False, timeout: float | None = None,
          progress: Callable | None = None, compare_output: Iterable[str] | None = None,
          output_filter: str | None = None, output_rtol: float | None = None) -> DiffResult:
    """Re-judge a saved diff directory (``aipc diff --check DIR``) without running the script again.

    Args:
        directory: a directory written by :func:`run` / ``aipc diff`` (holds ``diff.json``).
        tolerances: new tolerances (see :func:`run`). localize: also localize failures (this does
            run the failing models again, on their backends).
        compare_output / output_filter / output_rtol: the app-level comparison (see :func:`run`);
            ``None`` = as the run was made (files can only be compared when the run copied them).

    The runs' recorded backend options are an allow-list: paths, libraries and limits are never
    taken from a folder (:func:`onnxwrapper.diff._capture.received_options`; a note names what was
    dropped).

    Raises:
        FileNotFoundError: no ``diff.json`` there (a single capture is compared with :func:`compare`).
        MalformedFileError: a ``diff.json`` field of the wrong type, a run file outside the folder
            (the folder may come from elsewhere: docs/security.md).
    """
    directory = os.path.abspath(os.fspath(directory))
    try:
        manifest = read_manifest(directory, MANIFEST)
    except FileNotFoundError as exc:
        hint = (" It is a single capture; compare two captures with onnxwrapper.diff.compare()."
                if os.path.exists(os.path.join(directory, "capture.json")) else "")
        raise FileNotFoundError(f"{directory} is not an aipc diff directory (no {MANIFEST}).{hint}") from exc
    runs, notes = {}, []
    for label, d in (manifest.get("runs") or {}).items():
        d = dict(d)
        for key in ("capture_dir", "stdout", "stderr"):
            if d.get(key):
                d[key] = os.path.join(directory, d[key])
        d["options"], dropped = _received_options(d["backend"], d.get("options") or {})
        if dropped:
            notes.append(f"{label}: backend options recorded in the folder and not used: {', '.join(dropped)} (a "
                         f"folder never sets paths, libraries or limits; give your own: docs/security.md)")
        runs[label] = BackendRun(**{k: v for k, v in d.items() if k in BackendRun.__dataclass_fields__ and v is not None})
    result = judge_runs(directory, manifest, runs, as_tolerances(tolerances), progress)
    result.notes += notes
    result.mode = "check"
    result.timings = dict((manifest.get("model_run") or {}).get("timings") or {})
    saved = manifest.get("app") or {}
    judge_app(result, compare=_app_items(compare_output if compare_output is not None
                                         else saved.get("compare", (STDOUT,))),
              filter_regex=output_filter if output_filter is not None else saved.get("filter"),
              rtol=output_rtol if output_rtol is not None else saved.get("rtol"))
    if localize:
        localize_failures(result, timeout=timeout, progress=progress)
    return result


def _received_options(backend: str, options: Mapping) -> tuple[dict, list[str]]:
    """The recorded ``options`` of a run of ``backend`` that a folder may set, and the names dropped
    (:func:`onnxwrapper.diff._capture.received_options`; the backend class may allow more names)."""
    try:
        allowed = getattr(default_registry().get(backend), "received_options", ())
    except Exception:  # noqa: BLE001 - an unknown or broken backend allows only the common names
        allowed = ()
    return received_options(options, allowed)


def compare(reference, others: Mapping, *, tolerances=None, mode: str = "check") -> DiffResult:
    """Compare captures (objects or directories): ``others`` is ``{label: capture}``.

    Use it for captures made by :func:`~onnxwrapper.diff.start_capture` or ``aipc capture``.
    """
    ref = reference if isinstance(reference, Capture) else read_capture(reference)
    caps = {k: v if isinstance(v, Capture) else read_capture(v) for k, v in others.items()}
    return compare_captures(ref, caps, tolerances=as_tolerances(tolerances), mode=mode)
