"""How much an aipc run says on stderr — the one place that decides it.

Levels (``-v`` counts, ``AIPC_VERBOSE=0|1|2``; the default is 0):

* **0** (default, also ``AIPC_VERBOSE=0``): only what matters — onnxwrapper's WARNING records (a
  model only partly on the NPU or not at all, a fallback, a compile that failed, and the progress
  lines of a long compile, which the qnn backend logs as warnings) and errors. A script whose
  sessions all run on the NPU prints nothing of ours.
* **1** (``-v``): also the backend line, one line per session (what runs where) and, at exit,
  each session's partition summary (:class:`aipc_loader._report.SessionReporter`), and
  onnxwrapper's INFO log (each shape compiled or loaded from the cache).
* **2** (``-vv``): also onnxwrapper's DEBUG log.

:func:`configure` applies a level to the ``onnxwrapper`` logger of this process; the ``aipc``
command calls it in its own process and the child bootstrap in every Python child of an aipc run,
so whatever a backend logs follows the same rule, with the same prefix. Python warnings
(``PartialOffloadWarning``) follow Python's warning filters as in any script
(``PYTHONWARNINGS=ignore::onnxwrapper.PartialOffloadWarning`` hides them).
"""

from __future__ import annotations

import logging
import sys

__all__ = ["configure", "shows_sessions"]


class _AipcHandler(logging.StreamHandler):
    """The stderr handler aipc installs (found and replaced by a second :func:`configure`)."""


def configure(verbose: int, prefix: str = "aipc: ") -> None:
    """Show onnxwrapper's log records on stderr as verbosity ``verbose`` asks (module docstring).

    Args:
        verbose: 0, 1 or 2 (more counts as 2).
        prefix: put before each line (``"aipc: "``, ``"aipc[PID]: "`` in a child process).
    """
    logger = logging.getLogger("onnxwrapper")
    for old in [h for h in logger.handlers if isinstance(h, _AipcHandler)]:
        logger.removeHandler(old)
    handler = _AipcHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(prefix.replace("%", "%%") + "%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose >= 2 else logging.INFO if verbose == 1 else logging.WARNING)


def shows_sessions(verbose: int) -> bool:
    """Whether the run prints a line per session and the partitions at exit (``-v`` and up)."""
    return verbose >= 1
