"""Test cases shared by the qai and snpe backend tests (tests/fake_foreign.py; test support, not a fake).

Each builder writes an ONNX model and a FAKE compiled artifact (``fake_qnn_graph.py``) describing
how a converter would have exposed it natively, and returns the paths. Models use IR version 9
(``tests.models.make_model``) so that onnxruntime 1.31 loads them.
"""

from __future__ import annotations

import os

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

import fake_qnn_graph as fq
from tests import models

__all__ = ["conv", "mixed", "mixed_model", "dtype_identity", "int64_add", "quantized_conv", "two_graphs", "reference",
           "rng_feed"]


def _write(directory, name: str, data: bytes) -> str:
    path = os.path.join(os.fspath(directory), name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def reference(onnx_path: str, feed: dict, output_names=None) -> list:
    """Outputs of onnxruntime CPU for the same call."""
    import onnxruntime

    return onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).run(output_names, feed)


def conv(directory, artifact: str = "conv.htp.bin", *, batch=1, native_batch: int = 1, layout: str = "nchw",
         seed: int = 0, stem: str = "conv") -> tuple[str, str]:
    """smallconv (X float[batch,3,8,8] → Y float[batch,2,8,8]); ``layout="nhwc"`` declares the
    native input as [1,8,8,3] (a transposed layout the backend must refuse)."""
    onnx_path = _write(directory, f"{stem}.onnx", models.smallconv(batch=batch, seed=seed))
    if layout == "nhwc":
        x = fq.tensor("X", [native_batch, 8, 8, 3], perm=[0, 2, 3, 1])
    else:
        x = fq.tensor("X", [native_batch, 3, 8, 8])
    g = fq.graph("smallconv", onnx_path, [x], [fq.tensor("Y", [native_batch, 2, 8, 8])])
    return onnx_path, fq.write_artifact(os.path.join(os.fspath(directory), artifact), [g])


def mixed_model() -> bytes:
    """Inputs ``a.in``, ``b/in`` float[1,4]; outputs ``sum:0`` = a+b, ``prod.out`` = a*b, ``neg`` = -a."""
    g = h.make_graph(
        [h.make_node("Add", ["a.in", "b/in"], ["sum:0"]), h.make_node("Mul", ["a.in", "b/in"], ["prod.out"]),
         h.make_node("Neg", ["a.in"], ["neg"])], "mixed",
        [h.make_tensor_value_info("a.in", T.FLOAT, [1, 4]), h.make_tensor_value_info("b/in", T.FLOAT, [1, 4])],
        [h.make_tensor_value_info(n, T.FLOAT, [1, 4]) for n in ("sum:0", "prod.out", "neg")])
    return models.make_model(g, producer_name="mixed-producer", doc_string="mixed doc", model_version=3)


def mixed(directory, artifact: str = "mixed.htp.bin") -> tuple[str, str]:
    """The mixed model with sanitized native names and both orders reversed natively."""
    onnx_path = _write(directory, "mixed.onnx", mixed_model())
    ins = [fq.tensor("b_in", [1, 4], onnx="b/in"), fq.tensor("a_in", [1, 4], onnx="a.in")]
    outs = [fq.tensor("neg", [1, 4]), fq.tensor("prod_out", [1, 4], onnx="prod.out"),
            fq.tensor("sum_0", [1, 4], onnx="sum:0")]
    g = fq.graph("mixed", onnx_path, ins, outs)
    return onnx_path, fq.write_artifact(os.path.join(os.fspath(directory), artifact), [g])


def dtype_identity(directory, dtype: str, artifact_suffix: str = ".htp.bin") -> tuple[str, str]:
    """``Y = Identity(X)`` X/Y ``dtype``[1,3,4,4], natively the same type (uint8, uint16, float16)."""
    onnx_type = {"uint8": T.UINT8, "uint16": T.UINT16, "float16": T.FLOAT16, "float32": T.FLOAT}[dtype]
    onnx_path = _write(directory, f"id_{dtype}.onnx", models.identity(onnx_type, (1, 3, 4, 4)))
    g = fq.graph("identity", onnx_path, [fq.tensor("X", [1, 3, 4, 4], dtype)], [fq.tensor("Y", [1, 3, 4, 4], dtype)])
    return onnx_path, fq.write_artifact(os.path.join(os.fspath(directory), f"id_{dtype}{artifact_suffix}"), [g])


def int64_add(directory, artifact: str = "ids.htp.bin") -> tuple[str, str]:
    """``out = ids + 1`` with ids/out int64[1,4] in ONNX, int32 natively (as QNN stores int64)."""
    one = h.make_tensor("one", T.INT64, [1], [1])
    g = h.make_graph([h.make_node("Add", ["ids", "one"], ["out"])], "ids",
                     [h.make_tensor_value_info("ids", T.INT64, [1, 4])],
                     [h.make_tensor_value_info("out", T.INT64, [1, 4])], [one])
    onnx_path = _write(directory, "ids.onnx", models.make_model(g))
    fg = fq.graph("ids", onnx_path, [fq.tensor("ids", [1, 4], "int32")], [fq.tensor("out", [1, 4], "int32")])
    return onnx_path, fq.write_artifact(os.path.join(os.fspath(directory), artifact), [fg])


def quantized_conv(directory, artifact: str = "qconv.htp.bin") -> tuple[str, str]:
    """smallconv with a quantized native IO: X ufp8 (scale 1/255, offset 0), Y ufp16 (scale 1e-4,
    offset -32768) — the ONNX model stays float32, so only float mode can serve it."""
    onnx_path = _write(directory, "qconv.onnx", models.smallconv(batch=1))
    g = fq.graph("qconv", onnx_path, [fq.tensor("X", [1, 3, 8, 8], "ufp8", scale=1 / 255, offset=0)],
                 [fq.tensor("Y", [1, 2, 8, 8], "ufp16", scale=1e-4, offset=-32768)])
    return onnx_path, fq.write_artifact(os.path.join(os.fspath(directory), artifact), [g])


def two_graphs(directory, artifact: str = "two.htp.bin") -> tuple[str, str, str]:
    """A two-graph binary: graph 0 ``g_conv`` (conv.onnx), graph 1 ``g_mixed`` (mixed.onnx)."""
    conv_path = _write(directory, "conv.onnx", models.smallconv(batch=1))
    mixed_path = _write(directory, "mixed.onnx", mixed_model())
    g0 = fq.graph("g_conv", conv_path, [fq.tensor("X", [1, 3, 8, 8])], [fq.tensor("Y", [1, 2, 8, 8])])
    g1 = fq.graph("g_mixed", mixed_path, [fq.tensor("a_in", [1, 4], onnx="a.in"), fq.tensor("b_in", [1, 4], onnx="b/in")],
                  [fq.tensor("sum_0", [1, 4], onnx="sum:0"), fq.tensor("prod_out", [1, 4], onnx="prod.out"),
                   fq.tensor("neg", [1, 4])])
    return conv_path, mixed_path, fq.write_artifact(os.path.join(os.fspath(directory), artifact), [g0, g1])


def rng_feed(seed: int = 0) -> dict:
    """Feeds for the mixed model."""
    r = np.random.default_rng(seed)
    return {"a.in": r.standard_normal((1, 4)).astype(np.float32), "b/in": r.standard_normal((1, 4)).astype(np.float32)}
