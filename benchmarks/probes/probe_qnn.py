"""Robustness probe of onnxwrapper's ``qnn`` backend against plain onnxruntime (+ the QNN EP where it applies).

For each kind of bad input, fault or concurrency pattern the probe does the same thing with plain
onnxruntime and with ``onnxwrapper.InferenceSession(..., backend="qnn")`` and classifies onnxwrapper's
behaviour:

* ``same as ORT``  — same exception class and message prefix, or the same outputs (max |Δ| within FP16
  tolerance, ``2e-2 · (1 + max |ref|)``; fp32 kinds use ``1e-5``);
* ``typed error``  — onnxwrapper refuses with one of its own typed errors (``onnxwrapper.errors``) where ORT
  does something else: a deliberate, explained difference;
* ``deviation``    — anything else: another exception class or message, an untyped internal error, a wrong or
  silently different answer, a false refusal, a crash or a hang; with a one-line reason.

The reference is ORT on the CPU EP unless a kind says otherwise (numerics of FP16 inputs are compared with
ORT + the QNN EP at the backend's default target; fp32 kinds with the CPU EP). Groups: ``feed`` (bad
feeds), ``model`` (bad models, paths, bytes), ``opt`` (options, SessionOptions), ``api`` (session API,
``close()``), ``cache`` (compile-cache faults: corruption, deletion, read-only, lock contention, kill -9,
racing processes), ``nb`` (files next to the model), ``cfg`` (process-global QNN configuration), ``conc``
(threads), ``cf`` (If / Loop / Scan models).

Every model is generated with onnx.helper (tiny, compiles in well under a second on the HTP simulator);
every session uses a compile cache in a temporary directory (the user's cache is never touched). Kinds run
in child processes (one per group; fault-prone kinds alone), so a native crash is recorded as a deviation
instead of ending the probe. Only public APIs are used: ``onnxwrapper.InferenceSession`` with ``backend=`` /
``backend_options=``, ``onnxruntime`` and ``onnxruntime_qnn``'s plugin registration.

Modules: ``probe_qnn.py`` (this runner: child processes, verdict table, JSON), ``probe_qnn_common.py``
(outcomes, the verdict rule, sessions, kind registry), ``probe_qnn_models.py`` (the tiny models) and the kinds:
``probe_qnn_feeds.py``, ``probe_qnn_options.py``, ``probe_qnn_cache.py``, ``probe_qnn_config.py``,
``probe_qnn_flow.py``.

Usage::

    python benchmarks/probes/probe_qnn.py [--json OUT.json] [--only SUBSTRING ...] [--slow] [--list]

``--slow`` adds the 8 GiB broadcast-view kind (run under ``ulimit -v 6 GiB``, takes about a minute).
Needs onnxruntime-qnn (the HTP simulator on x86-64 Linux). Exit status 0 (the table is the result).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from probe_qnn_common import DEVIATION, KINDS, SAME, SKIPPED, TYPED, Context  # noqa: E402

MARK = "PROBE-RESULT "


def _load_kinds() -> None:
    import probe_qnn_feeds  # noqa: F401  (each module registers its kinds)
    import probe_qnn_options  # noqa: F401
    import probe_qnn_cache  # noqa: F401
    import probe_qnn_config  # noqa: F401
    import probe_qnn_flow  # noqa: F401


def _child(ids: list[str], work: str) -> None:
    """Run kinds in this process, one result line each (flushed, so a crash loses only the current kind)."""
    import logging
    import warnings

    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    _load_kinds()
    os.makedirs(work, exist_ok=True)
    ctx = Context(work, tempfile.mkdtemp(prefix="cache.", dir=work))
    os.environ["ONNXWRAPPER_CACHE_DIR"] = ctx.cache
    for kind_id in ids:
        k = KINDS[kind_id]
        start = time.perf_counter()
        try:
            record = k.fn(k, ctx)
        except Exception as exc:  # a bug of the probe itself, not of the library: report, go on
            record = {
                "id": k.id,
                "group": k.group,
                "title": k.title,
                "verdict": "probe error",
                "reason": f"{type(exc).__name__}: {str(exc)[:150]}",
                "ort": "",
                "onnxwrapper": "",
                "warnings": [],
            }
        record["wall"] = round(time.perf_counter() - start, 2)
        sys.stdout.write(MARK + json.dumps(record, default=str) + "\n")
        sys.stdout.flush()


def _spawn(ids: list[str], work: str, timeout: float) -> tuple[list[dict], str]:
    """Run ``ids`` in one child; returns the records it produced and, if it ended early, why."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", ",".join(ids), "--work", work]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=work)
        out, err, code = proc.stdout, proc.stderr, proc.returncode
        why = "" if code == 0 else f"process ended with {'signal ' + str(-code) if code < 0 else 'exit ' + str(code)}"
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        why = f"hang: no result within {timeout:.0f} s"
    records = [json.loads(line[len(MARK) :]) for line in out.splitlines() if line.startswith(MARK)]
    if why:
        tail = [line for line in err.splitlines() if line.strip() and "LIBNATIVE" not in line][-1:]
        why += f" ({tail[0].strip()[:120]})" if tail else ""
    return records, why


