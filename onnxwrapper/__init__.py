"""onnxwrapper: ``import onnxwrapper as ort`` wherever ``import onnxruntime as ort`` works.

Every public name of ``onnxruntime`` is reachable here and *is* onnxruntime's object
(``onnxwrapper.RunOptions is onnxruntime.RunOptions``), except:

* :class:`InferenceSession` — a subclass of ``onnxruntime.InferenceSession`` that dispatches to a
  backend (``cpu``, ``qnn``, plugins), selected by ``backend=``, ``providers=``,
  ``ONNXWRAPPER_BACKEND`` or ``auto``;
* :class:`SessionOptions` — a subclass of ``onnxruntime.SessionOptions`` that also records the
  calls ORT cannot report back (``add_initializer``, ``add_external_initializers``, free-dimension
  overrides, custom-op libraries), so backends that compile with a copy of the options apply them
  too (:class:`onnxwrapper.kernel.RecordingSessionOptions`);
* ``__version__`` — onnxwrapper's version (``get_version_string()`` stays onnxruntime's).

Added names: :func:`get_available_backends`, :class:`BackendInfo`, :func:`add_run_observer`,
:class:`PartitionReport` / :class:`NodeAssignment` / :class:`PartialOffloadWarning` (what
``InferenceSession.get_partition()`` returns and warns), :class:`NonFiniteInputWarning` (NaN/±Inf
feeds on an FP16 target), the error classes in
:mod:`onnxwrapper.errors`. ``onnxruntime.capi``, ``.quantization`` and
``.tools`` are used from onnxruntime itself. Importing this module imports onnxruntime and
nothing else: no backend SDK, no I/O, no logging configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import onnxruntime as _onnxruntime

# ``name as name``: explicit re-exports (PEP 484), so type checkers see them; ``__all__`` is computed
from onnxwrapper._registry import get_available_backends as get_available_backends
from onnxwrapper._session import InferenceSession as InferenceSession
from onnxwrapper._session import add_run_observer as add_run_observer
from onnxwrapper.errors import ArtifactError as ArtifactError
from onnxwrapper.errors import BackendCapabilityError as BackendCapabilityError
from onnxwrapper.errors import BackendCompileError as BackendCompileError
from onnxwrapper.errors import BackendConfigConflictError as BackendConfigConflictError
from onnxwrapper.errors import BackendError as BackendError
from onnxwrapper.errors import BackendNotFoundError as BackendNotFoundError
from onnxwrapper.errors import BackendOptionError as BackendOptionError
from onnxwrapper.errors import BackendRunError as BackendRunError
from onnxwrapper.errors import BackendUnavailableError as BackendUnavailableError
from onnxwrapper.errors import BackendValidationError as BackendValidationError
from onnxwrapper.errors import CompileBudgetError as CompileBudgetError
from onnxwrapper.errors import CompileFailedError as CompileFailedError
from onnxwrapper.errors import ContextLoadError as ContextLoadError
from onnxwrapper.errors import OnnxwrapperError as OnnxwrapperError
from onnxwrapper.errors import PartitionError as PartitionError
from onnxwrapper.errors import PrecisionUnsupportedError as PrecisionUnsupportedError
from onnxwrapper.errors import RemoteJobError as RemoteJobError
from onnxwrapper.errors import SessionClosedError as SessionClosedError
from onnxwrapper.kernel import NodeAssignment as NodeAssignment
from onnxwrapper.kernel import NonFiniteInputWarning as NonFiniteInputWarning
from onnxwrapper.kernel import PartialOffloadWarning as PartialOffloadWarning
from onnxwrapper.kernel import PartitionReport as PartitionReport
from onnxwrapper.kernel import RecordingSessionOptions as SessionOptions
from onnxwrapper.kernel import __version__ as __version__

if TYPE_CHECKING:
    # at run time ``BackendInfo`` comes from ``__getattr__`` (its dataclass is created on first use)
    from onnxwrapper._backend_info import BackendInfo as BackendInfo

_OWN = [
    "InferenceSession",
    "SessionOptions",
    "__version__",
    "get_available_backends",
    "BackendInfo",
    "add_run_observer",
    "PartitionReport",
    "NodeAssignment",
    "PartialOffloadWarning",
    "NonFiniteInputWarning",
    "OnnxwrapperError",
    "BackendError",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "BackendOptionError",
    "BackendValidationError",
    "BackendCapabilityError",
    "BackendCompileError",
    "CompileFailedError",
    "CompileBudgetError",
    "ContextLoadError",
    "BackendConfigConflictError",
    "BackendRunError",
    "PartitionError",
    "PrecisionUnsupportedError",
    "RemoteJobError",
    "ArtifactError",
    "SessionClosedError",
]


def _ort_public_names() -> list[str]:
    return [n for n in dir(_onnxruntime) if not n.startswith("_")]


def __getattr__(name: str) -> Any:
    """Forward every other public onnxruntime name (PEP 562); ``__all__`` is computed on demand;
    ``BackendInfo`` is imported on first use."""
    if name == "__all__":
        return sorted(set(_OWN) | set(_ort_public_names()))
    if name == "BackendInfo":
        from onnxwrapper._backend_info import BackendInfo

        return BackendInfo
    if not name.startswith("_") and hasattr(_onnxruntime, name):
        return getattr(_onnxruntime, name)
    raise AttributeError(f"module 'onnxwrapper' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OWN) | set(_ort_public_names()))
