"""Automatic operator patches in the QNN backend: compile, patch what QNN left on CPU, recompile.

The qnn backend applies registered patches automatically to nodes that would not run on QNN
(backend option ``patches`` to disable), and the partition report says so. The procedure, used
for static models, for every shape specialization of dynamic models and by ``compile_model``:

1. compile the model as given (cached) and read its partition;
2. if patches are enabled (backend option ``patches``, default ``True``) and some nodes are off
   the QNN EP, :func:`onnxwrapper.patches.patch_offloaded` rewrites those a registered patch can
   rewrite (in memory; nothing is written next to the user's model);
3. if anything was rewritten, the patched model is compiled under its own cache key (which
   includes the patch records) and its result is used; its
   :class:`~onnxwrapper.kernel.session._partition.PartitionReport` lists the patches (``report.patches``,
   ``summary()`` "patched: mod (node m)").

``strict=True`` is judged by the caller on the report this returns, i.e. after patching.

A patched model the QNN HTP cannot finalize (measured: the float ``Mod`` rewrite in FP32
simulation fails with ``EP_FAIL … QNN_COMMON_ERROR_MEM_ALLOC``, onnxruntime-qnn 2.7.0) falls back
to the unpatched compile with a WARNING on logger ``onnxwrapper.qnn``; the failure is remembered
in the compile cache (a meta-only entry) so later sessions do not retry it. Errors that would
also hit the unpatched model (EP creation, configuration conflicts) propagate.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from onnxwrapper.backends.qnn.compile import CompileMemo
from onnxwrapper.errors import BackendConfigConflictError, BackendUnavailableError, PartitionError
from onnxwrapper.kernel import PartitionReport
from onnxwrapper.patches import patch_offloaded

__all__ = ["compile_with_patches", "FailureMemo"]

_log = logging.getLogger("onnxwrapper.qnn")


class FailureMemo:
    """Remembers patched models the QNN EP failed to compile, in the artifact cache (one
    :class:`~onnxwrapper.backends.qnn.compile.CompileMemo` per patched compile).

    Args:
        cache: :class:`onnxwrapper.kernel.cache._cache.ArtifactCache`.
        key_for: ``key_for(records) -> str``, the cache key of the patched compile.
    """

    def __init__(self, cache, key_for: Callable[[list], str]) -> None:
        self.cache = cache
        self.key_for = key_for

    def _memo(self, records: list) -> CompileMemo:
        return CompileMemo(self.cache, {"failed-patched-compile": self.key_for(records)}, "error")

    def known(self, records: list) -> str | None:
        """The recorded error text when this patched compile failed before, else ``None``."""
        known = self._memo(records).known()
        return None if known is None else str(known)

    def remember(self, records: list, error: str) -> None:
        """Record that the patched compile failed with ``error``."""
        self._memo(records).remember(error)


def _describe(records: Sequence[dict]) -> str:
    return ", ".join(f"{r['patch']} (node {r['node_name'] or '<unnamed>'})" for r in records)


def compile_with_patches(compile_fn: Callable[[Any, list], tuple[Any, PartitionReport]], model, proto,
                         disabled: tuple[str, ...] | None, *, label: str, memo: FailureMemo | None = None
                         ) -> tuple[Any, PartitionReport, list[dict]]:
    """Compile ``model``; if patches are on and nodes stay off QNN, patch them and compile again.

    Args:
        compile_fn: ``compile_fn(model_input, records) -> (payload, PartitionReport)`` compiles
            ``model_input`` (path, bytes, or a zero-argument callable returning bytes — evaluate it
            only when really compiling) and returns whatever the caller needs (e.g. the cache entry)
            plus the partition. ``records`` is ``[]`` for the original model and the patch records
            (dicts) for the patched one, for its cache key. It may raise
            :class:`~onnxwrapper.errors.PartitionError` when QNN takes no node.
        model: the model input for the first compile.
        proto: the same model as an ``onnx.ModelProto`` (not modified; patched as a copy).
        disabled: from :func:`~onnxwrapper.backends.qnn.settings._options.disabled_patches` (``None``: patching off).
        label: model name for log lines. memo: remembers failed patched compiles (optional).

    Returns:
        ``(payload, report, records)``; ``report.patches == records`` (dicts) when the patched
        model is used, ``records == []`` otherwise.

    Raises:
        Whatever ``compile_fn`` raises for the original model — a ``PartitionError`` (no QNN node)
        only when patching is off or cannot help; BackendUnavailableError and
        BackendConfigConflictError also from the patched compile.
    """
    first_error: PartitionError | None = None
    payload = report = None
    try:
        payload, report = compile_fn(model, [])
        offloaded = report.offloaded_nodes
    except PartitionError as exc:
        if disabled is None or not exc.cpu_nodes:
            raise
        first_error, offloaded = exc, list(exc.cpu_nodes)
    if disabled is None or not offloaded:
        return payload, report, []

    try:
        patched, found = patch_offloaded(proto, offloaded, disabled=disabled)
    except Exception as exc:  # noqa: BLE001 - a patch bug must not break a model that runs unpatched
        _log.warning("onnxwrapper qnn: patching the CPU nodes of %s failed (%s: %s); using the unpatched model",
                     label, type(exc).__name__, exc)
        found = []
    if not found:
        if first_error is not None:
            raise first_error
        return payload, report, []
    records = [r.to_dict() for r in found]
    known = memo.known(records) if memo is not None else None
    if known is not None:
        _log.info("onnxwrapper qnn: not patching %s: the patched model failed to compile before (%s)", label, known)
        if first_error is not None:
            raise first_error
        return payload, report, []
    _log.info("onnxwrapper qnn: patched %s of %s (nodes the QNN EP rejected); using the patched model",
              _describe(records), label)
    try:
        new_payload, new_report = compile_fn(lambda: patched.SerializeToString(), records)
    except (BackendUnavailableError, BackendConfigConflictError):
        raise
    except Exception as exc:  # noqa: BLE001 - EPFail/Fail/PartitionError/...: the QNN EP rejected the rewrite
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
        _log.warning("onnxwrapper qnn: the patched model (%s) of %s failed to compile (%s); using the unpatched "
                     "model. Disable patches with backend_options={'patches': False}.", _describe(records), label,
                     error)
        if memo is not None:
            memo.remember(records, error)
        if first_error is not None:
            raise first_error from exc
        return payload, report, []
    return new_payload, new_report.with_patches(records), records
