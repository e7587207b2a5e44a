"""One model at a time (``aipc run MODEL.onnx``, ``aipc diff --model``, :func:`onnxwrapper.diff.run_model`):
generated, loaded and golden-output comparisons, the tensor file, timings and ``--gen-script``.

The runs use the cpu backend and the test-only ``perturb`` backend (tests/test_diff_support.py),
so they are fast; one comparison runs on the QNN HTP simulator."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxwrapper import diff
from tests import models
from tests.conftest import qnn_available
from tests.diff.test_diff_api import perturb_registered  # noqa: F401 (fixture)
from tests.test_diff_support import child_env, overflow_model  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow  # outside the fast subset: `aipc run/diff MODEL` child processes


def multi_dtype() -> bytes:
    """Identity of five inputs: f float[N,4], u8 uint8[2,2], i8 int8[3], ids int64["B"], mask bool[2]."""
    specs = [("f", T.FLOAT, ["N", 4]), ("u8", T.UINT8, [2, 2]), ("i8", T.INT8, [3]), ("ids", T.INT64, ["B"]),
             ("mask", T.BOOL, [2])]
    g = h.make_graph([h.make_node("Identity", [n], [f"{n}_out"]) for n, _, _ in specs], "multi",
                     [h.make_tensor_value_info(n, t, s) for n, t, s in specs],
                     [h.make_tensor_value_info(f"{n}_out", t, s) for n, t, s in specs])
    return models.make_model(g)


@pytest.fixture
def conv(tmp_path):
    path = tmp_path / "conv.onnx"
    path.write_bytes(models.smallconv(batch="N"))
    return path


def aipc(args, cwd, env, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aipc", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


# -- generated inputs -------------------------------------------------------------------------------------
def test_generated_inputs_dtype_aware_seeded_and_distinct_per_iteration(tmp_path):
    path = tmp_path / "multi.onnx"
    path.write_bytes(multi_dtype())
    inputs = diff.generate_inputs(path, shapes={"f": [2, 4]}, iterations=3)
    first = inputs.iterations[0]
    assert {n: (a.dtype.name, a.shape) for n, a in first.items()} == {
        "f": ("float32", (2, 4)), "u8": ("uint8", (2, 2)), "i8": ("int8", (3,)), "ids": ("int64", (1,)),
        "mask": ("bool", (2,))}
    many = diff.generate_inputs(path, shapes={"f": [64, 4], "u8": [2, 2]}, iterations=1).iterations[0]
    assert 0.0 <= many["f"].min() and many["f"].max() < 1.0
    assert {int(v) for v in many["ids"]} <= {0, 1}
    assert any("'ids' has dynamic dims 0 (B)" in n for n in inputs.notes)  # B defaulted to 1, and said so
    assert not np.array_equal(inputs.iterations[0]["f"], inputs.iterations[1]["f"])
    again = diff.generate_inputs(path, shapes={"f": [2, 4]}, iterations=3)
    assert all(np.array_equal(a[n], b[n]) for a, b in zip(inputs.iterations, again.iterations) for n in a)
    ranged = diff.generate_inputs(path, shapes={"f": [500, 4]}, val_range={"f": (-2, -1), "*": (5, 5)})
    feeds = ranged.iterations[0]
    assert -2 <= feeds["f"].min() and feeds["f"].max() <= -1 and set(feeds["u8"].ravel()) == {5}


@pytest.mark.parametrize("kwargs, message", [
    ({"shapes": {"nope": [1]}}, "shapes given for nope"),
    ({"shapes": {"f": [1, 5]}}, "dim 1 is fixed to 4"),
    ({"shapes": {"f": [1, 4, 1]}}, "has rank 3"),
    ({"val_range": {"x": (0, 1)}}, "value range given for x"),
    ({"val_range": (2, 1)}, "lo 2 > hi 1"),
    ({"iterations": 0}, "iterations must be >= 1"),
])
def test_generated_inputs_refuse_what_does_not_fit_the_model(tmp_path, kwargs, message):
    path = tmp_path / "multi.onnx"
    path.write_bytes(multi_dtype())
    with pytest.raises(ValueError, match=message):
        diff.generate_inputs(path, **kwargs)


# -- the tensor file and the other loaded forms ----------------------------------------------------------
def _polygraphy_array(arr: np.ndarray) -> dict:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return {"array": base64.b64encode(buf.getvalue()).decode(), "polygraphy_class": "ndarray"}


def test_tensor_file_round_trip_and_every_loaded_form(tmp_path, conv):
    x = [np.full((1, 3, 8, 8), k, np.float32) for k in range(2)]
    y = [np.full((1, 2, 8, 8), 10 + k, np.float32) for k in range(2)]
    path = diff.save_tensors(tmp_path / "io", [{"X": a} for a in x], [{"Y": b} for b in y],
                             metadata={"backend": "cpu"})
    assert path.endswith("io.npz")
    with np.load(path) as npz:  # readable by plain numpy: input<k>/<name>, output<k>/<name>
        assert sorted(npz.files) == ["__index__", "input0/X", "input1/X", "output0/Y", "output1/Y"]
    back = diff.read_tensors(path)
    assert len(back.inputs) == 2 and np.array_equal(back.outputs[1]["Y"], y[1]) and back.metadata["backend"] == "cpu"
    assert "2 iteration(s)" in repr(back)
    loaded = diff.load_inputs(path, conv)
    assert len(loaded) == 2 and len(loaded.golden) == 2 and np.array_equal(loaded.iterations[1]["X"], x[1])
    np.savez(tmp_path / "plain.npz", X=x[0])
    np.save(tmp_path / "one.npy", x[0])
    (tmp_path / "plain.json").write_text(json.dumps([{"X": x[0].tolist()}, {"X": x[1].tolist()}]))
    (tmp_path / "poly.json").write_text(json.dumps([{"X": _polygraphy_array(a)} for a in x]))
    for name, count in (("plain.npz", 1), ("one.npy", 1), ("plain.json", 2), ("poly.json", 2)):
        got = diff.load_inputs(tmp_path / name, conv)
        assert len(got) == count and got.iterations[0]["X"].dtype == np.float32, name
        assert np.array_equal(got.iterations[count - 1]["X"], x[count - 1]), name
    runs = {"polygraphy_class": "RunResults", "lst": [["onnxrt-runner", [
        {"outputs": {"Y": {"values": _polygraphy_array(b), "polygraphy_class": "LazyArray"}},
         "polygraphy_class": "IterationResult"} for b in y]]]}
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    golden = diff.read_tensors(tmp_path / "runs.json", role="outputs")
    assert [o["Y"][0, 0, 0, 0] for o in golden.outputs] == [10.0, 11.0] and not golden.inputs
    multi = tmp_path / "multi.onnx"
    multi.write_bytes(multi_dtype())
    with pytest.raises(ValueError, match="a .npy file holds one array, but the model has 5 inputs"):
        diff.load_inputs(tmp_path / "one.npy", multi)
    np.savez(tmp_path / "partial.npz", f=np.zeros((1, 4), np.float32))
    with pytest.raises(ValueError, match=r"Required inputs \(\['u8', 'i8', 'ids', 'mask'\]\) are missing"):
        diff.load_inputs(tmp_path / "partial.npz", multi)  # onnxruntime's own message


def test_data_loader_script(tmp_path, conv):
    (tmp_path / "loader.py").write_text("import numpy as np\n"
                                        "def load_data():\n"
                                        "    for k in range(5):\n"
                                        "        yield {'X': np.full((1, 3, 8, 8), k, np.float32)}\n"
                                        "def other():\n"
                                        "    return [{'X': np.zeros((2, 3, 8, 8), np.float32)}]\n")
    got = diff.load_data_loader(str(tmp_path / "loader.py"), conv, iterations=3)
    assert [float(f["X"].max()) for f in got.iterations] == [0.0, 1.0, 2.0]
    assert diff.load_data_loader(f"{tmp_path / 'loader.py'}:other", conv).iterations[0]["X"].shape == (2, 3, 8, 8)
    with pytest.raises(ValueError, match="defines no function 'missing'"):
        diff.load_data_loader(f"{tmp_path / 'loader.py'}:missing", conv)


# -- runs and comparisons (child processes) -----------------------------------------------------------------
def test_generated_comparison_timings_and_recheck(tmp_path, conv, child_env, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", child_env["PYTHONPATH"])
    inputs = diff.generate_inputs(conv, shapes={"X": [1, 3, 8, 8]}, iterations=3)
    runs = diff.run_model(conv, inputs, backends="cpu,twin=cpu", warm_up=2, directory=tmp_path / "d")
    assert runs.ok and runs.timings["twin"].warm_up == 2 and len(runs.timings["twin"].seconds) == 3
    assert runs.timings["cpu"].min <= runs.timings["cpu"].median <= runs.timings["cpu"].max
    result = diff.compare_model_runs(runs)
    assert result.exit_status == 0 and result.mode == "model" and result.compared_calls == 3
    assert "a model run: no app level" in result.verdict_line() and not result.app
    table = result.table()
    assert "model runs (time per iteration: session.run alone):" in table and "after 2 warm-up run(s)" in table
    doc = result.to_dict()
    assert doc["timings"]["twin"]["iterations"] == 3 and doc["mode"] == "model"
    again = diff.check(tmp_path / "d", tolerances=diff.Tolerance(atol=0.0, rtol=0.0))
    assert again.exit_status == 0 and again.timings.keys() == {"cpu", "twin"}  # identical CPU runs
    assert "DiffResult PASS" in repr(result) and "BackendRun twin [cpu]: ok" in repr(result)


def test_golden_outputs_from_elsewhere_judged_like_a_script_diff(tmp_path, conv, child_env, monkeypatch,
                                                                 perturb_registered):
    monkeypatch.setenv("PYTHONPATH", child_env["PYTHONPATH"])
    made = diff.run_model(conv, diff.generate_inputs(conv, shapes={"X": [2, 3, 8, 8]}, iterations=2),
                          backends="cpu", directory=tmp_path / "a")
    golden = made.save_outputs(tmp_path / "golden.npz")
    # on "another machine": the golden file carries its inputs
    inputs = diff.load_inputs(golden, conv)
    ok = diff.compare_model_runs(diff.run_model(conv, inputs, backends="cpu", directory=tmp_path / "b"),
                                 golden=golden)
    assert ok.exit_status == 0 and ok.reference == "golden" and ok.runs["golden"].backend == "cpu"
    off = diff.compare_model_runs(diff.run_model(conv, inputs, backends="perturb",
                                                 backend_options={"perturb": {"scale": 0.2}},
                                                 directory=tmp_path / "c"), golden=golden)
    assert off.exit_status == 1 and off.state == "tensor_mismatch" and "MISMATCH (tensors)" in off.verdict_line()
    crashed = diff.compare_model_runs(diff.run_model(conv, inputs, backends="perturb",
                                                     backend_options={"perturb": {"crash": True}},
                                                     directory=tmp_path / "e"), golden=golden)
    assert crashed.exit_status == 2 and "SIGSEGV" in crashed.verdict_line()
    other = diff.run_model(conv, diff.generate_inputs(conv, shapes={"X": [2, 3, 8, 8]}, seed=7, iterations=2),
                           backends="cpu", directory=tmp_path / "f")
    with pytest.raises(ValueError, match="was made from other inputs than this run's"):
        diff.compare_model_runs(other, golden=golden)
    np.savez(tmp_path / "plain.npz", Y=diff.read_tensors(golden).outputs[0]["Y"])  # a framework's golden
    plain = diff.compare_model_runs(diff.run_model(conv, diff.load_inputs(golden, conv, iterations=1),
                                                   backends="cpu", directory=tmp_path / "g"),
                                    golden=tmp_path / "plain.npz")
    assert plain.exit_status == 0 and any("records no inputs" in n for n in plain.notes)


# -- the command line and --gen-script ---------------------------------------------------------------------
def _verdict(text: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith("verdict:"))


@pytest.mark.parametrize("args, status", [
    (["diff", "--model", "conv.onnx", "--backends", "cpu,perturb", "--backend-option", "perturb:scale=0.2",
      "--input-shapes", "X:[1,3,8,8]", "--iterations", "2", "--warm-up", "1"], 1),
    (["diff", "conv.onnx", "--backends", "cpu,twin=cpu", "--load-inputs", "in.json", "--atol", "1e-6"], 0),
])
def test_cli_and_its_generated_script_give_the_same_verdict(tmp_path, conv, child_env, args, status):
    (tmp_path / "in.json").write_text(json.dumps({"X": np.ones((1, 3, 8, 8)).tolist()}))
    proc = aipc([*args, "--dir", "run1", "-q"], tmp_path, child_env)
    assert proc.returncode == status, proc.stdout + proc.stderr
    assert (tmp_path / "run1" / "report.json").exists() and (tmp_path / "run1" / "report.html").exists()
    gen = aipc([*args, "--gen-script", "again.py"], tmp_path, child_env)
    assert gen.returncode == 0 and not (tmp_path / "again").exists(), gen.stderr
    script = (tmp_path / "again.py").read_text()
    assert "diff.run_model(" in script and "diff.compare_model_runs(" in script and "sys.exit(result.exit_status)" in script
    elsewhere = tmp_path / "elsewhere"  # the script runs unchanged from any directory
    elsewhere.mkdir()
    rerun = subprocess.run([sys.executable, str(tmp_path / "again.py")], cwd=elsewhere, env=child_env,
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == status, rerun.stdout + rerun.stderr
    assert _verdict(rerun.stdout) == _verdict(proc.stdout)


def test_aipc_run_model_saves_and_compares_golden_outputs_across_directories(tmp_path, conv, child_env):
    a, b = tmp_path / "machine_a", tmp_path / "machine_b"
    a.mkdir(), b.mkdir()
    proc = aipc(["run", conv, "--backend", "cpu", "--input-shapes", "X:[1,3,8,8]", "--iterations", "3",
                 "--warm-up", "2", "--save-outputs", "golden.npz", "--save-inputs", "inputs.npz"], a, child_env)
    assert proc.returncode == 0, proc.stderr
    assert "output Y: float32[1, 2, 8, 8]" in proc.stdout and "3 iteration(s), min " in proc.stdout
    assert "after 2 warm-up run(s)" in proc.stdout and (a / "golden.npz").exists() and (a / "inputs.npz").exists()
    same = aipc([conv, "--backend", "cpu", "--load-outputs", a / "golden.npz"], b, child_env)  # `aipc MODEL.onnx`
    assert same.returncode == 0 and "verdict: PASS" in same.stdout, same.stdout + same.stderr
    saved = diff.read_tensors(a / "golden.npz")
    diff.save_tensors(b / "off.npz", saved.inputs, [{"Y": o["Y"] * 1.5} for o in saved.outputs])
    off = aipc(["run", conv, "--backend", "cpu", "--load-outputs", "off.npz"], b, child_env)
    assert off.returncode == 1 and "verdict: MISMATCH (tensors)" in off.stdout, off.stdout + off.stderr
    gen = aipc(["run", conv, "--backend", "cpu", "--load-outputs", a / "golden.npz", "--gen-script", "-"], b,
               child_env)
    assert "inputs = diff.load_inputs(" in gen.stdout and "golden=" in gen.stdout


@pytest.mark.parametrize("args, message", [
    (["run", "conv.onnx", "--load-inputs", "x.npz", "--seed", "3"], "--seed apply to generated inputs"),
    (["run", "conv.onnx", "--input-shapes", "X:1,3"], "expected NAME:[V0,V1,…]"),
    (["run", "conv.onnx", "--val-range", "X:[2,1]"], "LO <= HI"),
    (["run", "conv.onnx", "--input-shapes", "Z:[1,3,8,8]"], "shapes given for Z"),
    (["run", "missing.onnx"], "model not found: missing.onnx"),
    (["diff", "--model", "conv.onnx", "--backends", "cpu,qnnn"], "Did you mean 'qnn'?"),
    (["run", "conv.onnx", "--load-outputs", "nope.npz"], "no such file"),
])
def test_model_mode_usage_errors(tmp_path, conv, child_env, args, message):
    proc = aipc(args, tmp_path, child_env)
    assert proc.returncode == 64 and message in proc.stderr, proc.stderr


# -- on the QNN HTP simulator --------------------------------------------------------------------------------
@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_model_diff_on_qnn_with_value_range_localizes_the_fp16_overflow(tmp_path, child_env):
    (tmp_path / "overflow.onnx").write_bytes(overflow_model())
    proc = aipc(["diff", "--model", "overflow.onnx", "--val-range", "X:[150,400]", "--warm-up", "1", "--localize",
                 "--dir", "d", "-q", "--no-html"], tmp_path, child_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rep = json.loads((tmp_path / "d" / "report.json").read_text())
    (loc,) = rep["localizations"]
    assert loc["cause"] == "overflow" and loc["culprit"]["node"] == "scale_up", loc["message"]
    assert rep["timings"]["qnn"]["simulated"] and "QNNExecutionProvider" in rep["timings"]["qnn"]["partition"]
    assert "simulated device: not device speed" in proc.stdout


def test_a_crashed_backend_is_incomplete_and_saves_nothing(tmp_path, conv, child_env):
    proc = aipc(["diff", "--model", "conv.onnx", "--backends", "cpu,perturb", "--backend-option", "perturb:crash=true",
                 "--input-shapes", "X:[1,3,8,8]", "--save-outputs", "out.npz", "--dir", "d", "-q", "--no-html"],
                tmp_path, child_env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "verdict: INCOMPLETE — perturb: crashed — killed by SIGSEGV" in proc.stdout
    assert (tmp_path / "out-cpu.npz").exists() and not (tmp_path / "out-perturb.npz").exists()
