"""``compile_model``: the QNN compile of a session, as a public function writing files (``aipc compile``).

It runs the same pipeline as a session (:mod:`onnxwrapper.backends.qnn.pipeline._pipeline`: settings,
specialization, compile, operator patches, ``strict``), into a temporary folder next to the
output, then moves the EPContext model and its context binary into place; optionally it exports
one DLC per QNN partition (:func:`~onnxwrapper.backends.qnn.compile._compile.dump_dlc`). Both run in a
compile worker process (:mod:`onnxwrapper.backends.qnn.workers._workers`).

A compile that fails goes through the same recovery ladder as a session's
(:mod:`onnxwrapper.backends.qnn.recovery`), but what it writes is loaded by sessions of the model, so
it keeps the model's input shapes: no batch split. What a rescued compile writes:

* **options** — one EPContext model + ``<stem>_qnn.bin``, compiled with the extra QNN option;
* **graph split** — one *stitched* EPContext model, as for a repair recipe with CPU subgraphs: an
  ``EPContext`` node per NPU part, each with its own context binary (``<stem>_qnn.bin``, then
  ``<stem>_part<n>_qnn.bin``), and the nodes that fail even alone as ordinary ONNX nodes run by
  ORT's CPU EP (listed in the partition with the reason). ``strict=True`` refuses those with
  ``CompileFailedError`` (``.rung == "graph split"``), as sessions do;
* **no part compiles** — ``PartitionError`` (nothing to deploy).

The steps are in ``CompileResult.partition.recovery``; the memo and the graph split's parts go to
the compile cache (``cache_dir``), as for sessions, so a second compile replays what worked.
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
from onnxwrapper.backends.qnn.compile import make_record
from onnxwrapper.backends.qnn.model import (Signature, check_feed_cost, control_inputs, control_value, model_key,
                                            specialize_for_qnn)
from onnxwrapper.backends.qnn.pipeline import FolderStore, compile_repaired, compile_request, copy_epcontext
from onnxwrapper.backends.qnn.recovery import recovering_step
from onnxwrapper.backends.qnn.platform import qnn_versions, user_qnn_ep_options
from onnxwrapper.backends.qnn.session import check_partition
from onnxwrapper.backends.qnn.settings import qnn_setup
from onnxwrapper.backends.qnn.workers import default_pool
from onnxwrapper.errors import ArtifactError, BackendOptionError, BackendUnavailableError
from onnxwrapper.kernel import ModelSource, __version__, dynamic_inputs, input_dims, replace_files

__all__ = ["ARTIFACT_KEEPS_SHAPES", "CompileResult", "compile_model"]

_log = logging.getLogger("onnxwrapper.qnn")
#: why compile_model's recovery ladder does not batch-split: the artifact is loaded by sessions of the model
ARTIFACT_KEEPS_SHAPES = "an EPContext artifact keeps the model's input shapes"


@dataclass(frozen=True)
class CompileResult:
    """What :func:`compile_model` wrote.

    Attributes:
        ctx_path: the EPContext ONNX model. bin_path: its QNN context binary (``None`` if embedded).
        ctx_bytes / bin_bytes: file sizes in bytes. partition: per-node EP assignment
            (:class:`~onnxwrapper.kernel.session._partition.PartitionReport`, of the patched model when patched).
        seconds: compile wall time (s; the patched recompile included). ep_options: QNN EP options used.
        input_shapes: specialization shapes (``None`` for static models).
        versions: onnxruntime / onnxruntime_qnn / QNN SDK versions.
        patches: operator patches applied (``PatchRecord.to_dict()`` dicts; ``()`` when none).
        dlc_paths: DLCs written into ``dlc_dir`` (``()`` without ``dlc_dir``). dlc_seconds: their time (s).
        bin_paths: every context binary written, ``bin_path`` first (several for a model compiled as
            several QNN contexts: a recovery ladder's graph split, a repair recipe's CPU subgraphs).
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
    bin_paths: tuple = ()

    def __repr__(self) -> str:
        shapes = f" at {self.input_shapes}" if self.input_shapes else ""
        summary = self.partition.summary() if hasattr(self.partition, "summary") else self.partition
        return (f"<CompileResult {self.ctx_path} ({self.ctx_bytes + self.bin_bytes} bytes with its binary){shapes} "
                f"in {self.seconds:.1f} s: {summary}>")


