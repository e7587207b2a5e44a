"""One QNN compile: ORT's EPContext generation (and DLC export) as a compile worker runs it, the
ORT session class and creation guard of QNN sessions, the compile's budget (wall time, memory,
progress lines), its typed errors, what the cache remembers of a compile that gave no model, the
overridable initializers kept through it, and the provenance records stamped into every compiled
model and checked on a cache hit.
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.compile._budget import (DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_TOTAL_BUDGET_S, await_reply,
                                                      compile_seconds, convert_seconds, default_compile_memory_mb,
                                                      total_budget)
from onnxwrapper.backends.qnn.compile._cache_provenance import hit_problem, session_record
from onnxwrapper.backends.qnn.compile._compile import (CTX_NAME, build_session_options, cached_compile,
                                                       compile_cache_key, complete_epcontext, create_qnn_session, dump_dlc,
                                                       generate_epcontext, metadata_model, ort_session_class,
                                                       qnn_creation_guard)
from onnxwrapper.backends.qnn.compile._compile_errors import (UNWRITABLE_MARKERS, compile_hint, context_load_error,
                                                              context_memory_failure, epcontext_unwritable, qnn_error,
                                                              recoverable, remember_first_failure, take_first_failure,
                                                              typed_failure)
from onnxwrapper.backends.qnn.compile._compile_memo import CompileMemo
from onnxwrapper.backends.qnn.compile._provenance import make_record, stamp, verify
from onnxwrapper.backends.qnn.compile._warm import warm_qnn_backend

__all__ = [
    "CTX_NAME",
    "CompileMemo",
    "DEFAULT_COMPILE_TIMEOUT_S",
    "DEFAULT_TOTAL_BUDGET_S",
    "UNWRITABLE_MARKERS",
    "await_reply",
    "build_session_options",
    "cached_compile",
    "compile_cache_key",
    "compile_hint",
    "compile_seconds",
    "complete_epcontext",
    "context_load_error",
    "context_memory_failure",
    "convert_seconds",
    "create_qnn_session",
    "default_compile_memory_mb",
    "dump_dlc",
    "epcontext_unwritable",
    "generate_epcontext",
    "hit_problem",
    "make_record",
    "metadata_model",
    "ort_session_class",
    "qnn_creation_guard",
    "qnn_error",
    "recoverable",
    "remember_first_failure",
    "session_record",
    "stamp",
    "take_first_failure",
    "total_budget",
    "typed_failure",
    "verify",
    "warm_qnn_backend",
]
