"""TEST DOUBLE of qai-hub 0.56's plain value types.

Sources (qai_hub 0.56.0 wheel): ``public_rest_api.py`` (``ClientConfig``, ``TensorSpec``,
``InputSpecs``, ``DatasetEntries``, ``DEFAULT_HUB_*_URL``), ``client.py`` (``Device``,
``_validate_device_params``, ``SourceModelType``, ``MODEL_TYPES_BY_EXTENSION``, ``JobStatus``,
``JobType``), ``public_api_pb2.py`` (enum numbers of ``JobState``/``ModelType``/``JobType``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Mapping, NamedTuple, Union

import numpy as np

__all__ = ["DEFAULT_HUB_API_URL", "DEFAULT_HUB_WEB_URL", "ClientConfig", "TensorSpec", "IOSpec", "InputSpecs",
           "DatasetEntries", "Device", "SourceModelType", "MODEL_TYPES_BY_EXTENSION", "JobStatus", "JobType",
           "TENSOR_DTYPES"]

#: ``public_rest_api.DEFAULT_HUB_API_URL`` / ``DEFAULT_HUB_WEB_URL`` in 0.56
DEFAULT_HUB_API_URL = "https://workbench.aihub.qualcomm.com"
DEFAULT_HUB_WEB_URL = "https://workbench.aihub.qualcomm.com"

_InputSpec = tuple[tuple[int, ...], str]
#: ``public_rest_api.InputSpecs``: name -> shape tuple, or (shape tuple, dtype string)
InputSpecs = Mapping[str, Union[tuple[int, ...], _InputSpec]]
#: ``public_rest_api.DatasetEntries``: name -> one array per sample
DatasetEntries = Mapping[str, list]

#: ``api_utils._STR_TO_TETRA_TYPE``: the only dtype strings input specs / tensor specs carry
TENSOR_DTYPES = ("float16", "float32", "int32", "int8", "uint8", "int16", "uint16", "int64", "bool")


@dataclass
class ClientConfig:
    """Mirrors ``public_rest_api.ClientConfig`` (same fields and defaults)."""

    api_token: str
    api_url: str = DEFAULT_HUB_API_URL
    web_url: str = DEFAULT_HUB_WEB_URL
    verbose: bool = False
    client_mode: Literal["library", "cli"] = "library"
    default_project: str | None = None


class TensorSpec(NamedTuple):
    """Mirrors ``public_rest_api.TensorSpec``; ``dtype`` is one of :data:`TENSOR_DTYPES`."""

    name: str
    dtype: str
    shape: tuple | None = None
    scale: float | None = None
    zero_point: float | None = None


#: ``public_rest_api.IOSpec``: graph name (``None`` for single-graph models) -> tensor specs
IOSpec = dict


def _validate_device_params(name: str, os: str, attributes) -> None:
    # mirrors client._validate_device_params
    if name == "" and os != "" and attributes == []:
        raise ValueError("Cannot filter devices when provided only an OS version. Please provide a device name "
                         "and/or attributes.")


@dataclass
class Device:
    """Mirrors ``client.Device``: ``name`` must match a device name exactly; ``os`` is empty (latest),
    a version or a right-open interval ``"[12,13)"``; ``attributes`` a string or list of strings.
    Selection happens when a job is submitted (``Client._check_devices``)."""

    name: str = ""
    os: str = ""
    attributes: Union[str, list] = field(default_factory=list)

    def __post_init__(self):
        _validate_device_params(self.name, self.os, self.attributes)


class SourceModelType(Enum):
    """Mirrors ``client.SourceModelType`` (values = ``public_api_pb2.ModelType`` numbers)."""

    UNRECOGNIZED_MODEL_TYPE = 0
    TORCHSCRIPT = 1
    MLMODEL = 2
    TFLITE = 4
    MLMODELC = 5
    ONNX = 6
    MLPACKAGE = 8
    TETRART = 9
    QNN_LIB_AARCH64_ANDROID = 10
    QNN_CONTEXT_BINARY = 11
    AIMET_ONNX = 12
    QNN_LIB_X86_64_LINUX = 14
    QNN_DLC = 15
    TORCH_EXPORTED_PROGRAM = 16


#: ``client.MODEL_TYPES_BY_EXTENSION``
MODEL_TYPES_BY_EXTENSION = {
    ".bin": SourceModelType.QNN_CONTEXT_BINARY, ".mlmodel": SourceModelType.MLMODEL,
    ".mlmodelc": SourceModelType.MLMODELC, ".mlpackage": SourceModelType.MLPACKAGE, ".onnx": SourceModelType.ONNX,
    ".pt": SourceModelType.TORCHSCRIPT, ".pth": SourceModelType.TORCHSCRIPT,
    ".pt2": SourceModelType.TORCH_EXPORTED_PROGRAM, ".tflite": SourceModelType.TFLITE,
    ".trtmodel": SourceModelType.TETRART, ".aimet": SourceModelType.AIMET_ONNX, ".dlc": SourceModelType.QNN_DLC,
}


@dataclass(unsafe_hash=True)
class JobStatus:
    """Mirrors ``client.JobStatus``: ``state`` and the server's ``message`` (``failure_reason``).

    Terminal states: ``SUCCESS``, ``FAILED``. ``CREATED`` is *pending*; every other state (including
    ``UNSPECIFIED``) is *running* (``State._is_running_state``).
    """

    class State(Enum):
        SUCCESS = 10
        FAILED = 30
        CREATED = 1
        UNSPECIFIED = 0
        OPTIMIZING_MODEL = 50
        PROVISIONING_DEVICE = 60
        MEASURING_PERFORMANCE = 70
        RUNNING_INFERENCE = 80
        QUANTIZING_MODEL = 90
        LINKING_MODELS = 100

        @classmethod
        def _missing_(cls, value):
            return JobStatus.State.UNSPECIFIED

        def _is_terminal_state(self) -> bool:
            return self in (JobStatus.State.SUCCESS, JobStatus.State.FAILED)

        def _is_running_state(self) -> bool:
            return self not in (JobStatus.State.SUCCESS, JobStatus.State.FAILED, JobStatus.State.CREATED)

    state: "JobStatus.State"
    message: str | None = None

    @staticmethod
    def all_running_states():
        """``JobStatus.all_running_states``."""
        return [s for s in JobStatus.State if s._is_running_state()]

    @property
    def code(self) -> str:
        return self.state.name

    @property
    def success(self) -> bool:
        return self.state == JobStatus.State.SUCCESS

    @property
    def failure(self) -> bool:
        return self.state == JobStatus.State.FAILED

    @property
    def finished(self) -> bool:
        return self.state._is_terminal_state()

    @property
    def running(self) -> bool:
        return self.state._is_running_state()

    @property
    def pending(self) -> bool:
        return self.state == JobStatus.State.CREATED

    def __eq__(self, obj) -> bool:
        if isinstance(obj, JobStatus.State):
            return self.state == obj
        if isinstance(obj, str):
            return self.code == obj
        return self.state == obj.state and self.message == obj.message


class JobType(Enum):
    """Mirrors ``client.JobType``; ``PROFILE`` is an alias of ``INFERENCE`` since 0.56."""

    COMPILE = 3
    INFERENCE = 2
    PROFILE = 2
    QUANTIZE = 4
    LINK = 5
    UNSPECIFIED = 0

    @property
    def display_name(self) -> str:
        return self.name.lower()


def supported_array(value) -> bool:
    """``Client._SUPPORTED_NUMPY_DTYPES`` membership (the dtypes a dataset array may have)."""
    return isinstance(value, np.ndarray) and value.dtype in _SUPPORTED_NUMPY_DTYPES


_SUPPORTED_NUMPY_DTYPES = [np.dtype(t) for t in ("float16", "float32", "bool", "int8", "int16", "int32", "int64",
                                                  "uint8", "uint16")]
SUPPORTED_NUMPY_DTYPE_NAMES = ", ".join(d.name for d in _SUPPORTED_NUMPY_DTYPES)
