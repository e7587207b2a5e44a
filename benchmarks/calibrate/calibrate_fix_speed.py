"""How long ``aipc fix`` takes next to the ``aipc diff --localize`` it repairs, on a generated U-Net of
about 2000 nodes (``_unet_model.py``: ``unet`` — encoder, bottleneck and decoder of residual
blocks ``Conv → InstanceNorm → SiLU → Conv → Add``, skip ``Concat``s, one FP16 overflow before an
InstanceNorm in the bottleneck, float[1, 8, 32, 32]).

As a user would: a script runs the model; ``aipc diff --localize --backends cpu,qnn`` on it (the
yardstick), then ``aipc fix DIR --confirm`` (the recorded script again with the recipe). Each from a
cold compile cache of its own, shared by the two commands as on a user's machine: every QNN compile
is paid — the diff's run and its localization rounds, each candidate the fix verifies, the parts of
a split model — and nothing is skipped that a real app would run. It prints the two wall times,
their ratio (the target: at most ``--target``, default 3×), the verdict, and ``aipc fix``'s time per
stage (read from its ``fix.json``).

Measured (2-core host shared with other jobs, simulator, 1999 nodes): aipc diff --localize 148.7 s,
aipc fix --confirm 93.5 s (0.63×); again on a busier host 179.0 s and 139.1 s (0.78×).

Usage: ``python benchmarks/calibrate/calibrate_fix_speed.py [--blocks 55] [--levels 3] [--target 3]``
(from the repository root). A few minutes on a 2-core host. Exit status 0 when the target is met.
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
from _unet_model import unet  # noqa: E402 - the generated U-Net (next to this script; it imports tests/)

SCRIPT = """import sys
import numpy as np
import onnxruntime
x = np.random.default_rng(0).standard_normal((1, 8, 32, 32)).astype(np.float32)
y = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
print("strongest position", int(np.argmax(np.abs(y))))
"""


def _timed(cmd: list, env: dict, cwd: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    return time.perf_counter() - start, proc


def measure(blocks: int, levels: int, work: str) -> dict:
    """Diff (with localization) and fix the U-Net in ``work`` from a cold cache: the figures of one size."""
    model, script = os.path.join(work, "unet.onnx"), os.path.join(work, "app.py")
    data = unet(blocks=blocks, levels=levels)
    with open(model, "wb") as f:
        f.write(data)
    with open(script, "w", encoding="utf-8") as f:
        f.write(SCRIPT)
    env = {**os.environ, "ONNXWRAPPER_CACHE_DIR": os.path.join(work, "cache")}
    folder = os.path.join(work, "diff")
    aipc = [sys.executable, "-m", "aipc"]
    diff_s, diff = _timed(aipc + ["diff", "-q", "--localize", "--backends", "cpu,qnn", "--no-html", "--dir", folder,
                                  script, model], env, work)
    if diff.returncode != 1:
        raise SystemExit(f"aipc diff should flag the overflow (exit 1), got {diff.returncode}: {diff.stderr[-2000:]}")
    with open(os.path.join(folder, "report.json"), encoding="utf-8") as f:
        locs = json.load(f).get("localizations") or []
    fix_s, fix = _timed(aipc + ["fix", "-q", folder, "--confirm"], env, work)
    with open(os.path.join(folder, "fix.json"), encoding="utf-8") as f:
        report = json.load(f)
    trials = [(t.get("kind"), t.get("status"), round(t.get("seconds") or 0, 1)) for m in report.get("models", [])
              for t in m.get("trials", [])]
    stages = [s for m in report.get("models", []) for s in m.get("stages", [])] + report.get("stages", [])
    return {"nodes": 12 * levels * blocks + 4 * levels + 7, "diff_s": round(diff_s, 1), "fix_s": round(fix_s, 1),
            "ratio": round(fix_s / diff_s, 2), "fix_exit": fix.returncode,
            "localization": [(d.get("cause"), d.get("rounds"), (d.get("culprit") or {}).get("node")) for d in locs],
            "verdict": (fix.stdout.strip().splitlines() or ["?"])[-1], "trials": trials,
            "stages": [[n, round(s, 1)] for n, s in stages]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=55, help="residual blocks per level and side (default 55)")
    parser.add_argument("--levels", type=int, default=3, help="encoder/decoder levels (default 3)")
    parser.add_argument("--target", type=float, default=3.0, help="fix / diff wall-time ratio to meet (default 3)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        row = measure(args.blocks, args.levels, work)
    print(f"{row['nodes']} nodes: aipc diff --localize {row['diff_s']} s (localization {row['localization']}), "
          f"aipc fix --confirm {row['fix_s']} s → {row['ratio']}× a diff; {row['verdict']}", flush=True)
    print("  fix candidates: " + ", ".join(f"{k} {s} {sec} s" for k, s, sec in row["trials"]))
    print("  fix time per stage: " + " · ".join(f"{n} {s} s" for n, s in row["stages"]))
    met = row["ratio"] <= args.target and row["fix_exit"] == 0
    print(json.dumps({"target": args.target, "met": met, **row}))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
