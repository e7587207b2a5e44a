"""What ORT's ``SessionOptions`` cannot tell back: recorded calls, replayed on configured copies.

A backend that builds its own sessions (the qnn backend compiles with a configured *copy* of the
user's ``SessionOptions``, never the object itself) must copy the user's settings. ORT has getters
for the attributes and for config entries by key, but none for these calls (measured on
onnxruntime 1.32.0: ``SessionOptions`` is neither copyable nor picklable and has no getter for
them):

====================================================  ============================================
call                                                  effect
====================================================  ============================================
``add_initializer(name, ortvalue)``                   replaces an initializer's value
``add_external_initializers(names, ortvalues)``       supplies initializers stored as external data
``add_external_initializers_from_files_in_memory``    supplies external-data *files* from memory
(``file names, buffers, lengths``)
``add_free_dimension_override_by_name(name, size)``   fixes a symbolic dim (``dim_param``)
``add_free_dimension_override_by_denotation(d, size)`` fixes every dim with that denotation
``register_custom_ops_library(path)``                 loads custom operators
``set_load_cancellation_flag(bool)``                  cancels (``True``) the model load
====================================================  ============================================

So these calls are *recorded*, keyed weakly by the ``SessionOptions`` object (the record lives
as long as the object and keeps the user's ``OrtValue`` objects and buffers alive with it):

* :class:`RecordingSessionOptions` — ``onnxwrapper.SessionOptions``: a subclass of
  ``onnxruntime.SessionOptions`` (``isinstance`` holds; ORT's ``InferenceSession`` accepts it,
  measured) whose recorded methods record, then call ORT's;
* :func:`record_call` — for code that wraps ORT's own methods (the ``aipc`` hot patch does, while
  it is active, so unchanged scripts are recorded too).

Readers: :func:`replay_calls` (on a configured copy), :func:`free_dimension_overrides`,
:func:`supplied_external_data` (what a missing external-data file may be replaced by),
:func:`recorded_key` (for cache keys: a digest of every recorded value) and
:func:`fix_free_dimensions` (the graph inputs' dims as ORT will see them).
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from typing import Any, Iterable

import onnxruntime

__all__ = ["RECORDED_METHODS", "RecordingSessionOptions", "fix_free_dimensions", "free_dimension_overrides",
           "record_call", "recorded_calls", "recorded_key", "replay_calls", "supplied_external_data"]

#: the ``SessionOptions`` methods whose effect ORT cannot report back (see the module docstring)
RECORDED_METHODS: tuple[str, ...] = (
    "add_initializer",
    "add_external_initializers",
    "add_external_initializers_from_files_in_memory",
    "add_free_dimension_override_by_name",
    "add_free_dimension_override_by_denotation",
    "register_custom_ops_library",
    "set_load_cancellation_flag",
)

_records: "weakref.WeakKeyDictionary[Any, list[tuple[str, tuple]]]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def record_call(so, method: str, args: Iterable[Any]) -> None:
    """Remember that ``so.<method>(*args)`` was called (after ORT accepted it).

    Args:
        so: an ``onnxruntime.SessionOptions`` (or subclass) object.
        method: one of :data:`RECORDED_METHODS`. args: the positional arguments, as given.
    """
    entry = (method, tuple(args))
    with _lock:
        _records.setdefault(so, []).append(entry)


def recorded_calls(so) -> tuple[tuple[str, tuple], ...]:
    """The recorded ``(method, args)`` of ``so`` in call order; ``()`` for ``None`` or an unrecorded object."""
    if so is None:
        return ()
    with _lock:
        try:
            return tuple(_records.get(so, ()))
        except TypeError:  # not weak-referenceable: nothing was recorded for it
            return ()


def replay_calls(source, target, *, skip: Iterable[str] = ()) -> None:
    """Call every recorded method of ``source`` on ``target`` with the same arguments (same objects).

    Args:
        source: the user's ``SessionOptions`` (or ``None``). target: a fresh ``SessionOptions``.
        skip: method names not to replay.

    Raises:
        What ORT raises for a call on ``target`` (it accepted the same call on ``source``).
    """
    skipped = set(skip)
    for method, args in recorded_calls(source):
        if method not in skipped:
            getattr(onnxruntime.SessionOptions, method)(target, *args)


def free_dimension_overrides(so) -> tuple[dict[str, int], dict[str, int]]:
    """``({dim_param: size}, {denotation: size})`` recorded on ``so`` (later calls win)."""
    by_name: dict[str, int] = {}
    by_denotation: dict[str, int] = {}
    for method, args in recorded_calls(so):
        if method == "add_free_dimension_override_by_name":
            by_name[str(args[0])] = int(args[1])
        elif method == "add_free_dimension_override_by_denotation":
            by_denotation[str(args[0])] = int(args[1])
    return by_name, by_denotation


def supplied_external_data(so) -> tuple[frozenset[str], frozenset[str]]:
    """``(initializer names, external-data file names)`` whose data ``so`` supplies in memory
    (``add_external_initializers`` / ``add_external_initializers_from_files_in_memory``)."""
    names: set[str] = set()
    files: set[str] = set()
    for method, args in recorded_calls(so):
        if method == "add_external_initializers":
            names.update(str(n) for n in args[0])
        elif method == "add_external_initializers_from_files_in_memory":
            files.update(str(n) for n in args[0])
    return frozenset(names), frozenset(files)


def _value_digest(value: Any) -> str:
    """sha256 of an ``OrtValue`` (its numpy data, dtype and shape), a buffer or a plain value."""
    digest = hashlib.sha256()
    array = value.numpy() if hasattr(value, "numpy") else None
    if array is not None:
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    elif isinstance(value, (bytes, bytearray, memoryview)):
        digest.update(bytes(value))
    elif hasattr(value, "tobytes"):
        digest.update(value.tobytes())
    else:
        digest.update(repr(value).encode())
    return digest.hexdigest()


def recorded_key(so) -> list[list[str]]:
    """JSON-ready description of every recorded call for a cache key: method, names, and the
    sha256 of each value (initializers, in-memory files, custom-op library path)."""
    key = []
    for method, args in recorded_calls(so):
        if method == "add_initializer":
            key.append([method, str(args[0]), _value_digest(args[1])])
        elif method == "add_external_initializers":
            key.append([method, *(f"{n}:{_value_digest(v)}" for n, v in zip(args[0], args[1]))])
        elif method == "add_external_initializers_from_files_in_memory":
            key.append([method, *(f"{n}:{_value_digest(bytes(memoryview(b))[:int(size)])}"
                                  for n, b, size in zip(args[0], args[1], args[2]))])
        else:
            key.append([method, *(str(a) for a in args)])
    return key


def fix_free_dimensions(model, so):
    """``model`` as ORT will see it with ``so``'s free-dimension overrides, or ``model`` itself
    when ``so`` has none.

    Every graph-input dim whose ``dim_param`` has a by-name override, or whose ``denotation`` has
    a by-denotation override, gets that size; a ``dim_param`` fixed this way is fixed graph-wide
    (``onnxruntime.tools.onnx_model_utils.make_dim_param_fixed``). Measured on onnxruntime 1.32.0
    with ORT's ``abs_free_dimensions.onnx`` (input ``x: [Dim1 (DATA_BATCH), Dim2 (DATA_CHANNEL), 5]``):
    by name ``Dim1=4, Dim2=6`` → ``get_inputs()`` ``[4, 6, 5]``; by denotation ``DATA_BATCH=3,
    DATA_CHANNEL=5`` → ``[3, 5, 5]``.

    Args:
        model: ``onnx.ModelProto`` (not modified). so: the user's ``SessionOptions`` or ``None``.

    Returns:
        A new ``onnx.ModelProto`` when an override applies, else ``model``.
    """
    by_name, by_denotation = free_dimension_overrides(so)
    if not by_name and not by_denotation:
        return model
    import onnx
    from onnxruntime.tools.onnx_model_utils import make_dim_param_fixed

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    params: dict[str, int] = {}
    for value in copy.graph.input:
        if not value.type.HasField("tensor_type"):
            continue
        for dim in value.type.tensor_type.shape.dim:
            size = None
            if dim.HasField("dim_param") and dim.dim_param in by_name:
                size = by_name[dim.dim_param]
            elif dim.denotation and dim.denotation in by_denotation:
                size = by_denotation[dim.denotation]
            if size is None:
                continue
            if dim.HasField("dim_param") and dim.dim_param:
                params.setdefault(dim.dim_param, size)
            denotation = dim.denotation
            dim.Clear()
            dim.dim_value = size
            if denotation:
                dim.denotation = denotation
    for param, size in sorted(params.items()):
        make_dim_param_fixed(copy.graph, param, size)
    return copy


class RecordingSessionOptions(onnxruntime.SessionOptions):
    """``onnxruntime.SessionOptions`` that records the calls ORT cannot report back.

    Identical to ORT's class in every other respect (it *is* one: ``isinstance`` holds and ORT's
    ``InferenceSession`` accepts it). ``onnxwrapper.SessionOptions`` is this class, so a script
    written against ``import onnxwrapper as ort`` gets the same session on every backend.
    """

    def add_initializer(self, name, ortvalue) -> None:
        """As ORT: override initializer ``name`` with ``ortvalue`` (keep ``ortvalue`` alive)."""
        super().add_initializer(name, ortvalue)
        record_call(self, "add_initializer", (name, ortvalue))

    def add_external_initializers(self, names, ortvalues) -> None:
        """As ORT: supply the initializers ``names`` that the model stores as external data."""
        super().add_external_initializers(names, ortvalues)
        record_call(self, "add_external_initializers", (list(names), list(ortvalues)))

    def add_external_initializers_from_files_in_memory(self, names, buffers, lengths) -> None:
        """As ORT: supply whole external-data files (by the file name the model references) from memory."""
        super().add_external_initializers_from_files_in_memory(names, buffers, lengths)
        record_call(self, "add_external_initializers_from_files_in_memory", (list(names), list(buffers), list(lengths)))

    def add_free_dimension_override_by_name(self, name, size) -> None:
        """As ORT: fix the symbolic dim ``name`` (``dim_param``) to ``size``."""
        super().add_free_dimension_override_by_name(name, size)
        record_call(self, "add_free_dimension_override_by_name", (name, size))

    def add_free_dimension_override_by_denotation(self, denotation, size) -> None:
        """As ORT: fix every free dim with ``denotation`` (e.g. ``"DATA_BATCH"``) to ``size``."""
        super().add_free_dimension_override_by_denotation(denotation, size)
        record_call(self, "add_free_dimension_override_by_denotation", (denotation, size))

    def register_custom_ops_library(self, path) -> None:
        """As ORT: load the custom-operator library at ``path``."""
        super().register_custom_ops_library(path)
        record_call(self, "register_custom_ops_library", (path,))

    def set_load_cancellation_flag(self, value) -> None:
        """As ORT: ``True`` cancels loading the model (sessions raise ``ModelLoadCanceled``)."""
        super().set_load_cancellation_flag(value)
        record_call(self, "set_load_cancellation_flag", (value,))