def compile_model(model, output_path, backend_options: Mapping[str, Any] | None = None,
                  input_shapes: Mapping[str, Any] | None = None, *, sess_options=None,
                  overwrite: bool = False, dlc_dir=None, input_values: Mapping[str, Any] | None = None,
                  source_model=None) -> CompileResult:
    """Compile ``model`` for the QNN HTP into an EPContext model + QNN context binary.

    The same compile as a session's, in a compile worker process: with the ``patches`` option on
    (default), nodes the QNN EP leaves on CPU that a registered patch can rewrite are patched and the
    model recompiled (see :mod:`onnxwrapper.backends.qnn.pipeline._patching`); ``strict`` is judged after
    patching; ``If`` nodes decided by the shapes and ``input_values`` are folded first
    (:mod:`onnxwrapper.backends.qnn.model._specialize`). The ctx model carries a provenance record
    (:mod:`onnxwrapper.backends.qnn.compile._provenance`): sessions of the source model use it from next to
    the model only while the model, the QNN options and the shapes are the ones recorded. A compile
    that fails goes through the recovery ladder (module docstring: what a rescued compile writes).

    Args:
        model: path (``str``/``os.PathLike``), serialized bytes, or ``onnx.ModelProto``.
        output_path: the EPContext model to write, e.g. ``"m_ctx.onnx"`` (next to ``m.onnx`` it
            is then used by sessions automatically); the binary is ``<output stem>_qnn.bin`` (a
            graph split adds ``<output stem>_part<n>_qnn.bin``).
        backend_options: the ``qnn`` backend options (target, precision, patches, strict,
            compile_timeout, compile_memory_mb, …; ``cache_dir`` holds what the recovery ladder
            remembers and the parts of a graph split).
        input_shapes: ``{input name: shape}`` for inputs with dynamic dims (required for them).
        sess_options: ``onnxruntime.SessionOptions`` to copy (optimization level, configs).
        overwrite: replace existing output files, including ``*.dlc`` files in ``dlc_dir``
            (default: raise ArtifactError). The EPContext model and its binary are replaced all or
            nothing: when one is in use by another process (Windows cannot replace a file a running
            app has open or mapped) ArtifactError is raised and both are left as they were.
        dlc_dir: folder to write one DLC per QNN partition of the compiled (patched) model into,
            through QNN's IR backend (QNN EP options ``dump_qnn_ir_dlc``, ``dump_qnn_ir_dlc_dir``,
            ``qnn_ir_backend_path`` = onnxruntime-qnn's libQnnIr; a second session, see
            :func:`onnxwrapper.backends.qnn.compile._compile.dump_dlc`). Default ``None``: no DLC.
        input_values: ``{input name: value}`` for the model's control inputs (rank-0 int/bool inputs
            that decide an ``If``, e.g. silero-vad's ``sr``; required for them).
        source_model: the model file the artifact stands for, when ``model`` is a rewritten copy of
            it (static shapes, patches, QDQ: ``aipc compile``); its content hash is recorded instead
            of ``model``'s. Default: ``model`` itself.

    Returns:
        :class:`CompileResult`.

    Raises:
        BackendUnavailableError, BackendOptionError (missing shapes or control values),
        PartitionError (QNN took no node, or ``strict`` and some node is not on QNN after
        patching), CompileFailedError (``strict`` and the recovery ladder would run nodes on the
        CPU), BackendOptionError (also ``dlc_dir`` for a model compiled as several contexts),
        BackendCapabilityError (shapes beyond the HTP compiler; fp32 graphs the
        simulator cannot finalize), BackendCompileError (the compiler process died), ArtifactError
        (output exists; no IR backend library for ``dlc_dir``), ORT's classes for a bad model.
    """
    availability = QnnBackend.probe()
    if not availability.available:
        raise BackendUnavailableError(f"Backend 'qnn' is not available: {availability.reason}.", backend="qnn",
                                      reason=availability.reason, install_hint=availability.install_hint)
    if (backend_options or {}).get("repairs") is not None:  # a repair recipe, baked in (docs/repair.md)
        given = model if isinstance(model, (str, os.PathLike)) else None
        return compile_repaired(compile_model, model, output_path, backend_options, input_shapes,
                                sess_options=sess_options, overwrite=overwrite, dlc_dir=dlc_dir,
                                source_model=source_model if source_model is not None else given,
                                real_npu=availability.real_npu)
    config = QnnBackend.validate_options(backend_options or {})
    for key in ("graph", "onnx"):
        if config.get(key) is not None:
            raise BackendOptionError(f"compile_model compiles ONNX models; option '{key}' only applies to raw QNN "
                                     f"context binaries opened as sessions.", backend="qnn")
    source = (ModelSource(None, model.SerializeToString()) if isinstance(model, onnx.ModelProto)
              else ModelSource.from_arg(model))
    label = source.path or (os.fspath(source_model) if source_model is not None else "<model bytes>")
    setup = qnn_setup(config, user_qnn_ep_options(sess_options), source, user_so=sess_options, kwargs={},
                      label=label, real_npu=availability.real_npu)
    original = source.load_proto()
    dynamic = dynamic_inputs(original)
    control = control_inputs(original)
    shapes = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    values = {k: control_value(v) for k, v in (input_values or {}).items()}
    missing = [name for name in dynamic if name not in shapes]
    if missing:
        raise BackendOptionError(f"Inputs {missing} have dynamic dims {[dynamic[n] for n in missing]}: pass their "
                                 f"static shapes in input_shapes to compile a specialization.", backend="qnn")
    unbound = [name for name in control if name not in values]
    if unbound:
        raise BackendOptionError(f"Inputs {unbound} decide which branch of an If runs: pass their values in "
                                 f"input_values (e.g. {{'{unbound[0]}': 16000}}) to compile that branch.",
                                 backend="qnn")
    signature = Signature(shapes, {k: v for k, v in values.items() if k in control})
    check_feed_cost(original, dict({n: d for n, d in input_dims(original).items()
                                    if d is not None and n not in dynamic and n not in control}, **shapes),
                    setup.settings, label)
    proto, folded = specialize_for_qnn(original, signature, None, external_data_dir=source.directory)
    model_input = proto.SerializeToString() if (shapes or folded or signature.values) else (
        source.path if source.path is not None else source.read_bytes())
    record = _record(source, source_model, setup, signature)
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
        store = FolderStore(setup, proto, tmp, ctx_name, record=record, model_hash=model_key(source, sess_options))
        compiled = recovering_step(store, batch_split=ARTIFACT_KEEPS_SHAPES)(  # the recovery ladder, as sessions
            model_input, proto, shapes or None, signature.note(), dict(signature.values) or None)
        seconds = time.perf_counter() - start
        report = compiled.report
        check_partition(report, strict=settings.strict, label=label, warn_key=f"compile:{source.content_hash()}",
                        stacklevel=2)
        if "bins" in compiled.meta:  # rescued by a graph split: one stitched EPContext model, several binaries
            if dlc_dir:
                raise BackendOptionError(f"{label} compiles only as several QNN contexts "
                                         f"({report.recovery_summary()}); DLC export of such a model is not "
                                         f"supported. Export without --dlc.", backend="qnn")
            moves = _stitched_moves(compiled.ctx_path, tmp, output_path, record, overwrite)
        else:
            moves = [(compiled.ctx_path, output_path)]
            if compiled.meta.get("bin"):
                moves.append((os.path.join(compiled.directory, compiled.meta["bin"]),
                              os.path.join(folder, compiled.meta["bin"])))
        bin_paths = [target for _src, target in moves[1:]]
        bin_path = bin_paths[0] if bin_paths else None
        replace_files(moves)  # all or nothing: an output in use elsewhere (Windows) is an ArtifactError
        dlc_paths, dlc_seconds = [], 0.0
        if dlc_dir:
            start = time.perf_counter()
            request = compile_request(setup, proto, compiled.meta["model_input"], os.path.join(tmp, "dlc"),
                                      record=None, kind="dlc")
            written = default_pool().run(request)["dlc"]
            os.makedirs(dlc_dir, exist_ok=True)
            for old in old_dlcs:
                os.remove(old)
            for path in written:
                dlc_paths.append(os.path.join(dlc_dir, os.path.basename(path)))
                os.replace(path, dlc_paths[-1])
            dlc_seconds = time.perf_counter() - start
    _log.info("onnxwrapper qnn: compiled %s → %s in %.2f s (%s)", label, output_path, seconds, report.summary())
    return CompileResult(output_path, bin_path, os.path.getsize(output_path),
                         sum(os.path.getsize(p) for p in bin_paths), report, seconds,
                         dict(settings.ep_options), shapes or None, qnn_versions(), tuple(compiled.records),
                         tuple(dlc_paths), dlc_seconds, tuple(bin_paths))


