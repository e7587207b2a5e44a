"""Recording every ``InferenceSession`` run call into a capture directory (writer side).

The on-disk format is open and versioned (``FORMAT``/``FORMAT_VERSION``); docs/diff.md is its
specification and :mod:`onnxwrapper.diff._capture._reader` reads it. Layout::

    <dir>/capture.json          header: format, version, status, limits, models, sessions
    <dir>/calls.jsonl           one JSON object per recorded call, appended in completion order
    <dir>/calls/<seq>.npz       that call's arrays: ``i<k>`` = k-th input, ``o<k>`` = k-th output
                                (uncompressed, never pickled; names live in calls.jsonl)
    <dir>/models/<key>.onnx     only for models that were given as bytes (needed for replay)

Sessions are numbered from 1 in the order the script created them — the numbers ``aipc -v``
prints — when the creator announces them (:meth:`CaptureWriter.announce_session`, done by
``aipc diff``'s child process), else in the order of their first run call. Calls are numbered
from 0 within their session. (Format version 1 numbered sessions from 0; the reader shifts them.)

A call's line is appended to calls.jsonl only after its .npz is complete, so a process that
dies (even by SIGSEGV) leaves a consistent prefix. ``capture.json`` is replaced atomically when a
new session appears and when recording stops.

Arrays are copied when the call returns and written by a background thread; when more than
256 MiB wait to be written the recording call waits (memory stays bounded).

Limits: ``max_bytes`` bounds the array bytes written (plus stored models); when the next call
would exceed it, recording stops for good, the header says so (``status == "truncated"``), a
:class:`CaptureLimitWarning` is issued once and the script continues. ``max_calls_per_model``
skips further calls of a model (counted in the header's ``skipped_calls``).

Limits of the approach: ``run_with_iobinding`` calls record outputs only (ORT does not expose
the bound inputs); non-tensor outputs (sequences, maps) are listed but not stored; the model key
identifies the model file's bytes (sha256), not external-data files.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import queue
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from onnxwrapper import add_run_observer
from onnxwrapper.diff._capture._values import (array_meta, declared_types, model_key, sha256_file, tensor_meta,
                                              to_array, tool_versions, user_model)
from onnxwrapper.diff._capture._files import atomic_write, fmt_bytes, jsonable, parse_size, write_npz
from onnxwrapper.diff._capture._session_repairs import note_buckets, note_session

__all__ = ["FORMAT", "FORMAT_VERSION", "DEFAULT_MAX_BYTES", "CaptureLimitWarning", "CaptureWriter",
           "CaptureHandle", "start_capture", "model_key", "parse_size", "write_npz"]

FORMAT = "onnxwrapper-capture"
FORMAT_VERSION = 2
#: default bound on bytes written by one capture (arrays + stored models): 2 GiB.
DEFAULT_MAX_BYTES = 2 * 1024 ** 3
_QUEUE_ITEMS = 64
#: arrays waiting for the writer thread beyond this many bytes make the script wait (backpressure).
_PENDING_BYTES = 256 * 1024 ** 2


class CaptureLimitWarning(UserWarning):
    """Recording stopped (or skipped calls) because a capture limit was reached."""


@dataclass
class _Session:
    ordinal: int
    model: str
    calls: int = 0


class CaptureWriter:
    """Writes one capture directory; :meth:`observe` has the ``add_run_observer`` signature.

    Args:
        directory: capture directory, created if missing; it must not already hold a capture.
        max_bytes: bound on bytes written (arrays + stored models). Defaults to 2 GiB.
        max_calls_per_model: record at most this many calls per model key; ``None`` = no bound.
        store_models: ``"bytes"`` (default) stores models given as bytes; ``"all"`` also copies
            models given as paths; ``"none"`` stores nothing (replay then needs the paths).
        metadata: extra JSON-serializable facts stored under ``"metadata"`` in the header.
        background: write .npz files on a background thread (default True; the observer then
            only copies arrays). Call :meth:`close` to flush.

    Raises:
        FileExistsError: ``directory`` already contains ``capture.json``.
    """

    def __init__(self, directory, *, max_bytes: int | str = DEFAULT_MAX_BYTES,
                 max_calls_per_model: int | None = None, store_models: str = "bytes",
                 metadata: Mapping[str, Any] | None = None, background: bool = True) -> None:
        if store_models not in ("bytes", "all", "none"):
            raise ValueError(f"store_models must be 'bytes', 'all' or 'none', got {store_models!r}")
        self.directory = os.fspath(directory)
        if os.path.exists(os.path.join(self.directory, "capture.json")):
            raise FileExistsError(f"{self.directory} already holds a capture (capture.json); "
                                  f"choose a new directory or delete the old capture.")
        os.makedirs(os.path.join(self.directory, "calls"), exist_ok=True)
        self.max_bytes = parse_size(max_bytes)
        self.max_calls_per_model = max_calls_per_model
        self.store_models = store_models
        self._lock = threading.RLock()
        self._sessions: "weakref.WeakKeyDictionary[Any, _Session]" = weakref.WeakKeyDictionary()
        self._announced: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        self._next_ordinal = 1
        self._session_records: list[dict] = []
        self._models: dict[str, dict] = {}
        self._model_calls: dict[str, int] = {}
        self._skipped: dict[str, int] = {}
        self._seq = 0
        self._bytes = 0
        self._truncated: dict | None = None
        self._status = "recording"
        self._errors: list[str] = []
        self._closed = False
        self._header = {"format": FORMAT, "version": FORMAT_VERSION,
                        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                        "tool": tool_versions(), "metadata": dict(metadata or {}),
                        "limits": {"max_bytes": self.max_bytes, "max_calls_per_model": max_calls_per_model}}
        self._calls_file = open(os.path.join(self.directory, "calls.jsonl"), "a", encoding="utf-8")
        self._queue: queue.Queue | None = None
        self._thread = None
        self._pending = 0
        self._pending_cv = threading.Condition()
        if background:
            self._queue = queue.Queue(maxsize=_QUEUE_ITEMS)
            self._thread = threading.Thread(target=self._drain, name="onnxwrapper-capture", daemon=True)
            self._thread.start()
        self._write_header()

    # -- observer -------------------------------------------------------------------------------
    def observe(self, *, session, method, output_names, input_feed, run_options=None, outputs=None,
                seconds=0.0, call_key: tuple[int, int] | None = None, **_ignored) -> None:
        """Record one call (the ``onnxwrapper.add_run_observer`` contract). Never raises for a
        capture problem: failures are kept in the header's ``errors`` list instead.

        Sessions are numbered from 1 in creation order (:meth:`announce_session`), else at their
        first call; ``call_key=(session ordinal, call index)`` imposes the keys instead (replay uses
        it to keep the reference's keys)."""
        try:
            self._observe(session, method, output_names, input_feed, outputs, seconds, call_key)
        except Exception as exc:  # a capture bug must not break the user's script
            with self._lock:
                if len(self._errors) < 20:
                    self._errors.append(f"{type(exc).__name__}: {exc}")

    __call__ = observe

    def _observe(self, session, method, output_names, input_feed, outputs, seconds, call_key) -> None:
        with self._lock:
            if self._closed or self._truncated is not None:
                return
            sess = self._session_for(session, None if call_key is None else call_key[0])
            key = sess.model
            call_index = sess.calls if call_key is None else call_key[1]
            sess.calls += 1
            if self.max_calls_per_model is not None and self._model_calls.get(key, 0) >= self.max_calls_per_model:
                self._skipped[key] = self._skipped.get(key, 0) + 1
                return
        names_out = self._resolve_output_names(session, method, output_names, input_feed, outputs)
        arrays: dict[str, np.ndarray] = {}
        inputs_meta, outputs_meta = [], []
        if method != "run_with_iobinding":
            declared = declared_types(session) if any(isinstance(v, list) for v in input_feed.values()) else {}
            for k, (name, value) in enumerate(dict(input_feed).items()):
                arr = to_array(value, declared.get(name))
                inputs_meta.append(array_meta(name, arr, f"i{k}"))
                if arr is not None:
                    arrays[f"i{k}"] = arr
        values = outputs
        if method == "run_with_iobinding":
            values = input_feed.copy_outputs_to_cpu()
        for k, value in enumerate(values or []):
            arr = to_array(value)
            name = names_out[k] if k < len(names_out) else f"output_{k}"
            outputs_meta.append(array_meta(name, arr, f"o{k}"))
            if arr is not None:
                arrays[f"o{k}"] = arr
        nbytes = sum(a.nbytes for a in arrays.values()) + 512
        with self._lock:
            if self._closed or self._truncated is not None:
                return
            if self._bytes + nbytes > self.max_bytes:
                self._truncate(f"size limit of {fmt_bytes(self.max_bytes)} reached at call {self._seq} "
                               f"(model {key}, {fmt_bytes(nbytes)} more needed)")
                return
            self._bytes += nbytes
            self._model_calls[key] = self._model_calls.get(key, 0) + 1
            seq = self._seq
            self._seq += 1
        record = {"seq": seq, "session": sess.ordinal, "index": call_index, "model": key, "method": method,
                  "requested_output_names": list(output_names) if output_names else None,
                  "output_names": names_out, "inputs": inputs_meta, "outputs": outputs_meta,
                  "file": f"calls/{seq:06d}.npz", "seconds": float(seconds)}
        if self._queue is not None:
            with self._pending_cv:
                self._pending_cv.wait_for(lambda: self._pending == 0 or self._pending + nbytes <= _PENDING_BYTES)
                self._pending += nbytes
            self._queue.put((record, arrays, nbytes))
        else:
            self._write_call(record, arrays)

    def _resolve_output_names(self, session, method, output_names, input_feed, outputs) -> list[str]:
        if output_names:
            return [str(n) for n in output_names]
        try:
            names = [o.name for o in session.get_outputs()]
        except Exception:  # foreign or broken session: fall back to positions
            names = []
        count = len(outputs or []) if method != "run_with_iobinding" else len(names)
        return names[:count] if len(names) >= count else [f"output_{k}" for k in range(count)]

    def announce_session(self, session, **_ignored) -> None:
        """Number ``session`` now, when it is created (``aipc_loader``'s session-listener
        signature), so that ordinals follow creation order as ``aipc -v`` numbers sessions; a
        session never announced is numbered at its first run call. Never raises."""
        try:
            with self._lock:
                if session not in self._sessions and session not in self._announced:
                    self._announced[session] = self._next_ordinal
                    self._next_ordinal += 1
        except TypeError:  # not weak-referenceable: numbered at its first call
            pass

    def _session_for(self, session, ordinal: int | None = None) -> _Session:
        sess = self._sessions.get(session)
        if sess is not None:
            return sess
        path, data = user_model(session)
        sha = sha256_file(path) if path and os.path.isfile(path) else hashlib.sha256(data or b"").hexdigest()
        key = model_key(sha, path)
        if key not in self._models:
            self._models[key] = self._model_record(session, key, sha, path, data)
        if ordinal is None:
            ordinal = self._announced.pop(session, None)
        if ordinal is None:
            ordinal = self._next_ordinal
        self._next_ordinal = max(self._next_ordinal, ordinal + 1)
        sess = _Session(ordinal, key)
        self._sessions[session] = sess
        backend = getattr(session, "backend_name", None) or "onnxruntime"
        config = getattr(getattr(session, "_ow_backend", None), "config", None) or {}
        try:
            providers = list(session.get_providers())
        except Exception:
            providers = []
        record = {"ordinal": ordinal, "model": key, "backend": backend, "backend_options": jsonable(config),
                  "providers": providers}
        note_session(session, record)
        self._session_records.append(record)
        self._write_header()
        return sess

    def _model_record(self, session, key, sha, path, data) -> dict:
        stored = None
        if (data is not None and self.store_models != "none") or (path and self.store_models == "all"):
            blob = data if data is not None else open(path, "rb").read()
            if self._bytes + len(blob) <= self.max_bytes:
                os.makedirs(os.path.join(self.directory, "models"), exist_ok=True)
                stored = f"models/{key}.onnx"
                atomic_write(os.path.join(self.directory, stored), blob)
                self._bytes += len(blob)
        rec = {"sha256": sha, "path": os.path.abspath(path) if path else None, "stored": stored,
               "size_bytes": os.path.getsize(path) if path and os.path.isfile(path) else len(data or b"")}
        try:
            rec["inputs"] = tensor_meta(session.get_inputs())
            rec["outputs"] = tensor_meta(session.get_outputs())
        except Exception:
            rec["inputs"], rec["outputs"] = [], []
        return rec

    # -- writing --------------------------------------------------------------------------------
    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                record, arrays, nbytes = item
                self._write_call(record, arrays)
                with self._pending_cv:
                    self._pending -= nbytes
                    self._pending_cv.notify_all()
            finally:
                self._queue.task_done()

    def _write_call(self, record: dict, arrays: dict) -> None:
        try:
            path = os.path.join(self.directory, record["file"])
            write_npz(path + ".tmp", arrays)
            os.replace(path + ".tmp", path)
            line = json.dumps(record, separators=(",", ":")) + "\n"
            with self._lock:
                self._calls_file.write(line)
                self._calls_file.flush()
        except Exception as exc:
            with self._lock:
                if len(self._errors) < 20:
                    self._errors.append(f"call {record.get('seq')}: {type(exc).__name__}: {exc}")

    def _truncate(self, reason: str) -> None:
        self._truncated = {"reason": reason, "at_call": self._seq}
        self._status = "truncated"
        self._write_header()
        warnings.warn(f"onnxwrapper capture: {reason}; recording stopped, the script goes on. "
                      f"Calls recorded so far stay usable. Raise the limit with max_bytes= "
                      f"(aipc: --max-capture-bytes) or record fewer calls (max_calls_per_model=).",
                      CaptureLimitWarning, stacklevel=4)

    def _write_header(self) -> None:
        header = dict(self._header)
        header.update({"status": self._status, "truncated": self._truncated,
                       "bytes_written": self._bytes, "calls_recorded": self._seq,
                       "skipped_calls": dict(self._skipped), "errors": list(self._errors),
                       "models": self._models, "sessions": self._session_records,
                       "calls_file": "calls.jsonl"})
        atomic_write(os.path.join(self.directory, "capture.json"),
                      json.dumps(header, indent=1, default=str).encode())

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def bytes_written(self) -> int:
        """Bytes accounted so far (array bytes of recorded calls + stored models)."""
        return self._bytes

    @property
    def calls_recorded(self) -> int:
        """Number of calls recorded (not counting skipped or dropped ones)."""
        return self._seq

    @property
    def truncated(self) -> dict | None:
        """``{"reason", "at_call"}`` once the size limit stopped recording, else ``None``."""
        return self._truncated

    def close(self) -> None:
        """Flush pending writes and finalize ``capture.json``. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._queue is not None:
            self._queue.put(None)
            self._thread.join()
        with self._lock:
            self._status = "complete" if self._status == "recording" else self._status
            self._calls_file.close()
            note_buckets(self._session_records, self._sessions)
            self._write_header()


class CaptureHandle:
    """What :func:`start_capture` returns: ``.writer`` and ``.stop()`` (idempotent)."""

    def __init__(self, writer: CaptureWriter, undo) -> None:
        self.writer = writer
        self._undo = undo

    @property
    def directory(self) -> str:
        """The capture directory."""
        return self.writer.directory

    def stop(self) -> str:
        """Stop observing, flush, finalize the header; returns the capture directory."""
        self._undo()
        self.writer.close()
        return self.writer.directory

    def __enter__(self) -> "CaptureHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_capture(directory, *, max_bytes: int | str = DEFAULT_MAX_BYTES, max_calls_per_model: int | None = None,
                  store_models: str = "bytes", metadata: Mapping[str, Any] | None = None) -> CaptureHandle:
    """Record every run call of every ``onnxwrapper.InferenceSession`` in this process.

    Args:
        directory: new capture directory (see module docstring for the layout).
        max_bytes: bound on bytes written, int or ``"500M"``-style text. Defaults to 2 GiB.
        max_calls_per_model: record at most this many calls per model; ``None`` = all.
        store_models: see :class:`CaptureWriter`.
        metadata: JSON-serializable facts stored in the header (e.g. the script and its args).

    Returns:
        A :class:`CaptureHandle`; call ``.stop()`` (or use ``with``) to finalize.
    """
    writer = CaptureWriter(directory, max_bytes=max_bytes, max_calls_per_model=max_calls_per_model,
                           store_models=store_models, metadata=metadata)
    return CaptureHandle(writer, add_run_observer(writer.observe))
