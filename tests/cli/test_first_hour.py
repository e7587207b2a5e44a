"""The newcomer mistakes of issue 34, each as a user makes it: one line naming what was typed, the
documented exit status (aipc/_exit_codes.py), never a traceback."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from onnxwrapper.diff import parse_backends
from tests.conftest import qnn_available

ROOT = pathlib.Path(__file__).parents[2]


def aipc(*args, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aipc", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})))


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


def test_backend_npu_suggests_qnn(tmp_path):
    script = tmp_path / "app.py"
    script.write_text("print('hi')\n")
    proc = aipc("--backend", "npu", script)
    assert proc.returncode == 64 and "Did you mean 'qnn'?" in one_line_error(proc)


def test_a_script_given_as_the_backends_value_is_named(tmp_path):
    script = tmp_path / "app.py"
    script.write_text("print('hi')\n")
    proc = aipc("diff", "--backends", script)
    line = one_line_error(proc)
    assert proc.returncode == 64 and "is a script, not a backend" in line and "--backends cpu,qnn" in line


def test_run_labels_differing_only_in_case_are_refused():
    with pytest.raises(ValueError, match="differ only in case"):
        parse_backends("Q=cpu,q=cpu")
    assert parse_backends("q16=cpu,q32=cpu") == {"q16": "cpu", "q32": "cpu"}


@pytest.mark.parametrize("command", [["inspect"], ["compile", "-o", "{tmp}/out_ctx.onnx"], ["run"]])
def test_a_file_that_is_not_onnx_is_one_line_and_exit_64(tmp_path, command):
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is not a model\n")
    args = [c.format(tmp=tmp_path) for c in command]
    proc = aipc(*args[:1], bad, *args[1:], cwd=tmp_path)
    line = one_line_error(proc)
    assert proc.returncode == 64 and f"{bad}: not an ONNX model" in line
    assert not (tmp_path / "out_ctx.onnx").exists()


@pytest.mark.parametrize("command", ["run", "diff", "capture"])
def test_the_default_run_folders_are_git_ignored(command):
    from onnxwrapper.diff import default_directory

    if subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("needs a git checkout of the project (an installed copy has no .gitignore to check)")
    name = os.path.basename(default_directory(command=command))
    assert name.startswith(f"aipc-{command}-")
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", f"{name}/report.json"])
    assert ignored.returncode == 0, f"{name}/ is not covered by .gitignore"


@pytest.mark.parametrize("make, env_var", [("not-private", False), ("a-file", False), ("uncreatable", True)])
def test_an_unusable_cache_folder_stops_before_the_script_starts_naming_the_option(tmp_path, make, env_var):
    script = tmp_path / "app.py"
    script.write_text("print('SCRIPT STARTED')\n")
    cache = tmp_path / "cache"
    if make == "not-private":
        cache.mkdir()
        os.chmod(cache, 0o777)
    elif make == "a-file":
        cache.write_text("x")
    else:
        cache = tmp_path / "a-file" / "cache"
        (tmp_path / "a-file").write_text("x")
    args = ("--backend", "cpu", script) if env_var else ("--backend", "cpu", "--cache-dir", cache, script)
    proc = aipc(*args, cwd=tmp_path, env={"AIPC_CACHE_DIR": str(cache)} if env_var else None)
    line = one_line_error(proc)
    assert proc.returncode == 64 and "SCRIPT STARTED" not in proc.stdout
    assert line.startswith(f"aipc: error: {'$AIPC_CACHE_DIR' if env_var else '--cache-dir'} {cache}:")
    assert "'cache_dir'" not in line


# -- Ctrl-C: one line, exit 130, within 2 s, also with compiles running and queued -------------------------
_TOWER = """\
import sys
import numpy as np, onnx
from onnx import helper as h, TensorProto as T
layers, batch, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
nodes, inits, prev = [], [], "X"
for i in range(layers):
    w = np.random.default_rng(i).standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.1
    inits.append(onnx.numpy_helper.from_array(w, f"w{i}"))
    nodes += [h.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]), h.make_node("Relu", [f"c{i}"], [f"r{i}"])]
    prev = f"r{i}"
