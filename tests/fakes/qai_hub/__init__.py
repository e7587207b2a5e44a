"""TEST DOUBLE of the ``qai_hub`` package (Qualcomm AI Hub client) version 0.56.0 — NOT the real client.

It lives in ``tests/fakes/qai_hub`` and is never installed. It mirrors the subset of ``qai_hub``'s
surface an onnxwrapper backend uses — same names, signatures, job classes and states, dataset
format, ``download_output_data()`` shape and error classes — and answers from a simulated service
(:data:`farm`) that compiles and runs ONNX models locally with onnxruntime, so results are real
numbers. Time is simulated (:class:`ManualClock`): waiting for a job never sleeps. Each function's
docstring names the real client's source it mirrors (``qai_hub/hub.py``, ``qai_hub/client.py``,
``qai_hub/api_utils.py``, ``qai_hub/public_rest_api.py``, ``qai_hub/util/session.py`` of the 0.56.0
wheel).

Like ``qai_hub/hub.py``, the module-level functions are bound methods of a global
:class:`Client` created at import time; creating it reads no configuration.

As in the real package, ``RateLimitedError`` is reachable only as ``client.RateLimitedError``
(``qai_hub.client.__all__`` omits it).

Test control: :data:`farm` (see :class:`~._farm.Farm`): tokens, devices, injected failures,
hangs, rate limits, upload log, clock. ``reset()`` between tests. For other processes (the
children of ``aipc diff``), two environment variables configure the farm when it is created or
reset: ``QAI_HUB_DOUBLE_PLAN`` (JSON list of fault injections, :meth:`Farm.apply_plan`) and
``QAI_HUB_DOUBLE_LOG`` (a file to which every upload and job is appended as one JSON line).

onnxwrapper's ``aihub`` backend uses it only through the test plugin ``FakeAihubBackend``
(``tests/fakes/fake_backends.py``), which binds it with the backend's ``load_client`` seam.
"""

from ._clock import ManualClock
from ._errors import Error, InternalError, UserError
from ._farm import Farm
from ._types import (ClientConfig, Device, JobStatus, JobType, SourceModelType, TensorSpec)
from ._assets import Dataset, Model
from ._jobs import CompileJob, InferenceJob, Job, ProfileJob

__version__ = "0.56.0"

#: the simulated AI Hub service shared by every double client (test control surface)
farm = Farm()

from . import _client  # noqa: E402
from ._client import Client  # noqa: E402

_client.DEFAULT_FARM = farm
from . import client  # noqa: E402,F401  (qai_hub.client namespace: RateLimitedError lives only there)

_global_client = Client()

get_devices = _global_client.get_devices
get_device_attributes = _global_client.get_device_attributes
upload_model = _global_client.upload_model
get_model = _global_client.get_model
submit_compile_job = _global_client.submit_compile_job
submit_profile_job = _global_client.submit_profile_job
submit_inference_job = _global_client.submit_inference_job
get_job = _global_client.get_job
set_verbose = _global_client.set_verbose
set_session_token = _global_client.set_session_token
upload_dataset = _global_client.upload_dataset
get_dataset = _global_client.get_dataset


def reset() -> None:
    """Reset the farm and forget the global client's loaded configuration (test helper)."""
    farm.reset()
    _global_client._config = None


__all__ = ["Client", "ClientConfig", "CompileJob", "Dataset", "Device", "Error", "InferenceJob", "InternalError",
           "Job", "JobStatus", "JobType", "ManualClock", "Model", "ProfileJob", "SourceModelType",
           "TensorSpec", "UserError", "farm", "get_dataset", "get_device_attributes", "get_devices", "get_job",
           "get_model", "reset", "set_session_token", "set_verbose", "submit_compile_job", "submit_inference_job",
           "submit_profile_job", "upload_dataset", "upload_model", "__version__"]
