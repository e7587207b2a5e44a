"""Progress lines for long steps: one line when a step has run for a few seconds, one when it ends.

A compile for the QNN HTP takes from under a second (a small CNN) to minutes (a large transformer
on the simulator); a user watching a silent process cannot tell a compile from a hang. So a step
wrapped in :func:`progress_if_slow` logs, on the logger :data:`PROGRESS_LOGGER` at level INFO,
``"<what> … (still running after 3 s)"`` once it has run :data:`SLOW_AFTER_SECONDS`, and
``"<what>: done in 9.2 s"`` when it ends; a fast step logs nothing. The library configures no
handler (it stays quiet); the ``aipc`` command shows these records at its default verbosity and
the rest of onnxwrapper's INFO log only with ``-v`` (``aipc_loader._verbosity``). An application
shows them with ``logging.getLogger("onnxwrapper.progress").addHandler(...)`` and level INFO.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Iterator

__all__ = ["PROGRESS_LOGGER", "SLOW_AFTER_SECONDS", "progress_if_slow"]

#: the logger of progress lines (a child of ``onnxwrapper``; INFO records)
PROGRESS_LOGGER = "onnxwrapper.progress"

#: seconds after which a step says it is still running ("longer than a few seconds")
SLOW_AFTER_SECONDS = 3.0

_log = logging.getLogger(PROGRESS_LOGGER)


@contextlib.contextmanager
def progress_if_slow(what: str, *, after: float | None = None) -> Iterator[None]:
    """Log ``what`` on :data:`PROGRESS_LOGGER` if the ``with`` block runs longer than ``after`` seconds.

    Args:
        what: the step, as a clause (``"onnxwrapper qnn: compiling 'm.onnx' [x=1x3] for the QNN HTP"``).
        after: seconds before the first line (default :data:`SLOW_AFTER_SECONDS`, read at call time).

    The first line comes from a timer thread while the block runs; the second, with the block's
    wall time, when it ends (also when it raises). Nothing is logged for a faster block.
    """
    delay = SLOW_AFTER_SECONDS if after is None else after
    said = threading.Event()

    def still_running() -> None:
        said.set()
        _log.info("%s … (still running after %.0f s)", what, delay)

    timer = threading.Timer(delay, still_running)
    timer.daemon = True
    start = time.perf_counter()
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if said.is_set():
            _log.info("%s: done in %.1f s", what, time.perf_counter() - start)
