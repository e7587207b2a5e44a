"""Reading capture directories written by :class:`~onnxwrapper.diff.CaptureWriter`.

This is the consumer API of the capture format (docs/diff.md, "Capture format"), used by
``aipc diff``, ``aipc capture`` and quantization calibration::

    cap = read_capture("aipc-diff-…/cpu")
    for call in cap.calls:                      # completion order (seq)
        feeds = call.inputs()                   # {input name: np.ndarray}
        outs = call.outputs()                   # {output name: np.ndarray}
        cap.models[call.model].path, call.backend, call.backend_options, call.seconds

Arrays are read lazily from the call's .npz on each ``inputs()``/``outputs()`` call (nothing
is cached, so iterating a large capture keeps memory flat). Readers accept any header ``version``
up to :data:`~onnxwrapper.diff._capture._writer.FORMAT_VERSION` and ignore unknown keys.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from onnxwrapper.diff._capture._writer import FORMAT, FORMAT_VERSION
from onnxwrapper.diff._capture._values import sha256_file
from onnxwrapper.diff._capture._npy_bounded import BoundedNpz
from onnxwrapper.diff._capture._untrusted import (dim, inside, load_json, malformed, need, need_dict, need_int, need_list,
                                                  need_str, open_untrusted, optional)
from onnxwrapper.errors import MalformedFileError

__all__ = ["CaptureFormatError", "TensorSpec", "ModelInfo", "SessionInfo", "Call", "Capture", "read_capture"]


class CaptureFormatError(MalformedFileError):
    """The directory is not a readable capture (missing/corrupt header, newer format version, a
    field of the wrong type, a file name leaving the directory). A
    :class:`~onnxwrapper.errors.MalformedFileError` (so a ``ValueError``)."""


@dataclass(frozen=True)
class TensorSpec:
    """Declared model input/output: ``name``, ORT ``type`` string (``"tensor(float)"``), ``shape``
    (ints, dim_param strings or ``None``)."""

    name: str
    type: str | None
    shape: tuple


@dataclass(frozen=True)
class ModelInfo:
    """One model seen during the capture.

    Attributes:
        key: ``<stem>-<sha256[:12]>``, identical across captures of the same model file.
        sha256: hex digest of the model file's bytes (or of the bytes given to the session).
        path: absolute path at capture time, or ``None`` when the model was given as bytes.
        stored: path of the copy inside the capture (absolute), or ``None``.
        inputs / outputs: declared :class:`TensorSpec` lists, in model order.
    """

    key: str
    sha256: str
    path: str | None
    stored: str | None
    inputs: tuple = ()
    outputs: tuple = ()
    size_bytes: int = 0

    @property
    def input_names(self) -> list[str]:
        """Declared input names in model order."""
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """Declared output names in model order."""
        return [t.name for t in self.outputs]

    def model_source(self) -> str | bytes:
        """Something ``InferenceSession`` accepts for this model: the stored copy's bytes, else the
        original path when its sha256 still matches.

        Raises:
            FileNotFoundError: neither a stored copy nor an unchanged original file exists.
            MalformedFileError: the stored copy is not the recorded model (its sha256 differs).
        """
        if self.stored and os.path.isfile(self.stored):
            with open(self.stored, "rb") as f:
                data = f.read()
            if hashlib.sha256(data).hexdigest() != self.sha256:
                raise malformed(self.stored, f"models.{self.key}.stored", "its sha256 differs from the recorded one",
                                f"the model the capture recorded (sha256 {self.sha256[:12]}…)")
            return data
        if self.path and os.path.isfile(self.path):
            if sha256_file(self.path) == self.sha256:
                return self.path
            raise FileNotFoundError(f"Model {self.key}: {self.path} changed since the capture "
                                    f"(sha256 differs); restore it or re-run the capture.")
        raise FileNotFoundError(f"Model {self.key}: {self.path or '(given as bytes)'} is not available "
                                f"and the capture holds no copy of it.")


@dataclass(frozen=True)
class SessionInfo:
    """One ``InferenceSession``; ``ordinal`` numbers sessions from 1 in creation order (the numbers
    ``aipc -v`` prints), or in order of first use when the creation was not observed."""

    ordinal: int
    model: str
    backend: str
    backend_options: dict = field(default_factory=dict)
    providers: tuple = ()


@dataclass(frozen=True)
class Call:
    """One recorded run call.

    Attributes:
        seq: completion order in the capture (0-based, dense).
        session: session ordinal (from 1); index: call index within that session (0-based, counts calls
            skipped by ``max_calls_per_model`` too, so indices match across captures).
        model: model key (``Capture.models[model]``).
        method: ``"run"``, ``"run_with_ort_values"`` or ``"run_with_iobinding"``.
        output_names: names of the returned outputs, in order (resolved when ``None`` was passed);
        requested_output_names: the argument as passed (``None`` = all).
        input_meta / output_meta: per array ``{"name", "key", "dtype", "shape"}``.
        seconds: wall time of the call (s). backend / backend_options: from the session.
    """

    capture_dir: str
    seq: int
    session: int
    index: int
    model: str
    method: str
    output_names: tuple
    requested_output_names: tuple | None
    input_meta: tuple
    output_meta: tuple
    file: str
    seconds: float
    backend: str
    backend_options: dict

    def _load(self, meta) -> dict[str, np.ndarray]:
        with BoundedNpz(os.path.join(self.capture_dir, self.file)) as npz:
            return {m["name"]: npz[m["key"]] for m in meta if m.get("key")}

    def inputs(self) -> dict[str, np.ndarray]:
        """``{input name: array}`` as fed (inputs of ``run_with_iobinding`` calls are not recorded)."""
        return self._load(self.input_meta)

    def outputs(self) -> dict[str, np.ndarray]:
        """``{output name: array}``, tensor outputs only, in the order returned."""
        return self._load(self.output_meta)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{m['name']}{m.get('shape')}" for m in self.input_meta)
        return (f"<Call session {self.session} call {self.index} of {self.model} on {self.backend}: {self.method}"
                f"({shapes}) -> {len(self.output_names)} output(s), {self.seconds * 1e3:.3g} ms>")

    @property
    def input_signature(self) -> tuple:
        """``((name, dtype, shape), …)`` of the inputs: cheap identity of what was fed."""
        return tuple((m["name"], m.get("dtype"), tuple(m.get("shape") or ())) for m in self.input_meta)


@dataclass
class Capture:
    """A capture directory, read.

    Attributes:
        path: the directory. header: ``capture.json`` as a dict. status: ``"complete"``,
        ``"truncated"`` or ``"recording"`` (the process ended without closing: a crash).
        models: ``{key: ModelInfo}``. sessions: list of :class:`SessionInfo` by ordinal.
        calls: list of :class:`Call` ordered by ``seq``.
    """

    path: str
    header: dict
    models: dict
    sessions: list
    calls: list

    def __repr__(self) -> str:
        backends = sorted({s.backend for s in self.sessions})
        return (f"<Capture {self.path}: {self.status}, {len(self.calls)} call(s), {len(self.sessions)} session(s) "
                f"of {len(self.models)} model(s) on {', '.join(backends) or '-'}>")

    @property
    def status(self) -> str:
        """Header status (see class doc)."""
        return self.header.get("status", "recording")

    @property
    def truncated(self) -> dict | None:
        """``{"reason", "at_call"}`` when the size limit stopped recording."""
        return self.header.get("truncated")

    @property
    def metadata(self) -> dict:
        """The writer's ``metadata`` dict."""
        return self.header.get("metadata") or {}

    def calls_by_key(self) -> dict[tuple[int, int], Call]:
        """``{(session ordinal, call index): Call}`` — the live-mode matching key."""
        return {(c.session, c.index): c for c in self.calls}

    def calls_of(self, model: str) -> Iterator[Call]:
        """Calls of one model key, in ``seq`` order."""
        return (c for c in self.calls if c.model == model)


