"""Which command ``aipc fix`` runs to confirm a repair — never one a diff folder chose.

A diff folder may come from elsewhere ("send me your diff"): its ``diff.json`` names a script, its
arguments and a working directory (``target``), and a digest of the script — all written by whoever
made the folder, so none of it proves anything. The rule (docs/security.md, "aipc fix"):

* ``confirm=None`` / ``False`` (the default): no confirmation run. The replays of the recorded
  calls are the verification; a note says how to confirm.
* ``confirm=[script, arg, …]`` (``aipc fix DIR --confirm-with script.py args…``): the command the
  user names runs, in the user's working directory (``["-m", "pkg", …]`` runs a module). Nothing
  of the folder's ``target`` is used. A script that does not exist is an error before any work.
* ``confirm=True`` / ``"recorded"`` (``aipc fix DIR --confirm``): the recorded command — shown
  before it runs — and only when

  1. the folder was made on this machine by this user: its ``diff.json`` has a private record in
     the user's compile cache (:func:`onnxwrapper.diff._capture.local_record`), written when aipc
     wrote that very ``diff.json``. The command, its arguments and its working directory are read
     from that record, never from the folder;
  2. it ran a script (a module has no digest), and the file now at the recorded path has the
     sha256 the diff recorded; the children that run it check the digest of the very bytes they
     compile and refuse others (a script swapped after this check never runs).

  Anything else — a folder from elsewhere, an edited ``diff.json``, a module, a changed script — is
  refused with a note naming ``--confirm-with``.

A received folder alone therefore never runs code, nor chooses an argument or a working directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from onnxwrapper.diff._capture import script_sha256

__all__ = ["ConfirmCommand", "confirm_command", "RECORDED"]

RECORDED = "recorded"
_NAME_IT = "name the command: `aipc fix DIR --confirm-with SCRIPT ARGS…`"


@dataclass(frozen=True)
class ConfirmCommand:
    """A command to confirm a repair with: ``argv`` (a script path, or a module name when
    ``module``), the working directory ``cwd`` (``None``: the caller's), and ``sha256``: the digest
    the script's bytes must have when a child runs them (``None`` for a command the user named).
    ``compare_files``: whether the files the diff compared (``app.compare``) may be compared again
    (only for a folder made here: the names come from the private record)."""

    argv: tuple
    module: bool = False
    cwd: str | None = None
    sha256: str | None = None
    compare_files: bool = False

    def shown(self) -> str:
        """The command line as it runs (``python [-m] argv…``, odd arguments quoted)."""
        return " ".join(["python", *(["-m"] if self.module else []),
                         *(repr(a) if not a.isprintable() or " " in a or not a else a for a in self.argv)])


def _is_script_diff(target: Mapping) -> bool:
    argv = target.get("argv")
    return (isinstance(argv, list) and bool(argv) and all(isinstance(a, str) for a in argv)
            and "model" not in target)


def _user_command(confirm: Sequence, cwd: str | None) -> ConfirmCommand:
    items = [os.fspath(a) for a in confirm]
    if not items:
        raise ValueError("confirm: an empty command line (expected a script and its arguments)")
    module = items[0] == "-m"
    items = items[1:] if module else items
    if not items or not items[0]:
        raise ValueError("confirm: '-m' without a module name" if module else "confirm: an empty script name")
    if not module and not os.path.isfile(os.path.join(cwd or os.getcwd(), items[0])):
        raise FileNotFoundError(f"confirm: the script {items[0]!r} does not exist"
                                + (f" (in {cwd})" if cwd and not os.path.isabs(items[0]) else ""))
    return ConfirmCommand(tuple(items), module, cwd)


def confirm_command(target: Mapping | None, confirm, cwd: str | None,
                    local: Mapping | None = None) -> tuple[ConfirmCommand | None, str]:
    """The confirmation command for a diff whose manifest records ``target``, and a note.

    Args:
        target: ``diff.json``'s ``target`` object (untrusted: any type is accepted; it only tells
            whether the diff ran a script — what runs never comes from it).
        confirm: ``None``/``False``, ``True``/``"recorded"``, or an argv list (module docstring).
        cwd: the caller's working directory for a user-named command.
        local: the private record of the folder's ``diff.json``
            (:func:`onnxwrapper.diff._capture.local_record`), ``None`` for a folder from elsewhere.

    Returns:
        ``(command or None, note)``; the note says why nothing runs, or what runs.

    Raises:
        ValueError: a malformed ``confirm``. FileNotFoundError: a user-named script that does not
            exist (found before any work starts).
    """
    target = target if isinstance(target, Mapping) else {}
    if confirm is not None and confirm is not False and not isinstance(confirm, (bool, str, bytes)) \
            and isinstance(confirm, Sequence):
        command = _user_command(confirm, cwd)
        if not _is_script_diff(target):
            return None, "not a script diff: the replayed calls are the verification (no confirmation run)"
        return command, f"confirmation command (named by you): {command.shown()}"
    if confirm not in (None, False, True, RECORDED):
        raise ValueError(f"confirm: expected None, True, {RECORDED!r} or a command line (list), got {confirm!r}")
    if not _is_script_diff(target):
        return None, "not a script diff: the replayed calls are the verification (no confirmation run)"
    if confirm is None or confirm is False:
        return None, ("no confirmation run: the replayed calls are the verification. A diff folder never chooses "
                      "what runs; to run the script again with the recipe, name it: `aipc fix DIR --confirm-with "
                      "SCRIPT ARGS…`, or `aipc fix DIR --confirm` to run the recorded command of a diff you made "
                      "on this machine, when the script is byte-for-byte the one the diff ran")
    return _recorded(local)


def _recorded(local: Mapping | None) -> tuple[ConfirmCommand | None, str]:
    """The recorded command, read from the folder's private record ``local`` (module docstring)."""
    if local is None:
        return None, ("no confirmation run: this diff folder was not made on this machine by you (no private record "
                      "of its diff.json: it came from elsewhere, or was edited since), so its recorded command, "
                      f"arguments and working directory are not used; {_NAME_IT}")
    target = local.get("target") if isinstance(local.get("target"), Mapping) else {}
    argv = target.get("argv")
    if not _is_script_diff(target):
        return None, "not a script diff: the replayed calls are the verification (no confirmation run)"
    if target.get("module"):
        return None, ("no confirmation run: the diff ran a module (-m), whose code has no recorded digest; "
                      "name the command: `aipc fix DIR --confirm-with -m MODULE ARGS…`")
    digest = target.get("sha256")
    if not isinstance(digest, str):
        return None, f"no confirmation run: the diff recorded no digest of its script; {_NAME_IT}"
    where = next((c for c in (target.get("cwd"), local.get("cwd")) if isinstance(c, str) and c), None)
    now = script_sha256(argv[0], where)
    if now != digest:
        state = "is missing" if now is None else "differs from the one the diff ran"
        return None, (f"no confirmation run: the script {argv[0]!r} {state} (sha256 recorded {digest[:12]}…); "
                      f"{_NAME_IT}")
    command = ConfirmCommand(tuple(argv), False, where, digest, compare_files=True)
    return command, (f"confirmation command (recorded by your diff on this machine, script sha256 {digest[:12]}… "
                     f"checked{', in ' + where if where else ''}): {command.shown()}")
