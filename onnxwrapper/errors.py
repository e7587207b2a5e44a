"""Typed errors raised by onnxwrapper.

Where onnxruntime raises for the same bad input, onnxwrapper raises onnxruntime's exception class
(or a subclass of it) with the same message prefix, so ``except InvalidArgument`` and
``except ValueError`` in user code keep working. The errors below are for situations onnxruntime
has no notion of (backends, artifacts, partitions). Each message says what was wrong, what was
expected and what to do.

Hierarchy::

    Exception
    ├── OnnxwrapperError                      base of every error onnxwrapper raises itself
    │   ├── BackendError                      .backend: the backend name involved
    │   │   ├── BackendNotFoundError          (also ValueError) no backend has that name
    │   │   ├── BackendUnavailableError       (also RuntimeError) requested backend cannot run here
    │   │   ├── BackendOptionError            (also ValueError) unknown or invalid backend option
    │   │   ├── BackendValidationError        a plugin does not satisfy the backend protocol
    │   │   ├── BackendCapabilityError        (also NotImplementedError) method not served by it
    │   │   │   └── PrecisionUnsupportedError the target's hardware lacks the precision (FP16 on HTP v68)
    │   │   ├── BackendCompileError           (also RuntimeError) the backend's compiler process died
    │   │   │   └── CompileFailedError        (also onnxruntime EPFail) the compiler refused the graph
    │   │   │       │                         (.error_name, .error_code, .rung, .largest)
    │   │   │       └── CompileBudgetError    the compile ran past its wall-time or memory budget
    │   │   ├── BackendConfigConflictError    (also RuntimeError) process-global config clash
    │   │   ├── BackendRunError               (also onnxruntime EPFail) the native runtime failed
    │   │   │   ├── RemoteJobError            a remote service's job or request failed (.job_url)
    │   │   │   └── ContextLoadError          a compiled context could not be loaded (.error_name)
    │   │   ├── SessionClosedError            (also onnxruntime Fail) run after InferenceSession.close()
    │   │   ├── ForkedSessionError            (also RuntimeError) run in a fork()ed child of its process
    │   │   └── PartitionError                (also RuntimeError) nodes would run off the backend
    │   ├── ArtifactError                     .path: compiled artifact or cache entry problems
    │   ├── MalformedFileError                (also ValueError) .path, .entry: a file from elsewhere
    │   │                                     (tensor file, capture, diff folder) is not what its format says
    │   └── RecipeError                       (also ValueError) .path: an unusable repair recipe file
    │       └── RecipeMismatchError           the recipe is for another model (content hash differs)
    └── InternalError                         a broken invariant inside onnxwrapper (a bug:
                                              deliberately not an OnnxwrapperError)
"""

from __future__ import annotations

from onnxruntime.capi.onnxruntime_pybind11_state import EPFail as _OrtEPFail
from onnxruntime.capi.onnxruntime_pybind11_state import Fail as _OrtFail

__all__ = [
    "ArtifactError",
    "BackendCapabilityError",
    "BackendCompileError",
    "BackendConfigConflictError",
    "BackendError",
    "BackendNotFoundError",
    "BackendOptionError",
    "BackendRunError",
    "BackendUnavailableError",
    "BackendValidationError",
    "CompileBudgetError",
    "CompileFailedError",
    "ContextLoadError",
    "ForkedSessionError",
    "InternalError",
    "MalformedFileError",
    "OnnxwrapperError",
    "PartitionError",
    "PrecisionUnsupportedError",
    "RecipeError",
    "RecipeMismatchError",
    "RemoteJobError",
    "SessionClosedError",
]


class OnnxwrapperError(Exception):
    """Base class of every error onnxwrapper raises on its own account."""


class BackendError(OnnxwrapperError):
    """An error tied to one backend.

    Args:
        message: the full, user-facing explanation.
        backend: canonical backend name (e.g. ``"qnn"``), or ``None`` when unknown.
    """

    def __init__(self, message: str, *, backend: str | None = None) -> None:
        super().__init__(message)
        self.backend = backend


class BackendNotFoundError(BackendError, ValueError):
    """No registered backend has the requested name (``backend=`` or ``ONNXWRAPPER_BACKEND``)."""


class BackendUnavailableError(BackendError, RuntimeError):
    """The requested backend is registered but cannot run on this host.

    Attributes:
        reason: why it is unavailable (e.g. ``"onnxruntime-qnn is not installed"``).
        install_hint: what to run or install to fix it, may be empty.
    """

    def __init__(self, message: str, *, backend: str | None = None, reason: str = "",
                 install_hint: str = "") -> None:
        super().__init__(message, backend=backend)
        self.reason = reason
        self.install_hint = install_hint


class BackendOptionError(BackendError, ValueError):
    """A ``backend_options`` key is unknown or its value is invalid for that backend."""


class BackendValidationError(BackendError):
    """A backend class loaded from an entry point does not satisfy the backend protocol.

    Attributes:
        entry_point: the entry point's ``name = value`` text, when loaded from one.
    """

    def __init__(self, message: str, *, backend: str | None = None,
                 entry_point: str | None = None) -> None:
        super().__init__(message, backend=backend)
        self.entry_point = entry_point


