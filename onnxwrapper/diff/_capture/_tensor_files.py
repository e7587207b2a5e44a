"""Tensor files: model inputs and outputs saved on one machine and loaded on another.

**The format aipc writes** (``--save-inputs`` / ``--save-outputs``, :func:`save_tensors`) is a
numpy ``.npz`` file — a ZIP of ``.npy`` members, uncompressed and never pickled — readable with
``numpy.load(path)`` on any platform and by any ``.npy`` reader (C++ ``cnpy``, Java, Rust …):

* ``input<k>/<name>`` — input ``<name>`` of iteration ``k`` (from 0);
* ``output<k>/<name>`` — output ``<name>`` of iteration ``k``;
* ``__index__`` — a 0-d unicode array holding a JSON object: ``format``
  (``"onnxwrapper-tensors"``), ``version`` (1), ``iterations`` (count), ``inputs`` / ``outputs``
  (the names per iteration, in model order), ``metadata`` (``model``: ``{path, sha256}`` of the model
  that produced them; ``backend`` and ``backend_options`` of the run; ``tool`` versions). Readers
  ignore keys they do not know.

**What the readers accept** (:func:`read_tensors`):

* that format (a file holding only outputs, only inputs, or both);
* a plain ``.npz`` whose keys are tensor names (``numpy.savez("golden.npz", logits=y)`` in any
  framework): one iteration;
* a ``.npy`` file: one array, for a model with one input (or one output);
* JSON: an object ``{name: nested list}`` or a list of such objects (one per iteration), cast to
  the dtypes the model declares; and Polygraphy's JSON (``--save-inputs``: a list of
  ``{name: {"array": <base64 of numpy.save bytes>, "polygraphy_class": "ndarray"}}``;
  ``--save-outputs``: a ``RunResults`` object, whose first runner is read);
* a capture directory (``aipc capture``, one run of an ``aipc diff`` directory): the recorded calls
  of the model, in recording order.
"""

from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from onnxwrapper.diff._capture._reader import CaptureFormatError, read_capture
from onnxwrapper.diff._capture._files import write_npz
from onnxwrapper.diff._capture._npy_bounded import BoundedNpz, read_npy, read_npy_bytes
from onnxwrapper.diff._capture._untrusted import (load_json, malformed, need_dict, need_int, need_list, need_str,
                                                  open_untrusted, optional)
from onnxwrapper.errors import MalformedFileError
from onnxwrapper.kernel import ort_type_to_numpy

__all__ = ["TENSORS_FORMAT", "TENSORS_VERSION", "TensorSet", "save_tensors", "read_tensors"]

TENSORS_FORMAT = "onnxwrapper-tensors"
TENSORS_VERSION = 1
_INDEX = "__index__"
_KEY = re.compile(r"^(input|output)(\d+)/(.+)$", re.S)

Feeds = dict[str, np.ndarray]


@dataclass
class TensorSet:
    """Tensors read from a file: per iteration, the inputs and/or the outputs of one model.

    Attributes:
        inputs: one ``{input name: array}`` per iteration (empty list when the file holds none).
        outputs: one ``{output name: array}`` per iteration (empty list when the file holds none).
        metadata: what the file says about its origin (``model``, ``backend``, ``backend_options``,
            ``tool``); empty for files written by other tools.
        source: the path read.
    """

    inputs: list[Feeds] = field(default_factory=list)
    outputs: list[Feeds] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def __repr__(self) -> str:
        def names(items: list[Feeds]) -> str:
            return ", ".join(f"{n} {a.dtype}{list(a.shape)}" for n, a in items[0].items()) if items else "-"

        origin = self.metadata.get("backend")
        return (f"TensorSet({self.source!r}: {max(len(self.inputs), len(self.outputs))} iteration(s); "
                f"inputs: {names(self.inputs)}; outputs: {names(self.outputs)}"
                + (f"; from backend {origin}" if origin else "") + ")")


