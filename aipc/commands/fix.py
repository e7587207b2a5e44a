"""aipc fix: turn a failing `aipc diff` into a verified repair recipe.

usage:
  aipc fix DIFF_DIR [--output FILE] [--remedies exact,kernel,known,cpu,precision] [--all]
                    [--confirm | --confirm-with SCRIPT [ARGS…]]

For each model whose outputs failed on values (its localization is read from the diff's report, or
made now), candidates are tried from the cheapest and most exact to the most costly: exact rewrites
that keep FP16 in range (power-of-two rescaling, a max-subtracted softmax), rewrites that avoid a
wrong kernel (Pow(x, 2) as Mul(x, x), a dilated or wide Conv1d tap by tap, the patch registry), the
culprit subgraph on the CPU — only what a device runs, unless a simulator mode is asked for by name
(--simulator-modes fp32). Each is verified by
replaying the model's recorded calls on the backend and judging them with the diff's own tolerances;
the first that passes goes into the recipe file (default DIFF_DIR/repairs.json). A diff folder never
chooses what runs: to run the script once more with the recipe, name it (--confirm-with SCRIPT
ARGS…, everything after it belongs to the script), or ask for the recorded command (--confirm),
which is shown and runs only for a diff you made on this machine (a private record of its
diff.json) and when the script at the recorded path is byte-for-byte the one the diff ran (sha256).
A folder from elsewhere never chooses a command, an argument, a working directory or a path
(docs/security.md). Apply a recipe with `python -m aipc --repairs FILE script.py`,
`InferenceSession(..., backend_options={"repairs": FILE})` or `aipc compile --repairs FILE`.

Exit status: 0 every failing model repaired (and the confirmation run passed) · 1 not all repaired ·
2 the unrepaired model could not be replayed · 3 nothing to repair · 64 usage error (the table of
`aipc --help`).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import os
import sys

from aipc._exit_codes import EXIT_USAGE
from onnxwrapper.diff import console_safe
from onnxwrapper.repair.fix import REMEDIES, SIMULATOR_MODES, fix



def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``aipc fix`` on ``parser``."""
    parser.add_argument("directory", metavar="DIFF_DIR", help="a directory written by aipc diff (or a model diff)")
    parser.add_argument("--output", "-o", metavar="FILE", help="recipe file to write (default: DIFF_DIR/repairs.json)")
    parser.add_argument("--remedies", default=",".join(REMEDIES), metavar="LIST",
                        help=f"kinds of remedy to try, in this order (default: {','.join(REMEDIES)})")
    parser.add_argument("--backends", metavar="LABELS", help="only these runs of the diff (comma separated)")
    parser.add_argument("--all", dest="try_all", action="store_true",
                        help="verify every candidate, not only up to the first that passes")
    parser.add_argument("--max-calls", type=int, metavar="N", help="replay at most N calls per model")
    confirm = parser.add_mutually_exclusive_group()
    confirm.add_argument("--confirm", action="store_true",
                         help="run the diff's recorded command again with the recipe: only for a diff you made on "
                              "this machine, when its script's sha256 matches the one the diff recorded")
    confirm.add_argument("--confirm-with", nargs=argparse.REMAINDER, metavar="SCRIPT",
                         help="run this command (SCRIPT ARGS…, or -m MODULE ARGS…) again with the recipe; "
                              "the rest of the command line belongs to it")
    confirm.add_argument("--no-confirm", action="store_true",
                         help="no confirmation run (the default; kept for older command lines)")
    parser.add_argument("--simulator-modes", metavar="LIST", default="",
                        help="also search these modes of the x86-64 HTP simulator that no device has (fp32); "
                             "default none: every recipe runs on a device")
    parser.add_argument("--no-localize", action="store_true",
                        help="do not localize models the diff did not localize (candidates from value ranges only)")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", help="limit per child process")
    parser.add_argument("--json", metavar="PATH", help="write the fix report as JSON (default: DIFF_DIR/fix.json)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


def main(args: argparse.Namespace) -> int:
    """Run ``aipc fix``; returns the exit status."""
    directory = os.path.abspath(args.directory)
    if not os.path.isfile(os.path.join(directory, "diff.json")):
        print(f"aipc fix: error: {directory} is not an aipc diff directory (no diff.json)", file=sys.stderr)
        return EXIT_USAGE
    remedies = [r.strip() for r in args.remedies.split(",") if r.strip()]
    unknown = [r for r in remedies if r not in REMEDIES]
    if unknown or not remedies:
        print(f"aipc fix: error: --remedies: unknown kind(s) {', '.join(unknown) or '(none given)'}; "
              f"expected some of {','.join(REMEDIES)}", file=sys.stderr)
        return EXIT_USAGE
    modes = [m.strip() for m in args.simulator_modes.split(",") if m.strip()]
    if any(m not in SIMULATOR_MODES for m in modes):
        print(f"aipc fix: error: --simulator-modes: unknown mode(s) {', '.join(m for m in modes if m not in SIMULATOR_MODES)}; "
              f"expected some of {','.join(SIMULATOR_MODES)}", file=sys.stderr)
        return EXIT_USAGE
    progress = _progress(args.quiet)
    if args.confirm_with is not None:
        problem = _confirm_with_problem(args.confirm_with)
        if problem:  # found before any work starts
            print(f"aipc fix: error: --confirm-with: {problem}", file=sys.stderr)
            return EXIT_USAGE
    confirm = args.confirm_with if args.confirm_with else (True if args.confirm else None)
    result = fix(directory, backends=args.backends.split(",") if args.backends else None, remedies=remedies,
                 output=args.output, max_calls=args.max_calls, try_all=args.try_all, confirm=confirm,
                 localize=not args.no_localize, simulator_modes=modes,
                 timeout=args.timeout, progress=progress)
    print(console_safe(result.text()))  # model and node names, messages: from elsewhere
    path = result.write_json(args.json or os.path.join(directory, "fix.json"))
    print(f"aipc fix: report written: {path}", file=sys.stderr)
    return result.exit_status


def _progress(quiet: bool):
    """Progress lines on stderr; with ``-q`` only the line that shows a confirmation command before
    it runs."""
    def say(stage: str) -> None:
        if not quiet or stage.startswith("confirming"):
            print(console_safe(f"aipc fix: {stage}"), file=sys.stderr, flush=True)
    return say


def _confirm_with_problem(command: list) -> str | None:
    """Why ``--confirm-with COMMAND`` cannot run (no script, a script or top-level module that cannot
    be found from here), or ``None``. Nothing is imported."""
    if not command:
        return "expected SCRIPT [ARGS…] (or -m MODULE [ARGS…])"
    if command[0] == "-m":
        if len(command) < 2 or not command[1]:
            return "-m needs a module name (-m MODULE [ARGS…])"
        top = command[1].split(".")[0]
        found = importlib.machinery.PathFinder.find_spec(top, [os.getcwd(), *sys.path]) if top else None
        return None if found is not None else f"no module named {command[1]!r} here"
    if not os.path.isfile(command[0]):
        return f"the script {command[0]!r} does not exist"
    return None
