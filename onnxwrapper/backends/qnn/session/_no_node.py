"""Sessions (and shape specializations) of which the QNN EP takes no node: they run on CPU.

ONNX Runtime with the QNN EP runs such models on its CPU EP, without a word (measured on
onnxruntime 1.32.0 + onnxruntime-qnn 2.7.0: string ``Identity``, ``Sequence*``, optional types,
``TreeEnsembleClassifier``, ORT's ``Pad`` test models; only the two W-level lines the QNN EP
prints for every session). These ops never run on an NPU; they are the pre/post-processing
models real apps load next to the NPU model (tokenizers, classical ML). So the qnn backend does
the same by default, and says so:

* :class:`QnnCpuSession` — ORT's own CPU session of the model **with the user's own
  ``SessionOptions`` object** (so every option applies as on ORT: free-dimension overrides,
  ``add_initializer``, external initializers, ``optimized_model_filepath`` …). It reports what
  ORT + QNN EP reports (``get_providers()`` ``['QNNExecutionProvider', 'CPUExecutionProvider']``)
  and its partition, QNN 0/N nodes.
* :func:`no_node_policy` — ``strict=True``: :class:`~onnxwrapper.errors.PartitionError` (the
  ``strict`` refusal); otherwise one :class:`~onnxwrapper.kernel.PartialOffloadWarning` per model
  and process naming the way to refuse (``backend_options={'strict': True}``, ``aipc --strict``).
* the verdict is remembered in the compile cache (a
  :class:`~onnxwrapper.backends.qnn.compile.CompileMemo` next to the would-be compile), so later
  sessions do not try to compile again.
* :func:`~onnxwrapper.backends.qnn._op_support.predicted_no_node` — a model none of whose op types the QNN EP has a builder for
  (:data:`~onnxwrapper.backends.qnn._op_support.QNN_OP_TYPES`, or a custom domain such as
  ``ai.onnx.ml``'s ``TreeEnsembleClassifier`` + ``ZipMap``) is known to get no node without any
  compile: it becomes one :class:`QnnCpuSession` at once — dynamic shapes and all, not a session
  per input shape (which cost a tree-ensemble app 62.6 s instead of 8.4 s: a compile attempt, a
  cache memo and a "compiling … for the QNN HTP" log line per shape).
"""

from __future__ import annotations

from typing import Any, Mapping

from onnxwrapper.backends.base import BackendSession, OrtSessionArgs, SessionDescription
from onnxwrapper.backends.qnn.compile import CompileMemo
from onnxwrapper.backends.qnn.platform import EP_NAME
from onnxwrapper.backends.qnn.session._partition_check import warn_once
from onnxwrapper.errors import CompileBudgetError, CompileFailedError, PartitionError
from onnxwrapper.kernel import NodeAssignment, PartitionReport

__all__ = ["CPU_EP", "RECIPE_CPU_REASON", "CpuSessionAhead", "QnnCpuSession", "compile_or_verdict", "model_verdict", "no_node_policy", "ort_providers",
           "ort_provider_options", "remember_verdict"]

CPU_EP = "CPUExecutionProvider"


def ort_providers() -> list[str]:
    """What ORT + QNN EP's ``get_providers()`` says for every session (measured, also when QNN took
    no node): ``['QNNExecutionProvider', 'CPUExecutionProvider']``."""
    return [EP_NAME, CPU_EP]


def ort_provider_options(ep_options: Mapping[str, str]) -> dict:
    """What ORT + QNN EP's ``get_provider_options()`` says: ``{'CPUExecutionProvider': {},
    'QNNExecutionProvider': {QNN EP options}}`` (measured, in this order)."""
    return {CPU_EP: {}, EP_NAME: dict(ep_options)}


def _verdict_memo(cache, model_hash: str, compile_options) -> CompileMemo:
    return CompileMemo(cache, {"qnn-model-takes-no-node": model_hash, "options": dict(sorted(compile_options.items()))},
                       "partition")


def model_verdict(cache, model_hash: str, compile_options) -> PartitionReport | None:
    """The remembered partition of a model the QNN EP takes no node of (every node on ORT's CPU EP;
    found by the candidates' probe or at one input shape), or ``None``. Keyed by the model identity
    (``model_hash``) and the compile options (``QnnSettings.compile_options()``); one ``stat`` when
    nothing is remembered."""
    known = _verdict_memo(cache, model_hash, compile_options).known()
    try:
        return PartitionReport.from_dict(known).with_source("cache") if isinstance(known, dict) else None
    except (KeyError, TypeError, ValueError):
        return None


