"""Localization logic in-process: exposing tensors, one-shot vs bisection, chain, range suspects.

The two "backends" are ONNX Runtime CPU; the one under test corrupts every exposed tensor from
node ``n07`` on (as an error introduced at n07 would), so the first divergent node is known.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxwrapper.diff import BackendRun, Tolerance
from onnxwrapper.diff._localize._search import candidate_tensors, expose_tensors, localize, run_exposed
from tests import models

N = 20
BAD_FROM = 7


def chain_model(scale_at: int | None = None, scale: float = 1.0) -> bytes:
    """X float[1, 8] → n00 … n19 (Add 0.5 / Relu alternating) → Y; optional Mul by ``scale`` at ``scale_at``."""
    nodes, prev, inits = [], "X", [onnx.numpy_helper.from_array(np.array(0.5, np.float32), "half"),
                                   onnx.numpy_helper.from_array(np.array(scale, np.float32), "k")]
    for i in range(N):
        out = "Y" if i == N - 1 else f"t{i:02d}"
        if i == scale_at:
            nodes.append(h.make_node("Mul", [prev, "k"], [out], name=f"n{i:02d}"))
        elif i % 2:
            nodes.append(h.make_node("Relu", [prev], [out], name=f"n{i:02d}"))
        else:
            nodes.append(h.make_node("Add", [prev, "half"], [out], name=f"n{i:02d}"))
        prev = out
    g = h.make_graph(nodes, "chain", [h.make_tensor_value_info("X", T.FLOAT, [1, 8])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [1, 8])], inits)
    return models.make_model(g)


def fake_child(calls: list):
    """run_child stand-in: the reference is exact; backend 'bad' corrupts tensors from n07 on."""

    def run_child(backend, options, sdir, request_path):
        calls.append(backend)
        with open(request_path) as f:
            req = json.load(f)
        run_exposed(req, "cpu", {})
        if backend == "bad":
            with np.load(req["output"]) as npz:
                arrays = dict(npz)
            for k, name in enumerate(req["expose"]):
                index = N - 1 if name == "Y" else int(name[1:])
                if index >= BAD_FROM and f"t{k}" in arrays:
                    arrays[f"t{k}"] = arrays[f"t{k}"] * np.float32(1.1)  # SNR 20 dB
            np.savez(req["output"], **arrays)
        return BackendRun(backend=backend, status="ok")

    return run_child


def _localize(tmp_path, model, **kwargs):
    calls = []
    loc = localize(model_source=model, model_key="chain", inputs={"X": np.linspace(-1, 1, 8, dtype=np.float32)[None]},
                   backend="bad", backend_options={}, reference="cpu", reference_options={},
                   tolerance=Tolerance(), precision="fp32", workdir=str(tmp_path / "loc"), run_child=fake_child(calls),
                   failing_outputs=["Y"], **kwargs)
    return loc, calls


def test_candidates_in_graph_order_and_exposure_in_memory(tmp_path):
    model = chain_model()
    cands = candidate_tensors(onnx.load_model_from_string(model), {"X": (1, 8)})
    assert [c.node for c in cands] == [f"n{i:02d}" for i in range(N)]
    assert cands[0].est_bytes == 32
    exposed = onnx.load_model_from_string(expose_tensors(model, ["t03", "Y"]))
    assert [o.name for o in exposed.graph.output] == ["Y", "t03"]


def test_all_at_once_finds_the_first_divergent_node_and_its_chain(tmp_path):
    loc, calls = _localize(tmp_path, chain_model())
    # one round exposing every tensor, one running the first failing node alone
    assert loc.method == "all" and loc.rounds == 2 and calls == ["cpu", "bad", "cpu", "bad"]
    assert loc.first["node"] == f"n{BAD_FROM:02d}" and loc.first["op_type"] == "Relu"
    assert loc.cause == "node" and loc.culprit["node"] == loc.first["node"] and loc.isolated_snr_db < loc.bar_db
    assert [c["node"] for c in loc.chain] == [f"n{i:02d}" for i in range(BAD_FROM + 1, N)]
    assert loc.tensors_compared == N and not loc.error


def test_bisection_when_exposing_everything_is_too_costly(tmp_path):
    loc, calls = _localize(tmp_path, chain_model(), max_tensors=4)
    assert loc.method == "bisect" and loc.rounds > 1
    assert loc.first["node"] == f"n{BAD_FROM:02d}"
    assert loc.tensors_compared < N  # never everything at once


@pytest.mark.parametrize("bad_from,cause,named", [(5, "overflow", "n04"), (9, "overflow", "n04"), (N, "none", None)])
def test_fp16_overflow_is_the_cause_only_where_it_degrades_the_result(tmp_path, monkeypatch, bad_from, cause, named):
    # n04 multiplies by 1e5: every reference value from n04 on (≈ 2e5) is beyond FP16's range. Where
    # the result goes wrong downstream, the start of that region, n04, is named as the overflow; when
    # the backend computes every tensor right (as the HTP simulator does up to 131008), it is only listed.
    monkeypatch.setattr(sys.modules[__name__], "BAD_FROM", bad_from)
    calls = []
    loc = localize(model_source=chain_model(scale_at=4, scale=1e5), model_key="chain",
                   inputs={"X": np.ones((1, 8), np.float32)}, backend="bad", backend_options={}, reference="cpu",
                   reference_options={}, tolerance=Tolerance(check="none"), precision="fp16",
                   workdir=str(tmp_path / "loc"), run_child=fake_child(calls))
    assert loc.suspects and loc.suspects[0]["node"] == "n04" and loc.suspects[0]["max_abs"] > 65504
    assert loc.cause == cause and (loc.culprit or {}).get("node") == named, loc.message
    if cause == "overflow":
        assert "FP16 overflow at 'n04'" in loc.message and loc.first["node"] == f"n{bad_from:02d}"


def test_a_failing_round_is_reported_not_raised(tmp_path):
    def broken(backend, options, sdir, request_path):
        return BackendRun(backend=backend, status="crashed", signal="SIGSEGV", message="crashed with SIGSEGV")

    loc = localize(model_source=chain_model(), model_key="chain", inputs={"X": np.ones((1, 8), np.float32)},
                   backend="bad", backend_options={}, reference="cpu", reference_options={}, tolerance=Tolerance(),
                   precision="fp32", workdir=str(tmp_path / "loc"), run_child=broken)
    assert loc.first is None and "SIGSEGV" in loc.error and "incomplete" in loc.message


@pytest.mark.parametrize("bad_from", [0, N - 1])
def test_bisection_edges(tmp_path, monkeypatch, bad_from):
    monkeypatch.setattr(sys.modules[__name__], "BAD_FROM", bad_from)
    loc, _ = _localize(tmp_path, chain_model(), max_tensors=3)
    assert loc.first["node"] == f"n{bad_from:02d}"


def test_a_round_that_does_not_compile_is_measured_with_fewer_tensors(tmp_path):
    """A backend that cannot compile the graph with more than 6 exposed outputs (a large U-Net on
    QNN: "Failed to finalize") still localizes: the failing round is measured in smaller rounds."""
    calls = []
    inner = fake_child(calls)

    def limited(backend, options, sdir, request_path):
        with open(request_path) as f:
            if backend == "bad" and len(json.load(f)["expose"]) > 6:
                return BackendRun(backend=backend, status="script_failed", message="EPFail: Failed to finalize")
        return inner(backend, options, sdir, request_path)

    loc = localize(model_source=chain_model(), model_key="chain", inputs={"X": np.linspace(-1, 1, 8, dtype=np.float32)[None]},
                   backend="bad", backend_options={}, reference="cpu", reference_options={}, tolerance=Tolerance(),
                   precision="fp32", workdir=str(tmp_path / "loc"), run_child=limited, failing_outputs=["Y"])
    assert not loc.error and loc.first["node"] == f"n{BAD_FROM:02d}" and loc.cause == "node"
    assert loc.tensors_compared == N and any("20 tensors failed" in n and "Failed to finalize" in n for n in loc.notes)
