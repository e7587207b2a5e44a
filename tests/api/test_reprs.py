"""Every public result object prints readably in a REPL: one line (a diff result: one per output and
run), the facts a person looks for first, never the raw dataclass dump with every field."""

from __future__ import annotations

import numpy as np
import pytest

import onnxwrapper
from onnxwrapper import diff
from onnxwrapper.backends.qnn import CompileResult
from onnxwrapper.kernel import NodeAssignment, PartitionReport
from onnxwrapper.toolkit import inspect_model
from tests import models


def _report() -> PartitionReport:
    nodes = (NodeAssignment("conv", "Conv", "", "QNNExecutionProvider"),
             NodeAssignment("det", "Det", "", "CPUExecutionProvider", 1, "not supported"))
    return PartitionReport("QNNExecutionProvider", nodes, ("QNNExecutionProvider", "CPUExecutionProvider"),
                           note="m.onnx")


def _one_line(text: str, *must: str) -> None:
    assert "\n" not in text and len(text) < 400, text
    for word in must:
        assert word in text, (word, text)


def test_partition_report_and_selection():
    _one_line(repr(_report()), "PartitionReport", "QNNExecutionProvider 1/2 nodes", "Det", "source compile")
    _one_line(repr(PartitionReport.pending("QNNExecutionProvider", "m.onnx")), "not compiled yet", "pending")
    from onnxwrapper._selection import Selection

    _one_line(repr(Selection("qnn", "argument", "backend='qnn' was passed")), "qnn", "argument", "was passed")


def test_compile_result():
    result = CompileResult("out/m_ctx.onnx", "out/m_ctx_qnn.bin", 800, 57000, _report(), 1.25,
                           {"soc_model": "60"}, {"X": (1, 3, 8, 8)}, {"onnxruntime": "1.32.0"})
    _one_line(repr(result), "CompileResult out/m_ctx.onnx", "57800 bytes", "(1, 3, 8, 8)", "1.2 s",
              "QNNExecutionProvider 1/2 nodes")


def test_diff_result_and_its_parts():
    y = np.linspace(0, 1, 100, dtype=np.float32)
    good = diff.compare_arrays(y * 1.0001, y, diff.PRESETS["fp16"])
    bad = diff.compare_arrays(y + 0.5, y, diff.PRESETS["fp16"])
    for c, name in ((good, "pass"), (bad, "FAIL:tolerance")):
        c.backend, c.model, c.output = "qnn", "m-123", "logits"
        _one_line(repr(c), "CallComparison qnn m-123/logits", name, "SNR", "cosine")
    summary = diff.OutputSummary("qnn", "m-123", "logits", diff.PRESETS["fp16"], "fp16", calls=2, failed_calls=1,
                                 worst=bad, kind="tolerance")
    _one_line(repr(summary), "OutputSummary qnn m-123/logits", "FAIL:tolerance (1/2 calls)", "bar 27.1 dB")
    run = diff.BackendRun("qnn", label="qnn", status="crashed", signal="SIGSEGV", cause="killed by SIGSEGV", calls=3)
    _one_line(repr(run), "BackendRun qnn [qnn]", "crashed (SIGSEGV)", "3 call(s)", "killed by SIGSEGV")
    app = diff.AppComparison("qnn", "cpu", status="not_compared", reason="replay mode")
    _one_line(repr(app), "AppComparison qnn vs cpu", "not_compared (replay mode)")
    loc = diff.Localization("qnn", "m-123", cause="overflow", culprit={"node": "scale_up"}, rounds=2)
    _one_line(repr(loc), "Localization qnn m-123", "overflow at 'scale_up'", "2 round(s)")
    result = diff.DiffResult(reference="cpu", backends=["qnn"], mode="live", outputs=[summary],
                             runs={"cpu": diff.BackendRun("cpu", label="cpu"), "qnn": run}, compared_calls=2)
    text = repr(result)
    assert text.startswith("<DiffResult INCOMPLETE (exit status 2, incomplete)") and text.count("\n") == 4
    assert "verdict: INCOMPLETE" in text and "dataclass" not in text and "per_call" not in text


def test_toolkit_results(tmp_path):
    path = tmp_path / "conv.onnx"
    path.write_bytes(models.smallconv(batch=1))
    found = inspect_model(str(path), backend="qnn", probe=False)
    _one_line(repr(found), "Inspection", "3 nodes", "QNN 3 of 3 model nodes")
    _one_line(repr(found.partition), "PartitionPrediction(qnn, rules", "predicted")
    from onnxwrapper.toolkit import QuantizeResult

    q = QuantizeResult("m_w8a16_qdq.onnx", "w8a16", "QUInt16", "QUInt8", 8, True, 2.5, 14)
    _one_line(repr(q), "QuantizeResult w8a16", "QUInt16 activations", "14 Q/DQ nodes", "8 calibration sample(s)")


def test_captures_and_model_runs(tmp_path, monkeypatch):
    path = tmp_path / "conv.onnx"
    path.write_bytes(models.smallconv(batch=1))
    handle = diff.start_capture(tmp_path / "cap")
    sess = onnxwrapper.InferenceSession(str(path), backend="cpu")
    sess.run(None, {"X": np.zeros((1, 3, 8, 8), np.float32)})
    handle.stop()
    cap = diff.read_capture(tmp_path / "cap")
    _one_line(repr(cap), "Capture", "complete, 1 call(s), 1 session(s) of 1 model(s) on cpu")
    _one_line(repr(cap.calls[0]), "Call session 1 call 0", "run(X[1, 3, 8, 8]) -> 1 output(s)")
    inputs = diff.generate_inputs(path, iterations=2)
    _one_line(repr(inputs), "ModelInputs(2 iteration(s) [generated (seed 1)]; X: float32[1, 3, 8, 8])")
    timing = diff.Timing("qnn", "qnn", [0.002, 0.001, 0.003], warm_up=1, simulated=True)
    _one_line(repr(timing), "min 1 ms, median 2 ms, max 3 ms", "after 1 warm-up", "not device speed")


@pytest.mark.parametrize("obj", [onnxwrapper.get_available_backends()])
def test_backend_listing(obj):
    assert all(repr(i).startswith("<BackendInfo ") and "\n" not in repr(i) for i in obj)
