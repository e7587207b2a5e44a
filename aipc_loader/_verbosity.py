"""How much an aipc run says on stderr — the one place that decides it.

Levels (``-v`` counts, ``AIPC_VERBOSE=0|1|2``; the default is 0):

* **0** (default, also ``AIPC_VERBOSE=0``): only what matters — onnxwrapper's WARNING records (a
  model only partly on the NPU or not at all, a fallback, a compile that failed, and the progress
  lines of a long compile or of a long call on the simulator, which the qnn backend logs as
  warnings) and errors. A script whose sessions all run on the NPU prints nothing of ours.
* **1** (``-v``): also the backend line, one line per session (what runs where) and, at exit,
  each session's partition summary (:class:`aipc_loader._report.SessionReporter`), and
  onnxwrapper's INFO log (each shape compiled or loaded from the cache).
* **2** (``-vv``): also onnxwrapper's DEBUG log.

:func:`configure` applies a level in this process; the ``aipc`` command calls it in its own process
and the child bootstrap in every Python child of an aipc run, so whatever a backend logs follows
the same rule, with the same prefix. Python warnings (``PartialOffloadWarning``) follow Python's
warning filters as in any script (``PYTHONWARNINGS=ignore::onnxwrapper.PartialOffloadWarning``
hides them).

**aipc's lines are aipc's, not the app's.** The library logs to its own loggers
(:data:`LIBRARY_LOGGERS`) and installs no handler (``import onnxwrapper`` leaves logging as it
was: a plain script sees its warnings through Python's last-resort handler, or through its own
configuration). Under aipc the app runs in the same process, and its logging configuration must
neither duplicate aipc's lines nor hide them. So :func:`configure` makes those loggers aipc's own:

* they have one handler, aipc's, writing to stderr with aipc's prefix, and never propagate to the
  root logger — an app that calls ``logging.basicConfig()`` at import (basic-pitch does) does not
  get every ``aipc -v`` line twice;
* whether a record is shown is decided by aipc's verbosity alone — not by the root logger's level
  (``logging.getLogger().setLevel(logging.ERROR)``), not by ``logging.disable(…)``, not by
  ``logging.config.dictConfig``/``fileConfig`` disabling the loggers that existed before
  (``disable_existing_loggers``, their default), and not by a level or ``propagate`` set on these
  loggers by the app. That is what "the app's logging configuration silences them" means here; the
  app's own loggers keep every setting it gave them.

``-q``-style silence is aipc's choice: ``AIPC_VERBOSE=0`` still shows warnings (a long compile's
progress must never look like a hang). :func:`release` gives the loggers back to the library (tests).
"""

from __future__ import annotations

import logging
import sys

__all__ = ["LIBRARY_LOGGERS", "configure", "release", "shows_sessions"]

#: every logger name the library logs to (``tests/loader`` checks that no other name is used)
LIBRARY_LOGGERS = ("onnxwrapper", "onnxwrapper.aihub", "onnxwrapper.cache", "onnxwrapper.qnn")
_TOP = LIBRARY_LOGGERS[0]


class _AipcHandler(logging.StreamHandler):
    """The stderr handler aipc installs (found and replaced by a second :func:`configure`)."""


class _State:
    threshold = logging.WARNING
    handler: _AipcHandler | None = None
    adopted: dict = {}  # logger → (level, propagate) before it became aipc's


_state = _State()


class _AipcLogger(logging.Logger):
    """A library logger while aipc runs (module docstring): enabled by aipc's verbosity alone, its
    records go to aipc's handler and nowhere else. The attributes an app's logging configuration
    writes (``disabled``, ``propagate``) read as aipc needs them and ignore what is written."""

    @property
    def disabled(self) -> bool:
        return False

    @disabled.setter
    def disabled(self, value) -> None:  # logging.config's disable_existing_loggers
        pass

    @property
    def propagate(self) -> bool:
        return self.name != _TOP  # a child reaches the top logger, which stops: never the root's handlers

    @propagate.setter
    def propagate(self, value) -> None:
        pass

    def isEnabledFor(self, level: int) -> bool:  # neither logging.disable() nor a level set by the app
        return level >= _state.threshold

    def getEffectiveLevel(self) -> int:
        return _state.threshold

    def callHandlers(self, record: logging.LogRecord) -> None:
        if _state.handler is not None:
            _state.handler.handle(record)


def _adopt(logger: logging.Logger) -> None:
    if type(logger) is logging.Logger:
        _state.adopted[logger] = (logger.level, logger.__dict__.get("propagate", True))
        logger.__class__ = _AipcLogger


def configure(verbose: int, prefix: str = "aipc: ") -> None:
    """Show onnxwrapper's log records on stderr as verbosity ``verbose`` asks, whatever the app
    configures (module docstring).

    Args:
        verbose: 0, 1 or 2 (more counts as 2).
        prefix: put before each line (``"aipc: "``, ``"aipc[PID]: "`` in a child process).
    """
    _state.threshold = logging.DEBUG if verbose >= 2 else logging.INFO if verbose == 1 else logging.WARNING
    handler = _AipcHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(prefix.replace("%", "%%") + "%(message)s"))
    manager = logging.Logger.manager
    names = set(LIBRARY_LOGGERS) | {n for n in list(manager.loggerDict) if n.startswith(_TOP + ".")}
    for name in sorted(names):
        _adopt(logging.getLogger(name))
    top = logging.getLogger(_TOP)
    for old in [h for h in top.handlers if isinstance(h, _AipcHandler)]:
        top.removeHandler(old)
    top.addHandler(handler)  # loggers created later under "onnxwrapper." reach it the ordinary way
    logging.Logger.setLevel(top, _state.threshold)  # their ordinary level lookup finds aipc's
    _state.handler = handler


def release() -> None:
    """Give the library's loggers back: their own class, level and ``propagate``, no aipc handler
    (what ``import onnxwrapper`` leaves). For tests that configure aipc in their own process."""
    for logger, (level, propagate) in list(_state.adopted.items()):
        logger.__class__ = logging.Logger
        logger.propagate = propagate
        logger.handlers[:] = [h for h in logger.handlers if not isinstance(h, _AipcHandler)]
        logger.setLevel(level)
    _state.adopted.clear()
    _state.handler = None


def shows_sessions(verbose: int) -> bool:
    """Whether the run prints a line per session and the partitions at exit (``-v`` and up)."""
    return verbose >= 1
