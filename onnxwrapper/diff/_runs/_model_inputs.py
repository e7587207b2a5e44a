"""Inputs of a model run (``aipc run MODEL.onnx``, ``aipc diff --model``): generated, loaded from a
file, or produced by the user's data-loader function — always checked against the model's
declared inputs before anything runs.

Generated data (:func:`generate_inputs`, Polygraphy's conventions where it has them):

* **seed**: iteration ``k`` draws from ``numpy.random.default_rng(seed + k)``, so every iteration
  is different and the same seed gives the same data on every machine (default seed 1, as
  Polygraphy's ``--seed``);
* **shapes**: the declared shape, with ``shapes={name: [dims]}`` filling or overriding dims (fixed
  dims must agree); a dynamic dim left open becomes 1 and is reported in :attr:`ModelInputs.notes`
  (Polygraphy also uses 1);
* **values** (dtype-aware defaults; ``val_range`` overrides per input, ``"*"`` for the others):
  floating types uniform in [0, 1) (Polygraphy's default range); ``uint8`` integers in [0, 255] (an
  8-bit image); ``int8`` in [-128, 127]; other integer types in [0, 1] (safe as indices, class ids and
  masks, as Polygraphy's [0, 1]); ``bool`` False/True. Integer ranges include both ends. String
  inputs cannot be generated: load them (``load_inputs``) or write a data loader.
"""

from __future__ import annotations

import hashlib
import os
import runpy
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import onnx

from onnxwrapper.diff._capture import TensorSet, model_key, read_tensors, sha256_file
from onnxwrapper.kernel import node_args_from_onnx, ort_type_to_numpy, validate_feed

__all__ = ["ModelInputs", "model_facts", "generate_inputs", "load_inputs", "load_data_loader", "check_inputs",
           "default_val_range", "DEFAULT_SEED"]

DEFAULT_SEED = 1
Feeds = dict[str, np.ndarray]


@dataclass
class ModelInputs:
    """The feeds of a model run, one ``{input name: array}`` per iteration, already checked.

    Attributes:
        iterations: the feeds, in run order.
        origin: how they were made, e.g. ``"generated (seed 1)"`` or ``"loaded from in.npz"``.
        notes: facts the user should know (dims that defaulted to 1, iterations dropped).
        golden: outputs that came with the inputs (a file written by ``--save-outputs`` holds both);
            empty otherwise.
        metadata: what the loaded file said about its origin.
    """

    iterations: list[Feeds]
    origin: str = ""
    notes: list[str] = field(default_factory=list)
    golden: list[Feeds] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.iterations)

    def __repr__(self) -> str:
        first = self.iterations[0] if self.iterations else {}
        feeds = ", ".join(f"{n}: {a.dtype}{list(a.shape)}" for n, a in first.items())
        return f"ModelInputs({len(self.iterations)} iteration(s) {origin_text(self.origin)}; {feeds or 'no inputs'})"


def origin_text(origin: str) -> str:
    return f"[{origin}]" if origin else ""


@dataclass(frozen=True)
class _Facts:
    inputs: list
    outputs: list
    sha256: str
    key: str
    path: str | None


def model_facts(model) -> _Facts:
    """Declared inputs/outputs (``NodeArgInfo``), sha256 and capture key of ``model`` (path or bytes).

    Raises:
        FileNotFoundError: no such model file. ValueError: not an ONNX model.
    """
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such model file")
        sha = sha256_file(path)
        try:
            proto = onnx.load(path, load_external_data=False)
        except Exception as exc:  # noqa: BLE001 - protobuf raises several types
            raise ValueError(f"{path}: not an ONNX model ({type(exc).__name__}: {exc})") from exc
    else:
        path, data = None, bytes(model)
        sha = hashlib.sha256(data).hexdigest()
        proto = onnx.load_model_from_string(data)
    ins, outs = node_args_from_onnx(proto)
    return _Facts(ins, outs, sha, model_key(sha, path), path)


