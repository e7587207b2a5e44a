"""Every request the ``aihub`` backend makes to Qualcomm AI Hub: error mapping, backoff, bounded waits.

Facts (qai-hub 0.56.0 ``qai_hub/client.py``, ``util/session.py``):

* Job creation with ``retry=True`` retries HTTP 429 (``client.RateLimitedError``) by itself,
  *printing* to stdout and sleeping 20 s doubling to 60 s for up to 10 minutes
  (``_api_call_with_retry``). The backend always passes ``retry=False`` and owns the backoff, so the
  total wait is bounded by ``backend_options["max_wait"]`` and nothing is printed.
* ``Job.wait()`` sleeps with ``time.sleep`` and ``download_output_data()`` / ``download_profile()``
  call it without a timeout. The backend polls ``Job.get_status()`` itself (one GET per call; a
  terminal status is cached by the client) until ``SUCCESS``/``FAILED`` or ``job_timeout``, then
  downloads. A job that ran too long on the service ends ``FAILED`` with the service's message.
* Errors: ``UserError`` (HTTP 4xx, bad input; 401 → "Failed to authenticate."),
  ``client.RateLimitedError`` (HTTP 429; not exported as ``qai_hub.RateLimitedError``),
  ``InternalError`` (HTTP 5xx, connection errors, transport retries exhausted). A quota refusal is
  whatever status the service chooses: 429 is retried here, another 4xx is reported with its text.

A refused connection, a failed name lookup or an unreachable network is reported at once
(:class:`~onnxwrapper.errors.BackendUnavailableError`, :mod:`onnxwrapper.backends.aihub._unreachable`).
Other transient errors (rate limits, ``InternalError``) are retried with exponential backoff — 20 s,
doubling, at most 120 s between attempts — while the time spent since the first attempt plus the
next delay stays within ``max_wait``; then :class:`~onnxwrapper.errors.RemoteJobError`. Every wait
uses the client's clock (:class:`~onnxwrapper.backends.aihub.HubClient`), so tests run the whole
schedule on a simulated clock.
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
from typing import Any, Callable

from onnxwrapper.backends.aihub._client import CONFIGURE_HINT, HubClient, short_message
from onnxwrapper.backends.aihub._unreachable import unreachable_cause
from onnxwrapper.errors import BackendUnavailableError, RemoteJobError

__all__ = ["FIRST_DELAY", "MAX_DELAY", "HubCalls"]

_log = logging.getLogger("onnxwrapper.aihub")
FIRST_DELAY = 20.0
MAX_DELAY = 120.0
_AUTH_PREFIXES = ("Failed to authenticate", "Failed to load", "Please provide client configuration")


class HubCalls:
    """The requests of one session, serialized (the client's thread safety is undocumented).

    Args:
        hub: the :class:`HubClient`. device: device name for messages.
        job_timeout: seconds a job may take from submission to its end.
        max_wait: seconds of backoff per request for transient errors.
        poll_interval: seconds between job-status requests.
    """

    def __init__(self, hub: HubClient, *, device: str, job_timeout: float, max_wait: float,
                 poll_interval: float) -> None:
        self.hub, self.device = hub, device
        self.job_timeout, self.max_wait, self.poll_interval = job_timeout, max_wait, poll_interval
        self.lock = threading.RLock()
        self._user_error = hub.module.UserError
        self._transient = (hub.module.client.RateLimitedError, hub.module.InternalError)

    def _unavailable(self, exc: BaseException) -> BackendUnavailableError:
        reason = f"Qualcomm AI Hub refused the configured API token ({short_message(exc)})"
        return BackendUnavailableError(f"Backend 'aihub': {reason}. To fix: {CONFIGURE_HINT}.", backend="aihub",
                                       reason=reason, install_hint=CONFIGURE_HINT)

    def _unreachable(self, what: str, cause: str, spent: float) -> BackendUnavailableError:
        reason = f"Qualcomm AI Hub cannot be reached ({cause})"
        hint = "check the network connection, a proxy (HTTPS_PROXY) and the api_url of your qai-hub configuration"
        return BackendUnavailableError(f"Backend 'aihub': {reason} while trying to {what} (after the client's own "
                                       f"retries, {spent:.0f} s). A refused connection or a failed name lookup is "
                                       f"not retried. To fix: {hint}.", backend="aihub", reason=reason,
                                       install_hint=hint)

    def call(self, what: str, fn: Callable, *args, quiet: bool = False, **kwargs) -> Any:
        """``fn(*args, **kwargs)`` with transient errors retried within ``max_wait``.

        ``quiet`` captures what the client prints unconditionally (``Model.download`` prints
        "Downloaded model to …") into logger ``onnxwrapper.aihub`` at DEBUG.

        Raises:
            BackendUnavailableError: the token was rejected or is missing (with the configure hint), or
                AI Hub cannot be reached: a refused connection, a failed name lookup or an unreachable
                network (:mod:`onnxwrapper.backends.aihub._unreachable`) is never retried.
            RemoteJobError: transient errors beyond ``max_wait``.
            The client's ``UserError`` for anything else (callers map it with their context).
        """
        clock = self.hub.clock
        start = clock.monotonic()
        delay, attempts = FIRST_DELAY, 0
        with self.lock:
            while True:
                attempts += 1
                try:
                    if not quiet:
                        return fn(*args, **kwargs)
                    buffer = io.StringIO()
                    with contextlib.redirect_stdout(buffer):
                        result = fn(*args, **kwargs)
                    if buffer.getvalue().strip():
                        _log.debug("qai-hub printed: %s", buffer.getvalue().strip())
                    return result
                except self._user_error as exc:
                    if short_message(exc).startswith(_AUTH_PREFIXES):
                        raise self._unavailable(exc) from exc
                    raise
                except self._transient as exc:
                    spent = clock.monotonic() - start
                    cause = unreachable_cause(exc)
                    if cause is not None:  # not transient: said at once, not after max_wait
                        raise self._unreachable(what, cause, spent) from exc
                    kind = "rate limited" if isinstance(exc, self.hub.module.client.RateLimitedError) else \
                        "service error"
                    if spent + delay > self.max_wait:
                        raise RemoteJobError(
                            f"[ONNXRuntimeError] : 11 : EP_FAIL : Qualcomm AI Hub kept failing the request to "
                            f"{what} ({kind}: {short_message(exc)}); gave up after {attempts} attempt(s) and "
                            f"{spent:.0f} s (backend_options['max_wait'] = {self.max_wait:g} s). Try again later, "
                            f"or raise max_wait.", backend="aihub", job_kind=what,
                            status_message=short_message(exc)) from exc
                    _log.info("onnxwrapper aihub: %s while trying to %s; retrying in %.0f s", kind, what, delay)
                    clock.sleep(delay)
                    delay = min(delay * 2, MAX_DELAY)

    def wait(self, job, kind: str):
        """Poll ``job`` until it ends; return its final ``JobStatus``.

        Raises:
            RemoteJobError: it did not end within ``job_timeout`` (it keeps running on AI Hub: the
                client has no cancel call); status requests failing beyond ``max_wait``.
        """
        clock = self.hub.clock
        deadline = clock.monotonic() + self.job_timeout
        while True:
            status = self.call(f"read the status of {kind} job {job.job_id}", job.get_status)
            if status.finished:
                return status
            if clock.monotonic() + self.poll_interval > deadline:
                raise RemoteJobError(
                    f"[ONNXRuntimeError] : 11 : EP_FAIL : AI Hub {kind} job {job.job_id} on '{self.device}' did not "
                    f"finish within {self.job_timeout:g} s (backend_options['job_timeout']); last state "
                    f"{status.code}. It may still be running: {job.url}", backend="aihub", job_id=job.job_id,
                    job_url=job.url, job_kind=kind, status_message=status.code)
            clock.sleep(self.poll_interval)

    def finish(self, job, kind: str) -> None:
        """:meth:`wait`, then raise unless the job succeeded.

        Raises:
            RemoteJobError: the job failed (its URL and the service's message), or see :meth:`wait`.
        """
        status = self.wait(job, kind)
        if not status.success:
            message = status.message or "no message"
            raise RemoteJobError(
                f"[ONNXRuntimeError] : 11 : EP_FAIL : AI Hub {kind} job {job.job_id} failed on '{self.device}': "
                f"{message}. See {job.url}", backend="aihub", job_id=job.job_id, job_url=job.url, job_kind=kind,
                status_message=status.message)

    def refused(self, exc: BaseException, what: str) -> RemoteJobError:
        """The error for a request AI Hub refused with ``UserError`` (HTTP 4xx: bad input, quota, size)."""
        return RemoteJobError(f"[ONNXRuntimeError] : 11 : EP_FAIL : Qualcomm AI Hub refused to {what} on "
                              f"'{self.device}': {short_message(exc)}", backend="aihub", job_kind=what,
                              status_message=short_message(exc))
