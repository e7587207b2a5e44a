"""A new user's path, second round: precompiling what the NPU will really see, a quiet default run,
option errors that name the nearest option, one short line per backend, one rule for run folders,
one table of exit statuses, a fast test subset, and one page on precisions."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pathlib
import re
import subprocess
import sys

import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxwrapper
from aipc import cli
from aipc.args import CommandParser as _Parser
from onnxwrapper.diff import read_capture
from tests.conftest import qnn_available
from tests.models import make_model

ROOT = pathlib.Path(__file__).parents[2]
skip_without_qnn = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")

# Two models chained as OCR's detector and recognizer are: the second one's input shape is a count
# the script derives from the first one's output. 2 × 1.0001 and 2 × 1.0002 are above 2.0001 in fp32
# and round to 2.0 in FP16 (spacing 2⁻⁹ near 2): 4 boxes on the CPU, 2 on the NPU.
PIPELINE = """\
import sys
import numpy as np
import onnxruntime as ort
first, second = ort.InferenceSession(sys.argv[1]), ort.InferenceSession(sys.argv[2])
y = first.run(None, {"x": np.array([1.0001, 1.0002, 1.5, 1.6], np.float32)})[0]
boxes = int((y > 2.0001).sum())
w = second.run(None, {"z": np.ones((boxes, 2), np.float32)})[0]
print("boxes", boxes, w.shape)
"""


def _pipeline(directory: pathlib.Path) -> list[str]:
    two = h.make_tensor("two", T.FLOAT, [], [2.0])
    first = h.make_graph([h.make_node("Mul", ["x", "two"], ["y"])], "scale",
                         [h.make_tensor_value_info("x", T.FLOAT, [4])], [h.make_tensor_value_info("y", T.FLOAT, [4])],
                         [two])
    one = h.make_tensor("one", T.FLOAT, [], [1.0])
    second = h.make_graph([h.make_node("Add", ["z", "one"], ["w"])], "boxes",
                          [h.make_tensor_value_info("z", T.FLOAT, ["n", 2])],
                          [h.make_tensor_value_info("w", T.FLOAT, ["n", 2])], [one])
    (directory / "first.onnx").write_bytes(make_model(first))
    (directory / "second.onnx").write_bytes(make_model(second))
    (directory / "pipeline.py").write_text(PIPELINE)
    return ["pipeline.py", "first.onnx", "second.onnx"]


def aipc(*args, cwd, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aipc", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env={**os.environ, **(env or {})})


def _compiles(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "compiling" in line]


# -- 1: precompile what the NPU will really see ----------------------------------------------------------
@pytest.mark.qnn
@skip_without_qnn
def test_capture_on_the_npu_then_precompile_leaves_no_compile_for_the_run(tmp_path):
    script = _pipeline(tmp_path)
    plain = subprocess.run([sys.executable, *script], capture_output=True, text=True, cwd=tmp_path)
    assert plain.stdout.startswith("boxes 4"), plain.stderr  # the CPU finds 4 boxes ...
    captured = aipc("capture", "--backend", "qnn", "--cache-dir", tmp_path / "capture-cache", "-o", "cap", *script,
                    cwd=tmp_path)
    assert captured.returncode == 0, captured.stderr  # main: "unrecognized arguments: --backend"
    assert captured.stdout.startswith("boxes 2")  # ... the NPU's FP16 only 2: the second model's shape follows
    shapes = {c.model.split("-")[0]: c.input_meta[0]["shape"] for c in read_capture(tmp_path / "cap").calls}
    assert list(shapes["second"]) == [2, 2]
    cache = tmp_path / "cache"  # another cache: the precompile, not the capture's run, must provide the shapes
    compiled = aipc("compile", "--from-capture", "cap", "--cache-dir", cache, "--no-progress", cwd=tmp_path)
    assert compiled.returncode == 0 and "2 compiled" in compiled.stdout, compiled.stdout + compiled.stderr
    run = aipc("-v", "--cache-dir", cache, *script, cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.startswith("boxes 2"), run.stderr
    assert _compiles(run.stderr) == [] and "ready (compiled" not in run.stderr, run.stderr
    assert "specialization z=2x2 of 'second.onnx' ready (cache" in run.stderr, run.stderr


# -- 2: every option error suggests the nearest option, with the command's prefix ------------------------
def _subcommand_parser(name: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=f"aipc {name}", allow_abbrev=False)
    importlib.import_module(cli.SUBCOMMANDS[name][0]).add_arguments(parser)
    return parser


@pytest.mark.parametrize("name", [n for n in cli.SUBCOMMANDS if n != "run"])
def test_a_misspelled_option_of_every_subcommand_names_the_nearest(name, capsys):
    parser = _subcommand_parser(name)
    options = sorted(o for o in parser._option_string_actions if o.startswith("--") and o != "--help" and len(o) > 4)
    required = [v for a in parser._actions if a.required and a.option_strings for v in (a.option_strings[0], "x")]
    for option in options[:3]:
        typo = option[:-1]  # "--max-samples" → "--max-sample", "--backends" → "--backend"
        if typo in options:
            continue
        assert cli.main([name, typo, *required, "x"]) == 64
        err = capsys.readouterr().err
        assert err.startswith(f"aipc {name}: error: unrecognized arguments: {typo}"), err
        assert "; did you mean --" in err.splitlines()[0], err


@pytest.mark.parametrize("argv, prefix, nearest", [
    (["diff", "--backend", "qnn", "x.py"], "aipc diff", "--backends"),  # main: "aipc: … unrecognized", no hint
    (["--bakend", "cpu", "x.py"], "aipc", "--backend"),
    (["run", "--precison", "fp16", "x.py"], "aipc", "--precision"),
    (["capture", "--max-sample", "3", "x.py"], "aipc capture", "--max-samples"),
    (["compile", "--from-capture", "d", "--job", "2"], "aipc compile", "--jobs"),
    (["run", "m.onnx", "--input-shape", "x:[1]"], "aipc run", "--input-shapes"),
    (["diff", "--model", "m.onnx", "--backend", "cpu"], "aipc diff", "--backends"),
])
def test_option_errors_name_the_nearest_option(argv, prefix, nearest, capsys):
    assert cli.main(argv) == 64
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(f"{prefix}: error: unrecognized arguments: ") and first.endswith(
        f"did you mean {nearest}?"), first


# -- 3: quiet by default, progress for long compiles, the partition with -v ------------------------------
@pytest.mark.qnn
@skip_without_qnn
def test_a_run_prints_nothing_of_ours_by_default_and_the_partitions_with_v(tmp_path):
    script = _pipeline(tmp_path)
    cache = ["--cache-dir", tmp_path / "cache"]
    loud = aipc("-v", *cache, *script, cwd=tmp_path)  # first: compiles (a long compile would log progress)
    assert "aipc: partition 2: second.onnx [qnn]: QNNExecutionProvider" in loud.stderr, loud.stderr
    assert "simulated on this host" in loud.stderr
    quiet = aipc(*cache, *script, cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stdout.startswith("boxes 2")
    assert quiet.stderr == ""  # main: the simulated-device notice and "not compiled yet" per session
    assert aipc(*cache, *script, cwd=tmp_path, env={"AIPC_VERBOSE": "0"}).stderr == ""


@pytest.fixture
def restored_logger():
    logger = logging.getLogger("onnxwrapper")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.setLevel(level)
    logger.handlers[:] = handlers


@pytest.mark.parametrize("verbose, info_shown", [(0, False), (1, True)])
def test_warnings_such_as_compile_progress_show_at_every_verbosity_info_only_with_v(verbose, info_shown, capsys,
                                                                                    restored_logger):
    from aipc_loader import _verbosity  # here, not at the top: each test fails alone on main

    _verbosity.configure(verbose)
    qnn = logging.getLogger("onnxwrapper.qnn")
    qnn.info("onnxwrapper qnn: specialization x=1x3 of 'm.onnx' ready (cache, 0.04 s)")  # -v only
    qnn.warning("onnxwrapper qnn: still compiling 'm.onnx' [x=1x3] for the QNN HTP: 10 s")  # a long compile
    err = capsys.readouterr().err.splitlines()
    assert "aipc: onnxwrapper qnn: still compiling 'm.onnx' [x=1x3] for the QNN HTP: 10 s" in err, err
    assert any("ready (cache" in line for line in err) is info_shown, err
    _verbosity.configure(verbose, prefix="aipc[7]: ")  # a child process: one handler, its own prefix
    qnn.warning("again")
    assert capsys.readouterr().err == "aipc[7]: again\n"


# -- 4: one short line per backend, details on request ---------------------------------------------------
def test_backends_print_one_short_padded_line_each_and_details_on_request():
    home = os.path.expanduser("~")
    pasted = (f"no API token is configured for client 1.0: Failed to load client configuration file. "
              f"{home}/.client/client.ini not found. Please request access at https://example.com/ …")
    infos = onnxwrapper.get_available_backends()
    infos.append(onnxwrapper.BackendInfo(name="farm", available=False, reason=pasted, install_hint="client configure"))
    lines = str(infos).splitlines()
    assert len(lines) == len(infos) and all(len(line) <= 100 for line in lines), lines
    columns = {re.match(r"\S+\s+(available(?: \(\w+\))?|unavailable)\s+", line).end() for line in lines}
    assert len(columns) == 1, lines  # main: the reason starts right after each status, unpadded
    assert lines[-1] == f"farm   {'unavailable':<21}  no API token is configured for client 1.0"
    assert home not in str(infos) and home not in infos.describe()
    detail = infos[-1].describe()
    assert "~/.client/client.ini not found" in detail and "  fix: client configure" in detail
    assert lines[0].startswith("cpu    available              ONNX Runtime on the host CPU")


# -- 5: one rule for run folders: --dir/-o, else ./aipc-<command>-<date-time>, printed -------------------
def test_every_command_writing_a_run_folder_puts_it_in_the_working_directory_and_prints_it(tmp_path):
    from tests import models

    (tmp_path / "m.onnx").write_bytes(models.mul_1())
    (tmp_path / "s.py").write_text("import sys, numpy as np, onnxruntime as ort\n"
                                   "s = ort.InferenceSession(sys.argv[1])\n"
                                   "print(s.run(None, {'X': np.ones((3, 2), np.float32)})[0].sum())\n")
    commands = {"run": ["run", "m.onnx", "--backend", "cpu", "-q"],
                "diff": ["diff", "--model", "m.onnx", "--backends", "cpu,twin=cpu", "--no-html", "-q"],
                "capture": ["capture", "s.py", "m.onnx"]}
    for command, argv in commands.items():
        before = set(os.listdir(tmp_path))
        proc = aipc(*argv, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        made = [n for n in set(os.listdir(tmp_path)) - before if n.startswith(f"aipc-{command}-")]
        assert len(made) == 1, (command, sorted(set(os.listdir(tmp_path)) - before))  # main: run → a temp dir
        assert f"results in {tmp_path / made[0]}" in proc.stderr, proc.stderr


# -- 6: one table of exit statuses -----------------------------------------------------------------------
def test_one_table_of_exit_statuses_shared_by_the_library_and_documented():
    from aipc import _exit_codes  # here, not at the top: each test fails alone on main
    from onnxwrapper import diff
    from onnxwrapper.repair.fix import FixResult

    codes = [row[0] for row in _exit_codes.TABLE]
    assert len(codes) == len(set(codes))
    assert (diff.EXIT_OK, diff.EXIT_MISMATCH, diff.EXIT_BACKEND_FAILED, diff.EXIT_NOTHING_TO_REPAIR,
            diff.EXIT_USAGE) == (_exit_codes.EXIT_OK, _exit_codes.EXIT_FAILED, _exit_codes.EXIT_RUN_FAILED,
                                 _exit_codes.EXIT_NOTHING_TO_DO, _exit_codes.EXIT_USAGE)
    assert FixResult(directory="d").exit_status == _exit_codes.EXIT_NOTHING_TO_DO  # main: 2, as a failed run
    doc = (ROOT / "docs" / "loader.md").read_text(encoding="utf-8")
    for status, meaning, _ in _exit_codes.TABLE:
        assert re.search(rf"^\| {status} \| {re.escape(meaning)} \|", doc, re.M), (status, meaning)
    assert _exit_codes.table_text() in cli.help_text()


def test_a_mistyped_subcommand_and_a_missing_file_are_both_usage_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.py").write_text("print('ran')\n")
    assert cli.main(["dif", "x.py"]) == 64  # main: 2
    assert cli.main(["diff", "nonexistent.py"]) == 64
    assert cli.main(["inspect", "missing.onnx"]) == 64  # main: 2
    assert cli.main(["compile", "missing.onnx", "-o", "out"]) == 64  # main: 2
    assert cli.main(["compile", "--from-capture", "missing"]) == 64  # main: 2
    assert "ran" not in capsys.readouterr().out
    missing = aipc("--backend", "cpu", "nope.py", cwd=tmp_path)
    assert missing.returncode == 64 and "can't open file" in missing.stderr  # main: 2


# -- 7: the README gives the test command's duration and a fast subset -----------------------------------
def test_readme_gives_the_test_duration_and_a_fast_subset_of_defined_markers():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    tests = text.split("Run the tests:", 1)[1].split("## A short tour", 1)[0]
    assert re.search(r"takes\s+about\s+\d+\s+minutes", tests), tests
    fast = re.search(r'python -m pytest -q -m "([^"]+)"', tests)
    assert fast and re.search(r"under\s+\d\s+minutes", tests), tests
    declared = {m.split(":")[0] for m in re.findall(r'^\s+"(\w+:[^"]*)",?$',
                                                     (ROOT / "pyproject.toml").read_text(), re.M)}
    used = set(re.findall(r"not (\w+)", fast.group(1)))
    assert used and used <= declared, (used, declared)


# -- 8: one page on precisions, linked from the backend's page, the toolkit and the int8 error -----------
def test_one_precision_page_linked_from_the_docs_and_the_errors(capsys):
    page = (ROOT / "docs" / "precision.md").read_text(encoding="utf-8")
    assert page.startswith("# Choosing a precision")
    for word in ("**fp16**", "**fp32**", "**W8A16**", "**W8A8**", '**"int8"**'):
        assert f"| {word}" in page, word
    for doc in ("docs/backends/qnn.md", "docs/toolkit.md", "README.md"):
        assert "precision.md)" in (ROOT / doc).read_text(encoding="utf-8"), doc
    assert cli.main(["compile", "m.onnx", "--precision", "int8"]) == 64
    assert "'Choosing a precision' (docs/precision.md)" in capsys.readouterr().err
    from onnxwrapper.backends.qnn import QnnBackend

    with pytest.raises(onnxwrapper.BackendOptionError, match=r"w8a8.*'Choosing a precision'"):
        QnnBackend({"precision": "int8"})
    with pytest.raises(onnxwrapper.BackendOptionError, match="Did you mean 'fp16'"):
        QnnBackend({"precision": "fp61"})
