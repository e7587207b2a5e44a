"""Reports that never crash on a console encoding.

Windows gives a redirected ``stdout`` (a pipe, a file, ``> log.txt``) the ANSI code page, cp1252
in Western locales, and a console the OEM code page; neither has Δ ≥ ✓ ✗ → … ─ nor CJK text, so
``print`` raises ``UnicodeEncodeError`` halfway through a report. :func:`make_output_safe` — called
by the ``aipc`` subcommands that write reports (``diff``, ``fix``, ``inspect``, ``compile``,
``capture``, ``doctor``), never by ``aipc run``, whose stdout belongs to the user's script — keeps
each stream's encoding and swaps its error handler for ``aipc-ascii``: the report symbols become
their ASCII spelling (``≥`` → ``>=``, ``✓`` → ``ok``) and any other character the encoding lacks a
``\\uXXXX`` escape, so no text is lost silently. Streams that can encode everything (UTF-8) are
left alone.
"""

from __future__ import annotations

import codecs
import sys

__all__ = ["ASCII_SPELLING", "ERROR_HANDLER", "make_output_safe"]

ERROR_HANDLER = "aipc-ascii"
#: the report symbols and their ASCII spelling
ASCII_SPELLING = {"Δ": "d", "≥": ">=", "≤": "<=", "✓": "ok", "✗": "FAIL", "→": "->", "←": "<-", "…": "...",
                  "─": "-", "━": "=", "│": "|", "×": "x", "±": "+/-", "≈": "~", "≠": "!=", "·": ".", "²": "^2",
                  "⁻": "^-", "µ": "u", "—": "-", "–": "-", "‘": "'", "’": "'", "“": '"', "”": '"', "•": "*",
                  "▲": "^", "▼": "v", "⚠": "!", "∞": "inf"}


def _spell(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(ASCII_SPELLING.get(ch) or f"\\u{ord(ch):04x}" for ch in text), error.end


def _register() -> None:
    try:
        codecs.lookup_error(ERROR_HANDLER)
    except LookupError:
        codecs.register_error(ERROR_HANDLER, _spell)


def _needs_help(stream) -> bool:
    encoding = getattr(stream, "encoding", None)
    if not encoding or not hasattr(stream, "reconfigure"):
        return False
    try:
        "".join(ASCII_SPELLING).encode(encoding)
        "\u8bc6\u522b".encode(encoding)  # CJK text, as OCR results print it
    except (UnicodeEncodeError, LookupError):
        return True
    return False


def make_output_safe(*streams) -> None:
    """Give ``streams`` (default ``sys.stdout`` and ``sys.stderr``) the ``aipc-ascii`` error handler
    when their encoding cannot encode every character (module docstring); idempotent."""
    _register()
    for stream in streams or (sys.stdout, sys.stderr):
        if _needs_help(stream):
            try:
                stream.reconfigure(errors=ERROR_HANDLER)
            except (AttributeError, ValueError, OSError):
                continue
