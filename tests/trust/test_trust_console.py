"""Trust boundary, the console (docs/security.md): what a script prints, raises or names reaches the
terminal with its control characters escaped and long lines cut, so the verdict stays visible."""

from __future__ import annotations

import pytest

from onnxwrapper.diff import console_safe
from tests.test_diff_support import aipc_diff, child_env, write_script  # noqa: F401 (fixture)

HOSTILE_SCRIPT = """
import sys
import numpy as np
import onnxruntime as ort
s = ort.InferenceSession("conv.onnx")
print(s.run(None, {"X": np.ones((1, 3, 8, 8), np.float32)})[0].sum())
print("\\x1b[8mhidden\\x1b]0;title\\x07 one\\rtwo " + "x" * 200000)
sys.stdout.flush()
raise RuntimeError("\\x1b[8mboom\\u202e")
"""


@pytest.mark.parametrize("text, shown", [
    ("\x1b[8mhidden", "\\x1b[8mhidden"),
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
    ("one\rtwo", "one\\rtwo"),
    ("a\r\nb", "a\nb"),
    ("tab\tstays", "tab\tstays"),
    ("bidi\u202eevil", "bidi\\u202eevil"),
    ("sep\u2028x", "sep\\u2028x"),
    ("c1\x9bx", "c1\\x9bx"),
    ("naïve café — ✓", "naïve café — ✓"),
])
def test_control_characters_are_shown_escaped(text, shown):
    assert console_safe(text) == shown


def test_long_lines_are_cut_with_a_count():
    assert console_safe("x" * 12 + "\nshort", max_line=5) == "xxxxx… [7 more characters]\nshort"


def test_a_script_cannot_hide_the_verdict(tmp_path, child_env):
    from tests import models

    (tmp_path / "conv.onnx").write_bytes(models.smallconv(batch=1))
    script = write_script(tmp_path, HOSTILE_SCRIPT)
    proc = aipc_diff(["--backends", "cpu,twin=cpu", "--no-html", "--show-output", "--dir", tmp_path / "d", script],
                     tmp_path, child_env)
    out = proc.stdout
    assert proc.returncode == 2, out + proc.stderr
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    assert "\\x1b[8mhidden\\x1b]0;title\\x07 one" in out and "more characters]" in out
    assert max(len(line) for line in out.splitlines()) < 1100
    assert "cause: RuntimeError: \\x1b[8mboom\\u202e" in out
    assert out.rstrip().splitlines()[-1].startswith("verdict: INCOMPLETE")
