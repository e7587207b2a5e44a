"""What the qnn backend knows about a model before compiling it: its identity and its facts.

* :func:`model_key` — the model identity of a session's cache keys and provenance records: the
  content hash of the model and its external data, plus what the user's ``SessionOptions`` add to
  it (recorded initializers, free-dimension overrides, …).
* :class:`ModelFacts` — what the backend reads from the parsed model to choose how to open it
  (EPContext model? dynamic inputs? control inputs or control flow? external data? metadata? the
  feed sizes of its declared shapes), recorded once per model *content* in the compile cache by the
  full open path (:func:`remember_facts`), so that a later session of the same bytes can open its
  cached EPContext model without importing onnx or parsing the model
  (:mod:`onnxwrapper.backends.qnn.artifacts._cache_hit`). The record's key is the sha256 of the model's
  bytes (:meth:`onnxwrapper.kernel.ModelSource.bytes_digest`, always computed from the file in a
  new process) and :data:`FACTS_FORMAT`; its file is verified like every cache entry (sizes,
  sha256), so a truncated or overwritten record is not used.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, NamedTuple

from onnxwrapper.backends.qnn.compile import compile_cache_key
from onnxwrapper.backends.qnn.model._feed_limits import feed_rows
from onnxwrapper.backends.qnn.model._specialize import control_inputs
from onnxwrapper.backends.qnn.platform import copy_session_options
from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel import (ArtifactCache, ModelMetadataInfo, dynamic_inputs, has_control_flow, input_dims,
                                make_key, modelmeta_from_onnx, record_digest, recorded_key, supplied_external_data)

__all__ = ["FACTS_FORMAT", "ModelFacts", "facts_of", "is_epcontext_model", "model_key", "remember_facts",
           "session_cache_key", "stored_facts", "structure_key"]

#: bump when what a record holds, or how it is computed, changes: older records are then ignored
FACTS_FORMAT = 1
_FILE = "facts.json"


def is_epcontext_model(proto) -> bool:
    """True when the model already is a compiled EPContext model (it has ``EPContext`` nodes)."""
    return any(node.op_type == "EPContext" for node in proto.graph.node)


def model_key(source, user_so) -> str:
    """Content hash of the model (+ external data) and of what the user's SessionOptions add to it
    (recorded initializers, in-memory external data, free-dimension overrides, custom-op libraries):
    the model identity of a session's cache keys and provenance records."""
    names, files = supplied_external_data(user_so)
    content = source.content_hash(names, files)
    recorded = recorded_key(user_so)
    return make_key({"model": content, "session_options": recorded}) if recorded else content


def structure_key(source, user_so) -> str:
    """The identity of the model's *graph*: the sha256 of the model's own bytes (not of its external
    data: weights decide no partition) and what the user's SessionOptions add to it. Computed without
    onnx (a path's digest hint or a hash of its bytes), so a fact about the graph — the QNN EP takes
    none of its nodes — can be looked up before the model is parsed."""
    recorded = recorded_key(user_so)
    return make_key({"model-bytes": source.bytes_digest(), "session_options": recorded})


def session_cache_key(setup, model_hash: str) -> str:
    """The compile-cache key of a session's static model as given (no shapes, no patches):
    :meth:`~onnxwrapper.backends.qnn.pipeline._pipeline.CacheStore.key` ``(None, [])``."""
    user_so = setup.user_so
    _copy, entries = copy_session_options(user_so)
    level = int(user_so.graph_optimization_level) if user_so is not None else 99
    return compile_cache_key(model_hash, setup.settings.compile_options(), None, entries, level, [], None)


