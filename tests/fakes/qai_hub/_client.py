"""TEST DOUBLE of ``qai_hub.client.Client`` (qai-hub 0.56): same method names, signatures, argument
checks (client-side, in the real order) and exceptions; the service behind it is the farm
(:mod:`._farm`), which compiles and runs models locally (:mod:`._compile`, :mod:`._execute`).

Configuration, as ``api_utils.get_config_path`` / ``load_api_config_from_file`` and
``Client.config``: nothing is read at construction; the first API call loads ``~/.qai_hub/<profile>.ini``
(``profile=``), else the file named by ``$QAIHUB_CLIENT_INI``, else ``~/.qai_hub/client.ini``;
section ``[api]`` needs ``api_token``, ``api_url`` and ``web_url`` (``verbose`` defaults to True).
Missing file -> ``UserError("Failed to load client configuration file. ...")``; missing key ->
``UserError("Failed to load configuration file. ... Your API token is missing ...")``; a token the
farm does not accept -> ``UserError("Failed to authenticate. ...")`` (HTTP 401 mapping of
``client._raise_if_hub_user_error``).
"""

from __future__ import annotations

import configparser
import errno
import os
import socket
import posixpath
from pathlib import Path
from urllib.parse import urljoin

from ._assets import SUPPORT_EMAIL, Dataset, Model, visible_textbox
from ._compile import load_onnx, read_target
from ._errors import InternalError, UserError
from ._farm import StoredModel
from ._runtime import session_for
from ._submit import TRANSPORT_RETRY_SECONDS, SubmitMixin
from ._types import (DEFAULT_HUB_WEB_URL, MODEL_TYPES_BY_EXTENSION, ClientConfig, Device, SourceModelType,
                     _validate_device_params)

__all__ = ["Client", "QAIHUB_CLIENT_ENV", "get_config_path"]

QAIHUB_CLIENT_ENV = "QAIHUB_CLIENT_INI"
#: the farm clients use by default (set by the package to its ``farm``)
DEFAULT_FARM = None
_SIGNUP_URL, _GET_STARTED_URL = "https://aihub.qualcomm.com/", "https://aihub.qualcomm.com/get-started"


def get_config_path(profile: str | None = None) -> str:
    """``api_utils.get_config_path``: profile file, else ``$QAIHUB_CLIENT_INI``, else ``~/.qai_hub/client.ini``."""
    path = f"~/.qai_hub/{profile}.ini" if profile else os.environ.get(QAIHUB_CLIENT_ENV, "~/.qai_hub/client.ini")
    return os.path.expanduser(path)


def _token_help(web_url: str) -> str:
    return (f"Please go to your Account page to view your current token: {web_url}/account/. Refer to the Getting "
            f"Started instructions for configuring: {web_url}/docs/hub/getting_started.html.")


def _load_config(path: str, profile: bool = False) -> ClientConfig:
    """``load_api_config_from_file``; a missing file is ``UserError`` via ``Client.config`` but a raw
    ``FileNotFoundError`` via ``Client(profile=...)`` (``_initialize_config`` re-raises it)."""
    if not os.path.exists(path):
        text = (f"{path} not found. Please request access at {_SIGNUP_URL}. If you have access, please refer to "
                f"{_GET_STARTED_URL} for instructions on configuring the API key.")
        if profile:
            raise FileNotFoundError(text)
        raise UserError("Failed to load client configuration file.\n" + visible_textbox(text))
    parser = configparser.ConfigParser()
    parser.read([path])
    try:
        section = parser["api"]
        verbose = section.get("verbose", "True").lower() in ("yes", "true", "t", "1")
        return ClientConfig(api_url=section["api_url"], web_url=section["web_url"], api_token=section["api_token"],
                            default_project=section.get("default_project"), verbose=verbose)
    except KeyError:
        raise UserError("Failed to load configuration file.\n" + visible_textbox(
            f"Your API token is missing. {_token_help(DEFAULT_HUB_WEB_URL)}")) from None


def _version_key(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in text.split("."))


def _os_matches(device_os: str, wanted: str) -> bool:
    if not wanted:
        return True
    if wanted.startswith("["):
        low, _, high = wanted[1:].rstrip(")").partition(",")
        v = _version_key(device_os)
        return (not low or v >= _version_key(low)) and (not high or v < _version_key(high))
    return device_os == wanted


