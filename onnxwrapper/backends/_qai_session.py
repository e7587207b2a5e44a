"""An open qai_appbuilder session: one ``QNNContext``, the process-wide perf profile, runs
serialized process-wide (qai_appbuilder forbids concurrent ``Inference`` on two contexts)."""

from __future__ import annotations

import threading
import weakref

from onnxwrapper.backends._foreign_session import ForeignSession
from onnxwrapper.errors import BackendConfigConflictError, BackendRunError

__all__ = ["QaiSession"]

#: qai_appbuilder forbids concurrent Inference() on two contexts (qai_appbuilder 2.51 wheel comments)
_NATIVE_LOCK = threading.Lock()


class _PerfProfiles:
    """Process-wide perf-profile owner: set once, counted per session, released by the last one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active: str | None = None
        self.users = 0

    def acquire(self, module, profile: str) -> bool:
        if profile == "default":
            return False
        with self._lock:
            if self.active not in (None, profile):
                raise BackendConfigConflictError(
                    f"qai_appbuilder's perf profile is process-wide and '{self.active}' is active for "
                    f"{self.users} open session(s); this session asks for '{profile}'. Use the same "
                    f"backend_options['perf_profile'] for every session, or close the others first.",
                    backend="qai", active=self.active, requested=profile)
            if self.active is None:
                module.PerfProfile.SetPerfProfileGlobal(getattr(module.PerfProfile, profile.upper()))
                self.active = profile
            self.users += 1
            return True

    def release(self, module) -> None:
        with self._lock:
            self.users -= 1
            if self.users == 0 and self.active is not None:
                self.active = None
                module.PerfProfile.RelPerfProfileGlobal()


_PERF = _PerfProfiles()


def _cleanup(module, ctx, holds_profile: bool) -> None:
    """Release the perf profile (when this session holds it) *before* the context: qai_appbuilder
    2.51's ``RelPerfProfileGlobal`` needs a loaded model (after the last context is destroyed it logs
    "HTP infrastructure is not available (context released?)" and fails), and Qualcomm's samples
    release the profile right after ``Inference``, before ``del model``."""
    try:
        if holds_profile:
            _PERF.release(module)
    finally:
        ctx.release()


class QaiSession(ForeignSession):
    """An open qai_appbuilder ``QNNContext``; created by :meth:`QaiBackend.open`."""

    process_bound = True  # a QNNContext does not survive fork(): the façade's fork guard raises there

    def __init__(self, *, module, ctx, graph_index: int, holds_profile: bool, **kwargs) -> None:
        super().__init__(backend="qai", **kwargs)
        self._module, self._ctx, self._graph_index = module, ctx, graph_index
        self._finalizer = weakref.finalize(self, _cleanup, module, ctx, holds_profile)

    def _invoke(self, buffers: list, wanted: list):
        with _NATIVE_LOCK:
            outputs = self._ctx.Inference(list(buffers), perf_profile=self._module.PerfProfile.DEFAULT,
                                          graphIndex=self._graph_index)
        if not outputs:
            raise BackendRunError(
                "[ONNXRuntimeError] : 11 : EP_FAIL : qai_appbuilder returned no outputs: the QNN graph failed to "
                "execute (the native layer reports only this). Run with backend_options={'log_level': 'verbose'} "
                "to see QNN's log; check that the artifact was compiled for this device's HTP architecture.",
                backend="qai")
        if len(outputs) != self._out.native_count:
            raise BackendRunError(f"[ONNXRuntimeError] : 11 : EP_FAIL : qai_appbuilder returned {len(outputs)} "
                                     f"outputs, the graph declares {self._out.native_count}.", backend="qai")
        return outputs

    def _release(self) -> None:
        self._finalizer()