def _stitched_moves(ctx_path: str, tmp: str, output_path: str, record, overwrite: bool) -> list:
    """The stitched EPContext model of a graph split (in the compile cache) copied into ``tmp`` under
    the output's names — ``<stem>_qnn.bin`` for the first context binary, ``<stem>_part<n>_qnn.bin``
    for the n-th after it — stamped with ``record``; returns the ``(copy, target)`` moves, ctx first.

    Raises:
        ArtifactError: a target binary exists and ``overwrite`` is False.
    """
    folder, ctx_name = os.path.split(output_path)
    stem = os.path.splitext(ctx_name)[0]
    out = os.path.join(tmp, "stitched")
    os.mkdir(out)
    bins = copy_epcontext(ctx_path, out, ctx_name, lambda n: f"{stem}_qnn.bin" if n == 0 else f"{stem}_part{n}_qnn.bin",
                          record)
    for name in bins[1:]:
        if os.path.exists(os.path.join(folder, name)) and not overwrite:
            raise ArtifactError(f"{os.path.join(folder, name)} exists already; pass overwrite=True to replace it.",
                                path=os.path.join(folder, name))
    return [(os.path.join(out, name), os.path.join(folder, name)) for name in [ctx_name] + bins]


def _record(source, source_model, setup, signature) -> dict:
    """The provenance record: the hash of ``source_model`` (or of the model compiled), and the shapes of
    that model's dynamic inputs as compiled."""
    origin = ModelSource.from_arg(source_model) if source_model is not None else source
    shapes = dict(signature.shapes)
    if source_model is not None:
        original = origin.load_proto()
        compiled_dims = input_dims(source.load_proto())
        shapes = {name: tuple(compiled_dims[name]) for name in dynamic_inputs(original)
                  if compiled_dims.get(name) and all(isinstance(d, int) for d in compiled_dims[name])}
    name = os.path.basename(origin.path) if origin.path is not None else None
    return make_record(source_sha256=origin.content_hash(), source_name=name,
                       qnn_options=setup.settings.compile_options(), shapes=shapes or None,
                       values=dict(signature.values) or None, versions=dict(qnn_versions(), onnxwrapper=__version__))