def remember_verdict(cache, model_hash: str, compile_options, report: PartitionReport) -> None:
    """Remember (best effort) that the QNN EP takes no node of the model: :func:`model_verdict`."""
    _verdict_memo(cache, model_hash, compile_options).remember(report.to_dict())


def _ops(report: PartitionReport) -> str:
    ops = sorted({n.op_type for n in report.nodes})
    return ", ".join(ops[:8]) + (" …" if len(ops) > 8 else "")


#: the reason a repair recipe's CPU subgraph gives each of its nodes in the partition report
RECIPE_CPU_REASON = "repair recipe: runs on the CPU (the QNN result of this subgraph failed verification; see the recipe)"


def no_node_policy(report: PartitionReport, *, strict: bool, label: str, warn_key: str) -> None:
    """Refuse (``strict``) or warn once that QNN took none of the nodes of ``label``.

    Raises:
        PartitionError: ``strict`` (``.report`` is the partition, ``.cpu_nodes`` every node).
    """
    total = len(report.nodes)
    if strict and report.recovery:  # every rung failed (remembered in the cache): the compile failure, typed
        first = report.recovery[0]
        raise CompileFailedError(
            f"strict=True but the QNN HTP could compile no part of {label} ({first.get('error')}; every step of the "
            f"recovery failed and is recorded in the compile cache: {report.recovery_summary()}).", backend="qnn",
            model=label, error_name=first.get("error"), rung=report.recovery[-1].get("rung"))
    if strict:
        raise PartitionError(
            f"strict=True but the QNN execution provider took none of the {total} node(s) of {label} ({_ops(report)}): "
            f"{report.summary()}. Without strict=True the session runs on ORT's CPU execution provider, as "
            f"onnxruntime with the QNN EP does.", backend="qnn", cpu_nodes=report.cpu_nodes, report=report)
    if report.recovery and report.recovery[-1].get("rung") == "compile budget":
        warn_once(warn_key, f"{report.recovery[-1].get('detail')} It runs on ORT's CPU execution provider for the rest "
                            f"of this run.")
        return
    if total and all(n.reason == RECIPE_CPU_REASON for n in report.nodes):  # the recipe's choice, not the EP's
        warn_once(warn_key, f"The repair recipe runs every node of {label} ({_ops(report)}) on ORT's CPU execution "
                            f"provider (its CPU subgraphs: the QNN result failed verification there); the QNN HTP "
                            f"runs none of it.")
        return
    why = f" ({report.recovery_summary()})" if report.recovery else ""
    message = (f"The QNN execution provider took none of the {total} node(s) of {label} ({_ops(report)}){why}; it runs "
               f"on ORT's CPU execution provider, as onnxruntime with the QNN EP does. "
               f"backend_options={{'strict': True}} (aipc --strict) refuses such sessions.")
    warn_once(warn_key, message)


class QnnCpuSession(BackendSession):
    """ORT's CPU session of a model the QNN EP took no node of (see the module docstring).

    Args:
        model: the model as the user gave it (path or bytes). user_so: the user's ``SessionOptions``
            or ``None``, used as it is. kwargs: the user's ORT keyword arguments.
        report: the partition (QNN 0/N nodes). ep_options: the QNN EP options of the session.
        ahead: a :class:`CpuSessionAhead` of this very session, created while the verdict was found.
    """

    def __init__(self, model, user_so, kwargs: Mapping[str, Any], *, report: PartitionReport,
                 ep_options: Mapping[str, str], ahead: "CpuSessionAhead | None" = None) -> None:
        # no providers: ORT's default CPU EP, as ORT + QNN EP falls back to it (so a user's
        # session.disable_cpu_ep_fallback=1 fails as there); a SessionOptions with the user's own
        # EP devices keeps them (the QNN EP takes nothing again)
        self.ort_args = OrtSessionArgs(model, user_so, None, None, dict(kwargs),
                                       prebuilt=ahead.result() if ahead is not None else None)
        self.report = report
        self.ep_options = dict(ep_options)

    def describe(self) -> SessionDescription:
        """ORT's own session; every method is ORT's."""
        return SessionDescription(ort=self.ort_args)

    def providers(self) -> list[str]:
        return ort_providers()

    def provider_options(self) -> dict:
        return ort_provider_options(self.ep_options)

    def partition(self) -> PartitionReport:
        """QNN 0/N nodes: every node on ORT's CPU EP."""
        return self.report


