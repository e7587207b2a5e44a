"""What the QNN recovery ladder rescues, and at what cost: generated models that the HTP simulator
cannot compile as given, each run through ``onnxwrapper.InferenceSession(backend="qnn")``.

Per case it prints: the rung that worked (and the failure before it), the first session's compile
seconds (the ladder included), the second session's (the recorded recovery replayed from the cache),
one run's seconds, nodes on the NPU, partitions, and max |Δ| against onnxruntime on the CPU.

Cases (``--case``, default all but the slow ones):

* ``long-row``  — fp32, an intermediate row of 2²¹ floats (options: ``vtcm_mb=8``);
* ``gelu``      — fp32, Conv1d → Erf GELU → Conv1d (graph split; the fused GELU fails alone);
* ``unet-small``— fp32, the 1-D conv U-Net stand-in at ``[3, 1, 250]`` + ``[3, 15, 250]``;
* ``unet``      — fp32, the stand-in at ``[3, 1, 7500]`` + ``[3, 15, 7500]`` (slow: minutes);
* ``unet-fp16`` — the stand-in at ``[3, ·, 7500]`` in FP16, which compiles as given (slow).

Usage: ``python benchmarks/calibrate/calibrate_recovery.py [--case gelu --case unet]`` (from the repository
root: the models come from ``tests/recovery_models.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import onnxruntime

import onnxwrapper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tests import recovery_models as rm  # noqa: E402 - the shared generated models


def _unet(length: int, chans=(16, 32, 64, 128)):
    rng = np.random.default_rng(7)
    feed = {"a": rng.standard_normal((3, 1, length)).astype(np.float32),
            "b": rng.standard_normal((3, 15, length)).astype(np.float32)}
    return rm.unet1d(chans=chans), feed


def cases() -> dict:
    """name -> (model bytes, feed, backend options, slow?)"""
    rng = np.random.default_rng(0)
    return {
        "long-row": (rm.long_row(), {"x": rng.standard_normal((1, 2048, 1024)).astype(np.float32)},
                     {"precision": "fp32"}, False),
        "gelu": (rm.gelu_net(batch=1), {"x": rng.standard_normal((1, 4, 64)).astype(np.float32)},
                 {"precision": "fp32"}, False),
        "unet-small": (*_unet(250, (8, 16)), {"precision": "fp32"}, False),
        "unet": (*_unet(7500), {"precision": "fp32"}, True),
        "unet-fp16": (*_unet(7500), {}, True),
    }


def run_case(name: str, data: bytes, feed, options, cache: str) -> None:
    reference = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)
    seconds = []
    for _ in range(2):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options=dict(options, cache_dir=cache))
            outputs = session.run(None, feed)  # a dynamic model compiles at its first run
        seconds.append(time.perf_counter() - start)
    start = time.perf_counter()
    outputs = session.run(None, feed)
    run = time.perf_counter() - start
    report = session.get_partition()
    delta = max(float(np.max(np.abs(np.asarray(a, np.float64) - b))) for a, b in zip(outputs, reference))
    steps = " → ".join(f"{s['rung']}{' (' + s['detail'] + ')' if s.get('detail') else ''}: {s['result']}"
                       + (f" [{s['error']}]" if s.get("error") else "") for s in report.recovery) or "as given"
    print(f"{name}: {steps}")
    print(f"  first session + run {seconds[0]:.1f} s, second (replayed) {seconds[1]:.1f} s, one run {run:.2f} s; "
          f"NPU nodes {report.target_nodes}/{len(report.nodes)}, {report.num_partitions} partitions; "
          f"max |Δ| vs CPU {delta:.2e}", flush=True)


def main(argv=None) -> int:
    table = cases()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(table))
    args = parser.parse_args(argv)
    chosen = args.case or [name for name, case in table.items() if not case[3]]
    with tempfile.TemporaryDirectory() as cache:
        for name in chosen:
            data, feed, options, _slow = table[name]
            run_case(name, data, feed, options, cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
