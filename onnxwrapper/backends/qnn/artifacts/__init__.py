"""Compiled models that exist already: verified precompiled EPContext models next to the user's
model (an ordered list of resolvers, :func:`register_artifact_resolver`), and a session opened
straight from a compile-cache hit (:func:`open_cached`: no onnx import, no parse of the model), and
the first compile of a plain model with its parse done by the compile worker (:func:`first_compile`),
and the finding that the QNN EP takes no node of a model (:func:`probe_no_node`; in the compile
worker for a model that looks like classical ML: :func:`first_no_node`).
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.artifacts._artifacts import (RAW_BINARY_SUFFIXES, ResolvedArtifact,
                                                           check_artifact_interface, register_artifact_resolver,
                                                           resolve_precompiled, resolve_specialization)
from onnxwrapper.backends.qnn.artifacts._cache_hit import is_ort_format, is_raw_binary, model_label, open_cached
from onnxwrapper.backends.qnn.artifacts._first_compile import first_compile, first_compile_job, first_failure_token
from onnxwrapper.backends.qnn.artifacts._no_node_probe import first_no_node, no_node_job, probe_no_node

__all__ = [
    "RAW_BINARY_SUFFIXES",
    "ResolvedArtifact",
    "check_artifact_interface",
    "first_compile",
    "first_compile_job",
    "first_failure_token",
    "first_no_node",
    "is_ort_format",
    "is_raw_binary",
    "model_label",
    "no_node_job",
    "open_cached",
    "probe_no_node",
    "register_artifact_resolver",
    "resolve_precompiled",
    "resolve_specialization",
]