def save_tensors(path, inputs: Sequence[Mapping[str, Any]] = (), outputs: Sequence[Mapping[str, Any]] = (), *,
                 metadata: Mapping[str, Any] | None = None) -> str:
    """Write ``inputs`` and/or ``outputs`` (one mapping per iteration) in the format of the module
    docstring; returns the path written (``.npz`` is appended when missing, as numpy does).

    Raises:
        ValueError: nothing to write, or a value that is not a tensor (sequence/map outputs).
    """
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    if not inputs and not outputs:
        raise ValueError("save_tensors: nothing to write (no inputs and no outputs)")
    arrays: dict[str, np.ndarray] = {}
    index: dict[str, Any] = {"format": TENSORS_FORMAT, "version": TENSORS_VERSION,
                             "iterations": max(len(inputs), len(outputs)), "inputs": [], "outputs": [],
                             "metadata": dict(metadata or {})}
    for role, items in (("input", inputs), ("output", outputs)):
        for k, feeds in enumerate(items):
            names = []
            for name, value in feeds.items():
                arr = np.asarray(value)
                if arr.dtype == object:
                    raise ValueError(f"save_tensors: {role} '{name}' of iteration {k} is not a tensor "
                                     f"(dtype object); only tensors can be saved")
                arrays[f"{role}{k}/{name}"] = arr
                names.append(name)
            index[f"{role}s"].append(names)
    arrays[_INDEX] = np.array(json.dumps(index, default=str))
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = path + ".tmp"
    write_npz(tmp, arrays)
    os.replace(tmp, path)
    return path


def read_tensors(path, *, role: str = "inputs", input_specs: Sequence | None = None,
                 output_specs: Sequence | None = None, model_key: str | None = None,
                 model_sha256: str | None = None) -> TensorSet:
    """Read tensors from ``path`` (any form listed in the module docstring).

    Args:
        path: a file or a capture directory.
        role: what a file that does not say it (plain ``.npz``/``.npy``/JSON) holds: ``"inputs"``
            or ``"outputs"``.
        input_specs / output_specs: the model's declared inputs/outputs (objects with ``name``,
            ``type`` — an ORT type string such as ``"tensor(float)"`` — and ``shape``); used to name
            a lone ``.npy`` array, to cast JSON lists and to pick a capture's calls.
        model_key / model_sha256: the model's capture key and sha256 (a capture holding several
            models is read for that model).

    Raises:
        FileNotFoundError: no such file or directory.
        MalformedFileError (a ValueError): a truncated or corrupt file, a value of the wrong type,
            sizes beyond what the file holds (checked before any allocation) — naming the file and
            the entry. ValueError: a file that is none of the accepted forms, or does not fit the
            model (the message says what was found and what was expected).
    """
    if role not in ("inputs", "outputs"):
        raise ValueError(f"role must be 'inputs' or 'outputs', got {role!r}")
    path = os.fspath(path)
    if os.path.isdir(path):
        result = _read_capture_dir(path, input_specs, model_key, model_sha256)
    elif not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file or directory")
    else:
        lower = path.lower()
        if lower.endswith(".npz"):
            result = _read_npz(path, role)
        elif lower.endswith(".npy"):
            specs = input_specs if role == "inputs" else output_specs
            result = _one_array(path, role, specs)
        elif lower.endswith(".json"):
            result = _read_json(path, role, input_specs if role == "inputs" else output_specs)
        else:
            raise ValueError(f"{path}: not a tensor file aipc reads (expected .npz, .npy, .json or a capture "
                             f"directory)")
    result.source = path
    return result


# -- .npz ----------------------------------------------------------------------------------------------
def _read_index(npz: BoundedNpz, path: str) -> dict | None:
    if _INDEX not in npz.files:
        return None
    raw = npz[_INDEX]
    if raw.dtype.kind != "U" or raw.shape != ():
        raise malformed(path, _INDEX, f"a {raw.dtype} array of shape {raw.shape}", "a 0-d unicode array holding JSON")
    try:
        index = json.loads(str(raw[()]))
    except (ValueError, RecursionError) as exc:
        raise malformed(path, _INDEX, f"not JSON ({exc})", "a JSON object") from exc
    need_dict(index, path, _INDEX, "a JSON object {format, version, iterations, inputs, outputs, metadata}")
    if index.get("format") != TENSORS_FORMAT:
        raise ValueError(f"{path}: its __index__ names format {index.get('format')!r}, not {TENSORS_FORMAT!r}")
    version = need_int(index.get("version", 1), path, f"{_INDEX}.version", low=1)
    if version > TENSORS_VERSION:
        raise ValueError(f"{path}: tensor file version {index.get('version')} is newer than this onnxwrapper "
                         f"reads ({TENSORS_VERSION}); upgrade onnxwrapper")
    for role in ("inputs", "outputs"):
        for k, names in enumerate(optional(index, role, lambda v, r=role: need_list(v, path, f"{_INDEX}.{r}"), [])):
            for name in need_list(names, path, f"{_INDEX}.{role}[{k}]", "a list of tensor names"):
                need_str(name, path, f"{_INDEX}.{role}[{k}]", "a list of tensor names")
    optional(index, "metadata", lambda v: need_dict(v, path, f"{_INDEX}.metadata"))
    return index


