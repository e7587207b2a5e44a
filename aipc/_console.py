"""The one console of every ``aipc`` command: encoding-safe streams, text from elsewhere sanitized,
colours only where they belong.

* :func:`prepare` — called by the command line (:mod:`aipc.cli`) before any command runs: stderr
  (aipc's messages) and, unless a user's script owns it (``aipc run script.py``), stdout get the
  encoding-safe error handler of :mod:`aipc._console_encoding`, so a report never dies on a
  redirected Windows console (cp1252, cp932: ``Δ`` → ``d``, ``—`` → ``-``, anything else an escape).
  ``aipc run MODEL.onnx`` is aipc's own report: its stdout is prepared too.
* :func:`clean` — text from elsewhere (model, node and file names, messages) as it may be shown:
  control characters (``ESC``, OSC title sequences, ``\\r``), bidirectional overrides and other
  format characters escaped, long lines cut (:func:`onnxwrapper.diff.console_safe`, imported only
  when the text needs it).
* :func:`use_color` — ANSI colours on a stream only when it is a terminal, the user has not asked
  for none (``NO_COLOR`` set and not empty, https://no-color.org; ``TERM=dumb``) and, on Windows,
  the console processes escape sequences: the legacy console (conhost before Windows 10's VT
  support was switched on) is switched with ``SetConsoleMode(handle, mode |
  ENABLE_VIRTUAL_TERMINAL_PROCESSING)`` — the documented way (Microsoft, "Console Virtual Terminal
  Sequences"); where that fails there are no colours.
"""

from __future__ import annotations

import os
import sys

from aipc._console_encoding import make_output_safe

__all__ = ["ENABLE_VIRTUAL_TERMINAL_PROCESSING", "clean", "prepare", "use_color"]

#: SetConsoleMode flag of an output handle (wincon.h)
ENABLE_VIRTUAL_TERMINAL_PROCESSING = 0x0004
_STD_HANDLES = {1: -11, 2: -12}  # STD_OUTPUT_HANDLE, STD_ERROR_HANDLE (winbase.h)


def prepare(*, stdout: bool = True) -> None:
    """Make stderr — and stdout unless ``stdout=False`` (a user's script owns it) — encoding-safe
    (module docstring). Idempotent."""
    make_output_safe(*((sys.stdout, sys.stderr) if stdout else (sys.stderr,)))


def clean(text: str) -> str:
    """``text`` safe to show on a terminal (module docstring); plain printable ASCII is returned as is."""
    text = str(text)
    if text.isascii() and all(line.isprintable() and len(line) <= 1000 for line in text.split("\n")):
        return text
    from onnxwrapper.diff import console_safe  # the project's one sanitizer; imports onnxruntime

    return console_safe(text)


def _windows_vt(stream) -> bool:
    """Switch the Windows console behind ``stream`` to VT processing; True when it processes escapes."""
    try:
        import ctypes

        handle_id = _STD_HANDLES.get(stream.fileno())
        if handle_id is None:
            return False
        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        handle = kernel32.GetStdHandle(handle_id)
        mode = ctypes.c_uint32(0)
        if not kernel32.GetConsoleMode(handle, ctypes.byref(mode)):
            return False  # not a console (redirected, or a terminal that is not conhost)
        if mode.value & ENABLE_VIRTUAL_TERMINAL_PROCESSING:
            return True
        return bool(kernel32.SetConsoleMode(handle, mode.value | ENABLE_VIRTUAL_TERMINAL_PROCESSING))
    except (AttributeError, OSError, ValueError):
        return False


def use_color(stream=None, environ=None) -> bool:
    """True when ANSI colours may be written to ``stream`` (default ``sys.stdout``; module docstring).

    Args:
        stream: the output stream. environ: the environment (default ``os.environ``).
    """
    stream = sys.stdout if stream is None else stream
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):
        return False
    return _windows_vt(stream) if sys.platform == "win32" else True
