"""Backend ``qai``: QNN context binaries (and DLCs) run by qai_appbuilder ≥ 2.51 on Windows on Snapdragon.

Contract (facts: qai_appbuilder 2.51.40, its source and its behaviour; see docs/backends/qai.md):

* **Artifact.** The model path is either the compiled artifact (``.bin`` context binary or
  ``.dlc``) or the ONNX model it was compiled from; then the artifact is
  ``backend_options["artifact"]`` or the first file found next to the ONNX model in
  :func:`artifact_candidates` order. ``<stem>.bin`` comes last and is skipped when ``<stem>.cpp``
  sits next to it (that pair is qnn-onnx-converter output: weights, not a context binary). A
  missing artifact is an :class:`~onnxwrapper.errors.ArtifactError`, never an attempt to load the
  ``.onnx`` natively.
* **Metadata** (names, order, dtypes, shapes) comes from the ONNX model — the one given, the one in
  ``backend_options["onnx"]``, or ``<stem>.onnx`` next to a given artifact. Without any ONNX model
  the compiled graph's own IO is reported. Matching, layout checks and dtype modes:
  :mod:`onnxwrapper.backends._foreign_io`.
* **One ``QNNContext`` per session** under a unique model name (the native model map never
  overwrites a name). Input/output data types are ``NATIVE`` whenever the graph's IO types
  allow and ``FLOAT`` otherwise, per direction; when the first load guessed wrong it is reloaded
  once with the right types. FLOAT is refused for ``sfp8/16/32``/``ufp32`` tensors
  (:data:`NO_FLOAT_CONVERSION`). ``QNNConfig.Config`` is called with keywords (2.51 signature). A
  binary that fails to load (2.51 does not raise; its getters return ``[]``) is an ArtifactError.
* **Perf profile** (``burst`` by default) is set once per session with ``SetPerfProfileGlobal``
  after the model is loaded and released when the last session using it closes, before its
  context is released (``RelPerfProfileGlobal`` needs a loaded model); ``Inference`` is
  always called with ``PerfProfile.DEFAULT``. The profile is process-wide: a session asking for a
  different one while another is active raises BackendConfigConflictError.
* **Runs** are validated before the native call (the native layer reads the byte length it
  expects whatever it is given), serialized process-wide (qai_appbuilder forbids concurrent
  ``Inference`` on two contexts), and ``[]`` from the native layer raises
  :class:`~onnxwrapper.errors.BackendRunError`. A session used in a forked child raises.
* **Availability.** Only Windows on Snapdragon (win_arm64) — or an aarch64 Linux where
  ``qai_appbuilder`` imports — with the ≥ 2.51 API. The package is resolved by one documented
  seam, :meth:`QaiBackend.load_sdk`: a subclass may bind another implementation of the same API
  and is registered as the ``qai`` backend plugin through the entry-point group
  ``onnxwrapper.backends``, like any backend (what it reports — availability, provider names —
  it adapts by overriding the public :meth:`~QaiBackend.probe` / :meth:`~QaiBackend.open`).
* Never selected by ``auto`` (it needs a precompiled artifact); choose it with ``backend="qai"``.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import uuid
from dataclasses import dataclass
from typing import Any

import importlib_metadata

from onnxwrapper.backends import _foreign_io as fio
from onnxwrapper.backends._artifact_files import companion_onnx, companion_option, find_artifact, name_map_option
from onnxwrapper.backends._qai_session import _PERF, QaiSession
from onnxwrapper.backends.base import Availability, Backend, OptionSpec, SessionRequest
from onnxwrapper.backends.qnn import read_binary_info
from onnxwrapper.errors import ArtifactError, BackendError, BackendUnavailableError
from onnxwrapper.kernel import HostArchitecture, ModelMetadataInfo, ModelSource, host_architecture

__all__ = ["QaiBackend", "QaiSdk", "QaiSession", "artifact_candidates"]

_NEED = "needs Windows on Snapdragon (win_arm64) with qai-appbuilder ≥ 2.51"
_HINT = "pip install 'onnxwrapper[qai]'"
_RUNTIMES = {"htp": "HTP", "cpu": "CPU", "gpu": "GPU"}
_LOG_LEVELS = {"error": "ERROR", "warn": "WARN", "info": "INFO", "verbose": "VERBOSE", "debug": "DEBUG"}
_ORT_SEVERITY = {0: "verbose", 1: "info", 2: "warn", 3: "error", 4: "error"}
_ARTIFACT_SUFFIXES = (".htp.bin", ".cpu.bin", ".gpu.bin", ".dll.bin", ".so.bin", "_ctx_qnn.bin", ".dlc.bin",
                      ".dlc", ".bin")
#: native types qai_appbuilder 2.51's FLOAT mode cannot convert: IOTensor.cpp copyFromFloatToNative /
#: convertToFloat fall to "Datatype not supported yet!" for them, so every Inference returns [].
NO_FLOAT_CONVERSION = frozenset({"sfp8", "sfp16", "sfp32", "ufp32"})


def _graph(value):
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "" or (
            isinstance(value, int) and value < 0):
        raise ValueError("expected a graph name (str) or a graph index (int ≥ 0)")
    return value


def _path(value):
    return os.fspath(value)


_MODES = ("auto", "native", "float")


def artifact_candidates(stem: str, runtime: str) -> list[str]:
    """File names tried next to ``<stem>.onnx``, in order (runtime ``htp``/``cpu``/``gpu``).

    Runtime-tagged binaries first (``det.htp.bin``, ``det.onnx.htp.bin``), then
    qnn-context-binary-generator names (``det.dll.bin`` / ``det.so.bin``, ``libdet.…``), ORT's
    EPContext binary (``det_ctx_qnn.bin``), DLCs (``det.dlc``; qai_appbuilder itself prefers
    ``det.dlc.bin`` next to it on HTP), and ``det.bin`` last (easily a converter weight file).
    """
    lib = "dll" if sys.platform == "win32" else "so"
    return [f"{stem}.{runtime}.bin", f"{stem}.onnx.{runtime}.bin", f"{stem}.{lib}.bin", f"{stem}.onnx.{lib}.bin",
            f"lib{stem}.{lib}.bin", f"{stem}_ctx_qnn.bin", f"{stem}.dlc", f"{stem}.onnx.dlc", f"{stem}.dlc.bin",
            f"{stem}.bin"]


@dataclass(frozen=True)
class QaiSdk:
    """The qai_appbuilder package a :class:`QaiBackend` drives (see :meth:`QaiBackend.load_sdk`).

    Attributes:
        module: the imported package with qai_appbuilder 2.51's API (``QNNConfig``, ``QNNContext``,
            ``PerfProfile``, ``DataType``, ``Runtime``, ``LogLevel``, ``ProfilingLevel``).
        version: its version string.
    """

    module: Any
    version: str


def _version(module) -> str:
    try:
        return importlib_metadata.version("qai-appbuilder")
    except importlib_metadata.PackageNotFoundError:  # not installed as a distribution
        return str(getattr(module, "__version__", "unknown"))


def _api_problem(module, version: str) -> str | None:
    try:
        params = list(inspect.signature(module.QNNConfig.Config).parameters)
        module.QNNContext, module.PerfProfile, module.DataType  # noqa: B018 - presence check
    except (AttributeError, TypeError, ValueError) as exc:
        return f"qai_appbuilder {version} lacks the expected API ({exc}); {_NEED}"
    if not params or params[0] != "runtime":
        return (f"qai_appbuilder {version} has the pre-2.51 API (QNNConfig.Config({', '.join(params)})); "
                f"upgrade: pip install -U 'qai-appbuilder>=2.51'")
    return None


def _host_supported(host: HostArchitecture) -> bool:
    """qai_appbuilder is a native extension loaded into this process: the *process* must be ARM64
    (an x64 Python emulated on ARM64 Windows cannot load it, whatever ``platform.machine()`` says)."""
    return host.process_arch == "arm64" and host.system in ("Windows", "Linux")


def _host_text(host: HostArchitecture) -> str:
    note = host.note()
    return f"this host: {host.system}, process {host.process_arch}, OS {host.os_arch}" + (f"; {note}" if note else "")


class QaiBackend(Backend):
    """qai_appbuilder (QNN HTP/CPU/GPU) on Windows on Snapdragon; see the module docstring.

    Options (``backend_options``):
        artifact: path of the ``.bin``/``.dlc`` to run (default: resolved next to the ONNX model).
        onnx: path of the ONNX model the artifact was compiled from, when the model path is the artifact.
        graph: graph name (str) or index (int) inside a multi-graph binary. Default 0, checked
            against the ONNX model's IO names.
        runtime: ``"htp"`` (default), ``"cpu"`` or ``"gpu"`` (qai_appbuilder ``Runtime``).
        perf_profile: ``"burst"`` (default), ``"high_performance"`` or ``"default"`` (leave as is).
        input_mode / output_mode: ``"auto"`` (default), ``"native"`` or ``"float"`` data exchange.
        name_map: ``{ONNX tensor name: compiled tensor name}`` for renamed tensors.
        device_id: 0 = NSP (default), 1–3 = HPASS. core_ids: e.g. ``"0,1"`` (HTP cores 0–3).
        log_level: ``error``/``warn``/``info``/``verbose``/``debug``; default from
            ``SessionOptions.log_severity_level`` (ORT 0 → verbose … 3, 4 → error; unset → error).
    """

    name = "qai"
    aliases = ("qai_appbuilder", "qai-appbuilder", "appbuilder")
    execution_providers = ()
    npu = True
    options = {
        "artifact": OptionSpec("artifact", "path of the compiled .bin/.dlc to run", None, _path),
        "onnx": OptionSpec("onnx", "ONNX model the artifact was compiled from (False: none, use the compiled IO)",
                           None, companion_option),
        "graph": OptionSpec("graph", "graph name or index in a multi-graph context binary", None, _graph),
        "runtime": OptionSpec("runtime", "QNN backend: htp, cpu or gpu", "htp", lambda v: str(v).lower(),
                              tuple(_RUNTIMES)),
        "perf_profile": OptionSpec("perf_profile", "HTP perf profile set once per session", "burst",
                                   lambda v: str(v).lower(), ("burst", "high_performance", "default")),
        "input_mode": OptionSpec("input_mode", "input exchange: auto, native or float", "auto", str, _MODES),
        "output_mode": OptionSpec("output_mode", "output exchange: auto, native or float", "auto", str, _MODES),
        "name_map": OptionSpec("name_map", "{ONNX name: compiled tensor name}", None, name_map_option),
        "device_id": OptionSpec("device_id", "0 = NSP, 1-3 = HPASS", 0, int, (0, 1, 2, 3)),
        "core_ids": OptionSpec("core_ids", "comma-separated HTP core ids 0-3", None, str),
        "log_level": OptionSpec("log_level", "QNN log level", None, lambda v: str(v).lower(), tuple(_LOG_LEVELS)),
    }

    @classmethod
    def load_sdk(cls) -> QaiSdk:
        """The qai_appbuilder this backend drives: the injection seam of this backend.

        The default imports ``qai_appbuilder`` on a supported host (Windows on Snapdragon, or an
        aarch64 Linux). Override it in a subclass to bind another implementation of the same API
        (a build of qai_appbuilder installed elsewhere, an emulation of it) and register that
        subclass as the ``qai`` backend through the entry-point group ``onnxwrapper.backends``.

        Raises:
            BackendUnavailableError: unsupported host, or the package cannot be imported (with
                ``reason`` and ``install_hint``).
        """
        arch = host_architecture()
        host = _host_text(arch)
        if not _host_supported(arch):
            reason = f"{_NEED} ({host})"
            raise BackendUnavailableError(reason, backend="qai", reason=reason, install_hint=_HINT)
        try:
            module = importlib.import_module("qai_appbuilder")
        except ImportError as exc:
            reason = f"{_NEED}; qai_appbuilder is not importable ({exc})"
            raise BackendUnavailableError(reason, backend="qai", reason=reason, install_hint=_HINT) from exc
        return QaiSdk(module, _version(module))

    @classmethod
    def probe(cls) -> Availability:
        """Available when :meth:`load_sdk` gives a package with the ≥ 2.51 API. On real hardware
        ``real_npu`` is True but ``auto_selectable`` is False: it runs precompiled artifacts only,
        so it is used when asked for by name (``backend="qai"``)."""
        try:
            sdk = cls.load_sdk()
        except BackendUnavailableError as exc:
            return Availability(False, reason=exc.reason, install_hint=exc.install_hint)
        problem = _api_problem(sdk.module, sdk.version)
        if problem:
            return Availability(False, reason=problem, install_hint="pip install -U 'qai-appbuilder>=2.51'")
        host = _host_text(host_architecture())
        return Availability(True, reason=f"qai_appbuilder {sdk.version} ({host}); runs precompiled "
                                         f"artifacts, selected only with backend='qai'",
                            real_npu=True, auto_selectable=False, details={"qai_appbuilder": sdk.version})

    # -- open --------------------------------------------------------------------------------------
    def open(self, request: SessionRequest) -> QaiSession:
        """Load the artifact into one ``QNNContext`` and plan the IO (see the module docstring).

        Raises:
            NoSuchFile / InvalidProtobuf / TypeError: as ORT, for a bad ONNX model argument.
            ArtifactError: no artifact, unloadable artifact, IO that does not match the ONNX model.
            BackendError: qai_appbuilder rejected the configuration. BackendConfigConflictError:
            another session holds a different perf profile.
        """
        sdk = self.load_sdk()
        module = sdk.module
        cfg = self.config
        artifact, model = self._resolve(ModelSource.from_arg(request.path_or_bytes))
        runtime = getattr(module.Runtime, _RUNTIMES[cfg["runtime"]])
        level = cfg["log_level"] or _ORT_SEVERITY.get(getattr(request.sess_options, "log_severity_level", -1),
                                                      "error")
        try:
            module.QNNConfig.Config(runtime=runtime, log_level=getattr(module.LogLevel, _LOG_LEVELS[level]),
                                    profiling_level=module.ProfilingLevel.OFF, log_path="None")
        except (ValueError, OSError) as exc:
            raise BackendError(f"qai_appbuilder rejected runtime '{cfg['runtime']}': {exc}", backend="qai") from exc
        modes = ["native" if cfg[k] == "auto" else cfg[k] for k in ("input_mode", "output_mode")]
        ctx = self._load(module, artifact, *modes)
        try:
            self._check_loaded(ctx, artifact)
            graph_index = self._graph_index(ctx, artifact)
            natives = [self._native_io(ctx, graph_index, d, artifact) for d in ("Input", "Output")]
            if model is not None:
                inputs, outputs, meta, unknown = fio.onnx_io(model)
            else:
                inputs, outputs = fio.node_args_from_native(natives[0]), fio.node_args_from_native(natives[1])
                meta, unknown = ModelMetadataInfo(graph_name=str(ctx.getGraphName(graph_index))), set()
            plans = [fio.plan_io(args, nat, direction=d, mode=cfg[f"{d}_mode"], name_map=cfg["name_map"],
                                 where=artifact, unknown_shapes=unknown, float_unsupported=NO_FLOAT_CONVERSION)
                     for args, nat, d in zip((inputs, outputs), natives, ("input", "output"))]
            if [p.mode for p in plans] != modes:
                ctx.release()
                ctx = None
                ctx = self._load(module, artifact, plans[0].mode, plans[1].mode)
            holds = _PERF.acquire(module, cfg["perf_profile"])
        except BaseException:
            if ctx is not None:
                ctx.release()
            raise
        kind = "QNNDlc" if artifact.endswith(".dlc") else "QNNContextBinary"
        provider = f"{kind}(qai_appbuilder:{_RUNTIMES[cfg['runtime']]})"
        options = {"artifact": artifact, "graph_index": str(graph_index), "runtime": cfg["runtime"],
                   "perf_profile": cfg["perf_profile"], "input_data_type": plans[0].mode,
                   "output_data_type": plans[1].mode, "qai_appbuilder": sdk.version}
        return QaiSession(module=module, ctx=ctx, graph_index=graph_index, holds_profile=holds, inputs=inputs,
                          outputs=outputs, modelmeta=meta, in_plan=plans[0], out_plan=plans[1],
                          providers=[provider], provider_options={provider: options},
                          sess_options=request.sess_options)

    def _resolve(self, src: ModelSource):
        """(absolute artifact path, companion ``onnx.ModelProto`` or None)."""
        cfg = self.config
        explicit = cfg["artifact"]
        if src.path is not None and src.path.endswith((".bin", ".dlc")):
            if explicit is not None:
                raise ArtifactError("The model path is already an artifact; drop backend_options['artifact'] or "
                                    "pass the ONNX model as the model path.", path=src.path)
            artifact = src.path
            if not os.path.isfile(artifact):
                raise ArtifactError(f"Artifact {artifact} does not exist.", path=artifact)
            onnx_path = companion_onnx(artifact, _ARTIFACT_SUFFIXES, cfg["onnx"])
            model = ModelSource(onnx_path, None).load_proto() if onnx_path else None
            return os.path.abspath(artifact), model
        if cfg["onnx"] is not None:
            raise ArtifactError("backend_options['onnx'] names the companion ONNX model of an artifact given as "
                                "the model path; here the model path is already the ONNX model.", path=src.path)
        model = src.load_proto()  # ORT's errors for a missing/corrupt ONNX model
        if explicit is not None:
            if not os.path.isfile(explicit) or not explicit.endswith((".bin", ".dlc")):
                raise ArtifactError(f"backend_options['artifact'] = {explicit!r} is not an existing .bin or .dlc "
                                    f"file.", path=explicit)
            return os.path.abspath(explicit), model
        if src.path is None:
            raise ArtifactError("A model given as bytes needs backend_options={'artifact': <.bin or .dlc path>}: "
                                "qai_appbuilder loads compiled artifacts from files.")
        names = artifact_candidates(src.stem, cfg["runtime"])
        found, tried = find_artifact(src.directory, names, refuse_if={f"{src.stem}.bin": f"{src.stem}.cpp"})
        if found is None:
            raise ArtifactError(
                f"No compiled artifact for {src.path}. Tried, in order: {', '.join(tried)}. Compile the model to "
                f"a QNN context binary (e.g. with backend='qnn' and context caching, or qnn-context-binary-"
                f"generator) and put it next to the ONNX model, or pass backend_options={{'artifact': path}}.",
                path=src.path)
        return os.path.abspath(found), model

    def _load(self, module, artifact: str, in_mode: str, out_mode: str):
        data_type = {"native": module.DataType.NATIVE, "float": module.DataType.FLOAT}
        stem = os.path.basename(artifact).split(".")[0]
        kwargs = {"model_name": f"onnxwrapper_{stem}_{uuid.uuid4().hex[:12]}", "model_path": artifact,
                  "input_data_type": data_type[in_mode], "output_data_type": data_type[out_mode],
                  "deviceID": self.config["device_id"]}
        if self.config["core_ids"]:
            kwargs["coreIdsStr"] = self.config["core_ids"]
        try:
            return module.QNNContext(**kwargs)
        except (ValueError, RuntimeError) as exc:
            raise ArtifactError(f"qai_appbuilder could not load {artifact}: {exc}", path=artifact) from exc

    def _check_loaded(self, ctx, artifact: str) -> None:
        """ArtifactError when the binary did not load. qai_appbuilder 2.51's constructor ignores a
        failed ``ModelInitialize`` (no exception); every getter then returns an empty result and
        logs "model not found or released" (qai-appbuilder ``LibAppBuilder.cpp``)."""
        if not self._call(ctx.getInputName, 0, artifact) and not self._call(ctx.getGraphName, 0, artifact):
            raise ArtifactError(
                f"qai_appbuilder could not load {artifact}: it reports no graph and no tensors for it (qai_appbuilder "
                f"does not raise for a binary that fails to load). Check that the file is a QNN context binary or "
                f"DLC compiled for this device's HTP architecture with a QAIRT version not newer than the runtime's; "
                f"backend_options={{'log_level': 'verbose'}} shows QNN's own log.", path=artifact)

    def _graph_index(self, ctx, artifact: str) -> int:
        wanted = self.config["graph"]
        if wanted is None or isinstance(wanted, int):
            return wanted or 0
        catalog = _graph_names(artifact)
        if catalog is not None:
            if wanted not in catalog:
                raise ArtifactError(f"Graph '{wanted}' is not in {artifact}; it holds {catalog}.", path=artifact)
            return catalog.index(wanted)
        first = self._call(ctx.getGraphName, 0, artifact)
        if first == wanted:
            return 0
        raise ArtifactError(
            f"Graph 0 of {artifact} is '{first}', not '{wanted}'. qai_appbuilder cannot list a binary's graphs, "
            f"so select other graphs by index: backend_options={{'graph': 1}} (`aipc inspect` lists them).",
            path=artifact)

    @staticmethod
    def _call(getter, graph_index: int, artifact: str):
        try:
            return getter(graph_index)
        except (RuntimeError, ValueError, IndexError, TypeError) as exc:
            raise ArtifactError(f"qai_appbuilder could not describe graph {graph_index} of {artifact} ({exc}). "
                                f"Check the graph index and that the binary loads on this device.",
                                path=artifact) from exc

    def _native_io(self, ctx, graph_index: int, which: str, artifact: str) -> list:
        names = self._call(getattr(ctx, f"get{which}Name"), graph_index, artifact)
        shapes = self._call(getattr(ctx, f"get{which}Shapes"), graph_index, artifact)
        types = self._call(getattr(ctx, f"get{which}DataType"), graph_index, artifact)
        if not names and graph_index:
            raise ArtifactError(f"{artifact} has no graph {graph_index}: qai_appbuilder reports no {which.lower()}s "
                                f"for that index (it logs 'invalid graphIdx'). Select an existing graph with "
                                f"backend_options={{'graph': ...}} (`aipc inspect` lists them).", path=artifact)
        if not names or not (len(names) == len(shapes) == len(types)):
            raise ArtifactError(f"qai_appbuilder reported inconsistent {which.lower()}s for graph {graph_index} of "
                                f"{artifact} (names {names}, shapes {shapes}, types {types}).", path=artifact)
        return [fio.NativeTensor(str(n), tuple(int(d) for d in s), fio.native_type(str(t), artifact))
                for n, s, t in zip(names, shapes, types)]


def _graph_names(artifact: str) -> list[str] | None:
    """Graph names read from the binary itself with the raw context-binary reader
    (:func:`onnxwrapper.backends.qnn.read_binary_info`, needs QNN's System library); ``None`` when
    it cannot read this file."""
    try:
        return [g.name for g in read_binary_info(artifact).graphs]
    except (OSError, ValueError, ArtifactError):
        return None  # no System library or not readable: fall back to graph 0's name