class BackendCapabilityError(BackendError, NotImplementedError):
    """The session's backend cannot serve this ``InferenceSession`` method (e.g. IOBinding on SNPE)."""


class PrecisionUnsupportedError(BackendCapabilityError):
    """The target's hardware has no units for the requested precision (e.g. FP16 on Hexagon v68):
    refused before compiling, because a simulator may compile what the device cannot run.

    Attributes:
        precision: the refused precision (``"fp16"``). htp_arch: the target's HTP architecture.
    """

    def __init__(self, message: str, *, backend: str | None = None, precision: str = "",
                 htp_arch: int | None = None) -> None:
        super().__init__(message, backend=backend)
        self.precision = precision
        self.htp_arch = htp_arch


class BackendCompileError(BackendError, RuntimeError):
    """The backend's compiler died while compiling a model (a native abort, crash or kill of the
    compile worker process); the user's process is unaffected and a later compile starts a new worker.

    Attributes:
        model: the model's name in messages (file name, or ``"the model (bytes)"``).
        shapes: the specialization shapes (``{input: shape}``) or ``None``.
        signal: the name of the signal that ended the worker (``"SIGABRT"``), or ``None``.
        exit_code: the worker's exit status (negative: the signal number), or ``None``.
        stderr: the last lines the worker wrote to stderr (e.g. ``std::bad_alloc``), as one string.
    """

    def __init__(self, message: str, *, backend: str | None = None, model: str | None = None, shapes=None,
                 signal: str | None = None, exit_code: int | None = None, stderr: str = "") -> None:
        super().__init__(message, backend=backend)
        self.model = model
        self.shapes = shapes
        self.signal = signal
        self.exit_code = exit_code
        self.stderr = stderr


class CompileFailedError(BackendCompileError, _OrtEPFail):
    """The backend's compiler refused or failed the graph (QNN: ``Failed to finalize QNN graph``),
    also after the recovery the backend tried; raised instead of onnxruntime's raw ``EPFail`` (and
    also an ``EPFail``, so ``except EPFail`` keeps working).

    Attributes (besides :class:`BackendCompileError`'s):
        error_name: the native error's name, e.g. ``"QNN_COMMON_ERROR_MEM_ALLOC"``, or ``None``.
        error_code: its numeric code (``1002``), or ``None``.
        rung: the last recovery step tried (``"as given"``, ``"options"``, ``"batch split"``,
            ``"graph split"``, ``"cpu"``), or ``None`` when none was tried.
        largest: the largest tensor or op of the failing graph, as text (``"conv3: float32
            [3, 64, 7500] (5.5 MiB)"``), or ``None``.
    """

    def __init__(self, message: str, *, backend: str | None = None, model: str | None = None, shapes=None,
                 error_name: str | None = None, error_code: int | None = None, rung: str | None = None,
                 largest: str | None = None, stderr: str = "") -> None:
        super().__init__(message, backend=backend, model=model, shapes=shapes, stderr=stderr)
        self.error_name = error_name
        self.error_code = error_code
        self.rung = rung
        self.largest = largest


