"""Backend ``qnn`` (alias ``qairt``): ONNX models on the Qualcomm Hexagon NPU through ONNX Runtime's QNN EP.

What runs where: onnxruntime-qnn's plugin execution provider compiles the ONNX graph (or the parts
it supports) into a QNN context binary for the HTP; unsupported nodes stay on ORT's CPU EP and are
reported (:meth:`partition`, a :class:`~onnxwrapper.kernel._partition.PartialOffloadWarning`), or refused
with ``strict=True``. On Windows on Snapdragon the HTP is the real NPU; on x86-64 Linux it is
Qualcomm's HTP *simulator* (real QNN graphs, device numerics, not device speed).

Session life cycle (:meth:`QnnBackend.open`):

1. options → :class:`~onnxwrapper.backends.qnn._settings.QnnSettings` (default target on a host
   without NPU: Snapdragon X Elite, ``soc_model=60``, so numerics emulate the device's FP16);
2. the process-global QNN configuration is pinned (a conflicting one raises
   :class:`~onnxwrapper.errors.BackendConfigConflictError`);
3. static models: a precompiled artifact next to the model (``<stem>_ctx.onnx`` or a raw context
   binary, see :mod:`onnxwrapper.backends.qnn._artifacts`) wins, else the compile cache
   (:mod:`onnxwrapper.kernel._cache`) returns the EPContext model, compiling it once on a miss;
   dynamic models: a precompiled ``<stem>_ctx*.onnx`` for the feed's shapes, else compiled per
   feed shape at ``run`` (:mod:`onnxwrapper.backends.qnn._session`); a raw QNN context binary
   given as the model path (``*.bin``) is wrapped and run (:mod:`onnxwrapper.backends.qnn._binary`).
   Compiles apply operator patches to nodes QNN leaves on CPU unless ``patches=False``
   (:mod:`onnxwrapper.backends.qnn._patching`).

:func:`compile_model` is the same compile as a public function (used by ``aipc compile``), with
an optional DLC export (``dlc_dir``).
"""

from __future__ import annotations

import glob
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

from onnxwrapper.backends.qnn._binary import BinaryInfo, GraphInfo, TensorInfo, read_binary_info
from onnxwrapper.backends.qnn._op_support import QNN_OP_TYPES, qnn_rejection_reason
from onnxwrapper.backends.qnn._patching import convert_patches
from onnxwrapper.backends.qnn._targets import (PERFORMANCE_MODES, PROFILING_LEVELS, TARGETS, convert_bool,
                                               convert_choice, convert_htp_arch, convert_positive_int,
                                               convert_provider_options, convert_soc_model, convert_target)
from onnxwrapper.backends.base import Availability, Backend, BackendSession, OptionSpec, SessionRequest
from onnxwrapper.errors import ArtifactError, BackendOptionError, BackendUnavailableError

__all__ = ["QnnBackend", "CompileResult", "compile_model", "QNN_OP_TYPES", "qnn_rejection_reason", "read_binary_info",
           "BinaryInfo", "GraphInfo", "TensorInfo"]

_log = logging.getLogger("onnxwrapper.qnn")
_SRC = "QNN SDK QnnTypes.h Qnn_SocModel_t; QNN 'Supported Snapdragon devices'"