def _read_npz(path: str, role: str) -> TensorSet:
    with BoundedNpz(path) as npz:
        keys = [k for k in npz.files if k != _INDEX]
        index = _read_index(npz, path)
        parsed = [_KEY.match(k) for k in keys]
        result = TensorSet(metadata=dict((index or {}).get("metadata") or {}))
        if keys and all(parsed):
            found: dict = {"input": {}, "output": {}}
            for m in parsed:  # iteration numbers are checked (dense from 0) before any list grows
                found[m.group(1)].setdefault(int(m.group(2)), {})[m.group(3)] = m.group(0)
            for kind, items in (("input", result.inputs), ("output", result.outputs)):
                iterations = found[kind]
                missing = next((k for k in range(len(iterations)) if k not in iterations), None)
                if missing is not None:
                    last = max(iterations)
                    raise malformed(path, f"{kind}{last}/…", f"iteration {last} but no {kind}{missing}/…",
                                    f"{kind} iterations numbered 0, 1, … without gaps")
                items.extend({n: npz[member] for n, member in iterations[k].items()} for k in range(len(iterations)))
            if index is not None:  # keep the model order the index records
                for items, names in ((result.inputs, index.get("inputs") or []),
                                     (result.outputs, index.get("outputs") or [])):
                    for k, order in enumerate(names[:len(items)]):
                        items[k] = {n: items[k][n] for n in order if n in items[k]}
        else:
            one = {k: npz[k] for k in keys}
            (result.inputs if role == "inputs" else result.outputs).append(one)
    return result


def _one_array(path: str, role: str, specs: Sequence | None) -> TensorSet:
    with open_untrusted(path, None, None, "a .npy file (a regular file)") as f:
        arr = read_npy(f, os.fstat(f.fileno()).st_size, path)
    names = [s.name for s in specs or ()]
    if len(names) != 1:
        what = "input" if role == "inputs" else "output"
        raise ValueError(f"{path}: a .npy file holds one array, but the model has {len(names)} {what}s "
                         f"({', '.join(names) or 'unknown'}); save them in a .npz file with one key per name")
    one = {names[0]: arr}
    return TensorSet(inputs=[one]) if role == "inputs" else TensorSet(outputs=[one])


# -- JSON ----------------------------------------------------------------------------------------------
def _decode_polygraphy(value: Any, path: str, entry: str) -> Any:
    if isinstance(value, dict) and value.get("polygraphy_class") == "ndarray":
        text = need_str(value.get("array"), path, f"{entry}.array", "the base64 text of numpy.save bytes")
        try:
            data = base64.b64decode(text, validate=True)
        except ValueError as exc:
            raise malformed(path, f"{entry}.array", f"not base64 ({exc})", "the base64 text of numpy.save bytes") from exc
        return read_npy_bytes(data, path, f"{entry}.array")
    if isinstance(value, dict) and value.get("polygraphy_class") == "LazyArray":
        return _decode_polygraphy(value.get("values"), path, f"{entry}.values")
    return value


def _read_run_results(doc: dict, path: str) -> TensorSet:
    runs = need_list(doc.get("lst"), path, "lst", "a list of [runner name, [iteration results]]")
    if not runs:
        raise ValueError(f"{path}: Polygraphy RunResults without any runner")
    first = need_list(runs[0], path, "lst[0]", "[runner name, [iteration results]]")
    if len(first) != 2:
        raise malformed(path, "lst[0]", f"a list of {len(first)} items", "[runner name, [iteration results]]")
    name = need_str(first[0], path, "lst[0][0]", "the runner's name")
    iterations = []
    for k, it in enumerate(need_list(first[1], path, "lst[0][1]", "a list of iteration results")):
        it = need_dict(it, path, f"lst[0][1][{k}]", "an IterationResult object")
        outputs = optional(it, "outputs", lambda v, k=k: need_dict(v, path, f"lst[0][1][{k}].outputs",
                                                                   "an object {name: array}"), {})
        iterations.append({n: _as_array(_decode_polygraphy(v, path, f"lst[0][1][{k}].outputs.{n}"), None, path,
                                        f"lst[0][1][{k}].outputs.{n}") for n, v in outputs.items()})
    return TensorSet(outputs=iterations, metadata={"producer": f"polygraphy runner {name}"})


