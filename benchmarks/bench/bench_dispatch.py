"""A run on an already-compiled shape of a dynamic-shape model (``qnn`` backend) vs the same static
EPContext session run directly with onnxruntime.

Model: ``Y = X * W``, X float[N, 8] (tiny, so that the per-call overhead shows). The first run
with N = 2 is validated against the symbolic inputs, compiles that shape's specialization and
becomes the plan of its call key (``onnxwrapper.kernel.RunPlans``); afterwards every
``session.run`` is the plan lookup, the NaN/±Inf screen of the FP16 session and onnxruntime's
native ``run`` on the static EPContext session of N = 2 — whose Python ``run``, called directly,
is the raw figure. Rounds of ``--calls`` calls alternate; the figure is the median of the per-round
paired ratios. Target ≤ 1.05×.

Usage: ``python benchmarks/bench/bench_dispatch.py [--rounds 21] [--calls 2000] [--json-out PATH]``.
Exit status 0 when the target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto as T
from onnx import helper as h

import onnxwrapper
from _figures import Figure, load_average, paired_ratio, report

TARGET = 1.05
NAME = "dispatch"


def dynamic_mul() -> onnx.ModelProto:
    """``Y = X * W``, X float[N, 8], W = ones(8)."""
    w = onnx.numpy_helper.from_array(np.ones(8, np.float32), "W")
    g = h.make_graph([h.make_node("Mul", ["X", "W"], ["Y"])], "mul_dynamic",
                     [h.make_tensor_value_info("X", T.FLOAT, ["N", 8])],
                     [h.make_tensor_value_info("Y", T.FLOAT, ["N", 8])], [w])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9)


def _per_call(run, feed, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run(None, feed)
    return (time.perf_counter() - start) / calls


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json-out", help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench-dispatch-")
    try:
        path = os.path.join(root, "mul_dynamic.onnx")
        onnx.save(dynamic_mul(), path)
        session = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"cache_dir": root})
        feed = {"X": np.ones((2, 8), np.float32)}
        session.run(None, feed)  # compiles the specialization for N = 2
        artifact = session.backend_session.artifacts[-1]
        so = onnxruntime.SessionOptions()
        so.add_provider_for_devices([d for d in onnxruntime.get_ep_devices() if d.ep_name == "QNNExecutionProvider"],
                                    session.get_provider_options()["QNNExecutionProvider"])
        raw = onnxruntime.InferenceSession(artifact.ctx_path, so)  # the static EPContext model of N = 2
        np.testing.assert_array_equal(session.run(None, feed)[0], raw.run(None, feed)[0])
        for run in (session.run, raw.run):
            _per_call(run, feed, args.calls // 4)
        load_before = load_average()
        ours, theirs = [], []
        for k in range(args.rounds):
            for kind in (("ours", "raw") if k % 2 == 0 else ("raw", "ours")):
                if kind == "ours":
                    ours.append(_per_call(session.run, feed, args.calls))
                else:
                    theirs.append(_per_call(raw.run, feed, args.calls))
        figure = Figure(NAME, "run on a compiled shape of a dynamic model (1 call)", "s", statistics.median(ours),
                        statistics.median(theirs), paired_ratio(ours, theirs), TARGET, args.rounds, load_before,
                        load_average(), {"overhead_us": statistics.median(a - b for a, b in zip(ours, theirs)) * 1e6,
                                         "calls_per_round": args.calls})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return report([figure], args.json_out)


if __name__ == "__main__":
    sys.exit(main())
