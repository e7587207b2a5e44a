"""TEST DOUBLE of the ``qai_hub.client`` module namespace (qai-hub 0.56).

``qai_hub/__init__.py`` re-exports only ``client.__all__``, which does NOT include
``RateLimitedError``: real code must catch it as ``qai_hub.client.RateLimitedError``. The double
reproduces that split: ``qai_hub.RateLimitedError`` does not exist,
``qai_hub.client.RateLimitedError`` does.
"""

from ._client import Client
from ._errors import Error, InternalError, RateLimitedError, UserError
from ._jobs import CompileJob, InferenceJob, Job, ProfileJob
from ._assets import Dataset, Model
from ._types import ClientConfig, Device, JobStatus, JobType, SourceModelType, TensorSpec

RATE_LIMIT_RETRY_TIMEOUT = 10  # minutes (client.RATE_LIMIT_RETRY_TIMEOUT)

__all__ = ["Client", "ClientConfig", "CompileJob", "Dataset", "Device", "Error", "InferenceJob", "InternalError",
           "Job", "JobStatus", "JobType", "Model", "ProfileJob", "SourceModelType", "TensorSpec", "UserError"]