class Client(SubmitMixin):
    """Mirrors ``qai_hub.client.Client(config=None, profile=None, default_project_id=None,
    client_mode="library")``. ``_farm`` (double only) selects the simulated service."""

    def __init__(self, config: ClientConfig | None = None, profile: str | None = None,
                 default_project_id: str | None = None, client_mode: str = "library", *, _farm=None) -> None:
        if config and profile:
            raise ValueError("Specify either config or profile, not both")
        self._farm = _farm if _farm is not None else DEFAULT_FARM
        self._client_mode = client_mode
        self._default_project_id = default_project_id
        self._config = config if config else (_load_config(get_config_path(profile), True) if profile else None)

    # -- configuration (Client.config / set_session_token / set_verbose) ----------------------
    @property
    def config(self) -> ClientConfig:
        """``Client.config``: loads the default configuration on first use (see the module docstring)."""
        if self._config is None:
            self._config = _load_config(get_config_path())
            self._config.client_mode = self._client_mode
        return self._config

    @property
    def verbose(self) -> bool:
        return self.config.verbose

    def set_verbose(self, verbose: bool = True) -> None:
        """``Client.set_verbose``: when True the real client prints progress to stdout."""
        self.config.verbose = verbose

    def set_session_token(self, token: str) -> None:
        """``Client.set_session_token`` (deprecated in 0.56; raises if a config is already set)."""
        if self._config:
            raise UserError("ClientConfig has already been set. Unable to set session token.")
        self._config = ClientConfig(api_token=token, client_mode=self._client_mode)

    def _api(self, call: str, poll: bool = False, **summary) -> None:
        """One authenticated API request against the farm (raises like ``Client._api_call``)."""
        config = self.config
        if self._farm.unreachable:
            self._offline(config.api_url)
        if config.api_token not in self._farm.tokens:
            raise UserError("Failed to authenticate.\n" + visible_textbox(
                f"Failure to authenticate is likely caused by a bad or expired API token. "
                f"{_token_help(config.web_url)}"))
        self._farm.calls.append((call, summary))
        if poll:
            self._farm.take_poll_failure()

    def _offline(self, api_url: str) -> None:
        """No network: what ``Client._handle_api_exception`` raises for a ``requests`` ConnectionError,
        after the session's transport retries; the OS error is in the chain as urllib3 puts it."""
        self._farm.clock.advance(TRANSPORT_RETRY_SECONDS)
        if self._farm.unreachable == "dns":
            os_error: OSError = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        else:
            os_error = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
        connection = OSError(f"HTTPSConnectionPool: Max retries exceeded (Caused by NewConnectionError: {os_error})")
        connection.__cause__ = os_error  # stands for requests.exceptions.ConnectionError (an OSError)
        raise InternalError("Internal API failure.\n" + visible_textbox(
            f"Could not connect to Qualcomm AI Hub. Please visit {api_url} to check the service's status.")) \
            from connection

    def _web_url(self, kind: str, asset_id: str) -> str:
        return urljoin(self.config.web_url, posixpath.join(kind, asset_id, ""))

    # -- devices (Client.get_devices / _get_device / _check_devices) -------------------------
    def get_devices(self, name: str = "", os: str = "", attributes=None) -> list:
        """``Client.get_devices``: devices with exactly this ``name`` (if given), an OS matching
        ``os`` (version or right-open interval ``"[a,b)"``) and all ``attributes``.

        Raises:
            ValueError: only an OS given. UserError: malformed OS interval, configuration/token errors.
        """
        attributes = [] if attributes is None else [attributes] if isinstance(attributes, str) else list(attributes)
        _validate_device_params(name, os, attributes)
        if os.startswith("[") and not (os.endswith(")") and "," in os):
            raise UserError(f"Incorrectly formed OS interval {os}")
        self._api("get_device_list", name=name, os=os)
        return [Device(d.name, d.os, list(d.attributes)) for d in self._farm.devices
                if (not name or d.name == name) and _os_matches(d.os, os) and all(a in d.attributes for a in attributes)]

    def get_device_attributes(self) -> list:
        """``Client.get_device_attributes``: sorted union of every device's attributes."""
        return sorted({a for d in self.get_devices() for a in d.attributes})

    def _get_device(self, device: Device):
        wanted = [device.attributes] if isinstance(device.attributes, str) else device.attributes
        found = self.get_devices(device.name, device.os, wanted)
        return max(found, key=lambda d: _version_key(d.os)) if found else None

    def _check_devices(self, device, model_type: SourceModelType, compile_job: bool = False) -> list:
        devices = []
        for dev in [device] if isinstance(device, Device) else device:
            d = self._get_device(dev)
            if d is None:
                raise UserError(f"{dev} is not available.")
            needs = {SourceModelType.ONNX: ("framework:onnx", "ONNX"), SourceModelType.TFLITE: ("framework:tflite",
                     "TFLite"), SourceModelType.QNN_CONTEXT_BINARY: ("framework:qnn", "QNN"),
                     SourceModelType.QNN_DLC: ("framework:qnn", "QNN")}.get(model_type)
            if not compile_job and needs and needs[0] not in d.attributes:
                raise UserError(f"device {d} does not support {needs[1]} model input")
            devices.append(d)
        return devices

    # -- models and datasets -----------------------------------------------------------------
    @staticmethod
    def _determine_model_type(model) -> SourceModelType:
        """``client._determine_model_type`` for the types the double models."""
        if model is None:
            raise UserError("Model passed in was 'None' (make sure this is not the target of a failed compile job)")
        if isinstance(model, Model):
            return model.model_type
        if isinstance(model, (str, Path)):
            path = str(model)
            if os.path.isdir(path):
                if len([f for f in os.listdir(path) if f.endswith(".onnx")]) != 1:
                    raise UserError(f"Model directory '{path}' must contain exactly one .onnx file.")
                return SourceModelType.ONNX
            model_type = MODEL_TYPES_BY_EXTENSION.get(os.path.splitext(path)[1])
            if model_type is None:
                raise UserError(f"Unsupported model type for '{model}'.")
            return model_type
        if isinstance(model, bytes) and model[4:8] == b"TFL3":
            return SourceModelType.TFLITE
        if type(model).__name__ == "ModelProto":
            return SourceModelType.ONNX
        raise UserError("Unsupported model type.")

    def _store_model(self, payload, kind: str, name: str, data: bytes, producer: str | None = None) -> Model:
        farm = self._farm
        stored = StoredModel(farm.new_id("m"), name, kind, payload, farm.clock.now, producer)
        farm.models[stored.model_id] = stored
        if producer is None:
            farm.record_upload("model", name, data)
        return Model(self, stored)

    def upload_model(self, model, name: str | None = None, project=None) -> Model:
        """``Client.upload_model``: ``onnx.ModelProto``, a path (``.onnx``, ``.bin``, ``.dlc``, ...) or
        a directory (one ``.onnx`` + at most one ``.data``). Records the upload on the farm."""
        return self._upload_model_if_needed(model, self._determine_model_type(model), name)

    def _upload_model_if_needed(self, model, model_type: SourceModelType, name: str | None = None) -> Model:
        if isinstance(model, Model):
            return model
        self._api("create_and_upload_model", kind=model_type.name)
        if isinstance(model, (str, Path)):
            path = os.path.expanduser(str(model))
            files = [os.path.join(path, f) for f in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
            data = b"".join(open(f, "rb").read() for f in files)
            if model_type == SourceModelType.ONNX:
                payload = load_onnx(path)
            else:
                try:
                    payload = read_target(data)
                    session_for(payload.onnx_bytes)  # a target file that onnxruntime cannot load fails here
                except ValueError:
                    payload = data
            return self._store_model(payload, model_type.name, name or os.path.basename(path), data)
        if model_type == SourceModelType.ONNX:
            return self._store_model(model, "ONNX", name or "ONNX", model.SerializeToString())
        return self._store_model(model, model_type.name, name or "TFLite", bytes(model))

    def get_model(self, model_id: str) -> Model:
        """``Client.get_model``. Raises UserError (HTTP 404 text) for an unknown id."""
        self._api("get_model", model_id=model_id)
        stored = self._farm.models.get(model_id)
        if stored is None:
            raise UserError(f"Model ID '{model_id}' could not be found. It may not exist or you may not have "
                            f"permission to view it.")
        return Model(self, stored)

    def get_dataset(self, dataset_id: str) -> Dataset:
        """``Client.get_dataset``. Raises UserError (HTTP 404 text) for an unknown id."""
        self._api("get_dataset", dataset_id=dataset_id)
        entries = self._farm.datasets.get(dataset_id)
        if entries is None:
            raise UserError(f"ID '{dataset_id}' could not be found. It may not exist or you may not have "
                            f"permission to view it.")
        return Dataset(self, dataset_id, dataset_id, self._farm.clock.now, entries)

    def upload_dataset(self, data, name: str | None = None, project=None) -> Dataset:
        """``Client.upload_dataset``: ``{name: [arrays]}`` (ordered keys = schema; one array per
        sample, same count for every key; dtypes float16/float32/bool/int8/int16/int32/int64/uint8/
        uint16). Expires after 30 days.

        Raises:
            UserError: bad structure or dtype, unequal sample counts, too large (HTTP 413).
        """
        self._check_data_entries(data)
        return self._upload_dataset(data, name)

    def _upload_dataset(self, inputs, name: str | None = None) -> Dataset:
        import numpy as np

        if isinstance(inputs, Dataset):
            return inputs
        if isinstance(inputs, str):
            raise NotImplementedError("the qai-hub test double does not read h5 dataset files")
        entries = {k: [np.array(a, copy=True) for a in v] for k, v in inputs.items()}
        data = b"".join(a.tobytes() for v in entries.values() for a in v)
        limit = self._farm.max_dataset_bytes
        self._api("create_and_upload_dataset", bytes=len(data))
        if limit is not None and len(data) > limit:
            raise UserError("The uploaded asset is too large. Please contact us for workarounds."
                            f"Please contact support at {SUPPORT_EMAIL} if you need assistance.")
        dataset_id = self._farm.new_id("d")
        self._farm.datasets[dataset_id] = entries
        self._farm.record_upload("dataset", name or "h5-dataset", data)
        return Dataset(self, dataset_id, name or "h5-dataset", self._farm.clock.now, entries)