class ModelFacts(NamedTuple):
    """Facts of one model content (module docstring); an immutable ``NamedTuple``.

    Attributes:
        epcontext: the model is an EPContext model. dynamic: an input has a non-fixed dim.
        control: the model has control inputs (rank-0 inputs deciding an ``If``).
        control_flow: the model has ``If``/``Loop``/``Scan`` nodes.
        external: ``[(location as written in the model, [tensor names])]`` of its external data.
        meta: the :class:`~onnxwrapper.kernel.ModelMetadataInfo` fields ORT reports for it.
        feeds: per precision (``"fp16"``, ``"fp32"``), the
            :func:`~onnxwrapper.backends.qnn.model._feed_limits.feed_rows` of its declared static shapes.
    """

    epcontext: bool
    dynamic: bool
    control: bool
    control_flow: bool
    external: tuple
    meta: Mapping[str, Any]
    feeds: Mapping[str, list]

    @property
    def plain(self) -> bool:
        """A static model compiled as it is: no EPContext nodes, dynamic dims, control inputs or control flow."""
        return not (self.epcontext or self.dynamic or self.control or self.control_flow)

    def modelmeta(self) -> ModelMetadataInfo:
        """The model's metadata as :func:`onnxwrapper.kernel.modelmeta_from_onnx` gives it."""
        return ModelMetadataInfo(**self.meta)


def facts_of(source, proto) -> ModelFacts:
    """The :class:`ModelFacts` of ``proto`` (``source``'s model as parsed, without external data loaded)."""
    shapes = {name: dims for name, dims in input_dims(proto).items() if dims is not None}
    dynamic = bool(dynamic_inputs(proto))
    feeds = {} if dynamic else {p: [list(r) for r in feed_rows(proto, shapes, p)] for p in ("fp16", "fp32")}
    return ModelFacts(epcontext=is_epcontext_model(proto), dynamic=dynamic, control=bool(control_inputs(proto)),
                      control_flow=has_control_flow(proto), external=tuple(source.external_references()),
                      meta=dataclasses.asdict(modelmeta_from_onnx(proto)), feeds=feeds)


def _key(source) -> str:
    return make_key({"qnn-model-facts": FACTS_FORMAT, "model": source.bytes_digest()})


def stored_facts(cache_dir: str | None, source) -> ModelFacts | None:
    """The recorded facts of ``source``'s content, or ``None`` (none recorded, or the record is not
    intact: it is then ignored here and rewritten by the next full open). Hashes the model bytes.

    Raises:
        NoSuchFile / InvalidProtobuf as :meth:`onnxwrapper.kernel.ModelSource.read_bytes`.
    """
    entry = ArtifactCache(cache_dir).peek(_key(source))
    if entry is None or _FILE not in entry.files:
        return None
    try:
        with open(entry.file(_FILE), encoding="utf-8") as f:
            doc = json.load(f)
        return ModelFacts(epcontext=bool(doc["epcontext"]), dynamic=bool(doc["dynamic"]),
                          control=bool(doc["control"]), control_flow=bool(doc["control_flow"]),
                          external=tuple((str(loc), [str(n) for n in names]) for loc, names in doc["external"]),
                          meta=dict(doc["meta"]), feeds=dict(doc["feeds"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember_facts(cache_dir: str | None, source, proto) -> None:
    """Record :func:`facts_of` ``(source, proto)`` in the compile cache once per model content (a
    damaged record is reported and replaced, as every cache entry). Never raises for the cache (a
    record only saves later work): a read-only or unusable cache records nothing. Also records the
    model file's digest hint (:func:`~onnxwrapper.kernel.record_digest`) for the next new process."""
    try:
        key = _key(source)
        cache = ArtifactCache(cache_dir)
        record_digest(cache.root, source, source.bytes_digest())
        if cache.peek(key) is not None:  # recorded and intact (a damaged record is replaced below)
            return
        facts = facts_of(source, proto)._asdict()

        def write(directory: str) -> dict:
            with open(os.path.join(directory, _FILE), "w", encoding="utf-8") as f:
                json.dump(facts, f, sort_keys=True)
            return {"kind": "qnn-model-facts"}

        cache.store(key, write)
    except (OSError, ArtifactError):
        return
