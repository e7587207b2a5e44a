"""Compile worker processes: QNN compiles run outside the user's process (:class:`WorkerPool`,
:class:`CompileRequest`, :func:`compile_many`), and one past its budget is stopped; the worker's
own entry point lives here too.
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.workers._workers import CompileRequest, WorkerPool, compile_many, default_pool

__all__ = [
    "CompileRequest",
    "WorkerPool",
    "compile_many",
    "default_pool",
]
