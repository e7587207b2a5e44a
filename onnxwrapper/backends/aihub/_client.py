"""The qai-hub client an ``aihub`` backend drives and the clock it waits with: the data of the
backend's injection seam (:meth:`AihubBackend.load_client`), and the offline configuration check.

Facts about the client (qai-hub 0.56.0, ``qai_hub/client.py``, ``hub.py``, ``api_utils.py``):

* ``import qai_hub`` builds a global ``Client()`` and reads no configuration; it imports
  ``requests``, ``h5py``, ``botocore`` and ``protobuf`` (about 0.5 s, measured), so it is imported
  only when the backend is probed or opened, never at ``import onnxwrapper``.
* ``Client().config`` loads the configuration on first use, with no network I/O: the file named by
  ``$QAIHUB_CLIENT_INI``, else ``~/.qai_hub/client.ini`` (section ``[api]`` with ``api_token``,
  ``api_url``, ``web_url``), written by ``qai-hub configure --api_token <token>``. A missing file or
  key raises ``qai_hub.UserError`` ("Failed to load client configuration file." / "Failed to load
  configuration file. … Your API token is missing"). There is no environment variable for the
  token itself. Whether a configured token is *valid* is known only at the first network call
  (HTTP 401 → ``UserError("Failed to authenticate. …")``).
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from typing import Any

import importlib_metadata

from onnxwrapper.errors import BackendUnavailableError

__all__ = ["CONFIGURE_HINT", "INSTALL_HINT", "HubClient", "SystemClock", "configuration_problem", "load_qai_hub",
           "short_message", "version_note"]

INSTALL_HINT = "pip install 'onnxwrapper[aihub]'"
#: what a user runs to configure the client (qai-hub's own CLI; token from the account page)
CONFIGURE_HINT = ("qai-hub configure --api_token <your token> (the token is on "
                  "https://workbench.aihub.qualcomm.com/account/; it is written to ~/.qai_hub/client.ini, or to "
                  "the file $QAIHUB_CLIENT_INI names)")
_TESTED = "0.56"


class SystemClock:
    """Wall-clock time for the backend's waits: ``monotonic()`` (s) and ``sleep(seconds)``."""

    @staticmethod
    def monotonic() -> float:
        """Seconds of ``time.monotonic()``."""
        return time.monotonic()

    @staticmethod
    def sleep(seconds: float) -> None:
        """Wait ``seconds`` of wall-clock time (``time.sleep``)."""
        time.sleep(seconds)


@dataclass(frozen=True)
class HubClient:
    """The client an :class:`~onnxwrapper.backends.aihub.AihubBackend` drives (see ``load_client``).

    Attributes:
        module: the imported package with qai-hub 0.56's API (``Client``, ``Device``, ``UserError``,
            ``InternalError``, ``client.RateLimitedError``).
        client: a ``module.Client`` of its own (the backend never uses the package's global client).
        version: the package version string.
        clock: any object with ``monotonic()`` (seconds) and ``sleep(seconds)``, used for every
            wait and backoff (default: :class:`SystemClock`; a client whose jobs run in simulated
            time passes the clock of that simulation).
    """

    module: Any
    client: Any
    version: str
    clock: Any = SystemClock()


def _version(module) -> str:
    try:
        return importlib_metadata.version("qai-hub")
    except importlib_metadata.PackageNotFoundError:  # not installed as a distribution
        return str(getattr(module, "__version__", "unknown"))


def load_qai_hub() -> HubClient:
    """Import ``qai_hub`` and create a ``Client()`` of its own (reads no configuration yet).

    Raises:
        BackendUnavailableError: qai-hub is not installed, or older than 0.56 (whose inference jobs
            take no ``profile`` argument).
    """
    try:
        module = importlib.import_module("qai_hub")
    except ImportError as exc:
        reason = f"qai-hub is not installed ({exc})"
        raise BackendUnavailableError(f"Backend 'aihub' needs the qai-hub client: {reason}. To fix: {INSTALL_HINT}.",
                                      backend="aihub", reason=reason, install_hint=INSTALL_HINT) from exc
    version = _version(module)
    parts = version.split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() and (int(parts[0]), int(parts[1])) < (0, 56):
        reason = f"qai-hub {version} is older than 0.56 (the API this backend uses)"
        hint = "pip install -U 'qai-hub>=0.56,<0.57'"
        raise BackendUnavailableError(f"Backend 'aihub': {reason}. To fix: {hint}.", backend="aihub", reason=reason,
                                      install_hint=hint)
    return HubClient(module, module.Client(), version)


def short_message(exc: BaseException) -> str:
    """The client's error text on one line (its messages wrap advice in a drawn text box)."""
    text = " ".join(str(exc).replace("│", " ").replace("|", " ").split())
    return "".join(ch for ch in text if ch not in "┌┐└┘─").strip()


def configuration_problem(hub: HubClient) -> str | None:
    """``None`` when the client has a configured API token, else why not (offline: reads the
    configuration file, never the network; see the module docstring)."""
    try:
        config = hub.client.config
    except hub.module.UserError as exc:
        return short_message(exc)
    except FileNotFoundError as exc:  # Client(profile=...) with a missing profile file
        return str(exc)
    if not getattr(config, "api_token", ""):
        return "the configuration has an empty api_token"
    return None


def version_note(version: str) -> str:
    """A note when ``version`` is newer than the qai-hub release this backend was written against."""
    return "" if version.startswith(_TESTED) else f" (written against qai-hub {_TESTED}; {version} is untested)"
