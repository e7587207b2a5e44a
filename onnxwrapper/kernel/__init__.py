"""The kernel every backend builds on: what a backend may import from onnxwrapper.

Backends (``onnxwrapper.backends.*``, third-party plugins) import these names from
``onnxwrapper.kernel`` only, never from a private ``onnxwrapper._*`` module or the façade:

* the model a session was asked for — :class:`ModelSource` (path or bytes, read lazily, hashed),
  and the digest hints a compile cache keeps of model files (:func:`recorded_digest`,
  :func:`record_digest`: a file whose state and CRC-32 match its hint is not hashed again);
* what ``SessionOptions`` cannot report back — :class:`RecordingSessionOptions` (``onnxwrapper.SessionOptions``),
  :func:`record_call`, :func:`recorded_calls`, :func:`replay_calls`, :func:`free_dimension_overrides`,
  :func:`fix_free_dimensions`, :func:`supplied_external_data`, :func:`recorded_key`, :data:`RECORDED_METHODS`;
* ORT's own errors for session calls a backend answers itself — :func:`check_providers`,
  :func:`assignment_not_enabled_error`;
* feeds — :func:`validate_feed` / :func:`validate_ort_values` / :func:`check_output_names` /
  :func:`check_input` (the one validator, onnxruntime's exact errors), :func:`feed_signature`,
  dtype maps :func:`ort_type_to_numpy` / :func:`numpy_to_ort_type`;
* the host — :func:`cpu_count`, :func:`available_memory` (sizing worker pools);
* run plans — :class:`RunPlans`, :func:`call_key`, :func:`plannable`, :func:`screened_plan`
  (a validated kind of ``run`` call,
  looked up by its key instead of validated again);
* metadata look-alikes of ``onnxruntime.NodeArg`` / ``ModelMetadata`` — :class:`NodeArgInfo`,
  :class:`ModelMetadataInfo`, :func:`node_args_from_onnx`, :func:`modelmeta_from_onnx`;
* shapes — :func:`input_dims`, :func:`dynamic_inputs`, :func:`is_static`, :func:`specialize`,
  :func:`shapes_note`;
* control flow — :func:`control_scalars`, :func:`has_control_flow`, :func:`bind_inputs`,
  :func:`fold_ifs` (``If`` nodes a specialization decides, folded before compiling);
* non-finite feeds — :class:`NonFiniteInputWarning`, :class:`NonFiniteInputCheck`,
  :func:`first_nonfinite`;
* partitions — :class:`PartitionReport`, :class:`NodeAssignment`, :class:`PartialOffloadWarning`,
  :func:`known_reason`, :func:`user_stacklevel` (warnings attributed to the user's call);
* the compile cache — :class:`ArtifactCache`, :class:`CacheEntry`, :func:`make_key`,
  :func:`default_cache_dir` and its environment variables, :func:`prune_records` (bounded folders
  of small record files next to it);
* versions — ``__version__`` (onnxwrapper's).

Importing it imports onnxruntime, onnx and numpy, nothing else; no I/O.
"""

from __future__ import annotations

from onnxwrapper.kernel._cache import (ENV_CACHE_DIR, ENV_CACHE_MAX_BYTES, FORMAT_VERSION, ArtifactCache, CacheEntry,
                                       default_cache_dir, make_key)
from onnxwrapper.kernel._cache_entry import prune_records
from onnxwrapper.kernel._control_flow import control_scalars, has_control_flow
from onnxwrapper.kernel._feeds import (check_input, check_output_names, feed_signature, numpy_to_ort_type,
                                       ort_type_to_numpy, validate_feed, validate_ort_values)
from onnxwrapper.kernel._metadata import ModelMetadataInfo, NodeArgInfo, modelmeta_from_onnx, node_args_from_onnx
from onnxwrapper.kernel._if_folding import bind_inputs, fold_ifs
from onnxwrapper.kernel._model_source import ModelSource
from onnxwrapper.kernel._digest_hints import record_digest, recorded_digest
from onnxwrapper.kernel._session_options import (RECORDED_METHODS, RecordingSessionOptions, fix_free_dimensions,
                                                 free_dimension_overrides, record_call, recorded_calls, recorded_key,
                                                 replay_calls, supplied_external_data)
from onnxwrapper.kernel._ort_answers import assignment_not_enabled_error, check_providers
from onnxwrapper.kernel._partition import (NodeAssignment, PartialOffloadWarning, PartitionReport, known_reason,
                                           user_stacklevel)
from onnxwrapper.kernel._nonfinite import NonFiniteInputCheck, NonFiniteInputWarning, first_nonfinite
from onnxwrapper.kernel._host import available_memory, cpu_count
from onnxwrapper.kernel._run_plans import RunPlans, call_key, plannable, screened_plan
from onnxwrapper.kernel._shapes import dynamic_inputs, input_dims, is_static, shapes_note, specialize
from onnxwrapper.kernel._version import __version__

__all__ = [
    "ArtifactCache",
    "CacheEntry",
    "ENV_CACHE_DIR",
    "ENV_CACHE_MAX_BYTES",
    "FORMAT_VERSION",
    "ModelMetadataInfo",
    "ModelSource",
    "NodeArgInfo",
    "NodeAssignment",
    "NonFiniteInputCheck",
    "NonFiniteInputWarning",
    "PartialOffloadWarning",
    "PartitionReport",
    "RECORDED_METHODS",
    "RecordingSessionOptions",
    "RunPlans",
    "__version__",
    "assignment_not_enabled_error",
    "available_memory",
    "bind_inputs",
    "call_key",
    "check_input",
    "check_output_names",
    "check_providers",
    "control_scalars",
    "cpu_count",
    "default_cache_dir",
    "dynamic_inputs",
    "feed_signature",
    "first_nonfinite",
    "fix_free_dimensions",
    "fold_ifs",
    "free_dimension_overrides",
    "has_control_flow",
    "input_dims",
    "is_static",
    "known_reason",
    "make_key",
    "modelmeta_from_onnx",
    "node_args_from_onnx",
    "numpy_to_ort_type",
    "ort_type_to_numpy",
    "plannable",
    "prune_records",
    "record_call",
    "record_digest",
    "recorded_calls",
    "recorded_digest",
    "recorded_key",
    "replay_calls",
    "screened_plan",
    "shapes_note",
    "specialize",
    "supplied_external_data",
    "user_stacklevel",
    "validate_feed",
    "validate_ort_values",
]
