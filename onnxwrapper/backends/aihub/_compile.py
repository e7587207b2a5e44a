"""Compiling a model on Qualcomm AI Hub for one device and one static shape, cached locally.

One compile = one static model: static models as they are, dynamic ones specialized to the feed's
shapes first with :func:`onnxwrapper.kernel.specialize` (as the ``qnn`` backend does), so the
service receives a fully static graph. The compile job gets ``input_specs`` = every input's shape and
dtype in ONNX order (qai-hub 0.56: shapes must be tuples of Python ``int``, dtypes one of
``float32, float16, int32, int8, uint8, int16, uint16, int64, bool``; the dict order is the target
model's input order) and ``options`` = ``--target_runtime <runtime>`` (+ ``--truncate_64bit_io``
when an input or output is int64: QNN targets have no 64-bit IO) + the user's ``compile_options``.

The compiled target model is stored in the compile cache (:class:`onnxwrapper.kernel.ArtifactCache`)
under a key of the model's content hash (external data included), the device, its OS, the target
runtime, the options and the input specs; the entry holds the downloaded target file and, as
metadata, the AI Hub model id, the job URL and the target's IO specs (``Model.input_spec`` /
``output_spec``). A later session with the same key compiles nothing: it reuses the AI Hub model
(``get_model``) or, when this account cannot see it any more, uploads the cached target file.
A model with external data is uploaded as a directory holding one ``.onnx`` and one ``.data``
(qai-hub 0.56 uploads a ``.onnx`` path alone, without its external data).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx.external_data_helper import load_external_data_for_model

from onnxwrapper.backends import _foreign_io as fio
from onnxwrapper.backends.aihub._jobs import HubCalls
from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel import ArtifactCache, input_dims, make_key, ort_type_to_numpy, shapes_note, specialize

__all__ = ["HUB_DTYPES", "CompiledTarget", "TargetCompiler"]

_log = logging.getLogger("onnxwrapper.aihub")
#: numpy dtype → qai-hub dtype name (``api_utils._STR_TO_TETRA_TYPE`` keys)
HUB_DTYPES = {np.dtype(t): t for t in ("float32", "float16", "int32", "int8", "uint8", "int16", "uint16", "int64")}
HUB_DTYPES[np.dtype(np.bool_)] = "bool"


@dataclass(frozen=True)
class CompiledTarget:
    """One compiled target model.

    Attributes:
        key: its compile-cache key. shapes: the specialization (``None`` for static models).
        path: the target file in the cache. model: the AI Hub ``Model`` inference jobs run.
        inputs / outputs: the target's tensors (:class:`~onnxwrapper.backends._foreign_io.NativeTensor`)
            in the target's order. job_url: the compile job's page. origin: ``"compiled"`` or ``"cache"``.
        seconds: wall time of compiling (or looking up) it.
    """

    key: str
    shapes: dict | None
    path: str
    model: Any
    inputs: tuple
    outputs: tuple
    job_url: str | None
    origin: str
    seconds: float


def _natives(rows, where: str) -> tuple:
    tensors = []
    for name, dtype, shape in rows:
        if shape is None:
            raise ArtifactError(f"The compiled model ({where}) reports no shape for tensor '{name}'.", path=where)
        tensors.append(fio.NativeTensor(str(name), tuple(int(d) for d in shape), fio.native_type(str(dtype), where)))
    return tuple(tensors)


def _spec_rows(io_spec) -> list:
    """``Model.input_spec``/``output_spec`` (``{graph or None: [TensorSpec]}``, one graph) → rows."""
    graphs = list(io_spec.values())
    if len(graphs) != 1:
        raise ArtifactError(f"The compiled model has {len(graphs)} graphs; the aihub backend runs single-graph models.")
    return [[t.name, t.dtype, list(t.shape) if t.shape is not None else None] for t in graphs[0]]


class TargetCompiler:
    """Compiles (or finds in the cache) the target model of one shape specialization.

    Args:
        calls: the session's :class:`HubCalls`. device: the AI Hub ``Device`` selected at open.
        config: the backend's validated options. source: the :class:`~onnxwrapper.kernel.ModelSource`.
        proto: its ``onnx.ModelProto`` (external data not loaded). inputs / outputs: the ONNX IO
            (``NodeArgInfo``). label: model name for messages and AI Hub job names.
    """

    def __init__(self, *, calls: HubCalls, device, config: dict, source, proto, inputs, outputs, label: str) -> None:
        self.calls, self.device, self.config = calls, device, config
        self.source, self.proto, self.inputs, self.label = source, proto, list(inputs), label
        self.model_hash = source.content_hash()
        self.external = bool(source.external_data_files())
        wide = [a.name for a in list(inputs) + list(outputs) if ort_type_to_numpy(a.type) == np.int64]
        self.options = " ".join(["--target_runtime", config["target_runtime"]]
                                + (["--truncate_64bit_io"] if wide else []) + ([config["compile_options"]]
                                                                              if config["compile_options"] else []))
        self.cache = ArtifactCache(config["cache_dir"])

    def input_specs(self, model) -> dict:
        """``{input name: (shape tuple of int, dtype name)}`` in ONNX input order.

        Raises:
            ArtifactError: an input dtype AI Hub does not accept.
        """
        dims = input_dims(model)
        specs = {}
        for arg in self.inputs:
            dtype = ort_type_to_numpy(arg.type)
            name = HUB_DTYPES.get(np.dtype(dtype)) if dtype is not None and dtype != np.object_ else None
            if name is None:
                raise ArtifactError(f"Input '{arg.name}' has type {arg.type}; AI Hub compile jobs accept "
                                    f"{', '.join(sorted(set(HUB_DTYPES.values())))}.", path=self.source.path)
            specs[arg.name] = (tuple(int(d) for d in dims[arg.name]), name)
        return specs

    def compile(self, shapes: dict | None) -> CompiledTarget:
        """The target for ``shapes`` (``None``: the static model), compiled on a cache miss.

        Raises:
            RemoteJobError: the upload or compile job failed or timed out (job URL and message).
            BackendUnavailableError: the token was rejected. ArtifactError: unusable target.
        """
        start = time.perf_counter()
        model = specialize(self.proto, shapes) if shapes else self.proto
        specs = self.input_specs(model)
        cfg = self.config
        key = make_key({"kind": "aihub-target", "v": 1, "model": self.model_hash, "device": cfg["device"],
                        "device_os": cfg["device_os"], "options": self.options,
                        "input_specs": {n: [list(s), d] for n, (s, d) in specs.items()}})
        built: dict = {}
        entry = self.cache.get_or_create(key, lambda tmp: self._build(tmp, model, specs, shapes, built))
        meta = entry.meta
        hub_model = built.get("model") or self._hub_model(entry, meta)
        where = meta.get("job_url") or entry.path
        target = CompiledTarget(key, dict(shapes) if shapes else None, entry.file(meta["file"]), hub_model,
                                _natives(meta["inputs"], where), _natives(meta["outputs"], where), meta.get("job_url"),
                                "cache" if entry.hit else "compiled", time.perf_counter() - start)
        _log.info("onnxwrapper aihub: %s%s for %s ready (%s, %.1f s)", self.label,
                  f" [{shapes_note(shapes)}]" if shapes else "", cfg["device"], target.origin, target.seconds)
        return target

    def _write_model(self, model, work: str) -> str:
        path = os.path.join(work, "model.onnx")
        if self.external:
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            load_external_data_for_model(copy, self.source.directory)
            onnx.save_model(copy, path, save_as_external_data=True, all_tensors_to_one_file=True,
                            location="model.data")
            return work  # a directory with one .onnx and one .data: the client zips and uploads it
        data = self.source.read_bytes() if model is self.proto else model.SerializeToString()
        with open(path, "wb") as f:
            f.write(data)
        return path

    def _build(self, tmp: str, model, specs: dict, shapes, built: dict) -> dict:
        client, calls = self.calls.hub.client, self.calls
        user_error = calls.hub.module.UserError
        name = self.label + (f" [{shapes_note(shapes)}]" if shapes else "")
        work = tempfile.mkdtemp(prefix="onnxwrapper-aihub-")
        try:
            upload = self._write_model(model, work)
            try:
                source = calls.call("upload the model", client.upload_model, upload, name=self.label)
                job = calls.call("create the compile job", client.submit_compile_job, source, self.device, name=name,
                                 input_specs=specs, options=self.options, retry=False)
            except user_error as exc:
                raise calls.refused(exc, f"compile {name}") from exc
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _log.info("onnxwrapper aihub: compile job %s for %s on %s: %s", job.job_id, name, self.config["device"],
                  job.url)
        calls.finish(job, "compile")
        target = job.get_target_model()
        path = calls.call("download the compiled model", job.download_target_model, os.path.join(tmp, "target"),
                          quiet=True)
        if target is None or not path or not os.path.isfile(path):
            raise ArtifactError(f"AI Hub compile job {job.job_id} succeeded but gave no target model ({job.url}).")
        built["model"] = target
        return {"file": os.path.relpath(path, tmp).replace(os.sep, "/"), "model_id": target.model_id,
                "job_id": job.job_id, "job_url": job.url, "device": self.config["device"], "options": self.options,
                "inputs": _spec_rows(target.input_spec), "outputs": _spec_rows(target.output_spec)}

    def _hub_model(self, entry, meta: dict):
        """The AI Hub model of a cached target: the same model id, else the cached file uploaded."""
        client, calls = self.calls.hub.client, self.calls
        user_error = calls.hub.module.UserError
        try:
            return calls.call("find the compiled model", client.get_model, meta["model_id"])
        except user_error:  # not visible to this account (any more): upload the compiled target itself
            _log.info("onnxwrapper aihub: AI Hub model %s not found; uploading the cached target", meta["model_id"])
        try:
            return calls.call("upload the compiled model", client.upload_model, entry.file(meta["file"]),
                              name=self.label)
        except user_error as exc:
            raise calls.refused(exc, "upload the compiled model") from exc