class CompileBudgetError(CompileFailedError):
    """A compile ran past its budget (wall time or memory) and was stopped; the worker process that
    ran it was ended, the user's process is unaffected and nothing was cached.

    Attributes (besides :class:`CompileFailedError`'s):
        seconds: wall time spent before it was stopped. peak_mb: the compiler process's largest
            resident memory seen (MiB), or ``None`` where it cannot be read.
        budget: ``"time"`` or ``"memory"`` (which limit of one compile was reached), or ``"total"``
            (the compiles of one model's recovery ladder together went past the ``compile_budget``).
    """

    def __init__(self, message: str, *, seconds: float = 0.0, peak_mb: float | None = None, budget: str = "time",
                 **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.seconds = seconds
        self.peak_mb = peak_mb
        self.budget = budget


class BackendConfigConflictError(BackendError, RuntimeError):
    """A backend whose configuration is process-global was asked for a second, different one.

    Attributes:
        active: the configuration already initialised in this process.
        requested: the conflicting configuration the new session asked for.
    """

    def __init__(self, message: str, *, backend: str | None = None, active=None, requested=None) -> None:
        super().__init__(message, backend=backend)
        self.active = active
        self.requested = requested


class BackendRunError(BackendError, _OrtEPFail):
    """A backend's native runtime failed to run the graph (qai_appbuilder returned no outputs,
    snpe-net-run exited non-zero, an output had the wrong byte size).

    Also onnxruntime's ``EPFail`` — the class ORT raises when an execution provider fails — so
    ``except EPFail`` in user code keeps working. Messages start with ORT's
    ``[ONNXRuntimeError] : 11 : EP_FAIL : `` prefix.
    """


class RemoteJobError(BackendRunError):
    """A job on a remote service (Qualcomm AI Hub: a compile or inference job) failed, did not finish
    within the bounded wait, or could not be created (rate limits or service errors beyond the
    retry budget).

    Attributes:
        job_id: the service's job id, or ``None`` when no job was created.
        job_url: the job's web page (where the service shows its logs), or ``None``.
        job_kind: ``"compile"``, ``"inference"`` or ``"profile"``.
        status_message: the service's own failure text, when it gave one.
    """

    def __init__(self, message: str, *, backend: str | None = None, job_id: str | None = None,
                 job_url: str | None = None, job_kind: str = "", status_message: str | None = None) -> None:
        super().__init__(message, backend=backend)
        self.job_id = job_id
        self.job_url = job_url
        self.job_kind = job_kind
        self.status_message = status_message


class ContextLoadError(BackendRunError):
    """A compiled context (a QNN context binary) could not be loaded, also after releasing other
    loaded contexts to make room; raised instead of onnxruntime's raw ``InvalidGraph``/``EPFail``.

    Attributes:
        error_name: the native error's name (``"QNN_COMMON_ERROR_MEM_ALLOC"``), or ``None``.
        error_code: its numeric code, or ``None``. live_mb: memory of the contexts still loaded (MiB).
    """

    def __init__(self, message: str, *, backend: str | None = None, error_name: str | None = None,
                 error_code: int | None = None, live_mb: float = 0.0) -> None:
        super().__init__(message, backend=backend)
        self.error_name = error_name
        self.error_code = error_code
        self.live_mb = live_mb


class SessionClosedError(BackendError, _OrtFail):
    """A run method (or an ORT method that needs the session) was called after
    ``InferenceSession.close()``, which released the backend's resources.

    Also onnxruntime's ``Fail`` (ORT's generic failure class; ORT itself has no ``close()``), so
    ``except Fail`` keeps working. Create a new ``InferenceSession`` to run the model again.
    """


class ForkedSessionError(BackendError, RuntimeError):
    """A session whose backend keeps native per-process state (``qnn``, ``qai``) was run in a child
    made by ``fork()`` after the session was created; it would hang there (measured with
    onnxruntime + QNN EP). Create the session in the child, or use the ``spawn`` start method."""


class PartitionError(BackendError, RuntimeError):
    """Part of the graph would run outside the requested backend while strict mode forbids it,
    or the backend's execution provider took none of its nodes where a compile needs at least one.

    Attributes:
        cpu_nodes: list of ``(node_name, op_type)`` assigned to the CPU execution provider.
        report: the partition (:class:`onnxwrapper.PartitionReport`) when the backend has it, else ``None``.
    """

    def __init__(self, message: str, *, backend: str | None = None, cpu_nodes=(), report=None) -> None:
        super().__init__(message, backend=backend)
        self.cpu_nodes = list(cpu_nodes)
        self.report = report


class ArtifactError(OnnxwrapperError):
    """A compiled artifact (context binary, EPContext model, DLC, cache entry) is unusable.

    Attributes:
        path: the artifact's path, when there is one.
        transient: True when the artifact or the input is not at fault but the moment is (a file
            another process has in use, a cache lock held too long, a full disk, an entry another
            process evicted while it was loaded): trying again later may work. The command line
            exits with status 1 for these and 64 (an input error) for the others.
    """

    def __init__(self, message: str, *, path: str | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.path = path
        self.transient = transient


class MalformedFileError(OnnxwrapperError, ValueError):
    """A file aipc reads but did not write in this run — a tensor file, a capture, a diff folder's
    ``diff.json`` — is truncated, of another type than its format says, or declares sizes beyond
    what it holds. Such files are untrusted input (docs/security.md): they get this error, never a
    wrong answer, a hang or a crash. The CLI exits with status 64 for it.

    Attributes:
        path: the file (or directory) read.
        entry: the member, key or line inside it that is wrong (``"input0/x"``, ``"models.m.inputs"``),
            or ``None`` for the file as a whole.
    """

    def __init__(self, message: str, *, path: str | None = None, entry: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.entry = entry


class RecipeError(OnnxwrapperError, ValueError):
    """A repair recipe (``aipc fix``'s output, backend option ``repairs``) cannot be used: unreadable,
    not a recipe, a newer format version, an unknown rewrite or bad parameters.

    Attributes:
        path: the recipe file, when there is one.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class RecipeMismatchError(RecipeError):
    """A repair recipe was given for a model it was not made for: the model's content hash (sha256
    of the model file's bytes) is not among the recipe's. A recipe is never applied to another model.

    Attributes:
        model_sha256: the hash of the model that was to be repaired.
        recipe_models: ``{sha256: model name}`` the recipe holds recipes for.
    """

    def __init__(self, message: str, *, path: str | None = None, model_sha256: str = "",
                 recipe_models=None) -> None:
        super().__init__(message, path=path)
        self.model_sha256 = model_sha256
        self.recipe_models = dict(recipe_models or {})


class InternalError(Exception):
    """A broken invariant inside onnxwrapper: a bug, please report it with the traceback."""
