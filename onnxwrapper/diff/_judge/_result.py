"""Result data of a diff: per-backend run status, per-call and per-output comparisons, verdicts.

Everything here is plain data with ``to_dict()``; the report modules render it and
:attr:`DiffResult.exit_status` is the CLI contract. Two levels are judged (:attr:`DiffResult.state`):

* the **tensor level** — every output of every call against the reference's;
* the **app level** — the script's own observable result (stdout, exit status, named files;
  :mod:`onnxwrapper.diff._judge._app_output`).

====  ==================================================================================
0     ``pass``: every compared output is within tolerance and the app output is identical
      (or not compared: replay mode, ``--compare-output none``)
1     ``tensor_mismatch`` (an output failed — tolerance, NaN/Inf, shape, dtype, missing — or
      the call sequences diverge), ``app_mismatch`` (stdout, exit status or a named file
      differs) or ``app_and_tensor_mismatch``
2     ``incomplete``: a run crashed (signal), raised an exception, timed out, was unavailable
      or could not start, or nothing at all was compared; takes precedence over 1
64    usage error (set by the command line, never by this module)
====  ==================================================================================

A script that ends with a non-zero exit status without an exception (``sys.exit(3)``) completed:
its exit status is part of its app-level result. ``repr()`` of each object: :mod:`._result_text`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxwrapper.diff._judge import _result_text as _text
from onnxwrapper.diff._judge import _verdict
from onnxwrapper.diff._report import render_table, to_document, write_html, write_json

__all__ = ["EXIT_OK", "EXIT_MISMATCH", "EXIT_BACKEND_FAILED", "EXIT_NOTHING_TO_REPAIR", "EXIT_USAGE", "STATES", "CallComparison",
           "OutputSummary", "Localization", "AppComparison", "DiffResult", "DiffAssertionError"]

#: exit statuses of results (``DiffResult``, ``ModelRuns``, ``FixResult``): the table of every aipc command
#: (``aipc --help``, docs/loader.md); 3 is ``aipc fix``'s "nothing to repair"
EXIT_OK, EXIT_MISMATCH, EXIT_BACKEND_FAILED, EXIT_NOTHING_TO_REPAIR, EXIT_USAGE = 0, 1, 2, 3, 64

#: failure kinds, most severe first (a call's kind is the first that applies).
FAILURE_KINDS = ("missing", "shape", "dtype", "nonfinite", "tolerance")
#: verdict states and their exit statuses (module docstring).
STATES = {"pass": EXIT_OK, "tensor_mismatch": EXIT_MISMATCH, "app_mismatch": EXIT_MISMATCH,
          "app_and_tensor_mismatch": EXIT_MISMATCH, "incomplete": EXIT_BACKEND_FAILED}


@dataclass
class CallComparison:
    """One output of one call compared against the reference.

    Attributes:
        backend, model, output: what was compared. session / index: the call's key; ref_seq /
            seq: the call's ``seq`` in the reference and backend captures.
        kind: ``"pass"`` or a failure kind of :data:`FAILURE_KINDS`.
        metrics: ``{metric name: value}`` (empty for shape/dtype/missing failures).
        failed: descriptions of failed thresholds; hints: matching "would have passed with" hints.
        min_atol / min_rtol: the absolute resp. relative tolerance alone that would have passed the
            abs/rel check (0 when there is none).
        detail: extra text (shapes, dtypes, "inputs differ").
        replayed: the backend side comes from the partial replay (``seq`` is that capture's).
    """

    backend: str
    model: str
    output: str
    session: int
    index: int
    ref_seq: int
    seq: int | None
    kind: str = "pass"
    metrics: dict = field(default_factory=dict)
    failed: list = field(default_factory=list)
    hints: list = field(default_factory=list)
    min_atol: float = 0.0
    min_rtol: float = 0.0
    detail: str = ""
    replayed: bool = False

    @property
    def passed(self) -> bool:
        """True when the call's outputs are within tolerance."""
        return self.kind == "pass"

    def to_dict(self) -> dict:
        """The fields as a JSON-safe dict (the report's per-call entries)."""
        return dict(self.__dict__)

    __repr__ = _text.repr_call


@dataclass
class OutputSummary:
    """All calls of one output of one model on one backend.

    Attributes:
        calls: number of calls compared; failed_calls: how many failed.
        worst: the :class:`CallComparison` shown in the table (worst failing call, else lowest SNR).
        kind: ``"pass"`` or the most severe failure kind seen. tolerance: the
            :class:`~onnxwrapper.diff.Tolerance` used. precision: preset name it came from.
        min_atol / min_rtol: largest over calls (what would have passed every call).
        per_call: ``[(session, index, max_abs_error, cosine_similarity, passed, snr_db)]`` in call
            order (plots).
    """

    backend: str
    model: str
    output: str
    tolerance: object
    precision: str
    calls: int = 0
    failed_calls: int = 0
    worst: CallComparison | None = None
    kind: str = "pass"
    min_atol: float = 0.0
    min_rtol: float = 0.0
    per_call: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when every compared call of this output is within tolerance."""
        return self.kind == "pass"

    def to_dict(self) -> dict:
        """A JSON-safe dict: the fields, the tolerance as a dict and as text, the worst call."""
        d = {k: v for k, v in self.__dict__.items() if k not in ("tolerance", "worst")}
        d["tolerance"] = self.tolerance.to_dict()
        d["tolerance_text"] = self.tolerance.describe()
        d["worst"] = self.worst.to_dict() if self.worst else None
        d["passed"] = self.passed
        return d

    __repr__ = _text.repr_output


@dataclass
class AppComparison:
    """The app-level comparison of one backend's run with the reference's.

    Attributes:
        backend: the run label; reference: the reference's label.
        status: ``"identical"``, ``"differs"`` or ``"not_compared"`` (``reason`` says why).
        items: :class:`~onnxwrapper.diff._judge._app_output.OutputItem` per compared observable.
        rtol: relative tolerance of printed numbers. filter: the ``--output-filter`` regex or None.
        explanation: for ``differs``, the first model/call whose tensors explain the difference
            (or why none does).
    """

    backend: str
    reference: str
    status: str = "not_compared"
    items: list = field(default_factory=list)
    rtol: float = 0.0
    filter: str | None = None
    reason: str = ""
    explanation: str = ""

    def to_dict(self) -> dict:
        """A JSON-safe dict: the fields, each compared item as a dict."""
        d = dict(self.__dict__)
        d["items"] = [i.to_dict() for i in self.items]
        return d

    __repr__ = _text.repr_app


@dataclass
class Localization:
    """Which node of a failing model is the cause (``--localize``; :mod:`onnxwrapper.diff._localize._search`).

    Attributes:
        backend, model: what was localized. call: ``(session, index)`` of the call used.
        method: ``"all"`` (every candidate tensor exposed at once) or ``"bisect"``.
        cause: ``"overflow"`` (FP16 range), ``"underflow"`` (values below FP16's normal range feeding a
            log, a division, a reciprocal, a square root or a normalization), ``"saturation"``,
            ``"node"`` (one node breaks), ``"amplification"``
            (a node amplifies upstream error), ``"accumulation"`` (the error grows smoothly),
            ``"none"`` (no exposed tensor below the bar) or ``""`` (incomplete).
        culprit: the node named by ``cause`` (for accumulation: the first node below the bar), as
            ``{"node", "op_type", "tensor", "index", "passed", "metrics", "failed",
            "reference_max_abs", "saturated"}``, or ``None``.
        first: the first node (graph order) whose output is below the bar, same form, or ``None``.
        chain: the nodes after it on the way to the failing outputs, same form.
        suspects: FP16 range problems: ``{"node", "op_type", "tensor", "max_abs", "saturated",
            "limit", "precision"}`` per node whose reference exceeds ±65504 or whose backend output
            saturates.
        underflows: FP16 underflow notes: ``{"node", "op_type", "tensor", "below", "zeros", "size",
            "smallest", "lost", "feeds"}`` per measured tensor whose reference holds non-zero values
            below 6.1e-5 (``below`` of ``size``; exact zeros, ``zeros``, are not underflow; ``lost``:
            those the backend got wrong) and that feeds such an operation (``feeds``: ``[{node, op_type}]``).
        bar_db: the SNR bar each tensor was held to. isolated_snr_db: SNR of the first failing node
            run alone on the reference's inputs (``None`` when not run).
        profile: ``[[node, op_type, snr_db], …]`` in graph order (measured tensors).
        rounds: expose-and-run rounds. tensors_compared: tensors compared.
        message: the report's sentence; error: why localization failed, if it did; notes: extra facts.
    """

    backend: str
    model: str
    call: tuple = (1, 0)
    method: str = "all"
    cause: str = ""
    culprit: dict | None = None
    first: dict | None = None
    chain: list = field(default_factory=list)
    suspects: list = field(default_factory=list)
    underflows: list = field(default_factory=list)
    bar_db: float | None = None
    isolated_snr_db: float | None = None
    profile: list = field(default_factory=list)
    rounds: int = 0
    tensors_compared: int = 0
    message: str = ""
    error: str = ""
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """The fields as a JSON-safe dict (the report's ``localizations`` entries)."""
        return dict(self.__dict__)

    __repr__ = _text.repr_localization


class DiffAssertionError(AssertionError):
    """Raised by the assertion helpers; its message is the console table. ``.result`` holds the
    :class:`DiffResult`."""

    def __init__(self, message: str, result: "DiffResult") -> None:
        super().__init__(message)
        self.result = result


@dataclass
class DiffResult:
    """The outcome of ``aipc diff`` / :func:`onnxwrapper.diff.run` / :func:`onnxwrapper.diff.check`.

    Attributes:
        reference: reference backend name; backends: the compared (non-reference) backends.
        mode: ``"live"``, ``"replay"`` or ``"check"``. runs: ``{backend: BackendRun}`` incl. reference.
        outputs: list of :class:`OutputSummary` (backend × model × output).
        failures: every failing :class:`CallComparison` (bounded to 1000 for memory).
        divergences: ``{backend: [sentences]}`` where call sequences differ from the reference.
        notes: other sentences for the report. localizations: list of :class:`Localization`.
        tolerances: the :class:`~onnxwrapper.diff.Tolerances` used. directory: the diff directory.
        script: ``{"argv": [...], "module": bool}`` of what ran, when known.
        compared_calls: matched calls compared. capture_dirs: ``{label: capture directory}``.
        timings: model runs only (``mode == "model"``): ``{label: Timing.to_dict()}`` — per-iteration
            wall time of ``session.run`` (:class:`onnxwrapper.diff.Timing`).
    """

    reference: str
    backends: list
    mode: str
    runs: dict = field(default_factory=dict)
    outputs: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    divergences: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    localizations: list = field(default_factory=list)
    tolerances: object = None
    directory: str | None = None
    script: dict = field(default_factory=dict)
    compared_calls: int = 0
    capture_dirs: dict = field(default_factory=dict)
    app: dict = field(default_factory=dict)
    nonfinite_feeds: list = field(default_factory=list)
    inputs_differ: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    @property
    def incomplete_runs(self) -> list:
        """Runs that did not complete (the reference's second run excluded: it only masks
        volatile output)."""
        return [r for r in self.runs.values() if not r.complete and not r.rerun_of]

    @property
    def backend_failed(self) -> bool:
        """True when a run did not complete or nothing was compared."""
        return bool(self.incomplete_runs) or (self.compared_calls == 0 and not self.outputs)

    @property
    def tensor_mismatch(self) -> bool:
        """True when an output failed or call sequences diverged."""
        return any(not o.passed for o in self.outputs) or any(self.divergences.values())

    @property
    def app_mismatch(self) -> bool:
        """True when a backend's app-level output differs from the reference's."""
        return any(a.status == "differs" for a in self.app.values())

    @property
    def mismatch(self) -> bool:
        """True on a mismatch at either level."""
        return self.tensor_mismatch or self.app_mismatch

    @property
    def state(self) -> str:
        """One of :data:`STATES` (module docstring)."""
        if self.backend_failed:
            return "incomplete"
        if self.tensor_mismatch and self.app_mismatch:
            return "app_and_tensor_mismatch"
        return "tensor_mismatch" if self.tensor_mismatch else "app_mismatch" if self.app_mismatch else "pass"

    @property
    def passed(self) -> bool:
        """True iff :attr:`exit_status` is 0."""
        return self.exit_status == EXIT_OK

    @property
    def exit_status(self) -> int:
        """0, 1 or 2 as documented in this module."""
        return STATES[self.state]

    def verdict_line(self) -> str:
        """The one-line verdict: state, which level failed and why (see
        :func:`onnxwrapper.diff._judge._verdict.verdict_line`)."""
        return _verdict.verdict_line(self)

    __repr__ = _text.repr_diff_result

    @property
    def verdict(self) -> str:
        """``"PASS"``, ``"MISMATCH"`` or ``"INCOMPLETE"``."""
        return {EXIT_OK: "PASS", EXIT_MISMATCH: "MISMATCH"}.get(self.exit_status, "INCOMPLETE")

    def table(self, *, color: bool = False, width: int | None = None) -> str:
        """The console table (see :func:`onnxwrapper.diff._report.render_table`)."""
        return render_table(self, color=color, width=width)

    def to_dict(self) -> dict:
        """The JSON report document (schema: docs/diff.md, "JSON report")."""
        return to_document(self)

    def write_json(self, path) -> str:
        """Write the JSON report to ``path``; returns the path."""
        return write_json(self, path)

    def write_html(self, path) -> str:
        """Write the self-contained HTML report (needs matplotlib: ``pip install 'onnxwrapper[report]'``)."""
        return write_html(self, path)

    def assert_passed(self) -> None:
        """Raise :class:`DiffAssertionError` with the console table unless the diff passed."""
        __tracebackhide__ = True  # pytest: point at the caller
        if not self.passed:
            raise DiffAssertionError(f"aipc diff verdict: {self.verdict} (exit status {self.exit_status})\n"
                                     + self.table(), self)

