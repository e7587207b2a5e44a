"""One console path for every aipc command (issue 34): encoding-safe on redirected Windows
consoles (cp1252, cp932), text from elsewhere sanitized, ``NO_COLOR`` honoured, and VT processing
switched on for the legacy Windows console through ``SetConsoleMode`` (a double of kernel32)."""

from __future__ import annotations

import ctypes
import io
import os
import pathlib
import subprocess
import sys

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from aipc import _console
from tests import models

ROOT = pathlib.Path(__file__).parents[2]
_HOSTILE = "evil\x1b]0;pwned\x07\x1b[8m\u202eman\rX"  # an OSC title, hidden text, a bidi override, a CR


def aipc(*args, cwd, encoding) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING=encoding)
    return subprocess.run([sys.executable, "-m", "aipc", *map(str, args)], capture_output=True, cwd=cwd, env=env,
                          timeout=300)


@pytest.mark.parametrize("encoding", ["cp932", "cp1252"])
def test_a_model_run_and_its_golden_comparison_survive_a_redirected_windows_console(tmp_path, encoding):
    model = tmp_path / "m.onnx"
    model.write_bytes(models.mul_1())
    saved = aipc("run", model, "--backend", "cpu", "--save-outputs", tmp_path / "golden.npz", "--dir", tmp_path / "a",
                 cwd=tmp_path, encoding=encoding)
    assert saved.returncode == 0, saved.stderr.decode(encoding, "replace")[-2000:]
    compared = aipc("run", model, "--backend", "cpu", "--load-outputs", tmp_path / "golden.npz", "--dir",
                    tmp_path / "b", cwd=tmp_path, encoding=encoding)
    out, err = compared.stdout.decode(encoding), compared.stderr.decode(encoding)
    assert compared.returncode == 0 and "Traceback" not in err, err[-2000:]
    assert "verdict: PASS" in out and "max|" in out  # Δ as it is (cp932) or spelled d (cp1252)


def _hostile_model(path: pathlib.Path) -> None:
    g = h.make_graph([h.make_node("Relu", ["x"], [_HOSTILE], name=_HOSTILE)], _HOSTILE,
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info(_HOSTILE, T.FLOAT, [2, 3])])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9), path)


def test_inspect_prints_names_from_the_model_sanitized(tmp_path):
    path = tmp_path / "m.onnx"
    _hostile_model(path)
    proc = subprocess.run([sys.executable, "-m", "aipc", "inspect", path, "--backend", "cpu", "--all-nodes"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "evil" in proc.stdout and "\\x1b" in proc.stdout and "\\u202e" in proc.stdout
    for raw in ("\x1b", "\x07", "\u202e", "\r"):
        assert raw not in proc.stdout and raw not in proc.stderr


def test_messages_on_stderr_are_sanitized(capsys):
    from aipc_loader._report import say

    say(f"results in ./{_HOSTILE}")
    err = capsys.readouterr().err
    assert err.startswith("aipc: results in ./evil") and "\\x1b" in err and "\x1b" not in err and "\r" not in err


class _Tty(io.StringIO):
    def __init__(self, fd: int = 1) -> None:
        super().__init__()
        self.fd = fd

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd


def test_no_color_and_dumb_terminals_get_no_colours(monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    assert _console.use_color(_Tty(), {}) is True
    assert _console.use_color(_Tty(), {"NO_COLOR": "1"}) is False
    assert _console.use_color(_Tty(), {"NO_COLOR": ""}) is True  # no-color.org: set *and* not empty
    assert _console.use_color(_Tty(), {"TERM": "dumb"}) is False
    assert _console.use_color(io.StringIO(), {}) is False  # redirected


class _Kernel32:
    """kernel32's console calls (documented contract): ``GetStdHandle(nStdHandle)``,
    ``GetConsoleMode(handle, LPDWORD)`` (0: not a console), ``SetConsoleMode(handle, mode)`` (0: refused)."""

    def __init__(self, mode: int, console: bool = True, accepts: bool = True) -> None:
        self.mode, self.console, self.accepts, self.set_to = mode, console, accepts, None

    def GetStdHandle(self, which: int) -> int:  # noqa: N802 - the Win32 names
        return 1000 + which

    def GetConsoleMode(self, handle: int, mode) -> int:  # noqa: N802
        mode._obj.value = self.mode
        return 1 if self.console else 0

    def SetConsoleMode(self, handle: int, mode: int) -> int:  # noqa: N802
        self.set_to = mode
        return 1 if self.accepts else 0


@pytest.mark.parametrize("mode, accepts, expected", [(0x3, True, True), (0x3, False, False), (0x7, False, True)])
def test_the_legacy_windows_console_is_switched_to_vt_processing(monkeypatch, mode, accepts, expected):
    kernel32 = _Kernel32(mode, accepts=accepts)
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(ctypes, "windll", type("WinDLL", (), {"kernel32": kernel32})(), raising=False)
    assert _console.use_color(_Tty(), {}) is expected
    if mode & 0x4:
        assert kernel32.set_to is None  # already on: left alone
    else:
        assert kernel32.set_to == mode | _console.ENABLE_VIRTUAL_TERMINAL_PROCESSING


def test_a_redirected_windows_stream_gets_no_colours(monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(ctypes, "windll", type("WinDLL", (), {"kernel32": _Kernel32(0x3, console=False)})(),
                        raising=False)
    assert _console.use_color(_Tty(), {}) is False
