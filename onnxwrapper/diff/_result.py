"""Result data of a diff: per-backend run status, per-call and per-output comparisons, verdicts.

Everything here is plain data with ``to_dict()``; the report modules render it and
:attr:`DiffResult.exit_status` is the CLI contract:

====  ==================================================================================
0     every compared output of every call is within tolerance on every backend
1     accuracy mismatch: an output failed (tolerance, NaN/Inf, shape, dtype, missing) or the
      call sequences of a backend diverge from the reference's (live mode)
2     a backend (or the reference) failed to run, crashed, timed out or was unavailable, or
      nothing at all was compared; takes precedence over 1 (the verdict is incomplete)
64    usage error (set by the command line, never by this module)
====  ==================================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["EXIT_OK", "EXIT_MISMATCH", "EXIT_BACKEND_FAILED", "EXIT_USAGE", "BackendRun", "CallComparison",
           "OutputSummary", "Localization", "DiffResult", "DiffAssertionError"]

EXIT_OK, EXIT_MISMATCH, EXIT_BACKEND_FAILED, EXIT_USAGE = 0, 1, 2, 64

#: failure kinds, most severe first (a call's kind is the first that applies).
FAILURE_KINDS = ("missing", "shape", "dtype", "nonfinite", "tolerance")


@dataclass
class BackendRun:
    """How one backend's run went.

    Attributes:
        backend: canonical backend name. options: the backend options asked for. label: the name
            of this run in the diff (the backend name unless given as ``label=backend``).
        status: ``"ok"``, ``"script_failed"`` (non-zero exit or exception), ``"crashed"`` (killed by
            a signal: ``signal`` holds its name, e.g. ``"SIGSEGV"``), ``"timeout"``,
            ``"unavailable"`` (backend cannot run here), ``"error"`` (could not start).
        returncode: the child's exit code (negative = signal number on POSIX), or ``None``.
        message: one human sentence. capture_dir: where its capture is.
        seconds: wall time of the child process (s). stdout / stderr: paths of its output logs.
        calls: number of calls recorded.
        replay_of: for an automatic partial replay (live mode), the label of the live run whose
            calls it re-ran on the reference's inputs; ``None`` otherwise.
    """

    backend: str
    options: dict = field(default_factory=dict)
    label: str = ""
    status: str = "ok"
    returncode: int | None = 0
    signal: str | None = None
    message: str = ""
    capture_dir: str | None = None
    seconds: float = 0.0
    stdout: str | None = None
    stderr: str | None = None
    calls: int = 0
    replay_of: str | None = None

    @property
    def ok(self) -> bool:
        """True when the run completed normally."""
        return self.status == "ok"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


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
        return self.kind == "pass"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class OutputSummary:
    """All calls of one output of one model on one backend.

    Attributes:
        calls: number of calls compared; failed_calls: how many failed.
        worst: the :class:`CallComparison` shown in the table (worst failing call, else lowest SNR).
        kind: ``"pass"`` or the most severe failure kind seen. tolerance: the
            :class:`~onnxwrapper.diff.Tolerance` used. precision: preset name it came from.
        min_atol / min_rtol: largest over calls (what would have passed every call).
        per_call: ``[(index, max_abs_error, cosine_similarity, passed)]`` in call order (plots).
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
        return self.kind == "pass"

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("tolerance", "worst")}
        d["tolerance"] = self.tolerance.to_dict()
        d["tolerance_text"] = self.tolerance.describe()
        d["worst"] = self.worst.to_dict() if self.worst else None
        d["passed"] = self.passed
        return d


@dataclass
class Localization:
    """Where a failing model first diverges (``--localize``).

    Attributes:
        backend, model: what was localized. call: ``(session, index)`` of the call used.
        method: ``"all"`` (every candidate tensor exposed at once) or ``"bisect"``.
        first: the first node in topological order whose output breaks tolerance, as
            ``{"node", "op_type", "tensor", "metrics", "failed", "index"}``, or ``None``.
        chain: the nodes after it on the way to the failing outputs, each as ``first``'s dict with
            ``"passed"``.
        suspects: nodes whose reference output leaves the backend precision's range (e.g. |x| >
            65504 for FP16): ``{"node", "op_type", "tensor", "max_abs", "limit"}``.
        rounds: number of expose-and-run rounds. tensors_compared: how many tensors were compared.
        message: a sentence for the report; error: why localization failed, if it did.
    """

    backend: str
    model: str
    call: tuple = (0, 0)
    method: str = "all"
    first: dict | None = None
    chain: list = field(default_factory=list)
    suspects: list = field(default_factory=list)
    rounds: int = 0
    tensors_compared: int = 0
    message: str = ""
    error: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


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

    @property
    def backend_failed(self) -> bool:
        """True when a run did not complete or nothing was compared."""
        return any(not r.ok for r in self.runs.values()) or (self.compared_calls == 0 and not self.outputs)

    @property
    def mismatch(self) -> bool:
        """True when an output failed or call sequences diverged."""
        return any(not o.passed for o in self.outputs) or any(self.divergences.values())

    @property
    def passed(self) -> bool:
        """True iff :attr:`exit_status` is 0."""
        return self.exit_status == EXIT_OK

    @property
    def exit_status(self) -> int:
        """0, 1 or 2 as documented in this module."""
        if self.backend_failed:
            return EXIT_BACKEND_FAILED
        return EXIT_MISMATCH if self.mismatch else EXIT_OK

    @property
    def verdict(self) -> str:
        """``"PASS"``, ``"MISMATCH"`` or ``"INCOMPLETE"``."""
        return {EXIT_OK: "PASS", EXIT_MISMATCH: "MISMATCH"}.get(self.exit_status, "INCOMPLETE")

    def table(self, *, color: bool = False, width: int | None = None) -> str:
        """The console table (see :func:`onnxwrapper.diff._report_console.render_table`)."""
        from onnxwrapper.diff._report_console import render_table

        return render_table(self, color=color, width=width)

    def to_dict(self) -> dict:
        """The JSON report document (schema: docs/diff.md, "JSON report")."""
        from onnxwrapper.diff._report_json import to_document

        return to_document(self)

    def write_json(self, path) -> str:
        """Write the JSON report to ``path``; returns the path."""
        from onnxwrapper.diff._report_json import write_json

        return write_json(self, path)

    def write_html(self, path) -> str:
        """Write the self-contained HTML report (needs matplotlib: ``pip install 'onnxwrapper[report]'``)."""
        from onnxwrapper.diff._report_html import write_html

        return write_html(self, path)

    def assert_passed(self) -> None:
        """Raise :class:`DiffAssertionError` with the console table unless the diff passed."""
        __tracebackhide__ = True  # pytest: point at the caller
        if not self.passed:
            raise DiffAssertionError(f"aipc diff verdict: {self.verdict} (exit status {self.exit_status})\n"
                                     + self.table(), self)


def finite_or_str(value):
    """JSON-safe float: non-finite floats become ``"inf"``, ``"-inf"`` or ``"nan"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
