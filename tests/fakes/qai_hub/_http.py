"""TEST DOUBLE of qai-hub 0.56's HTTP error mapping (``client._raise_if_hub_user_error``,
``Client._handle_api_exception``; retriable statuses from ``util/session.py``)."""

from __future__ import annotations

from ._assets import SUPPORT_EMAIL, visible_textbox
from ._errors import InternalError, RateLimitedError, UserError

__all__ = ["RETRIABLE", "http_error"]

RETRIABLE = (429, 500, 502, 503, 504)  # session.RETRIABLE_STATUSES


def http_error(status: int, message: str | None, api_url: str) -> Exception:
    """The exception the real client raises for an HTTP ``status`` from AI Hub."""
    if status == 429:
        return RateLimitedError(message or "Too Many Requests: please slow down and try again soon.")
    if status == 413:
        return UserError((message or "The uploaded asset is too large. Please contact us for workarounds.")
                         + f"Please contact support at {SUPPORT_EMAIL} if you need assistance.")
    if 400 <= status < 500:
        return UserError(message or f"API request returned status code {status}.")
    what = "Qualcomm AI Hub is unavailable right now." if status in (502, 503) else "Qualcomm AI Hub reported errors."
    tail = f" Please visit {api_url} to check the service's status."
    tail += f" Please contact support at {SUPPORT_EMAIL}." if status not in (502, 503) else ""
    return InternalError("Internal API failure.\n" + visible_textbox(what + tail))
