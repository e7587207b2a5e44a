"""Precompiled QNN artifacts next to the user's model, found by an ordered list of resolvers and
used only when their provenance record shows they were compiled from this very model.

When a session is opened for a model *path*, every resolver in :data:`ARTIFACT_RESOLVERS` is
asked in order; the first that returns a :class:`ResolvedArtifact` wins over the compile cache.
Built in: :func:`resolve_epcontext_next_to_model` — ``<stem>_ctx.onnx`` in the model's folder
(``aipc compile`` / ``compile_model`` output, or the name ORT itself writes with
``ep.context_enable=1``), with its ``*_qnn.bin``.

A neighbour is a file the user did not name, so it is used only when it is *verified*
(:func:`onnxwrapper.backends.qnn.compile._provenance.verify`): its provenance record names this model's
content hash, this session's QNN options and shapes, and its context binary is unchanged.
Otherwise — stale (the model was retrained), unrelated, unreadable, or without a record (ORT's
own output, older onnxwrapper) — it is ignored with one WARNING (logger ``onnxwrapper.qnn``, once
per file and reason in a process) and the model is compiled as if it were not there; a neighbour
never blocks a valid model. To use an unverifiable ctx model anyway, pass it as the model path.

Raw QNN context binaries (``<stem>.htp.bin``, …, ``<stem>.bin``) cannot carry a record, so they
are not picked up implicitly: run them by passing the ``.bin`` as the model path, or opt in with
``register_artifact_resolver(resolve_raw_context_binary)``. A raw binary found next to the model
(and not the model's own external data, nor converter weights next to ``<stem>.cpp``) is mentioned
in one WARNING.

Models with dynamic input dims (or control inputs) are compiled per specialization; before
compiling one the backend asks :data:`SPECIALIZATION_RESOLVERS` (built in:
:func:`resolve_epcontext_specialization`, a verified ``<stem>_ctx*.onnx`` whose static input
shapes are the feed's — e.g. ``aipc compile m.onnx --shape x=1,3,640,640 -o m_ctx_640.onnx``).
Their contract is ``resolver(source, settings, shapes) -> ResolvedArtifact | None`` with ``shapes``
= ``{dynamic input name: tuple of ints}``; for models with control inputs they also get
``values={control input: value}`` as a keyword.

Contract of a resolver: ``resolver(source, settings) -> ResolvedArtifact | None`` where
``source`` is the :class:`~onnxwrapper.kernel.model._model_source.ModelSource` (``source.path`` is not
``None``) and ``settings`` the :class:`~onnxwrapper.backends.qnn.settings._settings.QnnSettings`. It must
be cheap when nothing is there (a few ``os.path`` checks) and must not modify the user's folder.
Artifacts of resolvers the user registers are trusted (the user asked for them); the backend only
checks that their inputs and outputs have the original model's names and element types.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, NamedTuple

import threading

from onnxwrapper.backends._artifact_files import find_artifact
from onnxwrapper.backends.qnn.compile import verify
from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel import shapes_note

__all__ = ["RAW_BINARY_SUFFIXES", "ResolvedArtifact", "ArtifactResolver", "ARTIFACT_RESOLVERS", "SPECIALIZATION_RESOLVERS",
           "register_artifact_resolver", "resolve_precompiled", "resolve_specialization",
           "resolve_epcontext_next_to_model", "resolve_epcontext_specialization", "resolve_raw_context_binary",
           "static_input_shapes", "check_artifact_interface", "verified_neighbour", "warn_unused_raw_binaries"]

_log = logging.getLogger("onnxwrapper.qnn")
#: names of raw QNN context binaries next to a model ``<stem>``: ``<stem><suffix>``, in the order they are looked for
RAW_BINARY_SUFFIXES = (".htp.bin", ".onnx.htp.bin", ".dll.bin", ".onnx.dll.bin", ".so.bin", ".onnx.so.bin",
                       "_ctx_qnn.bin", ".dlc.bin", ".bin")
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _warn_once(path: str, reason: str, action: str) -> None:
    key = (os.path.abspath(path), reason)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    _log.warning("onnxwrapper qnn: %s %s; %s", path, reason, action)


def verified_neighbour(candidate: str, source, settings, shapes=None, values=None):
    """``candidate`` (an EPContext model next to ``source``'s model) parsed, when its provenance record
    matches this model, ``settings`` and the specialization; else ``None`` after one WARNING saying why."""
    import onnx

    try:
        ctx = onnx.load(candidate, load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - onnx raises DecodeError, OSError, ValueError: not a usable model
        _warn_once(candidate, f"is not a readable ONNX model ({type(exc).__name__})",
                   f"ignoring it and compiling {os.path.basename(source.path)}. Delete it or regenerate it with "
                   f"`aipc compile`.")
        return None
    why = verify(candidate, ctx, source_sha256=source.content_hash(), qnn_options=settings.compile_options(),
                 shapes=shapes, values=values)
    if why is not None:
        _warn_once(candidate, f"is not used: {why}",
                   f"compiling {os.path.basename(source.path)} instead. Delete the file, regenerate it with `aipc "
                   f"compile`, or pass it as the model path to use it anyway.")
        return None
    return ctx


def warn_unused_raw_binaries(source) -> None:
    """One WARNING per raw QNN context binary next to the model (qai naming conventions) that is not
    used implicitly; the model's own external-data files and converter weights (``<stem>.bin`` next to
    ``<stem>.cpp``) are not mentioned."""
    if source.path is None:
        return
    candidates = [os.path.join(source.directory, source.stem + s) for s in RAW_BINARY_SUFFIXES]
    found = [c for c in candidates if os.path.isfile(c)]
    if not found:
        return
    own = {os.path.normcase(os.path.abspath(p)) for p in source.external_data_files()}
    for path in found:
        if os.path.normcase(os.path.abspath(path)) in own:
            continue
        if path.endswith(f"{source.stem}.bin") and os.path.exists(os.path.join(source.directory, f"{source.stem}.cpp")):
            continue
        _warn_once(path, "(a raw QNN context binary name) is not used for the model next to it",
                   "a raw binary carries no record of the model it was compiled from. To run it, pass it as the "
                   "model path: InferenceSession('" + os.path.basename(path) + "', backend='qnn').")


class ResolvedArtifact(NamedTuple):
    """A precompiled artifact usable instead of compiling (an immutable ``NamedTuple``).

    Attributes:
        ctx_path: path of an EPContext ONNX model ORT can load with the QNN EP.
        kind: ``"epcontext"`` or ``"context_binary"`` (a wrapped raw QNN context binary).
        origin: the file that was found next to the model (for logs and reports).
        note: free text, e.g. the naming convention that matched.
    """

    ctx_path: str
    kind: str
    origin: str
    note: str = ""


ArtifactResolver = Callable[..., "ResolvedArtifact | None"]


def resolve_epcontext_next_to_model(source, settings) -> ResolvedArtifact | None:
    """``<model folder>/<stem>_ctx.onnx`` if it exists and is verified (:func:`verified_neighbour`);
    ``stem`` = file name without ``.onnx``."""
    if source.path is None:
        return None
    candidate = os.path.join(source.directory, f"{source.stem}_ctx.onnx")
    if os.path.isfile(candidate) and verified_neighbour(candidate, source, settings) is not None:
        return ResolvedArtifact(candidate, "epcontext", candidate, "verified EPContext model next to the model")
    return None


def resolve_raw_context_binary(source, settings) -> ResolvedArtifact | None:
    """A raw QNN context binary next to the model (:data:`RAW_BINARY_SUFFIXES`
    order; ``<stem>.bin`` skipped next to ``<stem>.cpp``; a file the model references as its
    external data — ``onnx.save(m, "m.onnx", save_as_external_data=True, location="m.bin")`` — is
    never taken for a binary), wrapped as an EPContext model by
    :func:`~onnxwrapper.backends.qnn.binary._wrap.wrap_raw_binary` (graph ``settings.graph`` when set), or ``None`` when there is none. Not in the default
    resolvers (a raw binary cannot be verified); opt in with ``register_artifact_resolver``. The
    user's folder is never written (the wrapper is cached in ``settings.cache_dir``, else the
    onnxwrapper cache).

    Raises:
        ArtifactError: a binary was found but cannot be read or wrapped (e.g. quantized IO).
    """
    if source.path is None:
        return None
    # a file the model itself references as external data is its weights, not a context binary
    external = {os.path.normcase(path) for path in source.external_data_files()}
    names = [source.stem + s for s in RAW_BINARY_SUFFIXES
             if os.path.normcase(os.path.join(source.directory, source.stem + s)) not in external]
    found, _tried = find_artifact(source.directory, names, refuse_if={f"{source.stem}.bin": f"{source.stem}.cpp"})
    if found is None:
        return None
    # imported here: the wrapper builds ONNX models (onnx); resolving without a binary needs none
    from onnxwrapper.backends.qnn.binary import wrap_raw_binary

    ctx, graph = wrap_raw_binary(found, graph=getattr(settings, "graph", None), onnx_model=source.load_proto(),
                                 cache_dir=getattr(settings, "cache_dir", None))
    return ResolvedArtifact(ctx, "context_binary", found, f"raw QNN context binary, graph '{graph.name}'")


_shape_memo: dict[tuple, dict | None] = {}


def static_input_shapes(path: str) -> dict[str, tuple] | None:
    """``{graph input name: shape}`` of the ONNX model at ``path`` (initializers excluded), or
    ``None`` when a dim is not fixed or the file is not a readable ONNX model. Memoized per
    (path, size, mtime)."""
    import onnx

    try:
        stat = os.stat(path)
    except OSError:
        return None
    memo_key = (os.path.abspath(path), stat.st_size, stat.st_mtime_ns)
    if memo_key not in _shape_memo:
        shapes: dict | None = {}
        try:
            model = onnx.load(path, load_external_data=False)
        except Exception:  # noqa: BLE001 - onnx raises DecodeError, OSError, ValueError: not a usable model
            model = None
        if model is None:
            shapes = None
        else:
            inits = {i.name for i in model.graph.initializer}
            for value in model.graph.input:
                if value.name in inits:
                    continue
                dims = value.type.tensor_type.shape.dim
                if not value.type.tensor_type.HasField("shape") or any(not d.HasField("dim_value") for d in dims):
                    shapes = None
                    break
                shapes[value.name] = tuple(int(d.dim_value) for d in dims)
        if len(_shape_memo) > 256:
            _shape_memo.clear()
        _shape_memo[memo_key] = shapes
    return _shape_memo[memo_key]


def resolve_epcontext_specialization(source, settings, shapes, values=None) -> ResolvedArtifact | None:
    """A ``<stem>_ctx*.onnx`` next to the model (file-name order) whose graph inputs are all static,
    whose shape of every input in ``shapes`` equals it, and which is verified for these ``shapes``
    and control-input ``values`` (:func:`verified_neighbour`); ``None`` when there is none."""
    import glob

    if source.path is None:
        return None
    pattern = os.path.join(glob.escape(source.directory), glob.escape(source.stem) + "_ctx*.onnx")
    wanted = {name: tuple(int(d) for d in shape) for name, shape in shapes.items()}
    for candidate in sorted(glob.glob(pattern)):
        static = static_input_shapes(candidate)
        if static is None or not all(static.get(name) == shape for name, shape in wanted.items()):
            continue
        if verified_neighbour(candidate, source, settings, wanted or None, values or None) is not None:
            return ResolvedArtifact(candidate, "epcontext", candidate,
                                    f"verified EPContext specialization for {shapes_note(wanted)} next to the model")
    return None


#: resolvers asked in order (raw context binaries are opt-in: :func:`resolve_raw_context_binary`)
ARTIFACT_RESOLVERS: list[ArtifactResolver] = [resolve_epcontext_next_to_model]
#: resolvers asked for each new feed shape of a dynamic model: ``resolver(source, settings, shapes)``
SPECIALIZATION_RESOLVERS: list[ArtifactResolver] = [resolve_epcontext_specialization]


def register_artifact_resolver(resolver: ArtifactResolver, *, index: int | None = None,
                               for_shapes: bool = False) -> Callable[[], None]:
    """Add a resolver (at ``index``, default last). Returns a function that removes it again.

    Args:
        resolver: ``resolver(source, settings)`` for static models, or with ``for_shapes=True``
            ``resolver(source, settings, shapes)`` for the specializations of dynamic models.
        index: position in the list; default last.
        for_shapes: add to :data:`SPECIALIZATION_RESOLVERS` instead of :data:`ARTIFACT_RESOLVERS`.
    """
    table = SPECIALIZATION_RESOLVERS if for_shapes else ARTIFACT_RESOLVERS
    if index is None:
        table.append(resolver)
    else:
        table.insert(index, resolver)

    def undo() -> None:
        if resolver in table:
            table.remove(resolver)

    return undo


def resolve_precompiled(source, settings) -> ResolvedArtifact | None:
    """The first artifact a resolver finds for ``source``, or ``None`` (also for bytes models). When
    none is found and :func:`resolve_raw_context_binary` is not registered, raw binaries next to the
    model are mentioned (:func:`warn_unused_raw_binaries`)."""
    if source.path is None:
        return None
    for resolver in list(ARTIFACT_RESOLVERS):
        found = resolver(source, settings)
        if found is not None:
            _log.info("onnxwrapper qnn: using precompiled %s %s for %s", found.kind, found.origin, source.path)
            return found
    if resolve_raw_context_binary not in ARTIFACT_RESOLVERS:
        warn_unused_raw_binaries(source)
    return None


def resolve_specialization(source, settings, shapes, values=None) -> ResolvedArtifact | None:
    """The first precompiled specialization a :data:`SPECIALIZATION_RESOLVERS` entry finds for
    ``shapes`` (``{dynamic input name: shape}``) and control-input ``values`` (passed as a keyword
    when not empty), or ``None`` (also for bytes models)."""
    if source.path is None:
        return None
    for resolver in list(SPECIALIZATION_RESOLVERS):
        found = resolver(source, settings, shapes, values=values) if values else resolver(source, settings, shapes)
        if found is not None:
            _log.info("onnxwrapper qnn: using precompiled %s %s for %s (%s)", found.kind, found.origin, source.path,
                      found.note)
            return found
    return None


def _signature(values, inits=()) -> list[tuple[str, int]]:
    return [(v.name, v.type.tensor_type.elem_type) for v in values if v.name not in inits]


def check_artifact_interface(artifact: ResolvedArtifact, original, bound=()):
    """Check that the artifact's graph inputs/outputs match the original model's names and element types.

    Args:
        bound: inputs of ``original`` a specialization holds as constants (control inputs), which the
            artifact therefore does not have.

    Returns:
        The artifact's ``onnx.ModelProto`` (without external data).

    Raises:
        ArtifactError: the artifact is unreadable or belongs to another model version (stale).
    """
    import onnx

    try:
        ctx = onnx.load(artifact.ctx_path, load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ValueError
        raise ArtifactError(f"Precompiled artifact {artifact.origin} could not be read: {exc}",
                            path=artifact.origin) from exc
    inits = {i.name for i in original.graph.initializer} | set(bound)
    want_in, want_out = _signature(original.graph.input, inits), _signature(original.graph.output)
    ctx_inits = {i.name for i in ctx.graph.initializer}
    got_in, got_out = _signature(ctx.graph.input, ctx_inits), _signature(ctx.graph.output)
    if sorted(got_in) != sorted(want_in) or got_out != want_out:
        raise ArtifactError(
            f"Precompiled artifact {artifact.origin} does not match the model: inputs {got_in} / outputs {got_out}, "
            f"expected inputs {want_in} / outputs {want_out} (name, ONNX element type). It is probably stale: "
            f"delete or regenerate it (`aipc compile`).", path=artifact.origin)
    return ctx
