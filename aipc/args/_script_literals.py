"""Text from elsewhere written into a generated Python script (``--gen-script``), as inert literals.

A model's file name, a label or an argument is data: it may hold ``\"\"\"``, a backslash, a newline
or a control character, and pasted as is into a docstring or a comment it becomes code (a model
named ``x\"\"\"+__import__("os").system("…")+\"\"\"y.onnx`` ran that command when the script ran).
Every piece of such text goes through one of these functions: :func:`docstring` escapes it into a
triple-quoted literal whose value is exactly the text, :func:`comment_line` into one comment line
that cannot end early. Values of the plan itself are written with ``repr`` (``pprint``), which is
already a literal.
"""

from __future__ import annotations

__all__ = ["docstring", "comment_line"]


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _escaped(text: str, *, keep_newlines: bool) -> str:
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n" and keep_newlines:
            out.append("\n")
        elif not ch.isprintable():
            out.append(_escape_char(ch))  # \r, \x1b, \u2028, NUL, … never reach the source raw
        else:
            out.append(ch)
    return "".join(out)


def docstring(text: str) -> str:
    """``text`` as a triple-quoted Python string literal whose value is ``text`` exactly.

    Backslashes and every double quote are escaped (so no ``\"\"\"`` can close the literal early),
    and every non-printable character except the newline is written as an escape (``\\x1b``,
    ``\\r``, ``\\u2028``). ``ast.literal_eval(docstring(t)) == t`` for every ``str`` ``t``.

    Args:
        text: any text, e.g. a title naming a model file.
    Returns:
        Python source of one string literal, ``\"\"\"…\"\"\"``.
    """
    return '"""' + _escaped(text, keep_newlines=True) + '"""'


def comment_line(text: str) -> str:
    """``text`` as one Python comment line (``# …``): newlines and other control characters are
    escaped, so the comment cannot end early and nothing after it becomes code.

    Args:
        text: any text, e.g. a comment naming a backend label.
    Returns:
        One line starting with ``# `` and holding no line break.
    """
    return "# " + "".join(_escape_char(ch) if not ch.isprintable() else ch for ch in text)
