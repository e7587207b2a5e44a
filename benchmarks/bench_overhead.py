"""Per-run overhead of ``onnxwrapper.InferenceSession`` vs raw ``onnxruntime`` on a tiny model.

Both sessions run the same feed on the cpu backend in the same process, interleaved in rounds
so that machine noise hits both alike. Two figures: the ratio of the best round times, and the
median of the per-round paired ratios (more robust on a busy 2-core VM, where single figures vary
by ±4 %). Target: ≤ 1.03×.

Usage: ``python benchmarks/bench_overhead.py [--rounds 15] [--calls 20000]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx.helper as h
import onnxruntime
from onnx import TensorProto as T

import onnxwrapper


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    model = tiny_model()
    raw = onnxruntime.InferenceSession(model)
    ours = onnxwrapper.InferenceSession(model, backend="cpu")
    feeds = {"X": np.ones((3, 2), np.float32)}
    for sess in (raw, ours):
        best_time(sess.run, feeds, 1000)  # warm-up
    raw_times, our_times = [], []
    for _ in range(args.rounds):
        raw_times.append(best_time(raw.run, feeds, args.calls))
        our_times.append(best_time(ours.run, feeds, args.calls))
    r, o = min(raw_times), min(our_times)
    paired = sorted(b / a for a, b in zip(raw_times, our_times))
    median = paired[len(paired) // 2]
    print(f"onnxruntime  per run: {r * 1e6:8.2f} us (best of {args.rounds} rounds x {args.calls} calls)")
    print(f"onnxwrapper  per run: {o * 1e6:8.2f} us")
    print(f"ratio of best rounds onnxwrapper/onnxruntime: {o / r:.3f}x")
    print(f"median paired ratio  onnxwrapper/onnxruntime: {median:.3f}x (target <= 1.03x)")


if __name__ == "__main__":
    main()