def _as_array(value: Any, dtype, path: str, entry: str) -> np.ndarray:
    """A JSON value (nested lists of numbers) as an array of ``dtype``; never an object array."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, dict):
        raise malformed(path, entry, "an object", "a number, a nested list of numbers or a Polygraphy array")
    try:
        with np.errstate(over="raise", invalid="ignore"):  # 1e308 into float32: an error, not inf
            arr = np.array(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError, FloatingPointError) as exc:
        expected = f"numbers that fit {np.dtype(dtype).name}" if dtype is not None else "a nested list of numbers"
        raise malformed(path, entry, f"not a numeric array ({exc})", expected) from exc
    if arr.dtype.hasobject:
        huge = all(isinstance(v, int) for v in arr.reshape(-1))
        raise malformed(path, entry, "integers beyond 64 bits" if huge else "a ragged or mixed list",
                        "a rectangular nested list of numbers" + (" within int64/uint64" if huge else ""))
    return arr


def _read_json(path: str, role: str, specs: Sequence | None) -> TensorSet:
    doc = load_json(path)
    dtypes = {s.name: _np_dtype(s.type) for s in specs or ()}
    if isinstance(doc, dict) and doc.get("polygraphy_class") == "RunResults":
        return _read_run_results(doc, path)
    items = doc if isinstance(doc, list) else [doc]
    if not items or not all(isinstance(i, dict) for i in items):
        raise ValueError(f"{path}: expected a JSON object {{name: values}} or a list of such objects (one per "
                         f"iteration)")
    iterations = []
    for k, item in enumerate(items):
        entry = f"iteration {k}" if isinstance(doc, list) else ""
        feeds = {}
        for name, value in item.items():
            where = f"{entry}, '{name}'" if entry else f"'{name}'"
            feeds[name] = _as_array(_decode_polygraphy(value, path, where), dtypes.get(name), path, where)
        iterations.append(feeds)
    return TensorSet(inputs=iterations) if role == "inputs" else TensorSet(outputs=iterations)


def _np_dtype(ort_type: str | None):
    try:
        return ort_type_to_numpy(ort_type) if ort_type else None
    except (KeyError, ValueError, TypeError):
        return None


# -- capture directories ---------------------------------------------------------------------------------
def _read_capture_dir(path: str, input_specs: Sequence | None, model_key: str | None,
                      model_sha256: str | None) -> TensorSet:
    try:
        cap = read_capture(path)
    except (CaptureFormatError, FileNotFoundError) as exc:
        raise MalformedFileError(f"{path}: a directory, but not a capture directory ({exc})", path=path,
                                 entry=getattr(exc, "entry", None)) from exc
    keys = _capture_models(cap, model_key, model_sha256, [s.name for s in input_specs or ()])
    if not keys:
        raise ValueError(f"{path}: the capture holds no call of this model (models recorded: "
                         f"{', '.join(cap.models) or 'none'})")
    calls = [c for c in cap.calls if c.model in keys and c.method != "run_with_iobinding"]
    first = cap.models[calls[0].model] if calls else None
    result = TensorSet(inputs=[c.inputs() for c in calls], outputs=[c.outputs() for c in calls],
                       metadata={"capture": os.path.abspath(path),
                                 "backend": calls[0].backend if calls else None,
                                 "backend_options": dict(calls[0].backend_options) if calls else {},
                                 "model": {"path": first.path, "sha256": first.sha256} if first else {}})
    return result


def _capture_models(cap, model_key: str | None, model_sha256: str | None, input_names: Iterable[str]) -> list[str]:
    if model_key and model_key in cap.models:
        return [model_key]
    by_sha = [k for k, m in cap.models.items() if model_sha256 and m.sha256 == model_sha256]
    if by_sha:
        return by_sha
    names = sorted(input_names)
    return [k for k, m in cap.models.items() if names and sorted(m.input_names) == names]
