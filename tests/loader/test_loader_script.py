"""Python's script semantics: what ``python script.py`` / ``python -m mod`` show the code, exit
statuses and tracebacks — compared byte for byte with plain Python in subprocesses, and checked
in-process for :func:`aipc_loader.run_script` / :func:`~aipc_loader.run_module`."""

from __future__ import annotations

import os
import sys

import pytest

import aipc_loader
from tests.test_loader_support import aipc, run, write, write_model

PROBE = """\
import sys, os
import sibling
print("argv", sys.argv)
print("path0", sys.path[0])
print("file", __file__, "name", __name__, "doc", __doc__)
print("globals", sorted(k for k in globals() if k.startswith("__")))
print("spec", getattr(__spec__, "name", None), "package", __package__, "cached", __cached__)
print("loader", type(__loader__).__name__, getattr(__loader__, "name", None))
print("main is me", sys.modules["__main__"].__dict__ is globals())
print("code", sys._getframe().f_code.co_filename)
print("sibling", sibling.VALUE)
print("unicode ✓ ünï", end="")
sys.stdout.buffer.write(b"\\n\\x00\\xff raw bytes\\n")
sys.stdout.flush()
print("stdin", sys.stdin.read().strip(), "tty", sys.stdout.isatty())
"""


@pytest.fixture
def project(tmp_path):
    """``proj/app/probe.py`` + its sibling module, a package ``proj/pkg`` and a working dir."""
    write(tmp_path / "proj" / "app" / "probe.py", PROBE)
    write(tmp_path / "proj" / "app" / "textprobe.py", PROBE.replace('sys.stdout.buffer.write(b"\\n\\x00\\xff raw bytes\\n")', 'print()'))
    write(tmp_path / "proj" / "app" / "sibling.py", "VALUE = 'next to the script'\n")
    write(tmp_path / "proj" / "pkg" / "__init__.py", "")
    write(tmp_path / "proj" / "pkg" / "mod.py", PROBE.replace("import sibling", "from pkg import sibling"))
    write(tmp_path / "proj" / "pkg" / "sibling.py", "VALUE = 'in the package'\n")
    write(tmp_path / "proj" / "pkg" / "__main__.py", "import sys; print('pkg main', sys.argv, __spec__.name)\n")
    (tmp_path / "elsewhere").mkdir()
    return tmp_path


def both(argv, cwd, stdin=None):
    """(plain python, aipc --backend cpu) results for the same argv (bytes output)."""
    import subprocess

    from tests.test_loader_support import clean_env

    plain = subprocess.run([sys.executable, *argv], cwd=cwd, env=clean_env(), input=stdin,
                           capture_output=True, timeout=120)
    ours = subprocess.run([sys.executable, "-m", "aipc", "--backend", "cpu", *argv], cwd=cwd, env=clean_env(),
                          input=stdin, capture_output=True, timeout=120)
    return plain, ours


@pytest.mark.parametrize("form", ["relative", "dotted", "absolute", "symlink"])
def test_script_sees_what_python_shows_it(project, form):
    script = project / "proj" / "app" / "probe.py"
    if form == "symlink":
        link = project / "elsewhere" / "link.py"
        link.symlink_to(script)
        target = "link.py"
        cwd = project / "elsewhere"
    else:
        target = {"relative": "../proj/app/probe.py", "dotted": "../proj/./app/probe.py",
                  "absolute": str(script)}[form]
        cwd = project / "elsewhere"
    plain, ours = both([target, "a", "-v", "--backend", "x"], cwd, stdin=b"from stdin\n")
    assert plain.returncode == 0, plain.stderr
    assert ours.stdout == plain.stdout
    assert ours.stderr == plain.stderr == b""
    assert ours.returncode == 0
    assert b"sibling next to the script" in ours.stdout
    assert b"argv ['" + target.encode() + b"', 'a', '-v', '--backend', 'x']" in ours.stdout


def test_module_form_sees_what_python_shows_it(project):
    cwd = project / "proj"
    plain, ours = both(["-m", "pkg.mod", "x", "-m", "y"], cwd, stdin=b"")
    assert plain.returncode == 0, plain.stderr
    assert ours.stdout == plain.stdout and ours.returncode == 0
    plain, ours = both(["-m", "pkg", "z"], cwd)
    assert ours.stdout == plain.stdout and b"pkg main" in ours.stdout


def test_directory_and_zip_forms(project):
    import zipfile

    app = project / "proj" / "dirapp"
    write(app / "__main__.py", "import sys; print(sys.argv, sys.path[0], __file__, __spec__.name)\n")
    with zipfile.ZipFile(project / "proj" / "zipapp.pyz", "w") as archive:
        archive.writestr("__main__.py", "import sys; print(sys.argv, sys.path[0], __file__)\n")
    for target in ("dirapp", "./dirapp/", "zipapp.pyz"):
        plain, ours = both([target, "arg"], project / "proj")
        assert plain.returncode == 0, plain.stderr
        assert ours.stdout == plain.stdout


@pytest.mark.parametrize("body, status", [
    ("pass", 0),
    ("raise SystemExit", 0),
    ("raise SystemExit(3)", 3),
    ("import sys; sys.exit(0)", 0),
    ("raise SystemExit('bye bye')", 1),
    ("raise SystemExit(True)", 1),
    ("import os; os._exit(7)", 7),
    ("def f():\n    raise ValueError('boom')\nf()", 1),
    ("try:\n    1/0\nexcept ZeroDivisionError as e:\n    raise KeyError('k') from e", 1),
    ("def (", 1),
])
def test_exit_status_and_stderr_match_python(tmp_path, body, status):
    write(tmp_path / "s.py", "print('out')\n" + body + "\n")
    plain, ours = both(["s.py"], tmp_path)
    assert plain.returncode == status
    assert ours.returncode == status
    assert ours.stdout == plain.stdout
    assert ours.stderr == plain.stderr


