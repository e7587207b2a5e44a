"""TEST DOUBLE of qai-hub 0.56's exception classes (``qai_hub/client.py``, section "ERROR HANDLING").

Same names, bases and constructor signatures as the real client; the messages the double raises
start with the same text as the real ones (``_raise_if_hub_user_error``, ``Client.config``,
``Client._api_call_with_retry``) so callers that match on prefixes behave the same.
"""

from __future__ import annotations

__all__ = ["Error", "InternalError", "UserError", "RateLimitedError"]


class Error(Exception):
    """Mirrors ``qai_hub.client.Error``: base of every exception the API raises itself."""

    def __init__(self, message):
        super().__init__(message)


class InternalError(Error):
    """Mirrors ``qai_hub.client.InternalError``: service failure (HTTP 5xx, connection, transport
    timeouts) as raised by ``client._raise_internal_error`` ("Internal API failure. ...")."""

    def __init__(self, message):
        super().__init__(message)


class UserError(Error):
    """Mirrors ``qai_hub.client.UserError``: bad input, missing/invalid API token (HTTP 4xx other
    than 429), unavailable device, expired dataset."""

    def __init__(self, message):
        super().__init__(message)


class RateLimitedError(Error):
    """Mirrors ``qai_hub.client.RateLimitedError``: HTTP 429 on job creation
    (``client._raise_if_hub_user_error``); ``submit_*_job(retry=True)`` retries it for up to
    ``RATE_LIMIT_RETRY_TIMEOUT`` = 10 minutes before raising it."""
