"""``aipc compile --from-capture``: every signature a captured run used, compiled ahead of time.

The QNN tests capture a real script with ``aipc capture``, precompile with two workers, then run
the same script with ``python -m aipc --backend qnn -v``: every specialization must come from the
cache (the log's ``ready (cache``) and none be compiled (no ``compiling`` line). The error tests
run the command in-process (no compile).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
from onnx import TensorProto as T
from onnx import helper as h

from aipc import cli
from tests import models
from tests.conftest import qnn_available

ROOT = pathlib.Path(__file__).parents[2]
skip_without_qnn = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")

SCRIPT = """\
import sys
import numpy as np
import onnxruntime as ort
dynamic = ort.InferenceSession(sys.argv[1])
static = ort.InferenceSession(sys.argv[2])
for batch in sys.argv[3:]:
    dynamic.run(None, {"X": np.ones((int(batch), 3, 8, 8), np.float32)})
static.run(None, {"X": np.ones((1, 3, 8, 8), np.float32)})
print("OK")
"""

RELU_SCRIPT = """\
import sys
import numpy as np
import onnxruntime as ort
session = ort.InferenceSession(sys.argv[1])
for m in sys.argv[2:]:
    session.run(None, {"X": np.ones((1, int(m)), np.float32)})
"""


def aipc(*args, cwd=None) -> subprocess.CompletedProcess:
    """``python -m aipc ARGS`` in a fresh process (the QNN configuration is process-global)."""
    return subprocess.run([sys.executable, "-m", "aipc", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd or ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _relu(dims) -> bytes:
    graph = h.make_graph([h.make_node("Relu", ["X"], ["Y"])], "relu", [h.make_tensor_value_info("X", T.FLOAT, dims)],
                         [h.make_tensor_value_info("Y", T.FLOAT, dims)])
    return models.make_model(graph)


@pytest.fixture
def captured(tmp_path):
    """A real ``aipc capture`` of SCRIPT: dynamic batches 1, 2, 3, 2 (three signatures) + one static model."""
    (tmp_path / "script.py").write_text(SCRIPT)
    (tmp_path / "dyn.onnx").write_bytes(models.smallconv(batch="N", seed=5))
    (tmp_path / "static.onnx").write_bytes(models.smallconv(batch=1, seed=6))
    run = [tmp_path / "script.py", tmp_path / "dyn.onnx", tmp_path / "static.onnx", 1, 2, 3, 2]
    proc = aipc("capture", "-o", tmp_path / "cap", *run)
    assert proc.returncode == 0, proc.stderr
    return tmp_path, run


@pytest.mark.qnn
@skip_without_qnn
def test_precompiled_shapes_are_cache_hits_in_the_next_aipc_run(captured):
    """The proof that the keys match: after the precompile, the app's run compiles nothing."""
    tmp_path, run = captured
    cache = tmp_path / "cache"
    proc = aipc("compile", "--from-capture", tmp_path / "cap", "--jobs", 2, "--cache-dir", cache, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["jobs"] == 2 and summary["counts"] == {"signatures": 4, "compiled": 4, "cached": 0, "failed": 0}
    rows = {m["name"]: m["rows"] for m in summary["models"]}
    assert [r["shapes"] for r in rows["dyn.onnx"]] == [{"X": [b, 3, 8, 8]} for b in (1, 2, 3)]
    assert [r["shapes"] for r in rows["static.onnx"]] == [{}]
    from onnxwrapper.kernel import ArtifactCache

    keys = {r["key"] for m in summary["models"] for r in m["rows"]}
    assert len(keys) == 4 and all(ArtifactCache(str(cache)).lookup(k) is not None for k in keys)

    proc = aipc("--backend", "qnn", "--cache-dir", cache, "-v", *run)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr
    assert proc.stderr.count("ready (cache") == 3 and "compiling" not in proc.stderr, proc.stderr

    again = aipc("compile", "--from-capture", tmp_path / "cap", "--cache-dir", cache, "--no-progress")
    assert again.returncode == 0, again.stderr
    assert "0 compiled, 4 cached already, 0 failed" in again.stdout and "static.onnx  (static)" in again.stdout


@pytest.mark.qnn
@skip_without_qnn
def test_failures_are_rows_with_their_type_and_exit_status_1(tmp_path):
    """A feed beyond the HTP compiler and a model changed since the capture fail alone; the rest compiles."""
    (tmp_path / "relu.py").write_text(RELU_SCRIPT)
    (tmp_path / "relu.onnx").write_bytes(_relu(["N", "M"]))
    (tmp_path / "script.py").write_text(SCRIPT)
    for name, batch in (("dyn.onnx", "N"), ("static.onnx", 1)):
        (tmp_path / name).write_bytes(models.smallconv(batch=batch, seed=7))
    assert aipc("capture", "-o", tmp_path / "cap1", tmp_path / "relu.py", tmp_path / "relu.onnx", 4,
                2 ** 23).returncode == 0
    assert aipc("capture", "-o", tmp_path / "cap2", tmp_path / "script.py", tmp_path / "dyn.onnx",
                tmp_path / "static.onnx", 1).returncode == 0
    (tmp_path / "dyn.onnx").write_bytes(models.smallconv(batch="N", seed=8))  # changed after the capture

    proc = aipc("compile", "--from-capture", tmp_path / "cap1", "-j", 2, "--cache-dir", tmp_path / "c", "--no-progress")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert any("X=1x4" in line and "compiled" in line for line in lines), proc.stdout
    assert any("X=1x8388608" in line and "failed" in line and "BackendCapabilityError" in line for line in lines)
    assert "1 compiled, 0 cached already, 1 failed" in proc.stdout

    proc = aipc("compile", "--from-capture", tmp_path / "cap2", "--cache-dir", tmp_path / "c", "--json")
    assert proc.returncode == 1, proc.stderr
    rows = {m["name"]: m["rows"] for m in json.loads(proc.stdout)["models"]}
    assert rows["dyn.onnx"][0]["origin"] == "failed" and rows["dyn.onnx"][0]["reason"].startswith("ModelChanged:")
    assert [r["origin"] for r in rows["static.onnx"]] == ["compiled"]


# -- usage and capture errors (no compile) ------------------------------------------------------------
def _run(capsys, *args) -> tuple[int, str, str]:
    status = cli.main(["compile", *map(str, args)])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_a_missing_directory_or_a_file_says_what_a_capture_is_and_how_to_make_one(tmp_path, capsys):
    status, _, err = _run(capsys, "--from-capture", tmp_path / "nope")
    assert status == 64 and "no such directory" in err and "aipc capture -o DIR" in err
    (tmp_path / "f.txt").write_text("x")
    status, _, err = _run(capsys, "--from-capture", tmp_path / "f.txt")
    assert status == 64 and "is a file, not a directory" in err


def test_not_a_capture_points_at_the_captures_inside_it(tmp_path, capsys):
    from onnxwrapper.diff import start_capture

    (tmp_path / "empty").mkdir()
    status, _, err = _run(capsys, "--from-capture", tmp_path / "empty")
    assert status == 64 and "not a capture directory (no capture.json)" in err and "Expected: a directory" in err
    with start_capture(tmp_path / "run" / "cpu"):
        pass  # a capture of a script that ran no session
    status, _, err = _run(capsys, "--from-capture", tmp_path / "run")
    assert status == 64 and f"--from-capture {tmp_path / 'run' / 'cpu'}" in err
    status, _, err = _run(capsys, "--from-capture", tmp_path / "run" / "cpu")
    assert status == 64 and "holds no session call" in err


def test_options_of_single_model_compiles_and_bad_values_are_usage_errors(tmp_path, capsys):
    status, _, err = _run(capsys, "--from-capture", tmp_path, "-o", tmp_path / "out")
    assert status == 64 and "-o is an option of `aipc compile MODEL -o OUT`" in err and "--cache-dir" in err
    status, _, err = _run(capsys, "--from-capture", tmp_path, "--calibration", tmp_path)
    assert status == 64 and "QDQ" in err
    assert _run(capsys, "--from-capture", tmp_path, "--jobs", 0)[0] == 64
    status, _, err = _run(capsys, "--from-capture", tmp_path, "--backend", "cpu")
    assert status == 64 and "qnn compile cache" in err
    status, _, err = _run(capsys, "--from-capture", tmp_path, "--precision", "w8a16")
    assert status == 64 and "invalid choice" in err


def test_a_model_filter_that_matches_nothing_lists_the_models(tmp_path, capsys):
    import numpy as np

    import onnxwrapper
    from onnxwrapper.diff import start_capture

    (tmp_path / "relu.onnx").write_bytes(_relu(["N", 4]))
    with start_capture(tmp_path / "cap"):
        onnxwrapper.InferenceSession(str(tmp_path / "relu.onnx"), backend="cpu").run(None, {"X": np.ones((2, 4),
                                                                                                      np.float32)})
    status, _, err = _run(capsys, "other.onnx", "--from-capture", tmp_path / "cap")
    assert status == 64 and "no model of the capture is 'other.onnx'" in err and "relu.onnx" in err


def test_help_fits_100_columns_and_says_how_keys_match(capsys):
    status, out, _ = _run(capsys, "--from-capture", "x", "--help")
    assert status == 0 and not [ln for ln in out.splitlines() if len(ln) > 100]
    assert "AIPC_CACHE_DIR" in out and "SessionOptions" in out and "--jobs" in out


def test_default_jobs_is_bounded_by_cpus_memory_and_the_work(monkeypatch):
    from onnxwrapper.backends.qnn import _precompile, default_jobs

    assert default_jobs(1) == 1 and 1 <= default_jobs() <= _precompile.MAX_DEFAULT_JOBS
    monkeypatch.setattr(_precompile, "available_memory", lambda: 300 * 2 ** 20)  # half holds no second worker
    assert default_jobs(18) == 1
    monkeypatch.setattr(_precompile, "available_memory", lambda: 2 ** 40)
    assert default_jobs(18, model_bytes=23_000_000) == min(len(os.sched_getaffinity(0)), 8)


DECODER_SCRIPT = """\
import sys
import numpy as np
import onnxruntime as ort
session = ort.InferenceSession(sys.argv[1])
enc = np.random.default_rng(7).standard_normal((1, 6, 16)).astype(np.float32)
tokens = [1]
for _ in range(int(sys.argv[2])):
    logits = session.run(None, {"input_ids": np.array([tokens], np.int64), "encoder_hidden_states": enc})[0]
    tokens.append(int(logits[0, -1].argmax()))
artifacts = getattr(getattr(session, "backend_session", None), "artifacts", [])
print("tokens", tokens, "compiled", sum(a.origin == "compiled" for a in artifacts))
"""


@pytest.mark.qnn
@pytest.mark.slow
@skip_without_qnn
def test_a_generative_apps_buckets_are_precompiled_so_its_next_run_compiles_nothing(tmp_path):
    """A CPU capture of a decoder loop (lengths 1..10) precompiles the sizes its shape buckets need
    (1, 2, 4, 8, 16: certified on the CPU with the captured feeds), not one per length; the app's
    NPU run then compiles nothing and gives the CPU's tokens."""
    from tests import decoder_models

    (tmp_path / "app.py").write_text(DECODER_SCRIPT)
    (tmp_path / "decoder.onnx").write_bytes(decoder_models.prefix_decoder().SerializeToString())
    run = [tmp_path / "app.py", tmp_path / "decoder.onnx", 10]
    cpu = aipc("capture", "-o", tmp_path / "cap", *run)
    assert cpu.returncode == 0, cpu.stderr
    cache = tmp_path / "cache"
    proc = aipc("compile", "--from-capture", tmp_path / "cap", "--cache-dir", cache, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    rows = summary["models"][0]["rows"]
    assert summary["counts"]["compiled"] == 5 and len(rows) == 10
    assert [r["bucket"]["input_ids"][1] if r["bucket"] else None for r in rows] == \
        [None, None, 4, None, 8, 8, 8, None, 16, 16]
    npu = aipc("--backend", "qnn", "--cache-dir", cache, *run)
    assert npu.returncode == 0, npu.stderr
    assert "compiled 0" in npu.stdout and npu.stdout.split("compiled")[0] == cpu.stdout.split("compiled")[0]