def read_capture(directory) -> Capture:
    """Read a capture directory.

    Args:
        directory: path to a directory holding ``capture.json`` and ``calls.jsonl``.

    Returns:
        :class:`Capture`. A trailing partial line of calls.jsonl (a killed process) is ignored.

    Raises:
        CaptureFormatError (a :class:`~onnxwrapper.errors.MalformedFileError`): no/corrupt
            ``capture.json``, another format, a newer version, a field of the wrong type, a missing
            key, or a file name (``stored``, a call's ``file``) that leaves the directory — naming
            the file and the entry.
    """
    directory = os.fspath(directory)
    header_path = os.path.join(directory, "capture.json")
    try:
        header = load_json(header_path)
    except FileNotFoundError as exc:
        raise CaptureFormatError(f"{directory} is not a capture directory (no capture.json).",
                                 path=header_path) from exc
    except MalformedFileError as exc:
        raise CaptureFormatError(str(exc), path=header_path) from exc
    with _as_capture_error():
        need_dict(header, header_path, "(document)", "a JSON object (the capture header)")
        if header.get("format") != FORMAT:
            raise CaptureFormatError(f"{header_path}: format is {header.get('format')!r}, expected {FORMAT!r}.",
                                     path=header_path, entry="format")
        version = need_int(header.get("version", 0), header_path, "version")
        if version > FORMAT_VERSION:
            raise CaptureFormatError(f"{header_path}: format version {header.get('version')} is newer than this "
                                     f"onnxwrapper reads ({FORMAT_VERSION}); upgrade onnxwrapper.",
                                     path=header_path, entry="version")
        models = {key: _model(directory, header_path, key, rec)
                  for key, rec in optional(header, "models", lambda v: need_dict(v, header_path, "models"), {}).items()}
        shift = 1 if version < 2 else 0  # version 1 numbered sessions from 0
        sessions = [_session(header_path, f"sessions[{k}]", rec, shift) for k, rec in
                    enumerate(optional(header, "sessions", lambda v: need_list(v, header_path, "sessions"), []))]
        for name in ("status", "calls_file"):
            optional(header, name, lambda v, n=name: need_str(v, header_path, n))
        for name in ("metadata", "truncated"):
            optional(header, name, lambda v, n=name: need_dict(v, header_path, n))
        by_ordinal = {s.ordinal: s for s in sessions}
        calls = []
        calls_path = inside(directory, header.get("calls_file") or "calls.jsonl", header_path, "calls_file")
        if os.path.exists(calls_path):
            with io.TextIOWrapper(open_untrusted(calls_path, "calls_file", None, "the capture's calls.jsonl (a regular "
                                                 "file)"), encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    try:
                        rec = json.loads(line)
                    except (ValueError, RecursionError):
                        continue  # a line cut by a crash
                    calls.append(_call(directory, calls_path, f"line {number}", rec, shift, by_ordinal))
    calls.sort(key=lambda c: c.seq)
    return Capture(path=directory, header=header, models=models, sessions=sessions, calls=calls)


class _as_capture_error:
    """Re-raise a :class:`MalformedFileError` of the checks as a :class:`CaptureFormatError`."""

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if isinstance(exc, MalformedFileError) and not isinstance(exc, CaptureFormatError):
            raise CaptureFormatError(str(exc), path=exc.path, entry=exc.entry) from exc
        return False


def _model(directory: str, path: str, key: str, rec: Any) -> ModelInfo:
    entry = f"models.{key}"
    rec = need_dict(rec, path, entry)
    stored = optional(rec, "stored", lambda v: inside(directory, v, path, f"{entry}.stored"))
    return ModelInfo(key=key, sha256=need_str(rec.get("sha256"), path, f"{entry}.sha256", "the model's sha256"),
                     path=optional(rec, "path", lambda v: need_str(v, path, f"{entry}.path")), stored=stored,
                     inputs=tuple(_spec(path, f"{entry}.inputs[{k}]", t) for k, t in
                                  enumerate(optional(rec, "inputs", lambda v: need_list(v, path, f"{entry}.inputs"), []))),
                     outputs=tuple(_spec(path, f"{entry}.outputs[{k}]", t) for k, t in
                                   enumerate(optional(rec, "outputs", lambda v: need_list(v, path, f"{entry}.outputs"),
                                                      []))),
                     size_bytes=optional(rec, "size_bytes", lambda v: need_int(v, path, f"{entry}.size_bytes"), 0))


def _session(path: str, entry: str, rec: Any, shift: int) -> SessionInfo:
    rec = need_dict(rec, path, entry)
    return SessionInfo(ordinal=need_int(rec.get("ordinal"), path, f"{entry}.ordinal") + shift,
                       model=need_str(rec.get("model"), path, f"{entry}.model"),
                       backend=optional(rec, "backend", lambda v: need_str(v, path, f"{entry}.backend"), ""),
                       backend_options=dict(optional(rec, "backend_options",
                                                     lambda v: need_dict(v, path, f"{entry}.backend_options"), {})),
                       providers=tuple(optional(rec, "providers", lambda v: need_list(v, path, f"{entry}.providers"),
                                                ())))


def _meta(path: str, entry: str, items: Any) -> tuple:
    result = []
    for k, m in enumerate(need_list(items, path, entry)):
        m = need_dict(m, path, f"{entry}[{k}]", "an object {name, key, dtype, shape}")
        need_str(m.get("name"), path, f"{entry}[{k}].name")
        optional(m, "key", lambda v: need_str(v, path, f"{entry}[{k}].key"))
        optional(m, "dtype", lambda v: need_str(v, path, f"{entry}[{k}].dtype"))
        for d in optional(m, "shape", lambda v: need_list(v, path, f"{entry}[{k}].shape", "a list of dimensions"), []):
            need_int(d, path, f"{entry}[{k}].shape", low=0)
        result.append(m)
    return tuple(result)


def _call(directory: str, path: str, entry: str, rec: Any, shift: int, by_ordinal: dict) -> Call:
    rec = need_dict(rec, path, entry, "a JSON object (one recorded call)")
    session = need_int(rec.get("session"), path, f"{entry}.session") + shift
    sess = by_ordinal.get(session)
    names = optional(rec, "output_names", lambda v: need_list(v, path, f"{entry}.output_names"), [])
    requested = optional(rec, "requested_output_names",
                         lambda v: need_list(v, path, f"{entry}.requested_output_names"))
    seconds = optional(rec, "seconds", lambda v: need(v, (int, float), path, f"{entry}.seconds", "a number"), 0.0)
    return Call(capture_dir=directory, seq=need_int(rec.get("seq"), path, f"{entry}.seq"), session=session,
                index=need_int(rec.get("index"), path, f"{entry}.index"),
                model=need_str(rec.get("model"), path, f"{entry}.model"),
                method=optional(rec, "method", lambda v: need_str(v, path, f"{entry}.method"), "run"),
                output_names=tuple(names), requested_output_names=tuple(requested) if requested else None,
                input_meta=_meta(path, f"{entry}.inputs", rec.get("inputs") or []),
                output_meta=_meta(path, f"{entry}.outputs", rec.get("outputs") or []),
                file=os.path.relpath(inside(directory, rec.get("file"), path, f"{entry}.file"),
                                     os.path.realpath(directory)),
                seconds=float(seconds), backend=sess.backend if sess else "",
                backend_options=sess.backend_options if sess else {})


def _spec(path: str, entry: str, rec: Any) -> TensorSpec:
    rec = need_dict(rec, path, entry, "an object {name, type, shape}")
    return TensorSpec(name=optional(rec, "name", lambda v: need_str(v, path, f"{entry}.name"), ""),
                      type=optional(rec, "type", lambda v: need_str(v, path, f"{entry}.type")),
                      shape=tuple(dim(d, path, f"{entry}.shape") for d in
                                  optional(rec, "shape", lambda v: need_list(v, path, f"{entry}.shape"), ())))
