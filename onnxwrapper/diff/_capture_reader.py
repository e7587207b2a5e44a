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
up to :data:`~onnxwrapper.diff._capture.FORMAT_VERSION` and ignore unknown keys.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from onnxwrapper.diff._capture import FORMAT, FORMAT_VERSION
from onnxwrapper.diff._capture_values import sha256_file

__all__ = ["CaptureFormatError", "TensorSpec", "ModelInfo", "SessionInfo", "Call", "Capture", "read_capture"]


class CaptureFormatError(ValueError):
    """The directory is not a readable capture (missing/corrupt header, newer format version)."""


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
        """
        if self.stored and os.path.isfile(self.stored):
            with open(self.stored, "rb") as f:
                return f.read()
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
        with np.load(os.path.join(self.capture_dir, self.file), allow_pickle=False) as npz:
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
        CaptureFormatError: no/corrupt ``capture.json``, another format, or a newer version.
    """
    directory = os.fspath(directory)
    header_path = os.path.join(directory, "capture.json")
    try:
        with open(header_path, encoding="utf-8") as f:
            header = json.load(f)
    except FileNotFoundError as exc:
        raise CaptureFormatError(f"{directory} is not a capture directory (no capture.json).") from exc
    except json.JSONDecodeError as exc:
        raise CaptureFormatError(f"{header_path} is not valid JSON: {exc}") from exc
    if header.get("format") != FORMAT:
        raise CaptureFormatError(f"{header_path}: format is {header.get('format')!r}, expected {FORMAT!r}.")
    if int(header.get("version", 0)) > FORMAT_VERSION:
        raise CaptureFormatError(f"{header_path}: format version {header.get('version')} is newer than this "
                                 f"onnxwrapper reads ({FORMAT_VERSION}); upgrade onnxwrapper.")
    models = {}
    for key, rec in (header.get("models") or {}).items():
        stored = os.path.join(directory, rec["stored"]) if rec.get("stored") else None
        models[key] = ModelInfo(key=key, sha256=rec.get("sha256", ""), path=rec.get("path"), stored=stored,
                                inputs=tuple(_spec(t) for t in rec.get("inputs") or ()),
                                outputs=tuple(_spec(t) for t in rec.get("outputs") or ()),
                                size_bytes=int(rec.get("size_bytes") or 0))
    shift = 1 if int(header.get("version", 1)) < 2 else 0  # version 1 numbered sessions from 0
    sessions = [SessionInfo(ordinal=s["ordinal"] + shift, model=s["model"], backend=s.get("backend", ""),
                            backend_options=dict(s.get("backend_options") or {}),
                            providers=tuple(s.get("providers") or ())) for s in header.get("sessions") or ()]
    by_ordinal = {s.ordinal: s for s in sessions}
    calls = []
    calls_path = os.path.join(directory, header.get("calls_file") or "calls.jsonl")
    if os.path.exists(calls_path):
        with open(calls_path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
                sess = by_ordinal.get(rec["session"] + shift)
                calls.append(Call(
                    capture_dir=directory, seq=rec["seq"], session=rec["session"] + shift, index=rec["index"],
                    model=rec["model"], method=rec.get("method", "run"),
                    output_names=tuple(rec.get("output_names") or ()),
                    requested_output_names=(tuple(rec["requested_output_names"])
                                            if rec.get("requested_output_names") else None),
                    input_meta=tuple(rec.get("inputs") or ()), output_meta=tuple(rec.get("outputs") or ()),
                    file=rec["file"], seconds=float(rec.get("seconds") or 0.0),
                    backend=sess.backend if sess else "", backend_options=sess.backend_options if sess else {}))
    calls.sort(key=lambda c: c.seq)
    return Capture(path=directory, header=header, models=models, sessions=sessions, calls=calls)


def _spec(rec: dict[str, Any]) -> TensorSpec:
    return TensorSpec(name=rec.get("name", ""), type=rec.get("type"), shape=tuple(rec.get("shape") or ()))