def default_val_range(dtype) -> tuple[float, float]:
    """The default value range of generated data for ``dtype`` (module docstring)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return (0.0, 1.0)
    if dtype == np.uint8:
        return (0, 255)
    if dtype == np.int8:
        return (-128, 127)
    return (0, 1)


def _dims(name: str, declared: Sequence, override: Sequence[int] | None, notes: list[str]) -> list[int]:
    if override is not None:
        override = [int(d) for d in override]
        if len(override) != len(declared):
            raise ValueError(f"input '{name}': shape {override} has rank {len(override)}, the model declares rank "
                             f"{len(declared)} {list(declared)}")
        for i, (want, got) in enumerate(zip(declared, override)):
            if isinstance(want, int) and want > 0 and want != got:
                raise ValueError(f"input '{name}': dim {i} is fixed to {want} by the model, got {got} "
                                 f"(shape {override})")
            if got <= 0:
                raise ValueError(f"input '{name}': dims must be positive, got {override}")
        return override
    dims, opened = [], []
    for i, d in enumerate(declared):
        if isinstance(d, int) and d > 0:
            dims.append(d)
        else:
            dims.append(1)
            opened.append(f"{i} ({d if d not in (None, -1) else '?'})")
    if opened:
        notes.append(f"input '{name}' has dynamic dims {', '.join(opened)}: generated with 1; give "
                     f"--input-shapes {name}:[{','.join(str(x) for x in dims)}] (or shapes=) for other sizes")
    return dims


def _values(rng: np.random.Generator, dtype: np.dtype, shape: list[int], lo, hi) -> np.ndarray:
    if dtype.kind == "f":
        return rng.uniform(float(lo), float(hi), size=shape).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(int(lo), int(info.min)), min(int(hi), int(info.max))
        return rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(int(bool(lo)), int(bool(hi)), size=shape, endpoint=True).astype(bool)
    raise ValueError(f"cannot generate values of dtype {dtype}")


def generate_inputs(model, *, shapes: Mapping[str, Sequence[int]] | None = None,
                    val_range: Mapping[str, Sequence[float]] | Sequence[float] | None = None,
                    seed: int = DEFAULT_SEED, iterations: int = 1) -> ModelInputs:
    """Random feeds for ``model`` (rules in the module docstring).

    Args:
        model: path or bytes of an ONNX model.
        shapes: ``{input name: [d0, d1, …]}`` for inputs with dynamic dims (or to restate fixed ones).
        val_range: ``(lo, hi)`` for every input, or ``{input name | "*": (lo, hi)}``.
        seed: base seed; iteration ``k`` uses ``seed + k``. iterations: number of feeds (≥ 1).

    Returns:
        :class:`ModelInputs` (``origin`` ``"generated (seed S)"``).

    Raises:
        ValueError: an unknown input name, a shape that contradicts the model, a range with lo > hi,
            a string input, ``iterations`` < 1.
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    facts = model_facts(model)
    names = [i.name for i in facts.inputs]
    ranges = _ranges(val_range, names)
    shapes = dict(shapes or {})
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        raise ValueError(f"shapes given for {', '.join(unknown)}, which the model does not have (its inputs: "
                         f"{', '.join(names)})")
    notes: list[str] = []
    specs = []
    for info in facts.inputs:
        if not info.type.startswith("tensor("):
            raise ValueError(f"input '{info.name}' is {info.type}: only tensors can be generated; load the inputs "
                             f"from a file or write a data loader")
        dtype = np.dtype(ort_type_to_numpy(info.type))
        if dtype.kind not in "fiub":
            raise ValueError(f"input '{info.name}' is {info.type}: values of this type cannot be generated; load "
                             f"the inputs from a file or write a data loader")
        lo, hi = ranges.get(info.name) or ranges.get("*") or default_val_range(dtype)
        specs.append((info.name, dtype, _dims(info.name, info.shape, shapes.get(info.name), notes), lo, hi))
    feeds = []
    for k in range(iterations):
        rng = np.random.default_rng(int(seed) + k)
        feeds.append({n: _values(rng, d, s, lo, hi) for n, d, s, lo, hi in specs})
    return ModelInputs(feeds, origin=f"generated (seed {seed})", notes=notes)


def _ranges(val_range, names: list[str]) -> dict[str, tuple]:
    if val_range is None:
        return {}
    items = dict(val_range) if isinstance(val_range, Mapping) else {"*": val_range}
    unknown = sorted(set(items) - set(names) - {"*"})
    if unknown:
        raise ValueError(f"value range given for {', '.join(unknown)}, which the model does not have (its inputs: "
                         f"{', '.join(names)})")
    result = {}
    for name, pair in items.items():
        lo, hi = pair
        if float(lo) > float(hi):
            raise ValueError(f"value range of '{name}': lo {lo} > hi {hi}")
        result[name] = (lo, hi)
    return result