def convert_graph(value: Any) -> int | str:
    """Option converter for ``graph``: a graph index (int ≥ 0) or a non-empty graph name."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "" or (
            isinstance(value, int) and value < 0):
        raise ValueError("expected a graph name (str) or a graph index (int >= 0)")
    return value


def _convert_companion(value: Any):
    from onnxwrapper.backends._foreign_io import companion_option

    return companion_option(value)


def _convert_cache_dir(value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise TypeError("expected a directory path (str or os.PathLike)")
    return os.path.abspath(os.path.expanduser(os.fspath(value)))


_DOCS = {
    "target": f"Named SoC to compile for: {', '.join(TARGETS)} (aliases such as 'x-elite', '8gen3', 'sm8650' "
              f"accepted); sets soc_model/htp_arch ({_SRC}). Default without a real NPU: 'snapdragon-x-elite' (FP16 "
              f"emulation); on a device: the device itself.",
    "soc_model": "Raw QNN soc_model (int, Qnn_SocModel_t, e.g. 60 = SC8380XP). On the simulator >= 36 switches FP16 "
                 "emulation on (measured).",
    "htp_arch": "Raw Hexagon arch: 68, 69, 73, 75, 79, 81 (or 'v73'); default from the target.",
    "precision": "'fp16' (default: the HTP's float math) or 'fp32' (x86-64 simulator only, no soc_model: an fp32 "
                 "reference, not a device mode).",
    "htp_performance_mode": f"HTP power/performance mode: {', '.join(PERFORMANCE_MODES)} (ORT QNN EP docs; no "
                            f"effect in the simulator).",
    "strict": "True: any node outside the QNN EP raises PartitionError (default False: warn once).",
    "profiling": f"QNN profiling level: {', '.join(PROFILING_LEVELS)}; writes a CSV (QNN EP profiling_file_path, "
                 f"default ./onnxwrapper_qnn_profile_<model>.csv).",
    "cache_dir": "Compile-cache directory (default $ONNXWRAPPER_CACHE_DIR, else the platform user cache dir, e.g. "
                 "~/.cache/onnxwrapper).",
    "max_specializations": "Live static-shape specializations per session for dynamic models (LRU; evicted ones "
                           "stay in the disk cache). Default 8.",
    "provider_options": "Raw QNN EP options, validated before the EP sees them (qnn_context_priority, device_id, "
                        "vtcm_mb, htp_graph_finalization_optimization_mode, profiling_level, ...; see "
                        "docs/backends/qnn.md).",
    "patches": "Operator patches for nodes the QNN EP leaves on CPU: True (default: every registered patch, "
               "onnxwrapper.patches.list_patches()), False (none), or a list of patch names to disable, e.g. "
               "['einsum']. The patched model is compiled instead and the partition report lists the patches.",
    "graph": "Graph name (str) or index (int) inside a raw QNN context binary (.bin model path, or one found next "
             "to the model); default: the only graph, else the one matching the ONNX model's IO names.",
    "onnx": "ONNX model describing a raw context binary given as the model path (names, order, dtypes, metadata); "
            "default <stem>.onnx next to the .bin when present; False: use the binary's own tensor names.",
}

_OPTIONS = {name: OptionSpec(name, _DOCS[name], default, convert) for name, default, convert in (
    ("target", None, convert_target),
    ("soc_model", None, convert_soc_model),
    ("htp_arch", None, convert_htp_arch),
    ("precision", "fp16", convert_choice("fp16", "fp32")),
    ("htp_performance_mode", None, convert_choice(*PERFORMANCE_MODES)),
    ("strict", False, convert_bool),
    ("profiling", "off", convert_choice(*PROFILING_LEVELS)),
    ("cache_dir", None, _convert_cache_dir),
    ("max_specializations", 8, convert_positive_int),
    ("provider_options", None, convert_provider_options),
    ("patches", True, convert_patches),
    ("graph", None, convert_graph),
    ("onnx", None, _convert_companion),
)}


class QnnBackend(Backend):
    """ONNX Runtime's QNN execution provider on the Hexagon HTP (NPU or x86-64 simulator).

    Args:
        options: ``backend_options`` (see :attr:`options` and docs/backends/qnn.md).

    Raises:
        BackendOptionError: unknown option (closest valid one suggested) or invalid value.
    """

    name = "qnn"
    aliases = ("qairt",)
    execution_providers = ("QNNExecutionProvider",)
    options = _OPTIONS
    npu = True
    process_global_config = True

    _probe_result: Availability | None = None
    _probe_lock = threading.Lock()

    @classmethod
    def probe(cls) -> Availability:
        """Whether onnxruntime-qnn is importable, and what its HTP is (cached; quiet; no registration on x86-64).

        On x86-64 the QNN ``OrtEpDevice`` reports device type CPU: the HTP is the simulator
        (``simulated=True``, ``real_npu=False``). Elsewhere the plugin is registered and its device
        type read: ``real_npu`` only for ``OrtHardwareDeviceType.NPU``.
        """
        with cls._probe_lock:
            if cls._probe_result is None:
                cls._probe_result = cls._probe()
            return cls._probe_result

    @classmethod
    def _probe(cls) -> Availability:
        from onnxwrapper.backends.qnn._runtime import INSTALL_HINT, ensure_registered, is_x86_host, qnn_versions

        try:
            import onnxruntime_qnn
            versions = qnn_versions()
        except ImportError as exc:
            return Availability(False, reason=f"onnxruntime-qnn is not installed ({exc})", install_hint=INSTALL_HINT)
        library = onnxruntime_qnn.get_library_path()
        if not os.path.exists(library):
            return Availability(False, reason=f"onnxruntime-qnn's EP library {os.path.basename(library)} is missing",
                                install_hint=INSTALL_HINT, details=versions)
        if is_x86_host():
            return Availability(True, reason=f"QNN HTP simulator on x86-64 (QNN SDK {versions['qnn_sdk']}): device "
                                f"numerics, not device speed", real_npu=False, simulated=True,
                                details={**versions, "device_type": "CPU (simulator)"})
        try:
            devices = ensure_registered()
        except BackendUnavailableError as exc:
            return Availability(False, reason=exc.reason or str(exc), install_hint=exc.install_hint, details=versions)
        import onnxruntime

        device = devices[0].device
        real = device.type == onnxruntime.OrtHardwareDeviceType.NPU
        kind = "Hexagon NPU" if real else f"QNN device of type {device.type.name}"
        return Availability(True, reason=f"{kind} ({device.vendor}), QNN SDK {versions['qnn_sdk']}", real_npu=real,
                            simulated=not real, details={**versions, "device_type": device.type.name,
                                                         "device_vendor": str(device.vendor)})

    def open(self, request: SessionRequest) -> BackendSession:
        """Prepare a QNN session: settings, config pin, artifact (precompiled / cached / compiled).

        Raises:
            ORT's exception (class and message) for a bad model argument or file;
            BackendUnavailableError (no onnxruntime-qnn, EP creation failed), BackendOptionError,
            BackendConfigConflictError, PartitionError (strict, or QNN took no node),
            ArtifactError (stale precompiled artifact, cache problems).
        """
        from onnxwrapper.backends.qnn._open import open_session

        availability = self.probe()
        if not availability.available:
            raise BackendUnavailableError(
                f"Backend 'qnn' is not available: {availability.reason}. To fix: {availability.install_hint}.",
                backend="qnn", reason=availability.reason, install_hint=availability.install_hint)
        return open_session(self.config, request, availability)


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
    import onnx

    from onnxwrapper.kernel._model_source import ModelSource
    from onnxwrapper.kernel._partition import PartitionReport
    from onnxwrapper.kernel._shapes import dynamic_inputs, shapes_note, specialize
    from onnxwrapper.backends.qnn._compile import dump_dlc, generate_epcontext
    from onnxwrapper.backends.qnn._patching import compile_with_patches
    from onnxwrapper.backends.qnn._runtime import claim_config, ensure_registered, qnn_versions, user_qnn_ep_options
    from onnxwrapper.backends.qnn._session import check_partition
    from onnxwrapper.backends.qnn._settings import resolve_settings

    availability = QnnBackend.probe()
    if not availability.available:
        raise BackendUnavailableError(f"Backend 'qnn' is not available: {availability.reason}.", backend="qnn",
                                      reason=availability.reason, install_hint=availability.install_hint)
    config = QnnBackend.validate_options(backend_options or {})
    for key in ("graph", "onnx"):
        if config.get(key) is not None:
            raise BackendOptionError(f"compile_model compiles ONNX models; option '{key}' only applies to raw QNN "
                                     f"context binaries opened as sessions.", backend="qnn")
    settings = resolve_settings(config, user_qnn_ep_options(sess_options), real_npu=availability.real_npu)
    source = (ModelSource(None, model.SerializeToString()) if isinstance(model, onnx.ModelProto)
              else ModelSource.from_arg(model))
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
    devices = ensure_registered()
    label = source.path or "<model bytes>"
    claim_config(settings.process_config(), label)
    os.makedirs(folder, exist_ok=True)
    note = shapes_note(shapes) if shapes else ""
    with tempfile.TemporaryDirectory(dir=folder, prefix=".onnxwrapper-compile-") as tmp:
        def compile_fn(model_in, records):
            directory = os.path.join(tmp, str(len(os.listdir(tmp))))
            os.mkdir(directory)
            data = model_in() if callable(model_in) else model_in
            meta = generate_epcontext(data, directory, sess_options, settings.ep_options, devices, original=proto,
                                      external_data_dir=source.directory, ctx_name=ctx_name, note=note)
            return (directory, meta, data), PartitionReport.from_dict(meta["partition"])

        start = time.perf_counter()
        (directory, meta, compiled_input), report, records = compile_with_patches(
            compile_fn, model_input, proto, settings.disabled_patches(), label=label)
        seconds = time.perf_counter() - start
        check_partition(report, strict=settings.strict, label=label, warn_key=f"compile:{source.content_hash()}",
                        stacklevel=2)
        dlc_paths, dlc_seconds = [], 0.0
        if dlc_dir:
            start = time.perf_counter()
            written = dump_dlc(compiled_input, os.path.join(tmp, "dlc"), sess_options, settings.ep_options, devices,
                               external_data_dir=source.directory)
            os.makedirs(dlc_dir, exist_ok=True)
            for old in old_dlcs:
                os.remove(old)
            for path in written:
                dlc_paths.append(os.path.join(dlc_dir, os.path.basename(path)))
                os.replace(path, dlc_paths[-1])
            dlc_seconds = time.perf_counter() - start
        os.replace(os.path.join(directory, ctx_name), output_path)
        bin_path = None
        if meta.get("bin"):
            bin_path = os.path.join(folder, meta["bin"])
            os.replace(os.path.join(directory, meta["bin"]), bin_path)
    _log.info("onnxwrapper qnn: compiled %s → %s in %.2f s (%s)", label, output_path, seconds, report.summary())
    return CompileResult(output_path, bin_path, os.path.getsize(output_path),
                         os.path.getsize(bin_path) if bin_path else 0, report, seconds,
                         dict(settings.ep_options), shapes or None, qnn_versions(), tuple(records), tuple(dlc_paths),
                         dlc_seconds)
