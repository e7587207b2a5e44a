"""A user's script, type-checked with ``mypy --strict`` against the installed wheel
(tests/project/test_typed.py). It is checked, not run: it touches the public API a user types against."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

import onnxwrapper as ort
from onnxwrapper import diff
from onnxwrapper.toolkit import inspect_model


def classify(model: str, image: npt.NDArray[np.float32]) -> int:
    sess = ort.InferenceSession(model, backend="qnn", backend_options={"precision": "fp16"})
    providers: list[str] = sess.get_providers()
    report = sess.get_partition()
    pending: bool = report is not None and report.source == "pending"
    outputs = sess.run(None, {"x": image})
    scores = np.asarray(outputs[0])
    print(providers, pending, report.summary() if report is not None else "no partition recorded")
    return int(scores.argmax())


def backends() -> list[str]:
    infos = ort.get_available_backends()
    return [info.name for info in infos if info.available and not info.simulated]


def compare(model: str, golden: str) -> int:
    inputs = diff.load_inputs(golden, model)
    runs = diff.run_model(model, inputs, backends="cpu,qnn", warm_up=2)
    timing = runs.timings["qnn"]
    median: float | None = timing.median
    result = diff.compare_model_runs(runs, golden=golden, tolerances=diff.Tolerances(changes={"atol": 1e-3}))
    verdict: str = result.verdict_line()
    worst = [s.worst.metrics.get("snr_db") for s in result.outputs if s.worst is not None]
    print(median, verdict, worst, result.write_json("report.json"))
    status: int = result.exit_status
    return status


def generated(model: str) -> diff.DiffResult:
    inputs = diff.generate_inputs(model, shapes={"x": [1, 3, 48, 192]}, val_range={"x": (0.0, 1.0)}, seed=1,
                                  iterations=3)
    diff.save_tensors("inputs.npz", inputs.iterations)
    runs = diff.run_model(model, inputs, backends="cpu,qnn")
    runs.save_outputs("golden.npz", "cpu")
    return diff.compare_model_runs(runs, reference="cpu", tolerances=diff.PRESETS["fp16"])


def script(path: str) -> bool:
    result = diff.run(path, ["--img", "a.png"], backends="cpu,qnn", replay=True)
    again = diff.check(result.directory or ".", tolerances=diff.Tolerance(atol=1e-2, rtol=1e-2))
    capture = diff.read_capture(again.capture_dirs["cpu"])
    calls: list[dict[str, npt.NDArray[np.generic]]] = [c.outputs() for c in capture.calls]
    return again.passed and bool(calls)


def inspect(model: str) -> str:
    found = inspect_model(model, backend="qnn", shapes={"x": [1, 3, 48, 192]})
    return found.partition.headline() if found.partition is not None else found.format_text()
