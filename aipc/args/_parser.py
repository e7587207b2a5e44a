"""The ``argparse`` parser of every aipc command: its errors are usage errors (exit status 64)."""

from __future__ import annotations

import argparse

from aipc._exit_codes import UsageError
from aipc.args._option_suggest import with_suggestion

__all__ = ["CommandParser"]


class CommandParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` that raises :class:`~aipc._exit_codes.UsageError` instead of
    exiting with argparse's status 2: the command maps it to status 64 and the message names the
    nearest option (:func:`aipc.args._option_suggest.with_suggestion`). ``--help`` still exits 0."""

    def error(self, message):
        """Raise :class:`~aipc._exit_codes.UsageError` for ``message``, with the nearest option."""
        raise UsageError(with_suggestion(self, message))