def load_inputs(path, model, *, iterations: int | None = None) -> ModelInputs:
    """Feeds for ``model`` read from ``path``: an ``.npz`` (aipc's tensor file or a plain one), a
    ``.npy`` (one-input models), JSON (plain or Polygraphy's) or a capture directory
    (:func:`onnxwrapper.diff.read_tensors`); ``iterations`` keeps the first N.

    A file written by ``--save-outputs`` carries the inputs it was made from and its outputs
    (:attr:`ModelInputs.golden`).

    Raises:
        FileNotFoundError: no such path. ValueError: the file holds no inputs, fewer than
            ``iterations``, or inputs that do not fit the model (onnxruntime's message).
    """
    facts = model_facts(model)
    data = read_tensors(path, role="inputs", input_specs=facts.inputs, output_specs=facts.outputs,
                        model_key=facts.key, model_sha256=facts.sha256)
    if not data.inputs:
        raise ValueError(f"{os.fspath(path)} holds no inputs (only outputs): give the inputs they were made from")
    return _select(data, facts, f"loaded from {os.fspath(path)}", iterations)


def load_data_loader(spec: str, model, *, iterations: int | None = None) -> ModelInputs:
    """Feeds from the user's function: ``spec`` is ``"file.py"`` (function ``load_data``, as
    Polygraphy's ``--data-loader-script``) or ``"file.py:function"``. The function takes no
    argument and returns or yields ``{input name: array}`` mappings; ``iterations`` keeps the first N.

    Raises:
        FileNotFoundError: no such script. ValueError: no such function, nothing yielded, or feeds
            that do not fit the model. Whatever the script raises, unchanged.
    """
    path, _, name = spec.rpartition(":") if spec.count(":") and not os.path.isfile(spec) else (spec, "", "")
    name = name or "load_data"
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data loader script {path}: no such file")
    namespace = runpy.run_path(path, run_name="__aipc_data_loader__")
    func = namespace.get(name)
    if not callable(func):
        found = sorted(k for k, v in namespace.items() if callable(v) and not k.startswith("_"))
        raise ValueError(f"{path} defines no function '{name}' (functions found: {', '.join(found) or 'none'}); "
                         f"give file.py:function")
    facts = model_facts(model)
    items: list[Feeds] = []
    for item in func():
        if not isinstance(item, Mapping):
            raise ValueError(f"{path}:{name} produced a {type(item).__name__}; expected {{input name: array}}")
        items.append(dict(item))
        if iterations is not None and len(items) >= iterations:
            break
    return _select(TensorSet(inputs=items), facts, f"from {path}:{name}", iterations)


def _select(data: TensorSet, facts: _Facts, origin: str, iterations: int | None) -> ModelInputs:
    feeds = list(data.inputs)
    if not feeds:
        raise ValueError(f"no inputs {origin}")
    notes = []
    if iterations is not None:
        if iterations < 1:
            raise ValueError(f"iterations must be >= 1, got {iterations}")
        if len(feeds) < iterations:
            raise ValueError(f"{iterations} iteration(s) asked for, but only {len(feeds)} {origin}")
        if len(feeds) > iterations:
            notes.append(f"{len(feeds) - iterations} more iteration(s) {origin} not used (iterations={iterations})")
        feeds = feeds[:iterations]
    golden = list(data.outputs[:len(feeds)]) if data.outputs else []
    return ModelInputs(check_inputs(facts.inputs, feeds), origin=origin, notes=notes, golden=golden,
                       metadata=dict(data.metadata))


def check_inputs(input_specs: Sequence, iterations: Iterable[Mapping[str, Any]]) -> list[Feeds]:
    """Each feed checked as ``onnxruntime.InferenceSession.run`` checks it (missing or unknown
    names, element types, ranks, fixed dims), lists converted to the declared dtype.

    Raises:
        ValueError / onnxruntime ``InvalidArgument``: exactly what onnxruntime raises, prefixed with the
            iteration.
    """
    out = []
    for k, feed in enumerate(iterations):
        try:
            checked = validate_feed(input_specs, feed)
        except Exception as exc:
            if k == 0:
                raise
            raise type(exc)(f"iteration {k}: {exc}") from exc
        out.append({n: np.ascontiguousarray(a) for n, a in checked.items()})
    return out
