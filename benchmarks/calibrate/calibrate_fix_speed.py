"""How the time of ``aipc fix`` grows with the model: a deep generated tower of residual blocks
(``tests/repair_models.py``: ``unet_tower``, 6 nodes a block, one FP16 overflow before an
InstanceNormalization in the middle) at several depths, each diffed and repaired from a cold compile
cache on the QNN HTP simulator.

Per depth it prints the wall time of ``aipc diff --backends cpu,qnn`` (the yardstick, measured in
the same run), of ``aipc fix`` on its folder (localization included), their ratio, the verdict, and
each candidate's seconds. The target is a fix in "a few diff runs" whatever the depth: the ratio at
the deepest model within ``--target`` (default 5×: localization compiles instrumented graphs, about
two diff runs; the unrepaired baseline replays the calls, one; the passing candidate, one).
Measured (2-core host, simulator): 301 nodes 3.5×, 2101 nodes 4.6× (diff 4.7 s, fix 21.7 s:
localization 10 s, baseline 4 s, the exact candidate 6 s).

Usage: ``python benchmarks/calibrate/calibrate_fix_speed.py [--blocks 50 --blocks 350] [--target 5]``
(from the repository root). Seconds to a minute per depth on a 2-core host. Exit status 0 when the target is met.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tests import repair_models  # noqa: E402 - the shared generated models

SCRIPT = """import sys
import numpy as np
import onnxruntime
x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
y = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
print("strongest position", int(np.argmax(np.abs(y))))
"""


def _timed(cmd: list, env: dict, cwd: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    return time.perf_counter() - start, proc


def measure(blocks: int, work: str) -> dict:
    """Diff and fix the ``blocks``-deep tower in ``work`` from a cold cache: the figures of one depth."""
    model, script = os.path.join(work, "tower.onnx"), os.path.join(work, "app.py")
    with open(model, "wb") as f:
        f.write(repair_models.unet_tower(blocks))
    with open(script, "w", encoding="utf-8") as f:
        f.write(SCRIPT)
    env = {**os.environ, "ONNXWRAPPER_CACHE_DIR": os.path.join(work, "cache")}
    folder = os.path.join(work, "diff")
    aipc = [sys.executable, "-m", "aipc"]
    diff_s, diff = _timed(aipc + ["diff", "-q", "--backends", "cpu,qnn", "--no-html", "--dir", folder, script, model],
                          env, work)
    if diff.returncode != 1:
        raise SystemExit(f"aipc diff should flag the overflow (exit 1), got {diff.returncode}: {diff.stderr[-2000:]}")
    fix_s, fix = _timed(aipc + ["fix", folder], env, work)
    with open(os.path.join(folder, "fix.json"), encoding="utf-8") as f:
        report = json.load(f)
    trials = [(t.get("kind"), t.get("status"), t.get("seconds")) for m in report.get("models", [])
              for t in m.get("trials", [])]
    return {"blocks": blocks, "nodes": 6 * blocks + 1, "diff_s": round(diff_s, 1), "fix_s": round(fix_s, 1),
            "ratio": round(fix_s / diff_s, 2), "fix_exit": fix.returncode,
            "verdict": (fix.stdout.strip().splitlines() or ["?"])[-1], "trials": trials}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, action="append", help="tower depths (default 50 and 350)")
    parser.add_argument("--target", type=float, default=5.0, help="fix / diff wall-time ratio to meet (default 5)")
    args = parser.parse_args(argv)
    rows = []
    for blocks in args.blocks or [50, 350]:
        with tempfile.TemporaryDirectory() as work:
            row = measure(blocks, work)
        rows.append(row)
        print(f"{row['nodes']} nodes: aipc diff {row['diff_s']} s, aipc fix {row['fix_s']} s → {row['ratio']}× a diff; "
              f"{row['verdict']}; candidates {row['trials']}", flush=True)
    deepest = max(rows, key=lambda r: r["nodes"])
    met = deepest["ratio"] <= args.target and deepest["fix_exit"] == 0
    print(json.dumps({"target": args.target, "met": met, "rows": rows}))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
