"""The compile budget and the recovery ladder outside ``python -m aipc``: ``aipc diff`` (script and
``--model``), ``aipc compile`` and ``aipc compile --from-capture`` take ``--compile-timeout`` /
``--compile-memory-mb`` (the run options' argument group, their ``AIPC_COMPILE_*`` variables) and
hand them to the QNN compiles; ``aipc compile`` writes what the ladder rescues. The diff tests stand
in for the runs at ``aipc.commands.diff.run`` (no child process); the compile tests run the command
in a fresh process on the HTP simulator."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import onnxwrapper
from aipc import cli
from onnxwrapper.diff import start_capture
from tests import models
from tests import recovery_models as rm
from tests.conftest import qnn_available
from tests.test_loader_support import aipc, clean_env

needs_qnn = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")


class _Result:
    """What ``aipc diff`` needs of a diff result to print and write its reports."""

    mismatch, exit_status, directory = False, 0, None

    def table(self, color: bool = False) -> str:
        return "table"

    def write_json(self, path):
        return path

    def write_html(self, path):
        return path


@pytest.fixture
def diff_runs(monkeypatch, tmp_path):
    """``aipc diff ARGS script.py`` in-process, its runs replaced: returns the backend options they got."""
    from aipc.commands import diff

    seen = {}

    def run(*args, **kwargs):
        seen.update(kwargs["backend_options"] or {})
        return _Result()

    monkeypatch.setattr(diff, "run", run)
    script = tmp_path / "app.py"
    script.write_text("print('hi')\n")

    def diff_with(*args):
        seen.clear()
        assert cli.main(["diff", "--dir", str(tmp_path / "d"), "--no-html", "-q", *args, str(script)]) == 0
        return dict(seen)
    return diff_with


def test_aipc_diff_passes_the_compile_budget_to_the_runs_that_compile(diff_runs, monkeypatch):
    monkeypatch.delenv("AIPC_COMPILE_TIMEOUT", raising=False)
    monkeypatch.delenv("AIPC_COMPILE_MEMORY_MB", raising=False)
    assert diff_runs("--backends", "cpu,qnn,q2=qnn", "--compile-timeout", "7", "--compile-memory-mb", "512",
                     "--backend-option", "q2:compile_timeout=9") == {
        "qnn": {"compile_timeout": 7.0, "compile_memory_mb": 512},
        "q2": {"compile_timeout": 9, "compile_memory_mb": 512}}  # a run's own option wins; cpu compiles nothing
    monkeypatch.setenv("AIPC_COMPILE_TIMEOUT", "30")  # as for python -m aipc: the variable when no option
    assert diff_runs("--backends", "cpu,qnn") == {"qnn": {"compile_timeout": 30.0}}
    assert diff_runs("--backends", "cpu,qnn", "--compile-timeout", "5") == {"qnn": {"compile_timeout": 5.0}}


def test_aipc_diff_model_writes_the_budget_into_its_qnn_run(tmp_path, capsys):
    (tmp_path / "m.onnx").write_bytes(models.mul_1())
    status = cli.main(["diff", "--model", str(tmp_path / "m.onnx"), "--backends", "cpu,qnn", "--compile-memory-mb",
                       "512", "--gen-script", "-"])
    script = capsys.readouterr().out
    assert status == 0 and "backend_options={'qnn': {'compile_memory_mb': 512}}" in script


@pytest.mark.qnn
@needs_qnn
def test_aipc_compile_writes_the_rescued_artifact_and_its_budget_reaches_the_compile(tmp_path):
    (tmp_path / "g.onnx").write_bytes(rm.gelu_net(batch=1, length=32))
    env = clean_env(ONNXWRAPPER_CACHE_DIR=str(tmp_path / "cache"))
    args = ["compile", "g.onnx", "--precision", "fp32", "--no-check", "--no-progress"]
    done = aipc([*args, "-o", "out", "--json", "--compile-timeout", "120"], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)["compile"]
    assert summary["partition"]["recovery"][-1]["rung"] == "graph split"
    assert sorted(os.listdir(tmp_path / "out")) == ["g_ctx.onnx", "g_ctx_compile.json", "g_ctx_part1_qnn.bin",
                                                    "g_ctx_qnn.bin"]
    assert [os.path.basename(p) for p in summary["bins"]] == ["g_ctx_qnn.bin", "g_ctx_part1_qnn.bin"]
    text = aipc([*args, "-o", "again", "--compile-timeout", "120"], cwd=tmp_path, env=env)
    assert "recovery: as given failed [QNN_COMMON_ERROR_MEM_ALLOC 1002] → batch split" in text.stdout
    fresh = clean_env(ONNXWRAPPER_CACHE_DIR=str(tmp_path / "fresh"))  # else the recorded recovery compiles nothing
    tight = aipc([*args, "-o", "tight", "--compile-memory-mb", "1"], cwd=tmp_path, env=fresh)
    assert tight.returncode == 1 and "budget:memory" in tight.stderr and "Traceback" not in tight.stderr


@pytest.mark.qnn
@needs_qnn
def test_aipc_compile_from_capture_takes_the_budget(tmp_path):
    from onnx import TensorProto as T
    from onnx import helper as h

    io = [h.make_tensor_value_info(name, T.FLOAT, ["N", 4]) for name in ("X", "Y")]
    graph = h.make_graph([h.make_node("Relu", ["X"], ["Y"])], "relu", io[:1], io[1:])
    (tmp_path / "relu.onnx").write_bytes(models.make_model(graph))
    with start_capture(tmp_path / "cap"):
        onnxwrapper.InferenceSession(str(tmp_path / "relu.onnx"), backend="cpu").run(None, {"X": np.ones((2, 4),
                                                                                                      np.float32)})
    proc = aipc(["compile", "--from-capture", tmp_path / "cap", "--cache-dir", tmp_path / "c", "--json",
                 "--no-progress", "--compile-memory-mb", "1"], env=clean_env())
    assert proc.returncode == 1, proc.stderr[-2000:]
    [row] = json.loads(proc.stdout)["models"][0]["rows"]
    assert row["origin"] == "failed" and "budget:memory" in row["reason"]
