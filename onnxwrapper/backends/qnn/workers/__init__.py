"""Compile worker processes: QNN compiles run outside the user's process (:class:`WorkerPool`,
:class:`CompileRequest`, :func:`compile_many`), and one past its budget is stopped; the worker's
own entry point lives here too, and the compile server that keeps one warm worker per user between
processes (:mod:`onnxwrapper.backends.qnn.workers._server`).
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.workers._request import CompileRequest
from onnxwrapper.backends.qnn.workers._worker_main import execute
from onnxwrapper.backends.qnn.workers._workers import WorkerPool, compile_many, default_pool

__all__ = [
    "CompileRequest",
    "WorkerPool",
    "compile_many",
    "default_pool",
    "execute",
]
