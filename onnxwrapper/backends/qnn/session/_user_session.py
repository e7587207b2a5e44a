"""The session the user holds: ORT + QNN EP's session options, minus two lines of native noise.

The qnn backend compiles with configured copies of the user's ``SessionOptions``; those internal
sessions log errors only (``log_severity_level=3`` unless the user chose a level). The session
the façade builds — the one ``get_session_options()`` describes and whose log lines reach a
default-logger callback — must look like ORT + QNN EP's instead:

* :func:`user_facing_options` — the user's own ``log_severity_level`` (``-1``: ORT's default
  logger decides, as with ORT + QNN EP; a callback set with ``onnxruntime.set_default_logger_callback``
  then receives the same messages), and ``optimized_model_filepath``: ORT itself then raises its
  ``Fail`` "Unable to serialize model as it contains compiled nodes" for a session with QNN nodes,
  as ORT + QNN EP does (measured on onnxruntime 1.32.0), and writes the file for a CPU session.
* :func:`static_session` — the :class:`~onnxwrapper.backends.qnn.session._session.QnnStaticSession` of an
  EPContext model with such options and guard.
* :func:`user_session_options` — the ``sess_options`` argument as ORT takes it (falsy = none;
  another type: ORT's own ``TypeError``).
* :func:`quiet_qnn_warnings` — the QNN EP prints two W-level lines on stderr for every session
  (onnxruntime-qnn 2.7.0 on x86-64: "File mapped weights feature is only available on Windows
  arm64 …" and "EPContext encryption config unavailable …"). When the user left the log severity
  at ``-1`` these two lines, and only these, are dropped from file descriptor 2 around the
  session's creation; everything else written meanwhile is written back. Creations are
  serialized by a lock while fd 2 is redirected.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from typing import Iterator

import onnxruntime

from onnxwrapper.backends.qnn.compile import build_session_options, qnn_creation_guard
from onnxwrapper.backends.qnn.session._session import QnnStaticSession, nonfinite_check

__all__ = ["BAKED_IN", "QNN_NOISE", "quiet_qnn_warnings", "static_session", "user_facing_options", "user_session_guard",
           "user_session_options"]

#: markers of the W-level lines the QNN EP prints for every session (onnxruntime-qnn 2.7.0)
QNN_NOISE = (b"File mapped weights feature is only available", b"EPContext encryption config unavailable")
#: config entries that shape the model ORT writes to ``optimized_model_filepath``
_OPTIMIZED_MODEL_KEYS = ("session.optimized_model_external_initializers_file_name",
                         "session.optimized_model_external_initializers_min_size_in_bytes")
_NO_CPU_KEY = "session.disable_cpu_ep_fallback"
_fd_lock = threading.Lock()


def _entry(so, key: str) -> str | None:
    try:
        return so.get_session_config_entry(key)
    except RuntimeError:
        return None


def user_facing_options(so, user_so, *, optimized_model: bool = True):
    """Give ``so`` (a configured copy, changed in place and returned) the user's log severity, the
    user's ``session.disable_cpu_ep_fallback`` (ORT then refuses CPU nodes itself, with its own
    ``Fail``, as with ORT + QNN EP; not given to compiles, which must see the whole graph) and, with
    ``optimized_model``, the user's ``optimized_model_filepath`` and its config entries."""
    so.log_severity_level = user_so.log_severity_level if user_so is not None else -1
    if user_so is not None and _entry(user_so, _NO_CPU_KEY) is not None and _entry(so, _NO_CPU_KEY) is None:
        so.add_session_config_entry(_NO_CPU_KEY, _entry(user_so, _NO_CPU_KEY))
    if optimized_model and user_so is not None and user_so.optimized_model_filepath:
        so.optimized_model_filepath = user_so.optimized_model_filepath
        for key in _OPTIMIZED_MODEL_KEYS:
            value = _entry(user_so, key)
            if value is not None and _entry(so, key) is None:
                so.add_session_config_entry(key, value)
    return so


