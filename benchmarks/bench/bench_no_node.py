"""A model the QNN EP takes no node of, on backend ``qnn`` vs plain onnxruntime, in fresh processes: the ratio.

The model is a classical-ML app's: a tree-ensemble classifier (``TreeEnsembleClassifier`` of
``ai.onnx.ml``) whose label goes through a ``Cast`` the QNN EP has an op builder for but refuses
(to ``double``), and a ``ZipMap`` — three nodes, none on the NPU, as a real tabular app's 194 MB
ensemble. It is handed to the session as **bytes**, with a dynamic batch, and run at two batch sizes.
Each figure pairs two fresh processes (Python start to exit), interleaved, alternating which goes
first:

* *first run*: ``onnxwrapper.InferenceSession(bytes, backend="qnn")`` with an empty compile cache —
  the no-node verdict is found by compiling only the candidate ``Cast`` in the compile worker — vs
  ``onnxruntime.InferenceSession(bytes)``;
* *warm cache*: the same with the cache the first run left — the verdict is read before the model is
  parsed.

Target: ≤ 1.2× for both (a real app took 48–57 s instead of 8.5–9.8 s before: a compile per batch size).
``--variant no-builder`` uses a model of ``TreeEnsembleClassifier`` + ``ZipMap`` only (no op with a
builder: known without any compile).

Usage: ``python benchmarks/bench/bench_no_node.py [--pairs 7] [--trees 5000] [--variant cast|no-builder]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

from _figures import Figure, load_average, paired_ratio, report, user_env

NAME = "no_node"

_CHILD = """
import sys, warnings, numpy as np
data = open(sys.argv[1], "rb").read()
warnings.simplefilter("ignore")
if sys.argv[2] == "qnn":
    import onnxwrapper
    session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": sys.argv[3]})
else:
    import onnxruntime
    session = onnxruntime.InferenceSession(data)
rng = np.random.default_rng(0)
for batch in (3, 64):
    session.run(None, {"X": rng.random((batch, 8)).astype(np.float32)})
"""


def tree_model(trees: int, features: int = 8, depth: int = 4, seed: int = 0, cast: bool = False) -> bytes:
    """``trees`` full binary trees of ``depth`` over ``features`` float features, 2 classes, + ZipMap;
    with ``cast``, the label goes through a ``Cast`` to double (an op the QNN EP has but refuses)."""
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
    label = "label_raw" if cast else "label"
    nodes = [h.make_node("TreeEnsembleClassifier", ["X"], [label, "probs"], domain="ai.onnx.ml",
                         classlabels_int64s=[0, 1], post_transform="LOGISTIC", **attrs),
             h.make_node("ZipMap", ["probs"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1])]
    if cast:
        nodes.append(h.make_node("Cast", [label], ["label"], to=T.DOUBLE, name="cast_label"))
    seq = h.make_sequence_type_proto(h.make_map_type_proto(T.INT64, h.make_tensor_type_proto(T.FLOAT, [])))
    g = h.make_graph(nodes, "trees", [h.make_tensor_value_info("X", T.FLOAT, [None, features])],
                     [h.make_tensor_value_info("label", T.DOUBLE if cast else T.INT64, [None]),
                      h.make_value_info("probabilities", seq)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 3)],
                        ir_version=9).SerializeToString()


def _process(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", _CHILD, *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=user_env())
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--trees", type=int, default=5000)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--variant", choices=("cast", "no-builder"), default="cast")
    parser.add_argument("--json-out")
    args = parser.parse_args(argv)
    figures = []
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trees.onnx")
        with open(path, "wb") as f:
            f.write(tree_model(args.trees, depth=args.depth, cast=args.variant == "cast"))
        size = os.path.getsize(path)
        warm = os.path.join(folder, "warm-cache")
        _process([path, "qnn", warm])  # fills the warm cache; the OS file cache is warm for everyone
        for name, cache_of in (("first run (empty compile cache)", lambda i: os.path.join(folder, f"cold{i}")),
                               ("warm compile cache", lambda i: warm)):
            load = load_average()
            ours, raw = [], []
            for i in range(args.pairs):
                order = ("qnn", "ort") if i % 2 == 0 else ("ort", "qnn")
                for which in order:
                    (ours if which == "qnn" else raw).append(
                        _process([path, "qnn", cache_of(i)] if which == "qnn" else [path, "ort"]))
            figures.append(Figure(NAME, f"{args.variant} model ({size / 1e6:.1f} MB bytes, 2 batch sizes), {name}",
                                  "s", sorted(ours)[len(ours) // 2], sorted(raw)[len(raw) // 2],
                                  paired_ratio(ours, raw), 1.2, args.pairs, load, load_average(),
                                  details={"trees": args.trees, "depth": args.depth}, against="a fresh process of "
                                  "raw onnxruntime on the same bytes"))
    report(figures, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
