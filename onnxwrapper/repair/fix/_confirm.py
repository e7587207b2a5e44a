"""Which command ``aipc fix`` runs to confirm a repair — never one a diff folder chose alone.

A diff folder may come from elsewhere ("send me your diff"); its ``diff.json`` names a script and
its arguments (``target.argv``). Running that is running someone else's code, so the rule is
(docs/security.md):

* ``confirm=None`` / ``False`` (the default): no confirmation run. The replays of the recorded
  calls are the verification; a note says how to confirm.
* ``confirm=[script, arg, …]`` (``aipc fix DIR --confirm-with script.py args…``): the command the
  user names runs, in the user's working directory (``["-m", "pkg", …]`` runs a module).
* ``confirm=True`` / ``"recorded"`` (``aipc fix DIR --confirm``): the user asks for the recorded
  command, and it runs only when it is provably the one the diff ran: a script (not a module)
  whose content digest ``aipc diff`` recorded (``target.sha256``), and the file now at the
  recorded path has that digest. Anything else is refused with a note.

A received folder alone therefore never runs code: either the user typed the command line, or
they asked for the recorded one and the script on their disk is byte-for-byte the one that ran.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from onnxwrapper.diff._capture import script_sha256

__all__ = ["ConfirmCommand", "confirm_command", "RECORDED"]

RECORDED = "recorded"


@dataclass(frozen=True)
class ConfirmCommand:
    """A command to confirm a repair with: ``argv`` (a script path, or a module name when
    ``module``), and the working directory ``cwd`` (``None``: the caller's)."""

    argv: tuple
    module: bool = False
    cwd: str | None = None


def confirm_command(target: Mapping | None, confirm, cwd: str | None) -> tuple[ConfirmCommand | None, str]:
    """The confirmation command for a diff whose manifest records ``target``, and a note.

    Args:
        target: ``diff.json``'s ``target`` object (untrusted: any type is accepted and checked).
        confirm: ``None``/``False``, ``True``/``"recorded"``, or an argv list (see module docstring).
        cwd: the caller's working directory for a user-named command.

    Returns:
        ``(command or None, note)``; the note says why nothing runs, or what runs.
    """
    target = target if isinstance(target, Mapping) else {}
    argv = target.get("argv")
    recorded = (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv))
    if not recorded:
        return None, "not a script diff: the replayed calls are the verification (no confirmation run)"
    if confirm is None or confirm is False:
        return None, ("no confirmation run: the replayed calls are the verification. A diff folder never chooses "
                      "what runs; to run the script again with the recipe, name it: `aipc fix DIR --confirm-with "
                      "SCRIPT ARGS…`, or `aipc fix DIR --confirm` to run the recorded command when the script is "
                      "byte-for-byte the one the diff ran")
    if isinstance(confirm, Sequence) and not isinstance(confirm, (str, bytes)):
        items = [os.fspath(a) for a in confirm]
        if not items:
            raise ValueError("confirm: an empty command line (expected a script and its arguments)")
        module = items[0] == "-m"
        items = items[1:] if module else items
        if not items:
            raise ValueError("confirm: '-m' without a module name")
        return ConfirmCommand(tuple(items), module, cwd), f"confirmation command (named by you): {_shown(items, module)}"
    if confirm is not True and confirm != RECORDED:
        raise ValueError(f"confirm: expected None, True, {RECORDED!r} or a command line (list), got {confirm!r}")
    where = target.get("cwd") if isinstance(target.get("cwd"), str) else None
    if target.get("module"):
        return None, ("no confirmation run: the diff ran a module (-m), whose code has no recorded digest; "
                      "name the command: `aipc fix DIR --confirm-with -m MODULE ARGS…`")
    digest = target.get("sha256")
    if not isinstance(digest, str):
        return None, ("no confirmation run: the diff recorded no digest of its script (older aipc, or edited); "
                      "name the command: `aipc fix DIR --confirm-with SCRIPT ARGS…`")
    now = script_sha256(argv[0], where)
    if now != digest:
        state = "is missing" if now is None else "differs from the one the diff ran"
        return None, (f"no confirmation run: the script {argv[0]!r} {state} (sha256 recorded {digest[:12]}…); "
                      f"name the command: `aipc fix DIR --confirm-with SCRIPT ARGS…`")
    return (ConfirmCommand(tuple(argv), False, where or cwd),
            f"confirmation command (recorded by the diff, script sha256 {digest[:12]}… checked): {_shown(argv, False)}")


def _shown(argv: Sequence[str], module: bool) -> str:
    return " ".join(["python", *(["-m"] if module else []), *(repr(a) if not a.isprintable() or " " in a else a
                                                               for a in argv)])
