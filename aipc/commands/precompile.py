"""aipc compile --from-capture: compile every shape a captured run used, in parallel, into the
compile cache, so that the app's next run on the NPU loads its models instead of compiling them.

usage: aipc compile --from-capture DIR [MODEL] [--jobs N] [--target T] [--precision fp16|fp32]
                    [--cache-dir DIR] [--compile-timeout S] [--compile-memory-mb MIB]
                    [--json] [--no-progress] [-v]

A model with dynamic input dims (a sequence length, a batch) is compiled for the QNN HTP once per
input signature — the shapes of its dynamic inputs plus the values of its control inputs — the
first time the app feeds it. An app with 18 sequence lengths compiles 18 times, one after another,
inside its first run. This command reads a capture of that run (`aipc capture -o DIR script.py`),
finds per model the distinct signatures it used, and compiles them N at a time in worker
processes into the same cache, under the same keys, as the app's sessions use:

    aipc capture -o cap script.py                  # once, on the CPU: records every feed
    aipc compile --from-capture cap --jobs 2       # compiles every captured shape, 2 at a time
    python -m aipc --backend qnn script.py         # loads them: no compile at run

MODEL (a path, file name or capture key) restricts it to one model of the capture. The backend
options are the run's: --target, --precision and --cache-dir, else AIPC_TARGET, AIPC_PRECISION
and AIPC_CACHE_DIR, as `python -m aipc` reads them; give the same ones to both, or the run looks
up other keys. The cache key also holds the app's SessionOptions, which a capture does not record:
the defaults are assumed (ORT_ENABLE_ALL, no session config entries or free-dimension overrides;
apps that set only threads or log levels match). A compile that fails goes through the recovery
ladder, as in the run, and what it took is remembered in the cache; --compile-timeout and
--compile-memory-mb (AIPC_COMPILE_TIMEOUT, AIPC_COMPILE_MEMORY_MB) bound each compile, as for
`python -m aipc`. --jobs defaults to the usable CPUs, bounded by
memory (a worker needs ≈ 180 MiB, more while compiling a large model) and by 8.

Output: a progress bar per signature (on a terminal), then one row per signature — model, shapes,
origin (compiled now / cached already / failed with the error's type and message) and seconds —
and the totals with the wall time. Exit status: 0 when every signature is in the cache, 1 when one
failed (the others are still compiled), 64 usage error, or no such capture directory, or not a
capture, 69 the qnn backend is not available here (the table of `aipc --help`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from tqdm import tqdm

import onnxwrapper
from aipc._exit_codes import EXIT_FAILED, EXIT_UNAVAILABLE, EXIT_USAGE, UsageError
from aipc.args import add_compile_budget, resolve_settings
from aipc.commands._capture_signatures import CaptureProblem, ModelPlan, plan_capture
from aipc_loader._report import say
from onnxwrapper.backends.qnn import WorkerPool, default_jobs, precompile
from onnxwrapper.errors import BackendOptionError, BackendUnavailableError
from onnxwrapper.kernel import default_cache_dir

__all__ = ["add_arguments", "main"]

#: options of `aipc compile MODEL -o OUT` that mean nothing here, with why
_SINGLE_MODEL_ONLY = {"-o": "the compiled specializations go to the compile cache (--cache-dir)",
                      "--output": "the compiled specializations go to the compile cache (--cache-dir)",
                      "--calibration": "quantized compiles write a QDQ model to a file, not to the cache",
                      "--shape": "the shapes are the captured ones", "--dim": "the shapes are the captured ones",
                      "--dlc": "it writes files next to a single compile", "--profile": "profile a single compile",
                      "--no-patch": "sessions patch by default, so the cache keys would not match",
                      "--repairs": "a repaired model compiles under other keys; use `aipc compile MODEL --repairs`"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``aipc compile --from-capture`` (see the module docstring)."""
    parser.add_argument("model", nargs="?", metavar="MODEL",
                        help="only this model of the capture (path, file name or capture key; default: all)")
    parser.add_argument("--from-capture", required=True, metavar="DIR",
                        help="capture directory of the app's run (aipc capture -o DIR script.py)")
    parser.add_argument("-j", "--jobs", type=int, metavar="N",
                        help="compile worker processes at once (default: usable CPUs, bounded by memory and 8)")
    group = parser.add_argument_group("backend options (as for `python -m aipc`; they are part of the cache key)")
    group.add_argument("--backend", default="qnn", metavar="NAME", help="qnn (the only backend with a compile cache)")
    group.add_argument("--target", metavar="T", help="QNN target SoC, e.g. snapdragon-x-elite [AIPC_TARGET]")
    group.add_argument("--precision", choices=("fp16", "fp32"), help="fp16 (default) or fp32 [AIPC_PRECISION]")
    group.add_argument("--cache-dir", metavar="DIR", help="compile cache to fill [AIPC_CACHE_DIR, else the "
                                                          "platform cache]")
    add_compile_budget(group)  # not part of the cache key: a budget decides only when the ladder takes over
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("-v", "--verbose", action="store_true", help="show onnxwrapper's log (each compile)")
    for option in _SINGLE_MODEL_ONLY:
        parser.add_argument(option, nargs="?", action=_Refuse, help=argparse.SUPPRESS)


