"""A model with no op the QNN EP can take, on backend ``qnn`` vs plain onnxruntime: the ratio.

The model is a tree-ensemble classifier (``TreeEnsembleClassifier`` + ``ZipMap``, domain
``ai.onnx.ml``) with a dynamic batch, as a classical-ML app ships it. Each round creates a session
and runs it at several batch sizes, once with ``onnxwrapper.InferenceSession(..., backend="qnn")``
(one ORT CPU session, nothing compiled) and once with ``onnxruntime.InferenceSession``; rounds are
interleaved so machine noise hits both alike. Target: ≤ 1.2× (before: a compile attempt and a CPU
session per batch size, 62.6 s vs 8.4 s for a real app).

Usage: ``python benchmarks/bench/bench_no_node.py [--rounds 7] [--trees 50]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np
import onnxruntime
from onnx import TensorProto as T
from onnx import helper as h

import onnxwrapper


def tree_model(trees: int, features: int = 8, depth: int = 4, seed: int = 0) -> bytes:
    """``trees`` full binary trees of ``depth`` over ``features`` float features, 2 classes, + ZipMap."""
    rng = np.random.default_rng(seed)
    attrs: dict = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
                                   "nodes_truenodeids", "nodes_falsenodeids", "class_treeids", "class_nodeids",
                                   "class_ids", "class_weights")}
    inner = 2 ** depth - 1
    for tree in range(trees):
        for node in range(2 ** (depth + 1) - 1):
            leaf = node >= inner
            attrs["nodes_treeids"].append(tree)
            attrs["nodes_nodeids"].append(node)
            attrs["nodes_featureids"].append(0 if leaf else int(rng.integers(features)))
            attrs["nodes_values"].append(0.0 if leaf else float(rng.random()))
            attrs["nodes_modes"].append("LEAF" if leaf else "BRANCH_LEQ")
            attrs["nodes_truenodeids"].append(0 if leaf else 2 * node + 1)
            attrs["nodes_falsenodeids"].append(0 if leaf else 2 * node + 2)
            if leaf:
                attrs["class_treeids"].append(tree)
                attrs["class_nodeids"].append(node)
                attrs["class_ids"].append(1)
                attrs["class_weights"].append(float(rng.standard_normal()))
    nodes = [h.make_node("TreeEnsembleClassifier", ["X"], ["label", "probs"], domain="ai.onnx.ml",
                         classlabels_int64s=[0, 1], post_transform="LOGISTIC", **attrs),
             h.make_node("ZipMap", ["probs"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1])]
    seq = h.make_sequence_type_proto(h.make_map_type_proto(T.INT64, h.make_tensor_type_proto(T.FLOAT, [])))
    g = h.make_graph(nodes, "trees", [h.make_tensor_value_info("X", T.FLOAT, [None, features])],
                     [h.make_tensor_value_info("label", T.INT64, [None]), h.make_value_info("probabilities", seq)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 3)],
                        ir_version=9).SerializeToString()


def one_round(make, data: bytes, feeds) -> float:
    start = time.perf_counter()
    session = make(data)
    for feed in feeds:
        session.run(None, feed)
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--trees", type=int, default=50)
    args = parser.parse_args(argv)
    data = tree_model(args.trees)
    rng = np.random.default_rng(1)
    feeds = [{"X": rng.random((n, 8)).astype(np.float32)} for n in (1, 3, 8, 17, 64, 100, 250, 1000) for _ in range(5)]
    with tempfile.TemporaryDirectory() as cache:
        qnn = lambda d: onnxwrapper.InferenceSession(d, backend="qnn", backend_options={"cache_dir": cache})  # noqa: E731
        ort = lambda d: onnxruntime.InferenceSession(d, providers=["CPUExecutionProvider"])  # noqa: E731
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the one "runs on ORT's CPU execution provider" warning
            one_round(qnn, data, feeds)  # imports, QNN plugin registration, ORT's thread pools: once per
            one_round(ort, data, feeds)  # process in an app too
            times = {"qnn": [], "ort": []}
            for i in range(args.rounds):  # alternating which goes first
                for name in (("ort", "qnn") if i % 2 else ("qnn", "ort")):
                    times[name].append(one_round(qnn if name == "qnn" else ort, data, feeds))
    ratios = [q / o for q, o in zip(times["qnn"], times["ort"])]
    print(f"{len(feeds)} runs at 8 batch sizes + session creation, {args.rounds} rounds, {args.trees} trees")
    print(f"onnxruntime: best {min(times['ort']) * 1e3:.1f} ms; onnxwrapper qnn: best {min(times['qnn']) * 1e3:.1f} ms")
    print(f"ratio of best rounds {min(times['qnn']) / min(times['ort']):.3f}x, median paired ratio "
          f"{statistics.median(ratios):.3f}x (target <= 1.2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