def run_all(kind_ids: list[str], work: str, progress) -> list[dict]:
    """Run the kinds in child processes: one per group of ordinary kinds, one per isolated kind."""
    batches: dict[str, list[str]] = {}
    for kind_id in kind_ids:
        k = KINDS[kind_id]
        batches.setdefault(kind_id if k.isolate else k.group, []).append(kind_id)
    results: dict[str, dict] = {}
    for ids in batches.values():
        pending = list(ids)
        while pending:
            timeout = sum(KINDS[i].timeout for i in pending)
            records, why = _spawn(pending, work, timeout)
            for record in records:
                results[record["id"]] = record
                progress(record)
            done = {r["id"] for r in records}
            pending = [i for i in pending if i not in done]
            if pending and why:  # the first missing kind took the child down: record it, go on with the rest
                k = KINDS[pending.pop(0)]
                record = {
                    "id": k.id,
                    "group": k.group,
                    "title": k.title,
                    "verdict": DEVIATION,
                    "reason": why,
                    "ort": "",
                    "onnxwrapper": why,
                    "warnings": [],
                }
                results[k.id] = record
                progress(record)
            elif pending:
                break
    return [results[i] for i in kind_ids if i in results]


def _versions() -> dict:
    import onnxruntime

    info = {"python": platform.python_version(), "machine": platform.machine(), "onnxruntime": onnxruntime.__version__}
    for name in ("onnxruntime_qnn", "onnxwrapper", "onnx", "numpy"):
        try:
            info[name] = getattr(__import__(name), "__version__", "?")
        except ImportError:
            info[name] = None
    return info


def table(records: list[dict]) -> str:
    """The human-readable table plus per-verdict and per-group counts."""
    width = max([len(r["id"]) for r in records] + [10])
    lines = [f"{'kind':{width}s}  {'verdict':12s}  reason", "-" * (width + 100)]
    for r in records:
        lines.append(f"{r['id']:{width}s}  {r['verdict']:12s}  {r['reason'][:150]}")
    counts = Counter(r["verdict"] for r in records)
    lines += [
        "",
        f"{len(records)} kinds: "
        + ", ".join(f"{counts.get(v, 0)} {v}" for v in (SAME, TYPED, DEVIATION, SKIPPED))
        + "".join(f", {n} {v}" for v, n in counts.items() if v not in (SAME, TYPED, DEVIATION, SKIPPED)),
    ]
    groups = sorted({r["group"] for r in records})
    for g in groups:
        c = Counter(r["verdict"] for r in records if r["group"] == g)
        lines.append(f"  {g:6s} " + ", ".join(f"{c.get(v, 0)} {v}" for v in (SAME, TYPED, DEVIATION)))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", metavar="OUT", help="also write the records as JSON to OUT")
    ap.add_argument(
        "--only", nargs="*", default=[], metavar="SUBSTRING", help="run only kinds whose id contains one of these"
    )
    ap.add_argument("--slow", action="store_true", help="include slow kinds (8 GiB broadcast view under ulimit)")
    ap.add_argument("--list", action="store_true", help="list the kinds and exit")
    ap.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child.split(","), args.work)
        return 0
    _load_kinds()
    ids = [
        i for i, k in KINDS.items() if (args.slow or not k.slow) and (not args.only or any(s in i for s in args.only))
    ]
    if args.list:
        for i in ids:
            print(f"{i:32s} {'[isolated] ' if KINDS[i].isolate else ''}{KINDS[i].title}")
        return 0
    try:
        import onnxruntime_qnn  # noqa: F401
    except ImportError:
        print("onnxruntime-qnn is not installed: nothing to probe (pip install 'onnxwrapper[qnn]').")
        return 0
    work = tempfile.mkdtemp(prefix="probe_qnn.")
    start = time.perf_counter()

    def progress(record):
        print(f"  {record['verdict']:12s} {record['id']}", file=sys.stderr, flush=True)

    try:
        records = run_all(ids, work, progress)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    seconds = time.perf_counter() - start
    print(table(records))
    print(f"\n({seconds:.0f} s; {json.dumps(_versions())})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "versions": _versions(),
                    "seconds": round(seconds, 1),
                    "counts": Counter(r["verdict"] for r in records),
                    "results": records,
                },
                f,
                indent=1,
                default=str,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
