"""FP16 underflow named as a cause by ``--localize``, beside overflow: values below FP16's smallest
normal number that feed a ``Log`` (a constant-Q front end), counted and traced to the node that
needs them; and a square root that saturates at exact zeros (a kernel bug, not underflow) is not
blamed on the small values next to it.

The backend under test is ONNX Runtime on the CPU with every float activation rounded to FP16
(``Cast`` to float16 and back after each node): it loses values below 6e-8 as the HTP does.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from onnxwrapper.diff import BackendRun, Tolerance
from onnxwrapper.diff._localize._search import localize, run_exposed
from tests import repair_models
from tests.models import make_model


def fp16_activations(data: bytes) -> bytes:
    """The model with every float node output rounded to FP16 (the HTP's activations)."""
    model = onnx.load_model_from_string(data)
    floats = {v.name for v in (*onnx.shape_inference.infer_shapes(model).graph.value_info, *model.graph.output)
              if v.type.tensor_type.elem_type == T.FLOAT}
    nodes = []
    for node in model.graph.node:
        nodes.append(node)
        for k, out in enumerate(node.output):
            if out in floats:
                node.output[k] = out + "__raw"
                nodes += [h.make_node("Cast", [out + "__raw"], [out + "__h"], to=T.FLOAT16),
                          h.make_node("Cast", [out + "__h"], [out], to=T.FLOAT)]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model.SerializeToString()


def fp16_child(backend, options, sdir, request_path):
    """run_child stand-in: the reference is ORT's CPU; backend 'fp16' rounds every activation to FP16."""
    with open(request_path) as f:
        req = json.load(f)
    if backend == "fp16":
        with open(req["model"], "rb") as f:
            emulated = fp16_activations(f.read())
        req["model"] = f"{sdir}/fp16.onnx"
        with open(req["model"], "wb") as f:
            f.write(emulated)
    run_exposed(req, "cpu", {})
    return BackendRun(backend=backend, status="ok")


def _localize(tmp_path, model: bytes, inputs: dict, run_child, failing: list):
    return localize(model_source=model, model_key="m", inputs=inputs, backend="fp16", backend_options={},
                    reference="cpu", reference_options={}, tolerance=Tolerance(), precision="fp16",
                    workdir=str(tmp_path / "loc"), run_child=run_child, failing_outputs=failing)


def test_values_below_fp16s_normal_range_feeding_a_log_are_named_as_underflow(tmp_path):
    loc = _localize(tmp_path, repair_models.cqt_log(), {"x": repair_models.cqt_inputs()}, fp16_child, ["y"])
    assert loc.cause == "underflow", loc.message
    assert loc.culprit["tensor"] == "power" and loc.first["node"] == "log"
    assert "below FP16's smallest normal number" in loc.message and "Log 'log'" in loc.message
    assert loc.rounds == 1  # no isolation round: the Log is right for the zeros it was fed
    note = next(u for u in loc.underflows if u["tensor"] == "power")
    # 60 of the 64 bins are below 6.1e-5 (down to 3e-13); FP16 keeps none of those below 6e-8
    assert note["below"] == 60 and note["size"] == 64 and note["zeros"] == 0 and note["smallest"] < 1e-12
    assert note["lost"] >= 50 and note["feeds"] == [{"node": "log", "op_type": "Log"}]
    assert {u["tensor"] for u in loc.underflows} == {"power"}  # re², im² and re, im feed no Log


def _sqrt_of_squares() -> bytes:
    nodes = [h.make_node("Mul", ["x", "x"], ["sq"], name="square"), h.make_node("Sqrt", ["sq"], ["y"], name="root")]
    vi = [h.make_tensor_value_info(n, T.FLOAT, [1, 64]) for n in ("x", "y")]
    return make_model(h.make_graph(nodes, "sqrt_sq", vi[:1], vi[1:]))


def test_a_square_root_saturating_at_exact_zeros_is_not_blamed_on_underflow(tmp_path):
    """faster-whisper's STFT on the HTP: ``Pow(x, 2)`` is −4 at x = −0, the ``Sqrt`` saturates there,
    where the reference power is tiny. Its other inputs are small too (squares of 1e-4, flushed by
    FP16) — the report lists them, but the cause is the saturation: where the error is, the backend's
    input is −4, not a value lost to underflow."""
    x = np.full((1, 64), 1e-4, np.float32)
    x[0, ::2] = np.linspace(0.5, 20, 32)  # the squares keep the bar despite the −4s
    x[0, 1::8] = 1e-5  # squares of 1e-10: below the range, and where the kernel returns −4 (as at −0 on the HTP)
    x[0, 3::16] = -0.0
    bug = np.zeros_like(x, bool)
    bug[0, 1::8] = True
    bad = {"sq": np.where(bug, -4.0, np.where(np.abs(x) < 1e-2, 0.0, x * x)).astype(np.float32)}
    bad["y"] = np.where(bad["sq"] < 0, 131008.0, np.sqrt(np.maximum(bad["sq"], 0))).astype(np.float32)

    def kernel_bug(backend, options, sdir, request_path):
        with open(request_path) as f:
            req = json.load(f)
        run_exposed(req, "cpu", {})
        if backend == "fp16":  # the exposed values "t<k>" of the kernel's tensors replaced
            with np.load(req["output"]) as npz:
                arrays = {key: bad.get(req["expose"][int(key[1:])], npz[key]) for key in npz.files}
            np.savez(req["output"], **arrays)
        return BackendRun(backend=backend, status="ok")

    loc = _localize(tmp_path, _sqrt_of_squares(), {"x": x}, kernel_bug, ["y"])
    assert loc.cause == "saturation" and loc.culprit["node"] == "square", loc.message
    assert [u["tensor"] for u in loc.underflows] == ["sq"] and loc.underflows[0]["feeds"][0]["op_type"] == "Sqrt"
    assert loc.underflows[0]["zeros"] == 4  # the −0 positions: zeros are not underflow
    assert loc.underflows[0]["below"] == 28 and loc.underflows[0]["lost"] == 20  # the −4s are not lost to underflow