def compile_or_verdict(compile_epcontext, store, patches, model_input, proto, shapes, note: str, values=None):
    """Compile with ``compile_epcontext`` (an ``EpContextFromOnnx`` over ``store``, a ``CacheStore``):
    ``(Compiled, None)``, or ``(None, report)`` when the QNN EP takes no node (remembered in the
    cache with a :class:`~onnxwrapper.backends.qnn.compile.CompileMemo`, so the next session does
    not try again). ``values``: the specialization's bound control-input values, or ``None``. A compile
    past the model's total ``compile_budget`` (outside ``strict``) gives ``(None, report)`` too: every
    node on the CPU for the rest of this run (not remembered in the cache: a precompile may fix it).

    Raises:
        CompileBudgetError: the total budget ran out under ``strict``. What the compile raises otherwise."""
    over = _OVER_BUDGET.get((store.model_hash, store.setup.settings.describe()))
    if over is not None:  # another compile of this model went past its total budget in this run
        return None, over
    key = store.key(shapes, [], values)
    memo = CompileMemo(store.cache, {"qnn-took-no-node": key, "patches": repr(patches)}, "partition",
                       unless_entry=key)
    known = memo.known()
    if isinstance(known, dict):
        return None, PartitionReport.from_dict(known).with_source("cache")
    try:
        if values:
            return compile_epcontext(model_input, proto, shapes, note, values), None
        return compile_epcontext(model_input, proto, shapes, note), None
    except PartitionError as exc:
        if exc.report is None:
            raise
        memo.remember(exc.report.to_dict())
        return None, exc.report
    except CompileBudgetError as exc:
        if exc.budget != "total" or store.setup.settings.strict:
            raise
        report = _all_on_cpu(proto, note, {"rung": "compile budget", "result": "failed", "error": "budget:total",
                                           "detail": str(exc), "seconds": round(exc.seconds, 1)})
        _OVER_BUDGET[(store.model_hash, store.setup.settings.describe())] = report
        return None, report


#: (model, settings) → the all-CPU report of a model whose compiles went past the total budget in this run
_OVER_BUDGET: dict[tuple, PartitionReport] = {}


def _all_on_cpu(proto, note: str, step: Mapping[str, Any]) -> PartitionReport:
    """Every node of ``proto`` on ORT's CPU EP, with ``step`` as the report's recovery."""
    nodes = tuple(NodeAssignment(n.name, n.op_type, n.domain, CPU_EP, 0, "the compile budget ran out")
                  for n in proto.graph.node if not (n.op_type == "Constant" and not n.input))
    return PartitionReport(EP_NAME, nodes, (CPU_EP,), "compile", note).with_recovery([step])


class CpuSessionAhead:
    """ORT's CPU session of a model — the one :class:`QnnCpuSession` runs — created in a thread while the
    backend finds out whether the QNN EP takes any node of the model (parse, probe: measured on a 20 MB
    tree ensemble, 0.6 s of a 1.4 s first open). ORT releases the GIL while it creates a session
    (measured), so the two overlap. Used for models that look like classical ML (an ``ai.onnx.ml`` op
    in their bytes); a session made in vain is dropped.

    Args:
        model, user_so, kwargs: exactly what :class:`QnnCpuSession` passes to ORT.
    """

    def __init__(self, model, user_so, kwargs: Mapping[str, Any]) -> None:
        import threading

        from onnxwrapper.backends.qnn.compile import ort_session_class

        self._session = None

        def build() -> None:
            try:
                self._session = ort_session_class()(model, user_so, **dict(kwargs))
            except Exception:  # noqa: BLE001 - the façade creates it again and raises ORT's error itself
                self._session = None
        self._thread = threading.Thread(target=build, daemon=True, name="onnxwrapper-qnn-cpu-ahead")
        self._thread.start()

    def result(self):
        """The created ``onnxruntime.InferenceSession`` (waits for it), or ``None`` when it failed."""
        self._thread.join()
        return self._session

    @staticmethod
    def worth_it(source) -> bool:
        """Whether ``source``'s bytes hold an ``ai.onnx.ml`` op domain (a tree ensemble, a classifier's
        ZipMap: ops the QNN EP has no builder for). A guess for speed only; never decides a verdict."""
        marker = b"ai.onnx.ml"
        if source.path is None:
            return marker in source.read_bytes()
        try:
            with open(source.path, "rb") as f:
                tail = b""
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    if marker in tail + chunk:
                        return True
                    tail = chunk[-len(marker):]
        except OSError:
            return False
        return False
