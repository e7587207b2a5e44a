"""What an aipc run reports on stderr about the sessions it redirected, with ``-v``: one line per
session saying what runs where and, at interpreter exit, each session's partition summary (also
with ``--report-partition``). At the default verbosity it says nothing: what matters there comes
as onnxwrapper's warnings (``aipc_loader._verbosity``).

Used by the ``aipc`` command in its own process and by the child-process bootstrap
(:mod:`aipc_loader._bootstrap`) in every Python child of an aipc run, so it lives with the hot
patch, not with the command line.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import weakref

from aipc_loader import _patch
from aipc_loader._verbosity import shows_sessions

__all__ = ["PREFIX", "say", "SessionReporter"]

PREFIX = "aipc: "


def say(message: str, prefix: str = PREFIX) -> None:
    """Write one prefixed line per line of ``message`` to stderr (the CLI's only output channel).
    Messages name models, files and scripts from elsewhere: control characters (``ESC``, ``\\r``),
    bidirectional overrides and other format characters are shown escaped
    (:func:`onnxwrapper.diff.console_safe`, imported only for such a message)."""
    message = str(message)
    message = message[:-1] if message.endswith("\n") else message
    lines = message.split("\n")
    if not all(line.isascii() and line.isprintable() for line in lines):
        from onnxwrapper.diff import console_safe

        lines = console_safe(message).split("\n")
    text = "".join(f"{prefix}{line}\n" for line in lines)
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class SessionReporter:
    """Reports redirected sessions: with ``verbose``, a line per creation — what runs where, from
    the session's partition (e.g. ``session 1: det.onnx on backend 'qnn' (0.52 s):
    QNNExecutionProvider 9/9 nodes, 1 partition``, or ``runs on CPU: QNNExecutionProvider took none
    of its 1 node(s) (Identity) …``); and at interpreter exit (``atexit``, after the script's own
    handlers) each session's partition summary with ``verbose`` or ``report_partition``.

    The summary comes from ``session.get_partition()`` at exit for sessions still alive, else
    the last one its backend session reported when the session was collected; ``None`` means the
    backend records no partition. In a ``fork`` child the lines say ``aipc[PID]:`` and count from 1; such children end with
    ``os._exit`` under multiprocessing, so they print no exit report.
    """

    def __init__(self, *, verbose: int = 0, report_partition: bool = False, prefix: str = PREFIX) -> None:
        self.verbose, self.report_partition, self.prefix = verbose, report_partition, prefix
        self._pid = os.getpid()
        self._records: list[dict] = []
        self._lock = threading.Lock()
        self._undo = None

    def start(self) -> "SessionReporter":
        """Listen to the patch and register the exit report."""
        self._undo = _patch.add_session_listener(self.on_session)
        if shows_sessions(self.verbose) or self.report_partition:
            atexit.register(self.report)
        return self

    def on_session(self, session, *, model=None, seconds: float = 0.0) -> None:
        label = _model_label(model)
        backend = getattr(session, "backend_name", "?")
        record = {"label": label, "backend": backend, "ref": _weak(session),
                  "report": _partition_of(session)}
        served_by = getattr(session, "backend_session", None)
        if served_by is not None and record["ref"] is not None:
            # when the session is collected before exit, keep the partition it had last
            weakref.finalize(session, _remember_partition, record, served_by)
        with self._lock:
            if os.getpid() != self._pid:     # a fork child: its own numbering and prefix
                self._pid, self._records = os.getpid(), []
                self.prefix = f"aipc[{self._pid}]: "
            self._records.append(record)
            number = len(self._records)
        if shows_sessions(self.verbose):
            say(f"session {number}: {label} on backend '{backend}' ({seconds:.2f} s): {_placement(session, record)}",
                self.prefix)

    def report(self) -> None:
        """Print the partition summary of every session seen (no-op when there were none)."""
        with self._lock:
            records = list(self._records)
        for number, record in enumerate(records, 1):
            session = record["ref"]() if record["ref"] is not None else None
            report = _partition_of(session) if session is not None else record["report"]
            if isinstance(report, Exception):
                text = f"not available ({type(report).__name__}: {report})"
            elif report is None:
                text = f"no partition recorded by backend '{record['backend']}'"
            else:
                try:
                    text = report.summary()
                except Exception as exc:  # noqa: BLE001
                    text = f"not available ({type(exc).__name__}: {exc})"
            say(f"partition {number}: {record['label']} [{record['backend']}]: {text}", self.prefix)


def _placement(session, record: dict) -> str:
    """What runs where, in one line, from the session's partition (else its providers)."""
    report = record["report"]
    if isinstance(report, Exception):
        return f"placement not available ({type(report).__name__}: {report})"
    if report is None:
        try:
            providers = session.get_providers()
        except Exception as exc:  # noqa: BLE001 - a report must not break the script
            providers = f"<{type(exc).__name__}>"
        return f"no partition yet (recorded at run, e.g. per input shape); providers {providers}"
    try:
        if report.target_nodes == 0 and report.source != "pending":  # pending: compiled per shape at run
            ops = ", ".join(sorted({n.op_type for n in report.nodes}))
            return (f"runs on CPU: {report.target_ep} took none of its {len(report.nodes)} node(s) ({ops}); "
                    f"--strict refuses such sessions")
        return report.summary()
    except Exception as exc:  # noqa: BLE001
        return f"placement not available ({type(exc).__name__}: {exc})"


def _remember_partition(record: dict, backend_session) -> None:
    try:
        record["report"] = backend_session.partition()
    except Exception as exc:  # noqa: BLE001 - reported as text
        record["report"] = exc


def _weak(obj):
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


def _partition_of(session):
    getter = getattr(session, "get_partition", None)
    if getter is None:
        return None
    try:
        return getter()
    except Exception as exc:  # noqa: BLE001 - reported as text
        return exc


def _model_label(model) -> str:
    if isinstance(model, (bytes, bytearray)):
        return f"<model bytes, {len(model)} B>"
    if model is None:
        return "<model>"
    try:
        return os.path.basename(os.fspath(model)) or str(model)
    except TypeError:
        return repr(model)
