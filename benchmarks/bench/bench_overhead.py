"""Per-run overhead of ``onnxwrapper.InferenceSession`` vs raw ``onnxruntime`` on a tiny model.

Both sessions run the same feed on the cpu backend in the same process, interleaved in rounds
so that machine noise hits both alike. Two figures: the ratio of the best round times, and the
median of the per-round paired ratios (more robust on a busy 2-core VM, where single figures vary
by ±4 %). Target: ≤ 1.03×.

Usage: ``python benchmarks/bench/bench_overhead.py [--rounds 15] [--calls 20000] [--json-out PATH]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import onnx.helper as h
import onnxruntime
from onnx import TensorProto as T

import onnxwrapper
from _figures import Figure, load_average, paired_ratio, report


def tiny_model() -> bytes:
    """``Y = X * W``, X float[3,2] (ORT's mul_1 test model)."""
    w = h.make_tensor("W", T.FLOAT, [3, 2], [1, 2, 3, 4, 5, 6])
    g = h.make_graph([h.make_node("Mul", ["X", "W"], ["Y"])], "mul_1",
                     [h.make_tensor_value_info("X", T.FLOAT, [3, 2])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [3, 2])], [w])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9).SerializeToString()


def best_time(run, feeds, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run(None, feeds)
    return (time.perf_counter() - start) / calls


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--json-out", help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    model = tiny_model()
    raw = onnxruntime.InferenceSession(model)
    ours = onnxwrapper.InferenceSession(model, backend="cpu")
    feeds = {"X": np.ones((3, 2), np.float32)}
    for sess in (raw, ours):
        best_time(sess.run, feeds, 1000)  # warm-up
    raw_times, our_times = [], []
    load_before = load_average()
    for k in range(args.rounds):
        for kind in (("raw", "ours") if k % 2 == 0 else ("ours", "raw")):
            if kind == "raw":
                raw_times.append(best_time(raw.run, feeds, args.calls))
            else:
                our_times.append(best_time(ours.run, feeds, args.calls))
    figure = Figure("overhead", "run on backend cpu, tiny model (1 call)", "s", statistics.median(our_times),
                    statistics.median(raw_times), paired_ratio(our_times, raw_times), 1.03, args.rounds, load_before,
                    load_average(), {"ratio_of_best_rounds": min(our_times) / min(raw_times),
                                     "calls_per_round": args.calls})
    return report([figure], args.json_out)


if __name__ == "__main__":
    sys.exit(main())
