"""Precompiled QNN artifacts next to the user's model, found by an ordered list of resolvers.

When a session is opened for a model *path*, every resolver in :data:`ARTIFACT_RESOLVERS` is
asked in order; the first that returns a :class:`ResolvedArtifact` wins over the compile cache.
Built-in order:

1. :func:`resolve_epcontext_next_to_model` — ``<stem>_ctx.onnx`` in the model's folder (the name
   ORT itself writes with ``ep.context_enable=1`` and no ``ep.context_file_path``), with its
   ``*_qnn.bin`` when it was generated with ``ep.context_embed_mode=0``.
2. :func:`resolve_raw_context_binary` — raw QNN context binaries in the naming conventions of
   qai_appbuilder's wrapper (``<stem>.htp.bin``, ``<stem>.onnx.htp.bin``, …, ``<stem>_ctx_qnn.bin``,
   ``<stem>.bin`` last), wrapped into an EPContext model by ``backends/qnn/_binary.py``.

Models with dynamic input dims are compiled per feed shape; before compiling a specialization the
backend asks :data:`SPECIALIZATION_RESOLVERS` (built in:
:func:`resolve_epcontext_specialization`, a ``<stem>_ctx*.onnx`` whose static input shapes are the
feed's — e.g. ``aipc compile m.onnx --shape x=1,3,640,640 -o m_ctx_640.onnx``). Their contract is
``resolver(source, settings, shapes) -> ResolvedArtifact | None`` with ``shapes`` =
``{dynamic input name: tuple of ints}``.

Contract of a resolver: ``resolver(source, settings) -> ResolvedArtifact | None`` where
``source`` is the :class:`~onnxwrapper.kernel._model_source.ModelSource` (``source.path`` is not
``None``) and ``settings`` the :class:`~onnxwrapper.backends.qnn._settings.QnnSettings`. It must
be cheap when nothing is there (a few ``os.path`` checks) and must not modify the user's folder.
The returned ``ctx_path`` is loaded by ORT with the QNN EP; the backend then checks that its
inputs and outputs have the original model's names and element types.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable

from onnxwrapper.backends._artifact_files import find_artifact
from onnxwrapper.backends.qnn._wrap import RAW_BINARY_SUFFIXES, wrap_raw_binary
from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel import shapes_note

__all__ = ["ResolvedArtifact", "ArtifactResolver", "ARTIFACT_RESOLVERS", "SPECIALIZATION_RESOLVERS",
           "register_artifact_resolver", "resolve_precompiled", "resolve_specialization",
           "resolve_epcontext_next_to_model", "resolve_epcontext_specialization", "resolve_raw_context_binary",
           "static_input_shapes", "check_artifact_interface"]

_log = logging.getLogger("onnxwrapper.qnn")


@dataclass(frozen=True)
class ResolvedArtifact:
    """A precompiled artifact usable instead of compiling.

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
    """``<model folder>/<stem>_ctx.onnx`` if it exists (``stem`` = file name without ``.onnx``)."""
    if source.path is None:
        return None
    candidate = os.path.join(source.directory, f"{source.stem}_ctx.onnx")
    if os.path.isfile(candidate):
        return ResolvedArtifact(candidate, "epcontext", candidate, "EPContext model next to the model")
    return None


def resolve_raw_context_binary(source, settings) -> ResolvedArtifact | None:
    """A raw QNN context binary next to the model (:data:`~onnxwrapper.backends.qnn._binary.RAW_BINARY_SUFFIXES`
    order; ``<stem>.bin`` skipped next to ``<stem>.cpp``; a file the model references as its
    external data — ``onnx.save(m, "m.onnx", save_as_external_data=True, location="m.bin")`` — is
    never taken for a binary), wrapped as an EPContext model by
    :func:`~onnxwrapper.backends.qnn._binary.wrap_raw_binary` (graph ``settings.graph`` when set), or
    ``None`` when there is none. The user's folder is never written (the wrapper is cached in
    ``settings.cache_dir``, else the onnxwrapper cache).

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


def resolve_epcontext_specialization(source, settings, shapes) -> ResolvedArtifact | None:
    """A ``<stem>_ctx*.onnx`` next to the model (file-name order) whose graph inputs are all static
    and whose shape of every input in ``shapes`` equals it; ``None`` when there is none."""
    import glob


    if source.path is None:
        return None
    pattern = os.path.join(glob.escape(source.directory), glob.escape(source.stem) + "_ctx*.onnx")
    wanted = {name: tuple(int(d) for d in shape) for name, shape in shapes.items()}
    for candidate in sorted(glob.glob(pattern)):
        static = static_input_shapes(candidate)
        if static is not None and all(static.get(name) == shape for name, shape in wanted.items()):
            return ResolvedArtifact(candidate, "epcontext", candidate,
                                    f"EPContext specialization for {shapes_note(wanted)} next to the model")
    return None


#: resolvers asked in order: EPContext model first, then raw context binaries
ARTIFACT_RESOLVERS: list[ArtifactResolver] = [resolve_epcontext_next_to_model, resolve_raw_context_binary]
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
    """The first artifact a resolver finds for ``source``, or ``None`` (also for bytes models)."""
    if source.path is None:
        return None
    for resolver in list(ARTIFACT_RESOLVERS):
        found = resolver(source, settings)
        if found is not None:
            _log.info("onnxwrapper qnn: using precompiled %s %s for %s", found.kind, found.origin, source.path)
            return found
    return None


def resolve_specialization(source, settings, shapes) -> ResolvedArtifact | None:
    """The first precompiled specialization a :data:`SPECIALIZATION_RESOLVERS` entry finds for
    ``shapes`` (``{dynamic input name: shape}``), or ``None`` (also for bytes models)."""
    if source.path is None:
        return None
    for resolver in list(SPECIALIZATION_RESOLVERS):
        found = resolver(source, settings, shapes)
        if found is not None:
            _log.info("onnxwrapper qnn: using precompiled %s %s for %s (%s)", found.kind, found.origin, source.path,
                      found.note)
            return found
    return None


def _signature(values, inits=()) -> list[tuple[str, int]]:
    return [(v.name, v.type.tensor_type.elem_type) for v in values if v.name not in inits]


def check_artifact_interface(artifact: ResolvedArtifact, original):
    """Check that the artifact's graph inputs/outputs match the original model's names and element types.

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
    inits = {i.name for i in original.graph.initializer}
    want_in, want_out = _signature(original.graph.input, inits), _signature(original.graph.output)
    ctx_inits = {i.name for i in ctx.graph.initializer}
    got_in, got_out = _signature(ctx.graph.input, ctx_inits), _signature(ctx.graph.output)
    if sorted(got_in) != sorted(want_in) or got_out != want_out:
        raise ArtifactError(
            f"Precompiled artifact {artifact.origin} does not match the model: inputs {got_in} / outputs {got_out}, "
            f"expected inputs {want_in} / outputs {want_out} (name, ONNX element type). It is probably stale: "
            f"delete or regenerate it (`aipc compile`).", path=artifact.origin)
    return ctx
