"""Per-run overhead of ``onnxwrapper.InferenceSession`` vs raw ``onnxruntime`` on a tiny model.

Both sessions run the same feed on the cpu backend in the same process, interleaved in rounds
so that machine noise hits both alike; the figure is the ratio of the best round times.
Target (issue 2): ≤ 1.03×.

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
    print(f"onnxruntime  per run: {r * 1e6:8.2f} us (best of {args.rounds} rounds x {args.calls} calls)")
    print(f"onnxwrapper  per run: {o * 1e6:8.2f} us")
    print(f"ratio onnxwrapper/onnxruntime: {o / r:.3f}x (target <= 1.03x)")


if __name__ == "__main__":
    main()
