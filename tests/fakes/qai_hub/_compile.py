"""TEST DOUBLE of what AI Hub's compile service does with a submitted ONNX model (server side).

The real compile happens on Qualcomm's servers; nothing here reproduces QNN. The double keeps
the *contract* a client can observe (qai-hub 0.56 ``client.submit_compile_job`` docstring and
``CompileJob.get_target_model``/``get_target_shapes``):

* ``input_specs`` (name -> shape tuple or (shape tuple, dtype)) fix the dynamic extents; shapes are
  tuples of Python ints >= 1, dtypes one of ``api_utils._STR_TO_TETRA_TYPE``'s keys, default
  ``float32`` (``api_utils.input_shapes_to_tensor_type_list_pb``).
* ``options`` is a CLI-like flag string; the double parses the flags listed in :data:`COMPILE_FLAGS`.
* The target model is an opaque file; for ``--target_runtime qnn_context_binary`` it is a ``.bin``
  (``EXTENSIONS_BY_MODEL_TYPE``). The double's ``.bin`` is its own format (:func:`write_target`):
  a header plus the *specialized ONNX model*, which the double's inference jobs run with
  onnxruntime on the CPU. It is not a QNN context binary.

Assumptions of the double that no public source states (each makes the double *stricter* than the
real service is known to be, so a backend that passes here also satisfies the real contract):

* dynamic input dims without ``input_specs`` fail the compile job (QNN graphs are static);
* ``input_specs`` names must be exactly the ONNX input names (the docs say specs "can be used to
  overwrite the model's input names"; the double does not rename);
* 64-bit IO fails for QNN targets unless ``--truncate_64bit_io``, which turns it into int32 IO;
* QNN targets name their tensors like the QAIRT converters (``[^A-Za-z0-9_]`` -> ``_``, leading
  digit -> ``_`` prefix);
* unknown flags, and targets other than ``qnn_context_binary``/``qnn_dlc``, fail the compile job.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import struct
from dataclasses import dataclass

import numpy as np

from ._runtime import session_for
from ._types import TENSOR_DTYPES, TensorSpec

__all__ = ["CompileFailure", "Target", "COMPILE_FLAGS", "INFERENCE_FLAGS", "parse_options", "load_onnx",
           "compile_onnx", "write_target", "read_target", "MAGIC"]

MAGIC = b"QAIHUB-TEST-DOUBLE-TARGET\n"
QNN_TARGETS = ("qnn_context_binary", "qnn_dlc")
KNOWN_TARGETS = QNN_TARGETS + ("tflite", "onnx", "precompiled_qnn_onnx", "genie", "onnxruntime_genai")
#: flag -> "value" (takes one value) or "bool" (optional true/false value)
COMPILE_FLAGS = {"--target_runtime": "value", "--compute_unit": "value", "--truncate_64bit_io": "bool",
                 "--quantize_full_type": "value", "--quantize_io": "bool", "--qairt_version": "value",
                 "--qnn_options": "value", "--output_names": "value"}
INFERENCE_FLAGS = {"--compute_unit": "value", "--qairt_version": "value", "--qnn_options": "value",
                   "--max_profiler_iterations": "value"}
_ONNX_TO_NAME = {1: "float32", 10: "float16", 6: "int32", 3: "int8", 2: "uint8", 5: "int16", 4: "uint16",
                 7: "int64", 9: "bool"}


class CompileFailure(Exception):
    """The simulated job fails; ``str(exc)`` becomes ``JobStatus.message``."""


@dataclass(frozen=True)
class Target:
    """A compiled target model: runtime, device name, IO specs (target names) and the ONNX model
    that stands in for the device graph (IO named ``onnx_inputs``/``onnx_outputs``)."""

    runtime: str
    device: str
    inputs: tuple
    outputs: tuple
    onnx_inputs: tuple
    onnx_outputs: tuple
    onnx_bytes: bytes
    options: str


def parse_options(options: str, flags: dict) -> dict:
    """``--flag value`` / ``--flag [true|false]`` pairs -> dict (keys without dashes).

    Raises:
        CompileFailure: unknown flag or missing value.
    """
    tokens = shlex.split(options or "")
    parsed, i = {}, 0
    while i < len(tokens):
        tok = tokens[i]
        key, _, inline = tok.partition("=")
        kind = flags.get(key)
        if kind is None:
            raise CompileFailure(f"Unrecognized option '{tok}' (test double: accepted {sorted(flags)}).")
        if inline:
            parsed[key[2:]] = inline
        elif kind == "value":
            if i + 1 >= len(tokens):
                raise CompileFailure(f"Option '{key}' needs a value.")
            parsed[key[2:]], i = tokens[i + 1], i + 1
        elif i + 1 < len(tokens) and tokens[i + 1].lower() in ("true", "false"):
            parsed[key[2:]], i = tokens[i + 1].lower() == "true", i + 1
        else:
            parsed[key[2:]] = True
        i += 1
    return parsed


def load_onnx(source):
    """The ONNX model behind an upload: ``onnx.ModelProto``, a ``.onnx`` path, or a directory with
    exactly one ``.onnx`` (+ at most one ``.data``), as ``client._get_model_dir_type`` accepts."""
    import onnx

    if isinstance(source, onnx.ModelProto):
        return source
    path = os.fspath(source)
    if os.path.isdir(path):
        onnx_files = [f for f in os.listdir(path) if f.endswith(".onnx")]
        path = os.path.join(path, onnx_files[0])
    return onnx.load(path)


def sanitize(name: str) -> str:
    """QAIRT converter tensor naming (assumption for QNN targets, see the module docstring)."""
    out = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return "_" + out if out[:1].isdigit() else out


def _value_info(vi):
    tt = vi.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else None
    return _ONNX_TO_NAME.get(tt.elem_type), dims


def _resolve_inputs(model, input_specs):
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in inits]
    by_name = {vi.name: vi for vi in graph_inputs}
    if input_specs is not None and set(input_specs) != set(by_name):
        raise CompileFailure(f"input_specs names {list(input_specs)} do not match the model inputs {list(by_name)}.")
    order = list(input_specs) if input_specs is not None else list(by_name)
    resolved = []
    for name in order:
        dtype, dims = _value_info(by_name[name])
        if dtype is None or dims is None:
            raise CompileFailure(f"Model input '{name}' has an unsupported type or no shape.")
        if input_specs is None:
            if any(d is None or d == 0 for d in dims):
                raise CompileFailure(f"Model input '{name}' has dynamic shape {dims}; provide input_specs.")
            shape, spec_dtype = tuple(dims), dtype
        else:
            spec = input_specs[name]
            shape, spec_dtype = (spec[0], spec[1]) if isinstance(spec[0], tuple) else (spec, "float32")
            if len(shape) != len(dims) or any(d not in (None, 0) and d != s for d, s in zip(dims, shape)):
                raise CompileFailure(f"input_specs shape {shape} of '{name}' is incompatible with the model's {dims}.")
            if spec_dtype != dtype:
                raise CompileFailure(f"input_specs dtype '{spec_dtype}' of '{name}' differs from the model's '{dtype}'.")
        resolved.append((name, tuple(int(s) for s in shape), dtype))
    return resolved


def _output_specs(model, session, feeds_shapes):
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - a model shape inference rejects still runs in ORT
        inferred = model
    outs = []
    for vi in inferred.graph.output:
        dtype, dims = _value_info(vi)
        outs.append([vi.name, dtype, dims])
    if any(d is None or None in d for _, _, d in outs) or any(t is None for _, t, _ in outs):
        feed = {n: np.zeros(s, dtype=np.dtype(t if t != "bool" else np.bool_)) for n, s, t in feeds_shapes}
        try:
            results = session.run([o[0] for o in outs], feed)
            for o, r in zip(outs, results):
                o[1], o[2] = _ONNX_TO_NAME.get(onnx.helper.np_dtype_to_tensor_dtype(r.dtype)), list(r.shape)
        except Exception:  # noqa: BLE001 - shapes stay unknown (TensorSpec.shape None)
            pass
    return [(n, t, tuple(d) if d is not None and None not in d else None) for n, t, d in outs]


def compile_onnx(model, device: str, input_specs, options: str) -> Target:
    """Simulate one compile job. Raises :class:`CompileFailure` with the job's failure message."""
    import onnx

    opts = parse_options(options, COMPILE_FLAGS)
    runtime = opts.get("target_runtime", "tflite")  # AI Hub's default target (assumption)
    if runtime not in KNOWN_TARGETS:
        raise CompileFailure(f"Unknown target runtime '{runtime}'.")
    if runtime not in QNN_TARGETS:
        raise CompileFailure(f"Target runtime '{runtime}' is not modelled by the test double (use qnn_context_binary).")
    inputs = _resolve_inputs(model, input_specs)
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    shapes = {n: s for n, s, _ in inputs}
    for vi in fixed.graph.input:
        if vi.name in shapes:
            for dim, size in zip(vi.type.tensor_type.shape.dim, shapes[vi.name]):
                dim.Clear()
                dim.dim_value = size
    data = fixed.SerializeToString()
    try:
        session = session_for(data)
    except Exception as exc:  # noqa: BLE001 - an invalid model fails the compile job
        raise CompileFailure(f"Failed to compile the model: {exc}") from exc
    outputs = _output_specs(fixed, session, inputs)
    truncate = bool(opts.get("truncate_64bit_io", False))
    specs = []
    for group in ([(n, t, s) for n, s, t in inputs], outputs):
        tensors = []
        for name, dtype, shape in group:
            if dtype not in TENSOR_DTYPES:
                raise CompileFailure(f"Tensor '{name}' has unsupported type {dtype}.")
            if dtype == "int64":
                if not truncate:
                    raise CompileFailure(f"Tensor '{name}' is int64; QNN targets need --truncate_64bit_io.")
                dtype = "int32"
            tensors.append(TensorSpec(sanitize(name), dtype, shape))
        specs.append(tuple(tensors))
    return Target(runtime, device, specs[0], specs[1], tuple(n for n, _, _ in inputs),
                  tuple(n for n, _, _ in outputs), data, options)


