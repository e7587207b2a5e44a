"""``compile_model``: the QNN compile of a session, as a public function writing files (``aipc compile``).

It runs the same pipeline as a session (:mod:`onnxwrapper.backends.qnn._pipeline`: settings,
specialization, compile, operator patches, ``strict``), into a temporary folder next to the
output, then moves the EPContext model and its context binary into place; optionally it exports
one DLC per QNN partition (:func:`~onnxwrapper.backends.qnn._compile.dump_dlc`).
"""

from __future__ import annotations

import glob
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Mapping

import onnx

from onnxwrapper.backends.qnn._backend import QnnBackend
from onnxwrapper.backends.qnn._compile import dump_dlc
from onnxwrapper.backends.qnn._pipeline import EpContextFromOnnx, FolderStore
from onnxwrapper.backends.qnn._runtime import qnn_versions, user_qnn_ep_options
from onnxwrapper.backends.qnn._session import check_partition
from onnxwrapper.backends.qnn._settings import qnn_setup
from onnxwrapper.backends.qnn._stitch import compile_repaired
from onnxwrapper.errors import ArtifactError, BackendOptionError, BackendUnavailableError
from onnxwrapper.kernel import ModelSource, dynamic_inputs, shapes_note, specialize

__all__ = ["CompileResult", "compile_model"]

_log = logging.getLogger("onnxwrapper.qnn")


@dataclass(frozen=True)
class CompileResult:
    """What :func:`compile_model` wrote.

    Attributes:
        ctx_path: the EPContext ONNX model. bin_path: its QNN context binary (``None`` if embedded).
        ctx_bytes / bin_bytes: file sizes in bytes. partition: per-node EP assignment
            (:class:`~onnxwrapper.kernel._partition.PartitionReport`, of the patched model when patched).
        seconds: compile wall time (s; the patched recompile included). ep_options: QNN EP options used.
        input_shapes: specialization shapes (``None`` for static models).
        versions: onnxruntime / onnxruntime_qnn / QNN SDK versions.
        patches: operator patches applied (``PatchRecord.to_dict()`` dicts; ``()`` when none).
        dlc_paths: DLCs written into ``dlc_dir`` (``()`` without ``dlc_dir``). dlc_seconds: their time (s).
    """

    ctx_path: str
    bin_path: str | None
    ctx_bytes: int
    bin_bytes: int
    partition: Any
    seconds: float
    ep_options: Mapping[str, str]
    input_shapes: Mapping[str, tuple] | None
    versions: Mapping[str, str]
    patches: tuple = ()
    dlc_paths: tuple = ()
    dlc_seconds: float = 0.0

    def __repr__(self) -> str:
        shapes = f" at {self.input_shapes}" if self.input_shapes else ""
        summary = self.partition.summary() if hasattr(self.partition, "summary") else self.partition
        return (f"<CompileResult {self.ctx_path} ({self.ctx_bytes + self.bin_bytes} bytes with its binary){shapes} "
                f"in {self.seconds:.1f} s: {summary}>")


