"""The toolkit subcommands as a user runs them: ``aipc inspect``, ``aipc capture``, ``aipc compile``.

Every command runs in a fresh ``python -m aipc`` process (the QNN configuration is process-global).
The QNN round trip compiles a small CNN for fp16, w8a16 and w8a8, loads the EPContext model with
``onnxwrapper.InferenceSession`` and runs it, and checks the three-way accuracy report.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import pytest

from tests import models
from tests.conftest import qnn_available, run_python
from tests.toolkit.test_inspect import mixed_model

ROOT = pathlib.Path(__file__).parents[2]
skip_without_qnn = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")

SCRIPT = """\
import sys
import numpy as np
import onnxruntime as ort
sess = ort.InferenceSession(sys.argv[1])
rng = np.random.default_rng(int(sys.argv[2]))
for _ in range(int(sys.argv[3])):
    y = sess.run(None, {"X": rng.random((1, 3, 8, 8), dtype=np.float32)})[0]
partition = getattr(sess, "get_partition", lambda: None)()
print("OUT", float(np.abs(y).sum()), type(sess).__module__, partition.source if partition is not None else None)
"""


def aipc(*args, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aipc", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    (tmp_path / "cnn.onnx").write_bytes(models.smallconv(batch=1))
    return tmp_path


# -- inspect ---------------------------------------------------------------------------------------
def test_inspect_text_and_json(tmp_path):
    path = tmp_path / "mixed.onnx"
    onnx.save(mixed_model(), path)
    proc = aipc("inspect", path, "--no-probe")
    assert proc.returncode == 0, proc.stderr
    assert "ops (7 types)" in proc.stdout and "patch 'mod'" in proc.stdout and "from rules" in proc.stdout
    proc = aipc("inspect", path, "--no-probe", "--json")
    data = json.loads(proc.stdout)
    assert data["partition"]["source"] == "rules" and data["op_histogram"]["Reshape"] == 2
    assert {p["patch"] for p in data["patches"]} == {"mod", "einsum"}


def test_inspect_static_shapes_and_usage_errors(tmp_path):
    path = tmp_path / "dyn.onnx"
    path.write_bytes(models.smallconv(batch="N", hw=("H", "W")))
    data = json.loads(aipc("inspect", path, "--no-probe", "--json", "--dim", "N=1", "--shape", "X=1,3,8,8").stdout)
    assert data["inputs"][0]["shape"] == [1, 3, 8, 8] and not data["inputs"][0]["dynamic"]
    proc = aipc("inspect", path, "--shape", "X=1,3")
    assert proc.returncode == 64 and "rank" in proc.stderr.lower()
    proc = aipc("inspect", path, "--dim", "batch=1")
    assert proc.returncode == 64 and "no dynamic dim named 'batch'" in proc.stderr
    assert aipc("inspect", tmp_path / "missing.onnx").returncode == 64
    proc = aipc("inspect")
    assert proc.returncode == 0 and proc.stdout.startswith("cpu")


@pytest.mark.qnn
@skip_without_qnn
def test_inspect_context_binary(tmp_path, monkeypatch):
    """``aipc inspect model.bin``: graphs, tensors, shapes, dtypes (text and --json)."""
    import warnings

    from onnxwrapper.backends.qnn import compile_model

    monkeypatch.setenv("ONNXWRAPPER_CACHE_DIR", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Det stays on CPU: two QNN graphs in one binary
        model = onnx.load_from_string(models.conv_det_relu())
        model.doc_string = str(tmp_path)  # a model of its own: no warn-once shared with other tests
        binary = compile_model(model, tmp_path / "cdr_ctx.onnx").bin_path
    proc = aipc("inspect", binary)
    assert proc.returncode == 0, proc.stderr
    assert "2 graphs" in proc.stdout and "graph 1: QNNExecutionProvider_" in proc.stdout
    assert [ln.split()[:3] for ln in proc.stdout.splitlines() if ln.strip().startswith(("X ", "d "))] == [
        ["X", "float32", "[1,"], ["d", "float32", "[1]"]]
    data = json.loads(aipc("inspect", binary, "--json").stdout)
    assert data["bytes"] == os.path.getsize(binary) and data["build_id"].startswith("v2.")
    (first, second) = data["graphs"]
    assert first["inputs"] == [{"name": "X", "shape": [1, 1, 2, 2], "dtype": "float32", "scale": None, "offset": None}]
    assert [t["name"] for t in second["inputs"] + second["outputs"]] == ["d", "Y"]
    assert aipc("inspect", binary, "--shape", "X=1,1,2,2").returncode == 64
    bogus = tmp_path / "weights.bin"
    bogus.write_bytes(b"\0" * 128)
    proc = aipc("inspect", bogus)
    assert proc.returncode == 1 and "not a QNN context binary" in proc.stderr
    assert aipc("inspect", tmp_path / "missing.bin").returncode == 64


# -- capture ---------------------------------------------------------------------------------------
def test_capture_leading_and_trailing_forms(workdir):
    cap = workdir / "cap"
    proc = aipc("capture", "-o", cap, "--max-samples", "3", workdir / "script.py", workdir / "cnn.onnx", 1, 5)
    assert proc.returncode == 0, proc.stderr
    assert "OUT" in proc.stdout and "3 calls of 1 model" in proc.stderr
    from onnxwrapper.diff import read_capture

    capture = read_capture(cap)
    assert len(capture.calls) == 3 and capture.header["metadata"]["args"] == [str(workdir / "cnn.onnx"), "1", "5"]
    proc = aipc("capture", "-o", cap, workdir / "script.py", workdir / "cnn.onnx", 1, 1)
    assert proc.returncode == 64 and "exists already" in proc.stderr
    # the form: options after the script's arguments
    cap2 = workdir / "cap2"
    proc = aipc("capture", workdir / "script.py", workdir / "cnn.onnx", 2, 4, "-o", cap2, "--max-samples", "2")
    assert proc.returncode == 0, proc.stderr
    assert "trailing '-o" in proc.stderr and len(read_capture(cap2).calls) == 2
    (workdir / "notacapture").mkdir()
    proc = aipc("capture", "-o", workdir / "notacapture", "--overwrite", workdir / "script.py", "x", 1, 1)
    assert proc.returncode == 64 and "not a capture directory" in proc.stderr
    proc = aipc("capture", workdir / "script.py", workdir / "cnn.onnx", 1, 1, cwd=workdir)  # no -o anywhere
    assert proc.returncode == 0 and len(list(workdir.glob("aipc-capture-*"))) == 1, proc.stderr


# -- compile ---------------------------------------------------------------------------------------
def test_compile_usage_errors(workdir):
    proc = aipc("compile", workdir / "cnn.onnx", "-o", workdir / "out", "--precision", "w8a16")
    assert proc.returncode == 64 and "--calibration" in proc.stderr
    dyn = workdir / "dyn.onnx"
    dyn.write_bytes(models.smallconv(batch="N"))
    if qnn_available():
        proc = aipc("compile", dyn, "-o", workdir / "out")
        assert proc.returncode == 64 and "dynamic dims" in proc.stderr and "--shape" in proc.stderr


_LOAD_AND_RUN = r'''
import json, sys
import numpy as np, onnxruntime
import onnxwrapper
ctx, original = sys.argv[1], sys.argv[2]
x = np.random.default_rng(7).random((1, 3, 8, 8), dtype=np.float32)
session = onnxwrapper.InferenceSession(ctx, backend="qnn")
y = session.run(None, {"X": x})[0]
ref = onnxruntime.InferenceSession(original, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
cos = float(np.dot(y.ravel(), ref.ravel()) / np.linalg.norm(y) / np.linalg.norm(ref))
print("RESULT" + json.dumps({"inputs": [i.name for i in session.get_inputs()], "shape": list(y.shape),
                             "cosine": cos, "max_abs": float(np.abs(y - ref).max())}))
'''


@pytest.mark.qnn
@skip_without_qnn
@pytest.mark.parametrize("precision", ["fp16", "w8a16", "w8a8"])
def test_compile_load_run_round_trip(workdir, precision):
    cap = workdir / "cap"
    assert aipc("capture", "-o", cap, workdir / "script.py", workdir / "cnn.onnx", 3, 8).returncode == 0
    out = workdir / "out"
    extra = ["--dlc", "--profile"] if precision == "fp16" else []
    proc = aipc("compile", workdir / "cnn.onnx", "-o", out, "--precision", precision, "--calibration", cap,
                "--json", "--no-progress", *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    ctx = out / "cnn_ctx.onnx"
    assert summary["compile"]["ctx"] == str(ctx) and ctx.exists() and (out / "cnn_ctx_qnn.bin").exists()
    assert summary["compile"]["bin_bytes"] > 0 and (out / "cnn_ctx_compile.json").exists()
    part = summary["compile"]["partition"]
    assert part["counts"]["QNNExecutionProvider"] >= 3
    offloaded = {n["op_type"] for n in part["nodes"] if n["ep"] != "QNNExecutionProvider"}
    assert offloaded <= {"QuantizeLinear", "DequantizeLinear"}  # only the graph-I/O (de)quantization
    (row,) = summary["accuracy"]["outputs"]
    assert summary["accuracy"]["qnn_error"] == "" and summary["accuracy"]["samples"] == 8
    if precision == "fp16":
        assert row["quantization"] is None and row["backend"]["cosine"] > 0.999
        assert summary["dlc"] and all(pathlib.Path(d["path"]).stat().st_size > 0 for d in summary["dlc"])
        prof = summary["profile"]
        assert prof["executions"] >= 1 and {r["op_type"] for r in prof["ops"]} >= {"Conv"}
        assert "not device timings" in prof["note"]
    else:
        assert (out / f"cnn_{precision}_qdq.onnx").exists()
        for leg in ("quantization", "backend", "total"):
            assert row[leg]["cosine"] > 0.99 and row[leg]["snr_db"] > 20, (leg, row)
        assert summary["quantization"]["activation_type"] == ("QUInt16" if precision == "w8a16" else "QUInt8")
    proc = run_python(_LOAD_AND_RUN, str(ctx), str(workdir / "cnn.onnx"), cwd=str(ROOT))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT"):])
    assert result["inputs"] == ["X"] and result["shape"] == [1, 2, 8, 8] and result["cosine"] > 0.99


@pytest.mark.qnn
@skip_without_qnn
def test_compiled_artifact_next_to_model_is_used_by_python_m_aipc(workdir):
    cap = workdir / "cap"
    assert aipc("capture", "-o", cap, workdir / "script.py", workdir / "cnn.onnx", 3, 4).returncode == 0
    proc = aipc("compile", workdir / "cnn.onnx", "-o", workdir, "--precision", "w8a16", "--calibration", cap,
                "--no-check", "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (workdir / "cnn_ctx.onnx").exists()
    run = aipc(workdir / "script.py", workdir / "cnn.onnx", 3, 2)
    assert run.returncode == 0, run.stderr[-3000:]
    cpu = subprocess.run([sys.executable, str(workdir / "script.py"), str(workdir / "cnn.onnx"), "3", "2"],
                         capture_output=True, text=True)
    got, ref = float(run.stdout.split()[1]), float(cpu.stdout.split()[1])
    assert "onnxwrapper" in run.stdout and abs(got - ref) / ref < 0.05
    assert run.stdout.split()[3] == "artifact"  # the session loaded cnn_ctx.onnx instead of compiling
    assert np.isfinite(got)


@pytest.mark.qnn
@skip_without_qnn
def test_compile_for_other_shapes_than_the_calibration(workdir):
    """Calibration captured at 8×8 quantizes a dynamic model compiled for --shape 16×16 (the NPU
    pipeline may feed other shapes than the CPU capture): quantize dynamic, then fix shapes."""
    dyn = workdir / "dyn.onnx"
    dyn.write_bytes(models.smallconv(batch="N", hw=("H", "W")))
    cap = workdir / "cap"
    assert aipc("capture", "-o", cap, workdir / "script.py", dyn, 3, 4).returncode == 0
    out = workdir / "out"
    proc = aipc("compile", dyn, "-o", out, "--precision", "w8a16", "--calibration", cap, "--shape", "X=1,3,16,16",
                "--json", "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert any("differ from the compile shapes" in n for n in summary["notes"])
    (row,) = summary["accuracy"]["outputs"]
    assert summary["accuracy"]["qnn_error"] == "" and row["total"]["cosine"] > 0.99
    ctx = onnx.load(str(out / "dyn_ctx.onnx"), load_external_data=False)
    assert [d.dim_value for d in ctx.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 16, 16]


@pytest.mark.qnn
@skip_without_qnn
def test_compile_applies_patches(tmp_path):
    from tests.patches.test_patches_registry import three_patch_model

    path = tmp_path / "three.onnx"
    onnx.save(three_patch_model(), path)
    proc = aipc("compile", path, "-o", tmp_path / "out", "--json", "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert sorted(p["patch"] for p in summary["patches"]) == ["maxpool3d", "mod"]
    assert summary["compile"]["partition"]["counts"] == {"QNNExecutionProvider": 17}
    assert summary["accuracy"]["outputs"][0]["backend"]["cosine"] > 0.999
    unpatched = aipc("compile", path, "-o", tmp_path / "raw", "--json", "--no-progress", "--no-patch", "--no-check")
    counts = json.loads(unpatched.stdout)["compile"]["partition"]["counts"]
    assert counts.get("CPUExecutionProvider") == 2  # MaxPool3d and Mod stay on the CPU without patches
