"""How one backend's run went (:class:`BackendRun`): what the child process of a run reports, the
record of the diff folder's manifest (``diff.json``'s ``runs``) and what the judging reads."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["BackendRun"]


def _repr(run) -> str:
    state = run.status + (f" ({run.signal})" if run.signal else "")
    cause = f" — {run.cause}" if run.cause else ""
    return f"<BackendRun {run.label or run.backend} [{run.backend}]: {state}, {run.calls} call(s), {run.seconds:.1f} s{cause}>"


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
        rerun_of: for the reference's second run (no recording; it tells volatile printed numbers
            such as timings apart), the reference's label; ``None`` otherwise.
        cause: one line saying why a run did not end normally (signal and script line, exception,
            exit status, time limit); empty for a normal run.
        exception: the script raised (the run is incomplete), as opposed to exiting with a status.
        files: ``{file name: copy inside the run directory, or None when this run did not write it}``.
        retried: for a live run that failed while another run of the same script was going and was
            run again alone (two copies of a script that sets itself up on first use race with each
            other): one sentence saying how the first attempt failed and how the second ended;
            empty otherwise.
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
    rerun_of: str | None = None
    cause: str = ""
    exception: bool = False
    files: dict = field(default_factory=dict)
    retried: str = ""

    @property
    def ok(self) -> bool:
        """True when the run ended with exit status 0."""
        return self.status == "ok"

    @property
    def complete(self) -> bool:
        """True when the script ran to its end: exit status 0, or another exit status without an
        exception (its exit status is then part of its result)."""
        return self.ok or (self.status == "script_failed" and not self.exception)

    __repr__ = _repr

    def to_dict(self) -> dict:
        """The fields as a JSON-safe dict (the report's ``runs`` entries)."""
        return dict(self.__dict__)
