"""Loaded QNN contexts budgeted by memory: how many shape specializations a session keeps loaded.

A dynamic-shape session keeps the ORT sessions of its recent specializations loaded (LRU), each
holding its QNN context. The HTP's budget is in bytes, not in count. Measured on the x86-64 HTP
simulator (onnxruntime-qnn 2.7.0, a probe of growing context counts): contexts of 64 MiB each
kept loaded fail on the 47th (about 2.9 GiB loaded) with ``INVALID_GRAPH : Failed to load from
EpContext model. contextCreateFromBinary failed … QNN_COMMON_ERROR_MEM_ALLOC``, raised from
``run()``; a released context gives its memory back (50 loads and releases of a 16 MiB context: the
process's resident memory grows by 6 MiB in all; 46 distinct 64 MiB contexts with 8 kept loaded:
it levels off at ~1.38 GiB).

So a session keeps loaded at most ``context_memory_mb`` MiB of context binaries (the size of their
files, known before the run; backend option ``context_memory_mb``), besides ``max_specializations``
contexts; the least recently used ones are released first, never the one just loaded. A load that
still fails for memory (other sessions hold contexts too) releases the session's other contexts one
at a time and retries, then raises :class:`~onnxwrapper.errors.ContextLoadError`.

Defaults (:func:`context_budget_mb`), MiB of context binaries per session:

==========================  =======  =====================================================
where                        MiB      why
==========================  =======  =====================================================
x86-64 HTP simulator         2048     measured limit ≈ 2.9 GiB loaded per process, 2/3 of it
device, ``htp_arch`` 68      1024     estimate, not measured on hardware (smaller memory parts)
device, ``htp_arch`` ≥ 69    2048     estimate, not measured on hardware (as the simulator)
==========================  =======  =====================================================
"""

from __future__ import annotations

import glob
import logging
import os
from typing import Callable

from onnxwrapper.backends.qnn.compile import context_load_error, context_memory_failure, qnn_error
from onnxwrapper.errors import ContextLoadError

__all__ = ["SIMULATOR_CONTEXT_MB", "DEVICE_CONTEXT_MB", "context_budget_mb", "context_bytes", "load_with_room"]

_log = logging.getLogger("onnxwrapper.qnn")
_MIB = 1024 * 1024
#: default ``context_memory_mb`` on the simulator (measured, see the module docstring)
SIMULATOR_CONTEXT_MB = 2048
#: default ``context_memory_mb`` on a device, by ``htp_arch`` (estimates; others: 2048)
DEVICE_CONTEXT_MB = {68: 1024}
_CACHE_CTX = "model_ctx.onnx"


def context_budget_mb(settings) -> float:
    """The session's budget of loaded contexts in MiB: the ``context_memory_mb`` option, else the
    default of the table in the module docstring."""
    if getattr(settings, "context_memory_mb", None):
        return float(settings.context_memory_mb)
    if not getattr(settings, "real_npu", False):
        return float(SIMULATOR_CONTEXT_MB)
    return float(DEVICE_CONTEXT_MB.get(getattr(settings, "htp_arch", None), SIMULATOR_CONTEXT_MB))


def context_bytes(ctx_path: str | None) -> int:
    """Bytes of the QNN context binaries of the EPContext model ``ctx_path``: every ``*.bin`` of its
    folder for a compile-cache entry (one context per folder, parts of a split included), else the
    ``<stem>*.bin`` files next to it; 0 for none (a CPU or just-in-time session)."""
    if not ctx_path or not os.path.isfile(ctx_path):
        return 0
    folder, name = os.path.split(ctx_path)
    pattern = "*.bin" if name == _CACHE_CTX else glob.escape(os.path.splitext(name)[0]) + "*.bin"
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(glob.escape(folder), pattern)))


def load_with_room(build: Callable[[], tuple], release_oldest: Callable[[], bool], live_mb: Callable[[], float],
                   label: str) -> tuple:
    """``build()`` (compile if needed, then load a context); when the load fails for memory, release
    the least recently used loaded context (``release_oldest()``: False when none is left) and retry.

    Raises:
        ContextLoadError: the load still fails with nothing left to release, or fails for another
            QNN reason (chained to ORT's error). Other errors of ``build`` unchanged.
    """
    while True:
        try:
            return build()
        except Exception as exc:  # noqa: BLE001 - ORT's load failures are mapped below, others re-raised
            if context_memory_failure(exc):
                if release_oldest():
                    _log.info("onnxwrapper qnn: loading a context of %s failed for memory; released the least "
                              "recently used one and retrying", label)
                    continue
                raise context_load_error(exc, label, live_mb()) from exc
            if isinstance(exc, ContextLoadError):
                raise
            if "Failed to load from EpContext" in str(exc) or (qnn_error(exc)[0] and "EpContext" in str(exc)):
                raise context_load_error(exc, label, live_mb()) from exc
            raise