dims = [int(batch) if batch.isdigit() else batch, 8, 32, 32]
g = h.make_graph(nodes, "tower", [h.make_tensor_value_info("X", T.FLOAT, dims)],
                 [h.make_tensor_value_info(prev, T.FLOAT, dims)], inits)
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9), path)
"""


def _interrupt(args, tmp_path, after: float) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``aipc ARGS``, press Ctrl-C (SIGINT) ``after`` seconds later; the result and the seconds to exit."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "aipc", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    time.sleep(after)
    start = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, out, err), time.perf_counter() - start


def _tower(tmp_path, layers: int, batch: str) -> pathlib.Path:
    path = tmp_path / f"tower{layers}{batch}.onnx"
    subprocess.run([sys.executable, "-c", _TOWER, str(layers), batch, str(path)], check=True, timeout=120)
    return path


@pytest.mark.qnn
@pytest.mark.slow
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_ctrl_c_during_a_compile_in_aipc_run_is_one_line(tmp_path):
    model = _tower(tmp_path, 800, "1")  # seconds of compile on the simulator
    script = tmp_path / "app.py"
    script.write_text(f"import onnxruntime as ort\nort.InferenceSession({str(model)!r})\nprint('CREATED')\n")
    proc, seconds = _interrupt(["--backend", "qnn", "--cache-dir", tmp_path / "cache", script], tmp_path, 2.5)
    assert proc.returncode == 130 and seconds < 2.0, (seconds, proc.stderr[-2000:])
    assert proc.stderr.strip() == "aipc: interrupted (Ctrl-C) at app.py, line 2" and "CREATED" not in proc.stdout


@pytest.mark.qnn
@pytest.mark.slow
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_ctrl_c_during_compile_from_capture_drops_the_queued_compiles(tmp_path):
    model = _tower(tmp_path, 150, "N")
    script = tmp_path / "app.py"
    script.write_text("import sys, numpy as np, onnxruntime as ort\ns = ort.InferenceSession(sys.argv[1])\n"
                      "for b in range(1, 9):\n    s.run(None, {'X': np.ones((b, 8, 32, 32), np.float32)})\n")
    assert aipc("capture", "-o", tmp_path / "cap", script, model, cwd=tmp_path).returncode == 0
    cache = tmp_path / "cache"
    proc, seconds = _interrupt(["compile", "--from-capture", tmp_path / "cap", "--jobs", "1", "--cache-dir", cache],
                               tmp_path, 4.0)
    assert proc.returncode == 130 and seconds < 2.0, (seconds, proc.stderr[-2000:])
    assert proc.stderr.strip().splitlines()[-1] == "aipc compile: interrupted (Ctrl-C)" and "Traceback" not in proc.stderr
    compiled = [p for p in (cache / "entries").glob("*")] if (cache / "entries").is_dir() else []
    assert len(compiled) < 8  # the queue was dropped, not compiled to the end


def test_ctrl_c_in_any_subcommand_is_one_line(monkeypatch, capsys):
    from aipc import cli
    from aipc.commands import doctor

    def interrupted(_args):
        raise KeyboardInterrupt
    monkeypatch.setattr(doctor, "main", interrupted)
    assert cli.main(["doctor"]) == 130
    assert capsys.readouterr().err == "aipc doctor: interrupted (Ctrl-C)\n"


# -- the aipc fix walkthrough of README's tour, as written -------------------------------------------------
@pytest.mark.qnn
@pytest.mark.slow
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_the_fix_walkthrough_runs_as_written(tmp_path):
    import re

    text = (ROOT / "examples" / "fix" / "README.md").read_text(encoding="utf-8")
    block = re.findall(r"```bash\n(.*?)```", text, re.S)[0]
    commands = [line.split("#")[0].split() for line in block.splitlines() if line.startswith("python -m aipc")]
    assert [c[3] for c in commands[:2]] == ["diff", "fix"] and "--repairs" in commands[2]
    expected = (ROOT / "examples" / "fix" / "expected.txt").read_text(encoding="utf-8")
    assert subprocess.run([sys.executable, "examples/fix/smooth.py"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120).stdout == expected
    statuses, outputs = [], []
    for command in commands:
        args = [a.replace('"$W', str(tmp_path)).replace('"', "") for a in command[3:]]
        proc = aipc(*args, cwd=ROOT)
        statuses.append(proc.returncode)
        outputs.append(proc.stdout)
    assert statuses == [1, 0, 0], outputs
    assert "cause: node — one node breaks: 'fir' (Conv)" in outputs[0] and "fix: REPAIRED" in outputs[1]

    def peaks(text):
        return re.findall(r"peak at sample \d", text)
    assert peaks(outputs[2]) == peaks(expected) and len(peaks(expected)) == 8
