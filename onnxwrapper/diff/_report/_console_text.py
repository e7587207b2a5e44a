"""Text from elsewhere made safe to print on a terminal: control characters escaped, long lines cut.

A script's output, an exception message, a model's node or output names reach the console report
of ``aipc diff`` / ``aipc fix``. Printed raw, ``ESC[8m`` hides everything after it (the verdict
line too), other escape sequences set the terminal's title or move the cursor, a ``\\r`` rewrites
the line, a bidirectional override reorders it, and a 200,000-character line buries the report.
:func:`console_safe` shows each such character as a Python escape (``\\x1b``, ``\\r``,
``\\u202e``) and cuts each line after :data:`MAX_LINE` characters with a count of what was cut.
``\\r\\n`` counts as a line end (Windows), a tab stays a tab.
"""

from __future__ import annotations

import unicodedata

__all__ = ["MAX_LINE", "console_safe"]

#: characters of one line shown before it is cut
MAX_LINE = 1000
_UNSAFE_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def _escaped(ch: str) -> str:
    if ch == "\r":
        return "\\r"
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _safe_char(ch: str) -> str:
    if ch == "\t" or (" " <= ch <= "~"):
        return ch
    return _escaped(ch) if unicodedata.category(ch) in _UNSAFE_CATEGORIES else ch


def console_safe(text: str, max_line: int = MAX_LINE) -> str:
    """``text`` with every control, format or unassigned character escaped and every line longer
    than ``max_line`` characters cut, ending ``… [N more characters]``.

    Args:
        text: any text (a script's output, a message, a name). max_line: characters kept per line.
    Returns:
        Text whose only line breaks are ``\\n`` and that holds no terminal control sequence.
    """
    out = []
    for line in text.replace("\r\n", "\n").split("\n"):
        cut = len(line) - max_line
        if cut > 0:
            line = line[:max_line]
        shown = line if line.isascii() and line.isprintable() else "".join(_safe_char(c) for c in line)
        out.append(shown + (f"… [{cut} more characters]" if cut > 0 else ""))
    return "\n".join(out)
