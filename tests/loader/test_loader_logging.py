"""aipc's own log lines, whatever the app does with Python's logging: each ``aipc -v`` line once
when the app configures the root logger at import (basic-pitch calls ``logging.basicConfig``), and
aipc's compile progress still shown when the app silences logging (root level, ``logging.disable``,
``dictConfig`` disabling the loggers that exist). The app's own loggers keep what it set. The
library itself installs nothing (``import onnxwrapper``).
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
import textwrap

from aipc_loader._verbosity import LIBRARY_LOGGERS
from tests import models

REPO = pathlib.Path(__file__).resolve().parents[2]


def _aipc(tmp_path, parts: tuple, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "mul_1.onnx").write_bytes(models.mul_1())
    path = tmp_path / "app.py"
    path.write_text("".join(textwrap.dedent(part) for part in parts))
    return subprocess.run([sys.executable, "-m", "aipc", *args, "--backend", "cpu", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


SESSION = """
    import numpy as np
    import onnxruntime as ort

    ort.InferenceSession("mul_1.onnx").run(None, {"X": np.ones((3, 2), np.float32)})
"""


def test_an_app_configuring_the_root_logger_gets_each_aipc_line_once(tmp_path):
    proc = _aipc(tmp_path, ("""
        import logging
        logging.basicConfig(level=logging.DEBUG)   # at import, as basic-pitch does
        logging.getLogger("app").info("the app's own line")
    """, SESSION), "-vv")
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "session on backend 'cpu'" in ln]
    assert len(lines) == 1 and lines[0].startswith("aipc"), proc.stderr  # main: also DEBUG:onnxwrapper:…
    assert proc.stderr.count("INFO:app:the app's own line") == 1  # the app's logging as it set it


def test_an_app_silencing_logging_still_shows_aipcs_compile_progress(tmp_path):
    proc = _aipc(tmp_path, ("""
        import logging, logging.config
        logging.getLogger().setLevel(logging.ERROR)
        logging.config.dictConfig({"version": 1})   # disables every logger that exists (its default)
        logging.disable(logging.CRITICAL)
        logging.getLogger("onnxwrapper").setLevel(logging.CRITICAL)
        logging.getLogger("onnxwrapper").propagate = True
        logging.getLogger("app").error("the app silenced this")
    """, SESSION, """
        from onnxwrapper.backends.qnn.compile._budget import CompileWatch

        watch = CompileWatch(None, "'m.onnx' [x=1x3]", "", None, None)
        watch._next_progress = 0.0   # a compile running long enough: the real progress line
        watch.check()
    """), "-vv")
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.splitlines()
    assert any(ln.startswith("aipc: onnxwrapper qnn: still compiling 'm.onnx' [x=1x3] for the QNN HTP")
               for ln in err), proc.stderr  # main: nothing
    assert sum("session on backend 'cpu'" in ln for ln in err) == 1, proc.stderr  # -vv: aipc's DEBUG line too
    assert "the app silenced this" not in proc.stderr


def test_the_library_installs_no_handler_and_uses_only_the_loggers_aipc_adopts():
    proc = subprocess.run([sys.executable, "-c", "import logging, onnxwrapper; lg = logging.getLogger('onnxwrapper'); "
                           "print(lg.handlers, lg.propagate, lg.level, type(lg).__name__)"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.split() == ["[]", "True", "0", "Logger"], proc.stdout + proc.stderr
    used = set()
    for path in (REPO / "onnxwrapper").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "getLogger" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                used.add(node.args[0].value)
    assert used and used <= set(LIBRARY_LOGGERS), sorted(used - set(LIBRARY_LOGGERS))
