"""Backend ``aihub``: ONNX models compiled and run on real Snapdragon devices of Qualcomm AI Hub.

`Qualcomm AI Hub <https://aihub.qualcomm.com/>`_ is a service that compiles models for, and runs
them on, a farm of Snapdragon phones, laptops and boards; ``qai-hub`` (``pip install
'onnxwrapper[aihub]'``, 0.56) is its Python client. With ``backend="aihub"`` and
``backend_options={"device": "Samsung Galaxy S25"}`` a session:

* compiles the model on AI Hub for that device when it is created (dynamic input dims: once per
  feed shape, at its first run, specialized as the ``qnn`` backend does) and keeps the compiled
  target in the local compile cache, keyed by the model's content hash, the device and the
  options: a second session compiles nothing;
* runs each ``run`` as an inference job on the device and returns the outputs in the ONNX model's
  names, dtypes and shapes; :meth:`AihubSession.run_batch` runs many feeds as one job per shape
  (``aipc diff --replay`` uses it);
* reports what AI Hub measured (:meth:`AihubSession.device_profile`: latency, memory, layers per
  compute unit), reached as ``session.backend_session.device_profile()``;
* raises typed errors: no token → :class:`~onnxwrapper.errors.BackendUnavailableError` saying how to
  configure; failed, timed-out or refused jobs → :class:`~onnxwrapper.errors.RemoteJobError` with the
  job's URL and message; rate limits and service errors are retried with backoff within
  ``max_wait``.

What leaves the machine: the model (its specialized copy, with external data) and every input
tensor of every run, uploaded to Qualcomm AI Hub; nothing is sent unless this backend was selected
by name — ``auto`` never picks it.

The client is bound through one documented seam, :meth:`AihubBackend.load_client` (returns a
:class:`HubClient`): a subclass may bind another implementation of the same API and is registered
as the ``aihub`` backend through the entry-point group ``onnxwrapper.backends``, like any plugin.
"""

from __future__ import annotations

from onnxwrapper.backends.aihub._backend import AihubBackend
from onnxwrapper.backends.aihub._client import HubClient, SystemClock
from onnxwrapper.backends.aihub._profile import DeviceProfile
from onnxwrapper.backends.aihub._session import AihubSession

__all__ = ["AihubBackend", "AihubSession", "DeviceProfile", "HubClient", "SystemClock"]
