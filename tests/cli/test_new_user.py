"""The defects a new user hit on a fresh clone, each as the user hit it: real ``aipc`` commands,
chained where the defect came from chaining (``aipc compile`` → ``aipc inspect`` on its output, from
another working directory), and the README's short tour run exactly as written."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxwrapper
from tests import models
from tests.conftest import qnn_available

ROOT = pathlib.Path(__file__).parents[2]
skip_without_qnn = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")

SCRIPT = """\
import sys
import numpy as np
import onnxruntime as ort
sess = ort.InferenceSession(sys.argv[1])
rng = np.random.default_rng(0)
for _ in range(int(sys.argv[2])):
    y = sess.run(None, {"X": rng.random((1, 3, 8, 8), dtype=np.float32)})[0]
print("OUT", float(np.abs(y).sum()))
"""


def aipc(*args, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aipc", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))


# -- defect 1: the README's short tour, as written, on a dynamic-shape model -------------------------------
def _tour() -> tuple[str, list[tuple[str, str]]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## A short tour", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    printed = [(m.group(1), m.group(2).strip()) for m in re.finditer(r"^(print\(.*?\))\s+# (.*)$", code, re.M)]
    return code, printed


@pytest.mark.qnn
@skip_without_qnn
def test_readme_short_tour_runs_as_written_and_prints_what_its_comments_say(tmp_path):
    code, printed = _tour()
    assert "get_partition().summary()" in code and len(printed) >= 4
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]  # on main: AttributeError ('NoneType' … 'summary')
    out = proc.stdout.splitlines()
    cursor = 0
    for _, comment in printed:  # each commented print: its output starts with the comment's text
        expected = re.split(r" \[|…| \(", comment, maxsplit=1)[0].rstrip()
        while cursor < len(out) and not out[cursor].startswith(expected):
            cursor += 1
        assert cursor < len(out), f"no printed line starts with {expected!r}:\n{proc.stdout}"
        cursor += 1


def test_pending_partition_of_a_dynamic_model_before_its_first_run():
    report = onnxwrapper.PartitionReport.pending("QNNExecutionProvider", "m.onnx: dynamic inputs x")
    assert report.source == "pending" and not report.nodes and not report.fully_offloaded
    assert report.summary().startswith("QNNExecutionProvider: not compiled yet") and "m.onnx" in report.summary()
    assert report.providers == [] and report.to_dict()["source"] == "pending"


# -- defect 2: aipc compile → aipc inspect on its output, from another working directory -------------------
@pytest.mark.qnn
@skip_without_qnn
def test_inspect_of_a_compiled_model_from_another_directory(tmp_path):
    (tmp_path / "m.onnx").write_bytes(models.smallconv(batch=1))
    compiled = aipc("compile", "m.onnx", "-o", "out", "--no-check", "--no-progress", cwd=tmp_path)
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probed = aipc("inspect", "../out/m_ctx.onnx", cwd=elsewhere)
    assert probed.returncode == 0 and "Traceback" not in probed.stderr, probed.stderr[-2000:]
    assert "measured: a QNN session" in probed.stdout and "QNNExecutionProvider 1/1 nodes" in probed.stdout
    ruled = aipc("inspect", "../out/m_ctx.onnx", "--no-probe", cwd=elsewhere)
    assert ruled.returncode == 0 and "QNN 1 of 1 model nodes" in ruled.stdout, ruled.stdout
    assert "CPU" not in ruled.stdout.split("partition", 1)[1]  # main: the EPContext node "runs on CPU"


def test_a_failed_probe_is_one_line_not_a_traceback():
    from onnxwrapper.toolkit._inspect_partition import _last_error

    stderr = ("2026 [E:onnxruntime:, x.cc:1 F] boom\nTraceback (most recent call last):\n  File \"x\", line 1\n"
              "onnxruntime.capi.onnxruntime_pybind11_state.InvalidGraph: [ONNXRuntimeError] : 10 : INVALID_GRAPH : "
              "Failed to load from EpContext model.\n")
    assert _last_error(stderr, 1) == ("InvalidGraph: [ONNXRuntimeError] : 10 : INVALID_GRAPH : Failed to load "
                                      "from EpContext model.")


# -- defects 3 and 4: inspect and a session agree; what was measured is said -------------------------------
@pytest.mark.qnn
@skip_without_qnn
def test_inspect_headline_equals_the_session_partition_at_the_same_shapes(tmp_path):
    path = tmp_path / "dyn.onnx"
    path.write_bytes(models.smallconv(batch="N", hw=("H", "W")))
    proc = aipc("inspect", path, "--shape", "X=1,3,8,8", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    inspected = json.loads(proc.stdout)["partition"]
    session = onnxwrapper.InferenceSession(str(path), backend="qnn")
    session.run(None, {"X": np.zeros((1, 3, 8, 8), np.float32)})
    report = session.get_partition()
    # ORT's layout transformation adds Transposes: the session counts 5 nodes, the model has 3
    assert inspected["session"]["counts"] == report.counts and inspected["measured"]
    assert inspected["headline"] == report.with_source("compile", note="").summary()
    text = aipc("inspect", path, "--shape", "X=1,3,8,8").stdout
    assert f"as get_partition() reports it): {inspected['headline']}" in text  # main: "QNN 3"


def test_inspect_without_shape_says_nothing_was_measured(tmp_path):
    path = tmp_path / "dyn.onnx"
    path.write_bytes(models.smallconv(batch="N", hw=("H", "W")))
    proc = aipc("inspect", path)
    assert proc.returncode == 0, proc.stderr
    head = next(ln for ln in proc.stdout.splitlines() if ln.startswith("partition"))
    assert "not measured" in head and "X [?, 3, ?, ?]" in head and "--shape" in head  # main: "CPU 3"
    assert "QNN 3 of 3 model nodes (predicted" in proc.stdout


def test_inspect_counts_weights_held_in_constant_nodes(tmp_path):
    w = np.arange(4096, dtype=np.float32).reshape(64, 64)
    g = h.make_graph([h.make_node("Constant", [], ["w"], value=onnx.numpy_helper.from_array(w)),
                      h.make_node("MatMul", ["x", "w"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 64])], [h.make_tensor_value_info("y", T.FLOAT, [1, 64])])
    path = tmp_path / "const.onnx"
    path.write_bytes(models.make_model(g))
    out = aipc("inspect", path, "--no-probe").stdout
    assert "weights 0.02 MB (0.02 MB in Constant nodes)" in out  # main: "initializers 0.00 MB"


# -- defect 5: unknown names get a suggestion; run --help is run's --------------------------------------
def test_misspelled_backend_and_subcommand_get_a_suggestion(tmp_path):
    (tmp_path / "s.py").write_text("print('ran')\n")
    backend = aipc("--backend", "qnnn", "s.py", cwd=tmp_path)
    assert backend.returncode == 64 and "Did you mean 'qnn'?" in backend.stderr, backend.stderr
    sub = aipc("dif", "s.py", cwd=tmp_path)
    assert sub.returncode == 64 and "did you mean 'aipc diff'?" in sub.stderr and "ran" not in sub.stdout
    assert "simulated" not in sub.stderr  # the error comes first, alone
    assert aipc("run", "--help").stdout.startswith("usage: aipc run ")


# -- defect 6: the backends print readably ---------------------------------------------------------------
def test_available_backends_print_one_line_each():
    infos = onnxwrapper.get_available_backends()
    assert isinstance(infos, list) and all(isinstance(i, onnxwrapper.BackendInfo) for i in infos)
    lines = str(infos).splitlines()
    assert len(lines) == len(infos) and lines[0].startswith("cpu    available")
    assert "BackendInfo(name=" not in repr(infos) and "details=" not in repr(infos)  # main: raw dataclass repr
    assert repr(infos).count("\n") == len(infos) + 1


# -- defect 7 and 8: a W8A16 model under aipc -v; the simulated notice once; compile --help --------------
@pytest.mark.qnn
@skip_without_qnn
def test_w8a16_model_under_aipc_v_has_no_partial_offload_warning(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    (tmp_path / "cnn.onnx").write_bytes(models.smallconv(batch=1))
    assert aipc("capture", "-o", "cap", "script.py", "cnn.onnx", 3, cwd=tmp_path).returncode == 0
    compiled = aipc("compile", "cnn.onnx", "-o", ".", "--precision", "w8a16", "--calibration", "cap", "--no-check",
                    "--no-progress", cwd=tmp_path)
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    run = aipc("-v", "script.py", "cnn.onnx", 1, cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.startswith("OUT"), run.stderr[-2000:]
    assert "Only part of" not in run.stderr, run.stderr  # main: warned for the expected graph-I/O Q/DQ
    assert "offload_graph_io_quantization=1 (expected for QDQ models)" in run.stderr
    assert run.stderr.count("simulated on this host") == 1  # main: the notice, then again in the -v line


@pytest.mark.slow  # eight `aipc … --help` processes
def test_help_texts_fit_100_columns_and_compile_lists_its_files():
    for args in (["--help"], ["run", "--help"], ["compile", "--help"], ["inspect", "--help"], ["diff", "--help"],
                 ["capture", "--help"], ["run", "m.onnx", "--help"], ["diff", "--model", "m.onnx", "--help"]):
        proc = aipc(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        too_long = [ln for ln in proc.stdout.splitlines() if len(ln) > 100]
        assert not too_long, (args, too_long)
    assert "_ctx_compile.json" in aipc("compile", "--help").stdout


def test_examples_write_nothing_into_the_repository():
    text = (ROOT / "examples" / "ocr" / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:  # every folder an example creates lives in a temporary directory
        for made in re.findall(r"(?:mkdir -p|-o|--models)\s+(\S+)", block):
            assert made.startswith(('"$W', "$W")), (made, block)


# -- defect 9: docs and docstrings stand on their own ----------------------------------------------------
_FOREIGN = re.compile(r"peers\.md|AIPC report|report §|\.\./shared|DESIGN\.md|STYLE\.md|issue \d+|anchor_\w+\.md|"
                      r"research notes|shared research|ort_api\.md|outside the repo\b|closing note", re.I)


def test_docs_and_docstrings_cite_nothing_a_user_does_not_have():
    files = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("examples/**/*.md")]
    files += [p for d in ("onnxwrapper", "aipc", "aipc_loader", "examples", "benchmarks")
              for p in (ROOT / d).rglob("*.py")]
    bad = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in files
           for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if _FOREIGN.search(line)]
    assert not bad, "\n".join(bad)
