"""The ``aipc`` command: dispatch, options and their environment variables, usage errors (64),
our stderr messages, subcommand modules, the simulated-HTP notice and the OCR example end to end."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import pytest

from aipc import cli
from aipc_loader import _env
from aipc.commands.run import EXIT_UNAVAILABLE, EXIT_USAGE, split_argv
from tests.test_loader_support import REPO, aipc, clean_env, needs_qnn, run, write, write_model

SESSION_SCRIPT = """\
import os, sys, onnxruntime as ort
s = ort.InferenceSession(os.path.join(os.path.dirname(__file__), "m.onnx"), providers=["CPUExecutionProvider"])
print(sys.argv[1:], type(s).__name__, getattr(s, "backend_name", None))
"""


@pytest.fixture
def script(tmp_path):
    write_model(tmp_path / "m.onnx")
    return write(tmp_path / "s.py", SESSION_SCRIPT)


def test_split_argv_leaves_script_arguments_alone():
    inv = split_argv(["-v", "--backend", "cpu", "--target=x", "s.py", "-v", "--backend", "qnn", "-m", "x"])
    assert inv.options == ["-v", "--backend", "cpu", "--target=x"]
    assert (inv.kind, inv.target, inv.args) == ("script", "s.py", ["-v", "--backend", "qnn", "-m", "x"])
    inv = split_argv(["--strict", "-m", "pkg.mod", "--strict"])
    assert (inv.kind, inv.target, inv.args) == ("module", "pkg.mod", ["--strict"])
    assert split_argv(["-mpkg", "a"]).target == "pkg"
    inv = split_argv(["--", "-odd-name.py", "x"])
    assert (inv.kind, inv.target, inv.args) == ("script", "-odd-name.py", ["x"])


def test_run_forms_are_equivalent(script, tmp_path):
    for argv in (["--backend", "cpu", script, "a", "-v"], ["run", "--backend", "cpu", script, "a", "-v"],
                 ["--backend=cpu", "--", script, "a", "-v"]):
        result = aipc(argv, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "['a', '-v'] InferenceSession cpu\n"
        assert result.stderr == ""


def test_module_form(tmp_path):
    write_model(tmp_path / "m.onnx")
    write(tmp_path / "pkg" / "__init__.py", "")
    write(tmp_path / "pkg" / "tool.py", SESSION_SCRIPT.replace("os.path.dirname(__file__)", "os.getcwd()"))
    result = aipc(["--backend", "cpu", "-m", "pkg.tool", "x"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "['x'] InferenceSession cpu\n"


def test_environment_variables_set_the_options(script, tmp_path):
    result = aipc([script], cwd=tmp_path, env=clean_env(AIPC_BACKEND="cpu", AIPC_VERBOSE="1",
                                                         AIPC_TARGET="ignored-on-cpu"))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert all(line.startswith("aipc: ") for line in lines)
    assert any("ignoring target='ignored-on-cpu' from the environment" in line for line in lines)
    assert any(line.startswith("aipc: session 1: m.onnx on backend 'cpu'") for line in lines)
    # the option wins over the variable
    quiet = aipc(["--backend", "cpu", script], cwd=tmp_path, env=clean_env(AIPC_BACKEND="nope"))
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_verbose_and_report_partition(script, tmp_path):
    verbose = aipc(["-v", "--backend", "cpu", script], cwd=tmp_path)
    assert verbose.returncode == 0
    lines = verbose.stderr.splitlines()
    assert lines[0] == "aipc: backend 'cpu' (ONNX Runtime on the host CPU), options {}; running " + str(script)
    assert lines[1].startswith("aipc: session 1: m.onnx on backend 'cpu' (")
    assert lines[-1] == "aipc: partition 1: m.onnx [cpu]: no partition recorded by backend 'cpu'"
    report = aipc(["--report-partition", "--backend", "cpu", script], cwd=tmp_path,
                  env=clean_env(AIPC_VERBOSE="0"))
    assert report.stderr.splitlines() == ["aipc: partition 1: m.onnx [cpu]: no partition recorded by backend 'cpu'"]
    assert report.stdout == verbose.stdout
    off = aipc(["--no-report-partition", "--backend", "cpu", script], cwd=tmp_path,
               env=clean_env(AIPC_REPORT_PARTITION="1"))
    assert off.stderr == ""


@pytest.mark.parametrize("argv, env, message", [
    ([], {}, "no script given"),
    (["--backend", "cpu"], {}, "no script given"),
    (["--bogus", "s.py"], {}, "unrecognized arguments: --bogus"),
    (["--back", "cpu", "s.py"], {}, "unrecognized arguments"),
    (["--backend"], {}, "expected one argument"),
    (["--backend", "nope", "s.py"], {}, "Unknown backend 'nope'"),
    (["--backend", "cpu", "--target", "x", "s.py"], {}, "Unknown option 'target' for backend 'cpu'"),
    (["s.py"], {"AIPC_BACKEND": "cpu", "AIPC_STRICT": "maybe"}, "AIPC_STRICT='maybe' is not a boolean"),
    (["s.py"], {"AIPC_BACKEND": "cpu", "AIPC_VERBOSE": "loud"}, "AIPC_VERBOSE='loud' is not a verbosity"),
    (["-"], {}, "stdin is not supported"),
])
def test_usage_errors_exit_64(tmp_path, argv, env, message):
    write(tmp_path / "s.py", "print('must not run')\n")
    result = aipc(argv, cwd=tmp_path, env=clean_env(**env))
    assert result.returncode == EXIT_USAGE, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.startswith("aipc: error: ") and message in result.stderr


def test_help_lists_subcommands_and_every_environment_variable():
    result = aipc(["--help"])
    assert result.returncode == 0 and result.stderr == ""
    for name in cli.SUBCOMMANDS:
        assert f"\n  {name} " in result.stdout
    for var, option, _ in _env.USER_VARIABLES:
        assert var in result.stdout and option in result.stdout
    assert _env.ACTIVE_VARIABLE in result.stdout
    run_help = aipc(["run", "--help"]).stdout  # defect: it printed the top-level help
    assert run_help.startswith("usage: aipc run ") and "subcommands:" not in run_help
    assert "--backend" in run_help and "aipc run MODEL.onnx" in run_help
    assert aipc(["--version"]).stdout.startswith("aipc (onnxwrapper) ")


def test_subcommand_modules_are_imported_lazily_and_errors_are_contained(monkeypatch, capsys):
    fake = types.ModuleType("aipc_test_fake_cmd")
    fake.__doc__ = "A fake subcommand."
    fake.add_arguments = lambda parser: parser.add_argument("--n", type=int, required=True)
    fake.main = lambda args: args.n
    monkeypatch.setitem(sys.modules, "aipc_test_fake_cmd", fake)
    monkeypatch.setitem(cli.SUBCOMMANDS, "diff", ("aipc_test_fake_cmd", "fake"))
    monkeypatch.setitem(cli.SUBCOMMANDS, "inspect", ("aipc._no_such_module", "missing"))
    assert cli.main(["diff", "--n", "5"]) == 5
    assert cli.main(["diff"]) == EXIT_USAGE
    assert "the following arguments are required: --n" in capsys.readouterr().err
    assert cli.main(["inspect", "x"]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert err.startswith("aipc inspect: error: subcommand 'inspect' is not available in this installation")
    assert cli.main(["diff", "--help"]) == 0
    assert "A fake subcommand." in capsys.readouterr().out
    assert "not available in this installation" in cli.help_text()


def test_cli_main_returns_the_scripts_status_in_process(tmp_path, capsys):
    script = write(tmp_path / "s.py", "import sys; print('hi'); sys.exit(4)\n")
    import aipc_loader

    import os

    from aipc_loader import _patch

    argv, main_module, environ = sys.argv, sys.modules["__main__"], dict(os.environ)
    listeners = list(_patch._state.listeners)
    try:
        assert cli.main(["--backend", "cpu", str(script)]) == 4
        assert os.environ["AIPC_ACTIVE"] and aipc_loader.is_active()   # the CLI does not restore
    finally:
        aipc_loader.uninstall()
        sys.argv = argv
        sys.modules["__main__"] = main_module
        os.environ.clear()
        os.environ.update(environ)
        _patch._state.listeners[:] = listeners
    assert capsys.readouterr().out == "hi\n"


@needs_qnn
@pytest.mark.qnn
def test_simulated_htp_notice_is_part_of_the_verbose_backend_line(tmp_path):
    write(tmp_path / "s.py", "print('no sessions')\n")
    result = aipc(["--backend", "qnn", "s.py"], cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == ""  # quiet by default
    assert result.stdout == "no sessions\n"
    lines = aipc(["-v", "--backend", "qnn", "s.py"], cwd=tmp_path).stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("aipc: backend 'qnn' (simulated on this host: ")
    assert "device numerics, not device speed" in lines[0]


@needs_qnn
@pytest.mark.qnn
@pytest.mark.slow
def test_ocr_example_prints_the_same_lines_on_qnn_as_on_cpu(tmp_path):
    pytest.importorskip("rapidocr")
    example = REPO / "examples" / "ocr" / "ocr.py"
    start = time.perf_counter()
    plain = run([example], cwd=tmp_path, timeout=300)
    cpu_seconds = time.perf_counter() - start
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == Path(example.with_name("expected.txt")).read_text().splitlines()
    start = time.perf_counter()
    ours = aipc(["-v", "--cache-dir", tmp_path / "cache", example], cwd=tmp_path, timeout=600)
    qnn_seconds = time.perf_counter() - start
    assert ours.returncode == 0, ours.stderr[-3000:]
    assert ours.stdout == plain.stdout
    partitions = [line for line in ours.stderr.splitlines() if line.startswith("aipc: partition ")]
    assert len(partitions) == 3 and all("[qnn]: QNNExecutionProvider" in line for line in partitions), partitions
    print(f"OCR wall time: cpu {cpu_seconds:.1f} s, aipc qnn (cold cache) {qnn_seconds:.1f} s")