def write_target(target: Target) -> bytes:
    """Serialize a target: :data:`MAGIC`, 8-byte little-endian header length, JSON header, ONNX bytes."""
    header = {"runtime": target.runtime, "device": target.device, "options": target.options,
              "inputs": [list(t) for t in target.inputs], "outputs": [list(t) for t in target.outputs],
              "onnx_inputs": list(target.onnx_inputs), "onnx_outputs": list(target.onnx_outputs)}
    raw = json.dumps(header).encode("utf-8")
    return MAGIC + struct.pack("<Q", len(raw)) + raw + target.onnx_bytes


def read_target(data: bytes) -> Target:
    """Parse :func:`write_target` output. Raises ``ValueError`` for anything else."""
    if not data.startswith(MAGIC):
        raise ValueError("not a context binary produced by the qai-hub test double")
    buf = io.BytesIO(data[len(MAGIC):])
    (size,) = struct.unpack("<Q", buf.read(8))
    h = json.loads(buf.read(size).decode("utf-8"))

    def specs(rows):
        return tuple(TensorSpec(r[0], r[1], tuple(r[2]) if r[2] is not None else None) for r in rows)

    return Target(h["runtime"], h["device"], specs(h["inputs"]), specs(h["outputs"]), tuple(h["onnx_inputs"]),
                  tuple(h["onnx_outputs"]), buf.read(), h["options"])