class _Refuse(argparse.Action):
    """An option of single-model compiles given with --from-capture: a usage error that says why."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise UsageError(f"{option_string} is an option of `aipc compile MODEL -o OUT`, not of --from-capture: "
                         f"{_SINGLE_MODEL_ONLY[option_string]}")


def _backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """The backend options `python -m aipc` would use with the same options and environment."""
    if args.backend not in ("qnn", "qairt"):
        raise UsageError(f"--from-capture fills the qnn compile cache; --backend {args.backend!r} has none")
    run = argparse.Namespace(backend="qnn", target=args.target, precision=args.precision, strict=None,
                             cache_dir=args.cache_dir, compile_timeout=args.compile_timeout,
                             compile_memory_mb=args.compile_memory_mb,
                             compile_budget=getattr(args, "compile_budget", None), verbose=None, report_partition=None,
                             repairs=None)
    options = dict(resolve_settings(run).backend_options)
    options.pop("strict", None)  # not part of a compile
    return options


class _Progress:
    """One tqdm bar over every signature of every model, counting compiled / cached / failed."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = tqdm(total=total, file=sys.stderr, disable=None if enabled else True, unit="shape",
                        desc="aipc compile", leave=False, dynamic_ncols=True)
        self.counts = {"compiled": 0, "cache": 0, "failed": 0}
        self.lock = threading.Lock()

    def done(self, plan: ModelPlan, result: Any) -> None:
        origin = "failed" if isinstance(result, BaseException) else result.origin
        with self.lock:
            self.counts[origin] = self.counts.get(origin, 0) + 1
            self.bar.set_description(f"aipc compile {plan.name}", refresh=False)
            self.bar.set_postfix(compiled=self.counts["compiled"], cached=self.counts["cache"],
                                 failed=self.counts["failed"], refresh=False)
            self.bar.update(1)


def _reason(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:300]}"


def _compile_model(plan: ModelPlan, options: dict, pool, progress: _Progress) -> list[dict]:

    def row(shapes, values, origin, seconds=0.0, key=None, reason=None, partition=None, bucket=None) -> dict:
        return {"shapes": {k: list(v) for k, v in (shapes or {}).items()}, "values": dict(values or {}),
                "origin": origin, "seconds": round(float(seconds), 3), "key": key, "reason": reason,
                "partition": partition, "bucket": {k: list(v) for k, v in bucket.items()} if bucket else None}

    try:
        results = precompile(plan.source, plan.signatures, options, pool=pool,
                             on_result=lambda _i, result: progress.done(plan, result))
    except (BackendOptionError, BackendUnavailableError):
        raise  # the command's options or installation: every model would fail the same way
    except Exception as exc:  # noqa: BLE001 - the model's failure (e.g. ORT cannot load it), not the command's
        for _ in plan.signatures:
            progress.done(plan, exc)
        return [row(None, None, "failed", reason=_reason(exc))]
    rows = []
    for entry, result in zip(plan.signatures, results):
        if isinstance(result, BaseException):
            shapes = {k: tuple(getattr(v, "shape", v)) for k, v in entry.items() if getattr(v, "ndim", 1)}
            rows.append(row(shapes, None, "failed", reason=_reason(result)))
        else:
            rows.append(row(result.shapes, result.values, result.origin, result.seconds, result.key,
                            partition=result.partition.summary(), bucket=result.bucket))
    return rows


def _run(plans: list[ModelPlan], options: dict, jobs: int, show_progress: bool) -> dict[str, list]:

    usable = [p for p in plans if p.error is None]
    progress = _Progress(sum(len(p.signatures) for p in usable), show_progress)
    pool = WorkerPool(jobs)
    pool.start()  # the workers boot while each model is read and hashed
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(usable)), thread_name_prefix="aipc-precompile")
    try:  # every model at once on one pool: the workers stay busy across models
        futures = {p.key: executor.submit(_compile_model, p, options, pool, progress) for p in usable}
        return {key: future.result() for key, future in futures.items()}
    finally:  # Ctrl-C: nothing queued is waited for; the closed pool kills its busy workers, fails the rest
        executor.shutdown(wait=False, cancel_futures=True)
        pool.close()
        progress.bar.close()


def _shapes_text(row: dict) -> str:
    parts = [f"{k}={'x'.join(str(d) for d in v)}" for k, v in row["shapes"].items()]
    parts += [f"{k}={v}" for k, v in row["values"].items()]
    bucket = row.get("bucket")
    if bucket:  # a shape bucket serves it: the compiled size
        parts.append("bucket " + ", ".join(f"{k}={'x'.join(str(d) for d in v)}" for k, v in bucket.items()))
    return ", ".join(parts) or "(static)"


