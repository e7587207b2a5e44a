"""TEST DOUBLE support: a deterministic clock, so that job progress and every client-side wait
(``Job.wait`` polling, rate-limit retries) advance simulated time instead of sleeping.

The real client uses ``time.sleep`` in ``Job.wait`` (poll every ``Job._polling_interval`` = 10 s, or
1 s when verbose) and in ``Client._api_call_with_retry`` (20 s doubling to 60 s). The double calls
``ManualClock.sleep`` at the same points with the same durations.
"""

from __future__ import annotations

__all__ = ["ManualClock"]


class ManualClock:
    """Simulated seconds since the double's farm was reset.

    ``sleep(s)`` returns immediately and advances the clock by ``s``; ``monotonic()`` reads it.
    A backend under test can use the same object for its own backoff (inject ``clock.sleep`` and
    ``clock.monotonic``), so a whole retry schedule runs in microseconds of wall time.
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = float(start)
        self.slept: list[float] = []

    def monotonic(self) -> float:
        """Current simulated time in seconds."""
        return self.now

    def sleep(self, seconds: float) -> None:
        """Advance simulated time by ``seconds`` (recorded in :attr:`slept`)."""
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        self.slept.append(float(seconds))
        self.now += float(seconds)

    def advance(self, seconds: float) -> None:
        """Let simulated time pass without recording a client sleep."""
        self.now += float(seconds)
