"""The exit statuses of every ``aipc`` command: one table, one meaning per status.

Every subcommand returns one of these (``aipc run SCRIPT`` returns the script's own status once the
script has started, as ``python`` computes it). Statuses 64 and 69 follow BSD's sysexits.h
(``EX_USAGE``, ``EX_UNAVAILABLE``); 64 covers every problem with what the user gave — an unknown
subcommand or option, a bad value, a missing or malformed input file — so that no input error
shares a status with a result. The library's results use the same numbers
(``onnxwrapper.diff.EXIT_*``, ``DiffResult.exit_status``, ``FixResult.exit_status``): a test
checks they agree with this table, because the library cannot import the command line.

:class:`UsageError` is the exception behind status 64 in the command line's own code.
"""

from __future__ import annotations

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_RUN_FAILED", "EXIT_NOTHING_TO_DO", "EXIT_USAGE", "EXIT_UNAVAILABLE",
           "EXIT_INTERRUPTED", "TABLE", "UsageError", "table_text"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_RUN_FAILED = 2
EXIT_NOTHING_TO_DO = 3
EXIT_USAGE = 64
EXIT_UNAVAILABLE = 69
EXIT_INTERRUPTED = 130

#: (status, meaning, where it comes from) — what ``aipc --help`` and docs/loader.md print.
TABLE: tuple[tuple[int, str, str], ...] = (
    (EXIT_OK, "success", "the work is done and, where something is judged, it passed"),
    (EXIT_FAILED, "failed", "a mismatch (diff, run MODEL with golden outputs), a model left unrepaired (fix), "
                            "a model or shape that did not compile (compile), an error onnxwrapper raised"),
    (EXIT_RUN_FAILED, "a run failed", "a backend's run crashed, raised, timed out or was unavailable, so "
                                      "there was nothing to judge (diff, run MODEL, fix)"),
    (EXIT_NOTHING_TO_DO, "nothing to do", "fix: the diff has no failing model to repair"),
    (EXIT_USAGE, "usage or input error", "an unknown subcommand or option (the nearest one is suggested), a "
                                         "bad value, a missing or malformed input file or folder"),
    (EXIT_UNAVAILABLE, "unavailable", "the backend or the subcommand cannot run on this host or installation"),
    (EXIT_INTERRUPTED, "interrupted", "Ctrl-C"),
)


class UsageError(Exception):
    """A command-line or environment usage error: exit status :data:`EXIT_USAGE` (64)."""


def table_text(indent: str = "  ") -> str:
    """The table as plain text lines, for ``--help`` (at most 100 columns)."""
    import textwrap

    lines = []
    for status, meaning, detail in TABLE:
        head = f"{indent}{status:>3}  {meaning}: "
        wrapped = textwrap.wrap(head + detail, 100, subsequent_indent=indent + " " * 5)
        lines += wrapped
    return "\n".join(lines)