def _format(summary: dict) -> str:
    width = max([len(m["name"]) for m in summary["models"]] + [5])
    shape_width = max([len(_shapes_text(r)) for m in summary["models"] for r in m["rows"]] + [6])
    lines = [f"{'model':<{width}}  {'shapes':<{shape_width}}  {'origin':<8}  {'seconds':>7}  reason"]
    for model in summary["models"]:
        for row in model["rows"]:
            origin = {"cache": "cached"}.get(row["origin"], row["origin"])
            lines.append(f"{model['name']:<{width}}  {_shapes_text(row):<{shape_width}}  {origin:<8}  "
                         f"{row['seconds']:>7.2f}  {row['reason'] or ''}".rstrip())
        lines += [f"  note ({model['name']}): {note}" for note in model["notes"]]
    c = summary["counts"]
    lines.append(f"{c['signatures']} shape(s) of {len(summary['models'])} model(s): {c['compiled']} compiled, "
                 f"{c['cached']} cached already, {c['failed']} failed; wall {summary['wall_seconds']:.1f} s on "
                 f"{summary['jobs']} worker(s) (compile time {summary['compile_seconds']:.1f} s)")
    lines.append(f"cache: {summary['cache_dir']}  backend options: {summary['backend_options'] or '{}'}")
    if c["failed"] == 0:
        lines.append("the next `python -m aipc --backend qnn …` run of the captured script with the same backend "
                     "options loads these instead of compiling")
    return "\n".join(lines)


def _summary(capture, plans: list[ModelPlan], rows: dict, options: dict, jobs: int, wall: float) -> dict:

    models = []
    for plan in plans:
        model_rows = rows.get(plan.key) or [{"shapes": {}, "values": {}, "origin": "failed", "seconds": 0.0,
                                             "key": None, "reason": plan.error, "partition": None}]
        models.append({"key": plan.key, "name": plan.name, "source": plan.source, "calls": plan.calls,
                       "notes": plan.notes, "rows": model_rows})
    every = [r for m in models for r in m["rows"]]
    counts = {"signatures": len(every), "compiled": sum(r["origin"] == "compiled" for r in every),
              "cached": sum(r["origin"] == "cache" for r in every), "failed": sum(r["origin"] == "failed" for r in every)}
    return {"capture": capture.path, "capture_status": capture.status, "cache_dir": default_cache_dir(
        options.get("cache_dir")), "backend_options": options, "jobs": jobs, "wall_seconds": round(wall, 3),
        "compile_seconds": round(sum(r["seconds"] for r in every if r["origin"] == "compiled"), 3),
        "counts": counts, "models": models}


def _note_recording(metadata: dict, models: int, options: dict) -> None:
    """Say when the capture's shapes may not be the NPU run's: recorded on the CPU with several models
    (a later model's shapes may follow an earlier model's FP16 outputs), or on other backend options."""
    if metadata.get("command") != "aipc capture":
        return
    recorded = metadata.get("backend") or "cpu"  # captures before --backend ran on the CPU
    if recorded == "cpu" and models > 1:
        say("note: this capture ran on the CPU; a model fed another model's outputs may get other shapes on the "
            "NPU (FP16) and compile at the run. Capture on the target to precompile exactly what it runs: "
            "aipc capture --backend qnn -o DIR script.py")
    elif recorded == "qnn":
        differ = sorted(k for k in ("target", "precision") if (metadata.get("backend_options") or {}).get(k)
                        != options.get(k))
        if differ:
            say(f"note: the capture ran with other backend options ({', '.join(differ)}); the shapes are that "
                f"run's")


def main(args: argparse.Namespace) -> int:
    """Run ``aipc compile --from-capture``; returns the exit status (see the module docstring)."""
    if args.jobs is not None and args.jobs < 1:
        say(f"error: --jobs must be >= 1, got {args.jobs}")
        return EXIT_USAGE
    try:
        options = _backend_options(args)
    except UsageError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    try:
        capture, plans = plan_capture(args.from_capture, args.model)
    except CaptureProblem as exc:
        say(f"error: {exc}")
        return exc.status
    _note_recording(capture.metadata, len(plans), options)
    if capture.status != "complete":
        say(f"warning: the capture is {capture.status}"
            + (f" ({capture.truncated.get('reason')})" if capture.truncated else " (the script did not end normally)")
            + ": only the shapes it recorded are compiled")

    if not any(i.name == "qnn" and i.available for i in onnxwrapper.get_available_backends()):
        say("error: the qnn backend is not available here (pip install 'onnxwrapper[qnn]')")
        return EXIT_UNAVAILABLE
    pending = sum(len(p.signatures) for p in plans if p.error is None)
    jobs = args.jobs or default_jobs(pending, max([p.size_bytes for p in plans] + [0]))
    if args.verbose:
        logging.basicConfig(format="aipc: %(message)s")
        logging.getLogger("onnxwrapper").setLevel(logging.INFO)
    start = time.perf_counter()
    try:
        rows = _run(plans, options, jobs, show_progress=not args.no_progress) if pending else {}
    except BackendOptionError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    except BackendUnavailableError as exc:
        say(f"error: {exc}")
        return EXIT_UNAVAILABLE
    summary = _summary(capture, plans, rows, options, jobs, time.perf_counter() - start)
    print(json.dumps(summary, indent=2, default=str) if args.json else _format(summary))
    return EXIT_FAILED if summary["counts"]["failed"] else 0
