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
* child processes — :func:`kill_process_tree` (POSIX process group, Windows ``taskkill /T``),
  :func:`new_session_kwargs`, :func:`crash_name` (signals and NTSTATUS codes by name);
* files named from elsewhere — :func:`open_regular`, :func:`read_regular` (regular files only,
  bounded: a FIFO, a device or a folder is :class:`NotRegularFileError`, never a hang);
* the host — :func:`cpu_count`, :func:`available_memory` (sizing worker pools);
  :func:`host_architecture` / :class:`HostArchitecture` / :func:`normalize_arch` (the process's
  architecture vs the operating system's: an x64 Python emulated on ARM64 Windows);
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
* files another process may be using (Windows: open or memory-mapped files cannot be replaced or
  deleted) — :func:`replace_files` (all or nothing), :func:`remove_tree` (never half-deleted);
* the compile cache — :class:`ArtifactCache`, :class:`CacheEntry`, :func:`make_key`,
  :func:`default_cache_dir` and its environment variables, :func:`prune_records` (bounded folders
  of small record files next to it), :func:`write_private_file` (how such a record is written:
  ``0600``, atomically);
* onnxruntime's telemetry — :func:`quiet_ort_telemetry` (off unless :data:`ENV_ORT_TELEMETRY` says
  otherwise; called when a session is created), :func:`ort_telemetry_wanted`;
* versions — ``__version__`` (onnxwrapper's).

Importing it imports onnxruntime, onnx and numpy, nothing else; no I/O.
"""

from __future__ import annotations

from onnxwrapper.kernel._version import __version__
from onnxwrapper.kernel.cache import (ArtifactCache, CacheEntry, ENV_CACHE_DIR, ENV_CACHE_MAX_BYTES, FORMAT_VERSION,
                                      NotRegularFileError, default_cache_dir, make_key, open_regular, prune_records,
                                      read_regular, remove_tree, replace_files, write_private_file)
from onnxwrapper.kernel.host import (HostArchitecture, available_memory, cpu_count, crash_name, host_architecture,
                                     kill_process_tree, new_session_kwargs, normalize_arch)
from onnxwrapper.kernel.model import (ModelMetadataInfo, ModelSource, NodeArgInfo, bind_inputs, control_scalars,
                                      dynamic_inputs, fold_ifs, has_control_flow, input_dims, is_static,
                                      modelmeta_from_onnx, node_args_from_onnx, record_digest, recorded_digest,
                                      shapes_note, specialize)
from onnxwrapper.kernel.session import (ENV_ORT_TELEMETRY, NodeAssignment, NonFiniteInputCheck, NonFiniteInputWarning,
                                        PartialOffloadWarning, PartitionReport, RECORDED_METHODS,
                                        RecordingSessionOptions, RunPlans, assignment_not_enabled_error, call_key,
                                        check_input, check_output_names, check_providers, feed_signature,
                                        first_nonfinite, fix_free_dimensions, free_dimension_overrides, known_reason,
                                        numpy_to_ort_type, ort_telemetry_wanted, ort_type_to_numpy, plannable,
                                        quiet_ort_telemetry, record_call, recorded_calls,
                                        recorded_key, replay_calls, screened_plan, supplied_external_data,
                                        user_stacklevel, validate_feed, validate_ort_values)

__all__ = [
    "ArtifactCache",
    "CacheEntry",
    "ENV_CACHE_DIR",
    "ENV_CACHE_MAX_BYTES",
    "ENV_ORT_TELEMETRY",
    "FORMAT_VERSION",
    "HostArchitecture",
    "ModelMetadataInfo",
    "ModelSource",
    "NodeArgInfo",
    "NodeAssignment",
    "NonFiniteInputCheck",
    "NonFiniteInputWarning",
    "NotRegularFileError",
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
    "crash_name",
    "default_cache_dir",
    "dynamic_inputs",
    "feed_signature",
    "first_nonfinite",
    "fix_free_dimensions",
    "fold_ifs",
    "free_dimension_overrides",
    "has_control_flow",
    "host_architecture",
    "input_dims",
    "is_static",
    "kill_process_tree",
    "known_reason",
    "make_key",
    "modelmeta_from_onnx",
    "new_session_kwargs",
    "node_args_from_onnx",
    "normalize_arch",
    "numpy_to_ort_type",
    "open_regular",
    "ort_telemetry_wanted",
    "ort_type_to_numpy",
    "plannable",
    "prune_records",
    "quiet_ort_telemetry",
    "read_regular",
    "record_call",
    "record_digest",
    "recorded_calls",
    "recorded_digest",
    "recorded_key",
    "remove_tree",
    "replace_files",
    "replay_calls",
    "screened_plan",
    "shapes_note",
    "specialize",
    "supplied_external_data",
    "user_stacklevel",
    "validate_feed",
    "validate_ort_values",
    "write_private_file",
]