@contextlib.contextmanager
def quiet_qnn_warnings(enabled: bool = True) -> Iterator[None]:
    """Drop the :data:`QNN_NOISE` lines from fd 2 during the block (see the module docstring)."""
    if not enabled:
        yield
        return
    with _fd_lock:
        try:
            sys.stderr.flush()
        except (AttributeError, ValueError, OSError):
            pass
        try:
            saved = os.dup(2)
        except OSError:
            yield
            return
        capture = tempfile.TemporaryFile()
        try:
            os.dup2(capture.fileno(), 2)
            try:
                yield
            finally:
                try:
                    sys.stderr.flush()
                except (AttributeError, ValueError, OSError):
                    pass
                os.dup2(saved, 2)
                capture.seek(0)
                kept = [line for line in capture.read().splitlines(keepends=True)
                        if not any(marker in line for marker in QNN_NOISE)]
                if kept:
                    os.write(2, b"".join(kept))
        finally:
            os.close(saved)
            capture.close()


def user_session_guard(user_so):
    """The guard of the user's QNN session: :func:`quiet_qnn_warnings` (when the user left the log
    severity at ``-1``) around the QNN creation guard (typed EP-creation errors, native stdout line)."""
    quiet = user_so is None or user_so.log_severity_level == -1

    @contextlib.contextmanager
    def guard() -> Iterator[None]:
        with quiet_qnn_warnings(quiet), qnn_creation_guard():
            yield

    return guard


#: recorded SessionOptions calls whose data an EPContext model already holds (ORT's writer embeds them)
BAKED_IN = ("add_external_initializers", "add_external_initializers_from_files_in_memory")


def static_session(setup, ctx, configs, report, info, warn_key: str, model_meta=None) -> QnnStaticSession:
    """The static session of EPContext model ``ctx``, the one the user holds.

    Args:
        setup: the session's :class:`~onnxwrapper.backends.qnn.settings._settings.QnnSetup` (registered).
        ctx: EPContext model path (or bytes). configs: extra session config entries.
        report: the compile-time partition, or ``None`` to read it back (precompiled artifacts:
            ``configs`` must then record the assignment). info: its
            :class:`~onnxwrapper.backends.qnn.session._session.ArtifactInfo`. warn_key: the model's warn-once key.
        model_meta: metadata to report instead of the artifact's, or ``None``.

    Session options: a copy of the user's (the recorded calls whose data the ctx model holds are not
    replayed: :data:`BAKED_IN`), ``configs``, the QNN EP, then :func:`user_facing_options`; the
    guard is :func:`user_session_guard`; FP16 targets check feeds for NaN/±Inf until the first
    warning (:func:`~onnxwrapper.backends.qnn.session._session.nonfinite_check`).
    """
    so = build_session_options(setup.user_so, setup.settings.ep_options, setup.devices, configs,
                               skip_recorded=BAKED_IN)
    user_facing_options(so, setup.user_so)
    return QnnStaticSession(ctx, so, setup.kwargs, report=report, strict=setup.settings.strict, label=setup.label,
                            warn_key=warn_key, artifact=info, model_meta=model_meta, user_so=setup.user_so,
                            guard=user_session_guard(setup.user_so),
                            nonfinite_check=nonfinite_check(setup.settings, setup.label))


def user_session_options(request):
    """The user's ``SessionOptions`` as ORT takes them: a falsy value means none (ORT: ``if
    sess_options``); anything else that is not a ``SessionOptions`` raises ORT's own ``TypeError``
    (its constructor's "incompatible constructor arguments")."""
    so = request.sess_options
    if not so:
        return None
    if not isinstance(so, onnxruntime.SessionOptions):
        from onnxruntime.capi import _pybind_state as C

        path = request.model_path
        C.InferenceSession(so, path if path is not None else request.path_or_bytes, path is not None, False)
        raise TypeError(f"sess_options must be an onnxruntime.SessionOptions, got {type(so).__name__}")
    return so
