"""Progress lines of a long run call on the QNN HTP simulator, saying once that it is the simulator's speed.

Why (measured on onnxruntime-qnn 2.7.0, x86-64 HTP simulator): the simulator computes the HTP's
numerics on the host CPU, far slower than the device — a statically quantized (QDQ) encoder takes
about 110 s per ``run`` call, where a Snapdragon NPU takes milliseconds. Without a word the user
waits and concludes the model (or aipc) is that slow.

A session on the simulator gets a run watch (:func:`simulator_watch`): a static session through
its description (:attr:`~onnxwrapper.backends.base.SessionDescription.watch`: the façade wraps ORT's
run methods), a dynamic one around each specialization's ORT call and its plans (the compile of a
new shape is not a call's wait: it has progress lines of its own). A call still running after :data:`RUN_PROGRESS_AFTER_S` seconds logs one WARNING line on logger
``onnxwrapper.qnn`` (so it reaches stderr without any logging set-up, and ``aipc`` shows it, as the
compile progress lines), then one every :data:`RUN_PROGRESS_EVERY_S` seconds while it runs. The
first such line in the process adds that this is the simulator's speed, not the device's; later
ones do not repeat it. One daemon thread watches every call of the process; it sleeps while no
call is due. A call costs the watch about 1 µs (two lock round trips); on a device (an ARM64
process reaching a real NPU) there is no watch at all.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from onnxwrapper.backends.qnn.platform import is_x86_host

__all__ = ["RUN_PROGRESS_AFTER_S", "RUN_PROGRESS_EVERY_S", "simulator_watch"]

_log = logging.getLogger("onnxwrapper.qnn")

#: a call running longer than this logs its first progress line (seconds; as a compile's)
RUN_PROGRESS_AFTER_S = 10.0
#: then one line every this many seconds
RUN_PROGRESS_EVERY_S = 30.0
#: said once per process, with the first progress line of a long call
SIMULATOR_NOTE = ("this is the speed of the QNN HTP simulator on this x86-64 host, not the device's: a Snapdragon "
                  "NPU runs the same graph far faster (the simulator computes the device's numerics, not its speed)")
#: run methods watched (``run_async`` returns at once: its call is not the wait)
WATCHED = ("run", "run_with_ort_values", "run_with_iobinding")


class _Calls:
    """The calls in flight in this process and the thread that reports the long ones."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.live: dict[int, list] = {}  # token → [label, start, next progress time]
        self.counter = 0
        self.thread: threading.Thread | None = None
        self.wake_at = float("inf")  # when the watching thread wakes next (inf: when told)
        self.said = False

    def begin(self, label: str) -> int:
        now = time.monotonic()
        with self.cond:
            self.counter += 1
            self.live[self.counter] = [label, now, now + RUN_PROGRESS_AFTER_S]
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._watch, daemon=True, name="onnxwrapper-qnn-run-progress")
                self.thread.start()
            elif now + RUN_PROGRESS_AFTER_S < self.wake_at:  # due before the thread wakes: wake it
                self.cond.notify()
            return self.counter

    def end(self, token: int) -> None:
        with self.cond:
            self.live.pop(token, None)

    def _watch(self) -> None:
        while True:
            lines = []
            with self.cond:
                now = time.monotonic()
                due = min((entry[2] for entry in self.live.values()), default=float("inf"))
                if due > now:
                    self.wake_at = due
                    self.cond.wait(None if due == float("inf") else due - now)
                    self.wake_at = float("inf")
                    continue
                for entry in self.live.values():
                    if entry[2] <= now:
                        entry[2] = now + RUN_PROGRESS_EVERY_S
                        lines.append((entry[0], now - entry[1], not self.said))
                        self.said = True
            for label, seconds, first in lines:  # logged outside the lock: a handler may be slow
                _log.warning("onnxwrapper qnn: a call of %s has been running for %.0f s on the QNN HTP simulator%s",
                             label, seconds, f" — {SIMULATOR_NOTE}" if first else "")


_CALLS = _Calls()


def simulator_watch(label: str, simulated: bool | None = None) -> Callable[[str, Callable], Callable] | None:
    """The run watch of a session of ``label`` (a model's name, for the line): ``watch(method,
    impl)`` returns ``impl`` wrapped so that a long call logs progress (module docstring); ``None``
    when the HTP is not the simulator (``simulated``; default: an x86-64 process, where
    onnxruntime-qnn's HTP is always the simulator)."""
    if not (is_x86_host() if simulated is None else simulated):
        return None

    def watch(method: str, impl: Callable) -> Callable:
        if method not in WATCHED:
            return impl

        def watched(*args, **kwargs):
            token = _CALLS.begin(label)
            try:
                return impl(*args, **kwargs)
            finally:
                _CALLS.end(token)
        return watched
    return watch
