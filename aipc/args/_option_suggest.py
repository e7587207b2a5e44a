"""The nearest option for an option argparse does not know (``did you mean --backends?``).

Every parser of the command line (``aipc run``, each subcommand, the model commands) raises its
errors through :func:`with_suggestion`, so a misspelled or singular/plural option gets the same
hint everywhere: ``aipc diff --backend qnn x.py`` → ``unrecognized arguments: --backend; did you
mean --backends?``. Closeness is :func:`difflib.get_close_matches` (ratio ≥ 0.6) over the
parser's own option strings, or a unique option the typed text is a prefix of (abbreviations are
refused by the parsers, ``allow_abbrev=False``, so that a script never loses an argument to one).
Values get the hint their option documents (:data:`VALUE_HINTS`), e.g. where precisions are
explained for a ``--precision`` argparse refused.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re

__all__ = ["with_suggestion", "nearest_option", "misplaced_script", "VALUE_HINTS"]

#: option → what to read when argparse refused its value (argparse names the allowed values itself)
VALUE_HINTS = {
    "--precision": "fp16/fp32 run the float model; w8a16/w8a8 (8-bit weights; 'int8') need a quantized model "
                   "from `aipc compile MODEL --precision w8a8 --calibration DIR` — see 'Choosing a precision' "
                   "(docs/precision.md)",
}

_UNRECOGNIZED = "unrecognized arguments: "
_INVALID_VALUE = re.compile(r"^argument (?P<names>[^:]+): invalid choice")


def nearest_option(token: str, options: list[str]) -> str | None:
    """The option of ``options`` closest to ``token`` (``--backend`` → ``--backends``), or ``None``.

    ``token`` may carry a value (``--backend=qnn``); only its name is compared. A token that is a
    prefix of exactly one option suggests that option.
    """
    name = token.split("=", 1)[0]
    if not name.startswith("-") or name in options:
        return None
    same_kind = [o for o in options if o.startswith("--") == name.startswith("--")] or options
    prefixed = [o for o in same_kind if o.startswith(name)]
    if len(prefixed) == 1:
        return prefixed[0]
    close = difflib.get_close_matches(name, same_kind, n=1, cutoff=0.6)
    return close[0] if close else None


def with_suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's error ``message`` for ``parser``, with the nearest option of each unknown one and
    the hint of an option whose value was refused (:data:`VALUE_HINTS`)."""
    options = sorted(parser._option_string_actions)  # argparse's own table of option strings
    if message.startswith(_UNRECOGNIZED):
        tokens = message[len(_UNRECOGNIZED):].split()
        hints = [f"{t.split('=', 1)[0]} → {near}" for t in tokens if t.startswith("-")
                 for near in [nearest_option(t, options)] if near]
        if len(hints) == 1:
            return f"{message}; did you mean {hints[0].split(' → ')[1]}?"
        if hints:
            return f"{message}; did you mean: {', '.join(hints)}?"
        return message
    match = _INVALID_VALUE.match(message)
    if match:
        for name in match.group("names").split("/"):
            if name in VALUE_HINTS:
                return f"{message}; {VALUE_HINTS[name]}"
    return message


def misplaced_script(option: str, value: str | None, usage: str) -> str | None:
    """The usage error for a script given as the value of an option that takes names
    (``aipc diff --backends script.py`` leaves no script, since argparse read it as the list of
    backends), or ``None`` when ``value`` does not look like a script (a ``.py`` entry, or a file).

    Args:
        option: the option as typed (``--backends``). value: its value. usage: the command with
            the script in its place (``aipc diff --backends cpu,qnn script.py``).
    """
    entries = [e.strip() for e in (value or "").split(",") if e.strip()]
    script = next((e for e in entries if e.lower().endswith((".py", ".pyw")) or os.path.isfile(e)), None)
    if script is None:
        return None
    return (f"{option} {value}: '{script}' is a script, not a backend; {option} takes backend names "
            f"(e.g. {option} cpu,qnn) and the script comes after the options: {usage}")