def compile_model(model, output_path, backend_options: Mapping[str, Any] | None = None,
                  input_shapes: Mapping[str, Any] | None = None, *, sess_options=None,
                  overwrite: bool = False, dlc_dir=None) -> CompileResult:
    """Compile ``model`` for the QNN HTP into an EPContext model + QNN context binary.

    The same compile as a session's: with the ``patches`` option on (default), nodes the QNN EP
    leaves on CPU that a registered patch can rewrite are patched and the model recompiled (see
    :mod:`onnxwrapper.backends.qnn._patching`); ``strict`` is judged after patching.

    Args:
        model: path (``str``/``os.PathLike``), serialized bytes, or ``onnx.ModelProto``.
        output_path: the EPContext model to write, e.g. ``"m_ctx.onnx"`` (next to ``m.onnx`` it
            is then used by sessions automatically); the binary is ``<output stem>_qnn.bin``.
        backend_options: the ``qnn`` backend options (target, precision, patches, strict, …;
            cache options unused).
        input_shapes: ``{input name: shape}`` for inputs with dynamic dims (required for them).
        sess_options: ``onnxruntime.SessionOptions`` to copy (optimization level, configs).
        overwrite: replace existing output files, including ``*.dlc`` files in ``dlc_dir``
            (default: raise ArtifactError).
        dlc_dir: folder to write one DLC per QNN partition of the compiled (patched) model into,
            through QNN's IR backend (QNN EP options ``dump_qnn_ir_dlc``, ``dump_qnn_ir_dlc_dir``,
            ``qnn_ir_backend_path`` = onnxruntime-qnn's libQnnIr; a second session, see
            :func:`onnxwrapper.backends.qnn._compile.dump_dlc`). Default ``None``: no DLC.

    Returns:
        :class:`CompileResult`.

    Raises:
        BackendUnavailableError, BackendOptionError, BackendConfigConflictError (another QNN
        configuration is active in this process), PartitionError (QNN took no node, or
        ``strict`` and some node is not on QNN after patching), ArtifactError (output exists; no
        IR backend library for ``dlc_dir``), ORT's classes for a bad model.
    """
    availability = QnnBackend.probe()
    if not availability.available:
        raise BackendUnavailableError(f"Backend 'qnn' is not available: {availability.reason}.", backend="qnn",
                                      reason=availability.reason, install_hint=availability.install_hint)
    if (backend_options or {}).get("repairs") is not None:  # a repair recipe, baked in (docs/repair.md)
        return compile_repaired(compile_model, model, output_path, backend_options, input_shapes,
                                sess_options=sess_options, overwrite=overwrite, dlc_dir=dlc_dir)
    config = QnnBackend.validate_options(backend_options or {})
    for key in ("graph", "onnx"):
        if config.get(key) is not None:
            raise BackendOptionError(f"compile_model compiles ONNX models; option '{key}' only applies to raw QNN "
                                     f"context binaries opened as sessions.", backend="qnn")
    source = (ModelSource(None, model.SerializeToString()) if isinstance(model, onnx.ModelProto)
              else ModelSource.from_arg(model))
    label = source.path or "<model bytes>"
    setup = qnn_setup(config, user_qnn_ep_options(sess_options), source, user_so=sess_options, kwargs={},
                      label=label, real_npu=availability.real_npu)
    proto = source.load_proto()
    dynamic = dynamic_inputs(proto)
    shapes = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    missing = [name for name in dynamic if name not in shapes]
    if missing:
        raise BackendOptionError(f"Inputs {missing} have dynamic dims {[dynamic[n] for n in missing]}: pass their "
                                 f"static shapes in input_shapes to compile a specialization.", backend="qnn")
    if shapes:
        proto = specialize(proto, shapes)
        model_input = proto.SerializeToString()
    else:
        model_input = source.path if source.path is not None else source.read_bytes()
    output_path = os.path.abspath(os.fspath(output_path))
    folder, ctx_name = os.path.split(output_path)
    bin_target = os.path.join(folder, os.path.splitext(ctx_name)[0] + "_qnn.bin")
    dlc_dir = os.path.abspath(os.fspath(dlc_dir)) if dlc_dir is not None else None
    old_dlcs = sorted(glob.glob(os.path.join(glob.escape(dlc_dir), "*.dlc"))) if dlc_dir else []
    for existing in [output_path, bin_target] + old_dlcs[:1]:
        if os.path.exists(existing) and not overwrite:
            raise ArtifactError(f"{existing} exists already; pass overwrite=True to replace it.", path=existing)
    setup = setup.register()
    settings = setup.settings
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".onnxwrapper-compile-") as tmp:
        start = time.perf_counter()
        compiled = EpContextFromOnnx(FolderStore(setup, proto, tmp, ctx_name))(
            model_input, proto, shapes or None, shapes_note(shapes) if shapes else "")
        seconds = time.perf_counter() - start
        report = compiled.report
        check_partition(report, strict=settings.strict, label=label, warn_key=f"compile:{source.content_hash()}",
                        stacklevel=2)
        dlc_paths, dlc_seconds = [], 0.0
        if dlc_dir:
            start = time.perf_counter()
            written = dump_dlc(compiled.meta["model_input"], os.path.join(tmp, "dlc"), sess_options,
                               settings.ep_options, setup.devices, external_data_dir=source.directory)
            os.makedirs(dlc_dir, exist_ok=True)
            for old in old_dlcs:
                os.remove(old)
            for path in written:
                dlc_paths.append(os.path.join(dlc_dir, os.path.basename(path)))
                os.replace(path, dlc_paths[-1])
            dlc_seconds = time.perf_counter() - start
        os.replace(compiled.ctx_path, output_path)
        bin_path = None
        if compiled.meta.get("bin"):
            bin_path = os.path.join(folder, compiled.meta["bin"])
            os.replace(os.path.join(compiled.directory, compiled.meta["bin"]), bin_path)
    _log.info("onnxwrapper qnn: compiled %s → %s in %.2f s (%s)", label, output_path, seconds, report.summary())
    return CompileResult(output_path, bin_path, os.path.getsize(output_path),
                         os.path.getsize(bin_path) if bin_path else 0, report, seconds,
                         dict(settings.ep_options), shapes or None, qnn_versions(), tuple(compiled.records),
                         tuple(dlc_paths), dlc_seconds)