def test_keyboard_interrupt_exits_130_with_one_line_where_the_script_was(tmp_path):
    write(tmp_path / "k.py", "print('before')\nraise KeyboardInterrupt\n")
    plain, ours = both(["k.py"], tmp_path)
    assert ours.returncode == 130           # plain Python kills itself with SIGINT: -2 here, 130 in a shell
    assert plain.returncode in (-2, 130)
    assert ours.stdout == plain.stdout and plain.stderr.endswith(b"KeyboardInterrupt\n")
    assert ours.stderr == b"aipc: interrupted (Ctrl-C) at k.py, line 2\n"  # issue 34: not a traceback


def test_cannot_open_and_no_module_are_usage_errors_with_pythons_messages(tmp_path):
    missing = aipc(["--backend", "cpu", "nope.py"], cwd=tmp_path)
    assert missing.returncode == 64  # the table of every command; Python would exit 2
    assert missing.stderr.startswith("aipc: error: can't open file ")
    assert "[Errno 2] No such file or directory" in missing.stderr
    nomod = aipc(["--backend", "cpu", "-m", "no_such_module_x"], cwd=tmp_path)
    assert nomod.returncode == 64 and "No module named no_such_module_x" in nomod.stderr


# -- in-process API -------------------------------------------------------------------------------
def test_run_script_in_process_restores_interpreter_state(project, capsys):
    argv, path, main = sys.argv, list(sys.path), sys.modules["__main__"]
    script = project / "proj" / "app" / "textprobe.py"
    sys.stdin, saved_stdin = open(os.devnull), sys.stdin
    try:
        status = aipc_loader.run_script(script, ["x"], backend=None)
    finally:
        sys.stdin.close()
        sys.stdin = saved_stdin
    out = capsys.readouterr().out
    assert status == 0
    assert f"path0 {script.parent}" in out and "sibling next to the script" in out
    assert "name __main__" in out and "main is me True" in out
    assert sys.argv is argv and sys.path == path and sys.modules["__main__"] is main
    sys.modules.pop("sibling", None)


@pytest.mark.parametrize("body, status, err", [
    ("raise SystemExit(3)", 3, ""),
    ("raise SystemExit('msg')", 1, "msg\n"),
    ("raise RuntimeError('bad')", 1, "RuntimeError: bad"),
    ("raise KeyboardInterrupt", 130, "aipc: interrupted (Ctrl-C) at s.py, line 1"),
])
def test_run_script_returns_statuses(tmp_path, capsys, body, status, err):
    script = write(tmp_path / "s.py", body + "\n")
    assert aipc_loader.run_script(script, [], backend=None) == status
    captured = capsys.readouterr().err
    assert err in captured
    if status == 1 and "Error" in err:
        assert captured.startswith("Traceback (most recent call last):\n  File \"" + str(script))
        assert "_script.py" not in captured


def test_run_script_activates_cpu_backend_and_restores(tmp_path, capsys):
    write_model(tmp_path / "m.onnx")
    script = write(tmp_path / "s.py", """\
        import os, onnxruntime as ort, onnxwrapper
        s = ort.InferenceSession(os.path.join(os.path.dirname(__file__), "m.onnx"), providers=["CPUExecutionProvider"])
        print(type(s) is onnxwrapper.InferenceSession, s.backend_name, "AIPC_ACTIVE" in os.environ)
    """)
    before = dict(os.environ)
    assert aipc_loader.run_script(script, [], backend="cpu") == 0
    assert capsys.readouterr().out == "True cpu True\n"
    assert not aipc_loader.is_active() and dict(os.environ) == before


def test_run_module_and_launch_errors(project, capsys, monkeypatch):
    monkeypatch.chdir(project / "proj")
    assert aipc_loader.run_module("pkg", ["q"], backend=None) == 0
    assert "pkg main" in capsys.readouterr().out
    with pytest.raises(aipc_loader.LaunchError, match="No module named no_such_mod") as info:
        aipc_loader.run_module("no_such_mod", [], backend=None)
    assert info.value.exit_status == 1
    with pytest.raises(aipc_loader.LaunchError, match="can't open file") as info:
        aipc_loader.run_script(project / "missing.py", [], backend=None)
    assert info.value.exit_status == 2
    for name in ("pkg", "pkg.__main__"):
        sys.modules.pop(name, None)


def test_script_without_onnxruntime_and_output_without_newline(tmp_path):
    write(tmp_path / "p.py", "import sys\nsys.stdout.write('no newline')\nsys.stderr.write('err')\n")
    plain, ours = both(["p.py"], tmp_path)
    assert ours.stdout == plain.stdout == b"no newline" and ours.stderr == plain.stderr == b"err"


def test_safe_path_flag_is_respected(tmp_path):
    write(tmp_path / "p.py", "import sys; print(sys.path[0] == __import__('os').path.dirname(__file__))\n")
    plain = run(["-P", "p.py"], cwd=tmp_path)
    ours = run(["-P", "-m", "aipc", "--backend", "cpu", "p.py"], cwd=tmp_path)
    assert plain.stdout == ours.stdout == "False\n"  # -P: Python 3.11+, the minimum
