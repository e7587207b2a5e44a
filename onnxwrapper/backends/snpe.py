"""Backend ``snpe``: SNPE DLCs run by ``snpe-net-run`` from the QAIRT SDK, or by qai_appbuilder.

Contract (facts: QAIRT SDK docs "Tools" for snpe-net-run / snpe-dlc-info; see docs/backends/snpe.md):

* **SDK.** ``backend_options["sdk_root"]``, else ``$QAIRT_SDK_ROOT``, else ``$SNPE_ROOT``: the folder
  holding ``bin/<arch>/snpe-net-run`` (``<arch>`` for this host from :func:`host_arch_dirs`), else
  ``snpe-net-run`` on ``PATH``. The child process gets ``<root>/lib/<arch>`` prepended to its
  library path (and DSP skels on ``ADSP_LIBRARY_PATH``); onnxwrapper's own environment is not changed.
* **Artifact.** The model path is the ``.dlc`` or the ONNX model it was converted from; then the DLC
  is ``backend_options["artifact"]`` or ``<stem>.dlc`` / ``<stem>.onnx.dlc`` next to it. Metadata
  comes from the ONNX model (given, ``backend_options["onnx"]``, or ``<stem>.onnx`` next to the DLC),
  else from the DLC.
* **IO check at open.** ``snpe-dlc-info -i <dlc> -s <csv>`` lists the DLC's input/output names,
  dims and types; names, layouts (never guessed) and the exchange mode are planned exactly as for
  ``qai`` (:mod:`onnxwrapper.backends._foreign_io`): ``native`` → raw files in the DLC's types with
  ``--use_native_input_files`` / ``--use_native_output_files``, which snpe-net-run's help says
  "Must be used with --userbuffer_xxx": ``--userbuffer_auto`` (user buffers with the types
  detected from the DLC) is passed with them; ``float`` → float32 raw files that SNPE converts
  with the DLC's quantization encodings.
* **Run.** Each ``run`` writes one raw file per input into a private temporary folder, one input
  list line ``name:=file …``, runs ``snpe-net-run --container … --input_list … --output_dir …``
  with ``--use_dsp``/``--use_gpu``/``--use_aip`` (nothing for ``cpu``, SNPE's default) and
  ``--perf_profile``, and reads every requested output from ``Result_0`` of that single run:
  ``<name>.raw``, and in native output mode first ``<name>_native.raw`` (how snpe-net-run names
  native output files is not documented; qnn-net-run, built from the same sample app, writes
  ``<name>_native.raw`` for tensors that are not float32). No CPU fallback flag is ever passed. A non-zero exit, a timeout or a missing/short output
  file raises :class:`~onnxwrapper.errors.BackendRunError` with the tool's message.
  Every run starts a process that loads the DLC: expect its init time per call.
* **engine.** ``"net-run"``, ``"qai_appbuilder"`` (the DLC goes through the ``qai`` backend's
  ``QNNContext`` DLC loading) or ``"auto"`` (net-run when an SDK is found, else qai_appbuilder).
* **Injection.** The SDK is located by one documented seam, :meth:`SnpeBackend.locate_sdk`, and
  the ``qai_appbuilder`` engine is :meth:`SnpeBackend.qai_backend`: a subclass may bind other
  ones and is registered as the ``snpe`` backend plugin through the entry-point group
  ``onnxwrapper.backends``, like any backend. Never selected by ``auto``.
"""

from __future__ import annotations

import csv
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

from onnxwrapper.backends import _adsp_path, _foreign_io as fio
from onnxwrapper.backends._artifact_files import companion_onnx, companion_option, find_artifact, name_map_option
from onnxwrapper.backends._foreign_session import ForeignSession
from onnxwrapper.backends.base import Availability, Backend, OptionSpec, SessionRequest
from onnxwrapper.backends.qai import QaiBackend
from onnxwrapper.errors import ArtifactError, BackendRunError, BackendUnavailableError
from onnxwrapper.kernel import ModelMetadataInfo, ModelSource

__all__ = ["Sdk", "SnpeBackend", "SnpeSession", "find_sdk", "host_arch_dirs", "parse_dlc_info"]

_RUNTIME_FLAGS = {"cpu": [], "gpu": ["--use_gpu"], "dsp": ["--use_dsp"], "aip": ["--use_aip"]}
_PERF = ("burst", "high_performance", "sustained_high_performance", "balanced", "default", "power_saver",
         "low_power_saver", "high_power_saver", "low_balanced", "extreme_power_saver", "system_settings")
_MODES = ("auto", "native", "float")
_INSTALL = ("install the Qualcomm AI Runtime (QAIRT) SDK and set QAIRT_SDK_ROOT to its root (the folder "
            "holding bin/<arch>/snpe-net-run), or install qai-appbuilder on Windows on Snapdragon")


def host_arch_dirs() -> list[str]:
    """SDK ``bin/``/``lib/`` folder names for this host, most specific first (QAIRT 2.x layout). The
    SDK's tools run as processes of their own, natively: the *OS's* architecture decides
    (:func:`onnxwrapper.kernel.host_architecture`), also under an x64 Python emulated on ARM64."""
    arm = _adsp_path.native_host().process_arch == "arm64"
    if sys.platform == "win32":
        return ["aarch64-windows-msvc", "arm64x-windows-msvc"] if arm else ["x86_64-windows-msvc"]
    if arm:
        return ["aarch64-ubuntu-gcc9.4", "aarch64-oe-linux-gcc11.2", "aarch64-oe-linux-gcc9.3",
                "aarch64-oe-linux-gcc8.2"]
    return ["x86_64-linux-clang"]


@dataclass(frozen=True)
class Sdk:
    """A located SDK: ``root``, ``arch`` folder, tool paths, ``lib_dir`` (may not exist)."""

    root: str
    arch: str
    net_run: str
    dlc_info: str | None
    lib_dir: str

    def env(self) -> dict:
        """This process's environment, ``lib_dir`` on the library path, DSP skels on ADSP_LIBRARY_PATH (ARM64)."""
        env = dict(os.environ)
        var = "PATH" if sys.platform == "win32" else "LD_LIBRARY_PATH"
        if os.path.isdir(self.lib_dir):
            env[var] = os.pathsep.join(p for p in (self.lib_dir, env.get(var, "")) if p)
        _adsp_path.add_sdk_skels(env, self.root)
        return env


def _tool(bin_dir: str, name: str) -> str | None:
    path = os.path.join(bin_dir, name + (".exe" if sys.platform == "win32" else ""))
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def find_sdk(root: str | None = None) -> tuple[Sdk | None, str]:
    """Locate ``snpe-net-run``; return ``(Sdk, "")`` or ``(None, what was looked at)``."""
    looked = []
    roots = [(r, src) for r, src in ((root, "backend_options['sdk_root']"),
                                     (os.environ.get("QAIRT_SDK_ROOT"), "QAIRT_SDK_ROOT"),
                                     (os.environ.get("SNPE_ROOT"), "SNPE_ROOT")) if r]
    for base, source in roots:
        names = host_arch_dirs()
        prefixes = {n.split("-")[0] + "-" + n.split("-")[1] for n in names}
        extra = sorted(os.path.basename(d) for d in glob.glob(os.path.join(base, "bin", "*"))
                       if any(os.path.basename(d).startswith(p) for p in prefixes))
        for arch in dict.fromkeys(names + extra):
            bin_dir = os.path.join(base, "bin", arch)
            net_run = _tool(bin_dir, "snpe-net-run")
            if net_run:
                return Sdk(os.path.abspath(base), arch, net_run, _tool(bin_dir, "snpe-dlc-info"),
                           os.path.join(base, "lib", arch)), ""
        looked.append(f"{source}={base} (no bin/{'|'.join(names)}/snpe-net-run)")
    on_path = shutil.which("snpe-net-run")
    if on_path:
        bin_dir = os.path.dirname(os.path.abspath(on_path))
        base = os.path.dirname(os.path.dirname(bin_dir))
        return Sdk(base, os.path.basename(bin_dir), on_path, _tool(bin_dir, "snpe-dlc-info"),
                   os.path.join(base, "lib", os.path.basename(bin_dir))), ""
    looked.append("snpe-net-run not on PATH" if roots else "QAIRT_SDK_ROOT/SNPE_ROOT unset, snpe-net-run not on PATH")
    return None, "; ".join(looked)


def parse_dlc_info(text: str, where: str | None = None) -> tuple[list, list]:
    """Input and output tensors from ``snpe-dlc-info`` output (CSV from ``-s`` or a ``|`` table).

    Sections start at a row whose first cell is ``Input Name`` / ``Output Name`` and use the
    ``Dimensions`` and ``Type`` columns; dims may be ``1,3,8,8`` or ``1x3x8x8``.

    Raises:
        ArtifactError: no input or output section, or an unparsable row.
    """
    sections: dict[str, list] = {}
    current, cols = None, []
    for line in text.splitlines():
        s = line.strip()
        if not s or set(s) <= set("-|+= "):
            continue
        cells = ([c.strip() for c in s[1:-1].split("|")] if s.startswith("|") and s.endswith("|")
                 else [c.strip() for c in next(csv.reader([s]))])
        if cells[0] in ("Input Name", "Output Name"):
            current, cols = cells[0].split()[0].lower(), cells
            sections[current] = []
            continue
        if current is None or len(cells) < len(cols) or "Dimensions" not in cols or "Type" not in cols:
            current = None
            continue
        try:
            dims = tuple(int(d) for d in re.split(r"[,x\s]+", cells[cols.index("Dimensions")]) if d)
        except ValueError:
            current = None
            continue
        sections[current].append(fio.NativeTensor(cells[0], dims, fio.native_type(cells[cols.index("Type")], where)))
    if not sections.get("input") or not sections.get("output"):
        raise ArtifactError(f"snpe-dlc-info output for {where} has no input/output tensor table; cannot check the "
                            f"DLC's IO against the model.", path=where)
    return sections["input"], sections["output"]


class SnpeSession(ForeignSession):
    """A DLC run by ``snpe-net-run`` once per ``run``; created by :meth:`SnpeBackend.open`."""

    def __init__(self, *, sdk: Sdk, dlc: str, native_inputs: list, command_flags: list, timeout: float,
                 **kwargs) -> None:
        super().__init__(backend="snpe", **kwargs)
        self._sdk, self._dlc, self._native_inputs = sdk, dlc, native_inputs
        self._flags, self._timeout = command_flags, timeout
        self._native_outputs = self._out.mode == "native"

    def _invoke(self, buffers: list, wanted: list):
        with tempfile.TemporaryDirectory(prefix="onnxwrapper-snpe-") as tmp:
            tokens = []
            for i, (tensor, buf) in enumerate(zip(self._native_inputs, buffers)):
                buf.tofile(os.path.join(tmp, f"input_{i}.raw"))
                tokens.append(f"{tensor.name}:=input_{i}.raw")
            with open(os.path.join(tmp, "input_list.txt"), "w", encoding="utf-8") as f:
                f.write(" ".join(tokens) + "\n")
            cmd = [self._sdk.net_run, "--container", self._dlc, "--input_list", "input_list.txt",
                   "--output_dir", "output", *self._flags]
            try:
                proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=self._timeout,
                                      env=self._sdk.env())
            except subprocess.TimeoutExpired as exc:
                raise BackendRunError(f"[ONNXRuntimeError] : 11 : EP_FAIL : snpe-net-run did not finish within "
                                         f"{self._timeout} s (backend_options['timeout']).", backend="snpe") from exc
            if proc.returncode != 0:
                tail = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
                raise BackendRunError(f"[ONNXRuntimeError] : 11 : EP_FAIL : snpe-net-run exited with code "
                                         f"{proc.returncode}: {tail}", backend="snpe")
            result = os.path.join(tmp, "output", "Result_0")
            return {p.index: np.fromfile(self._output_file(result, p.native.name, self._native_outputs),
                                         dtype=np.uint8) for p in wanted}

    @staticmethod
    def _output_file(result_dir: str, name: str, native: bool = False) -> str:
        """The raw file of output ``name``: ``<name>.raw`` (``:`` → ``_`` and QAIRT-sanitized names
        too); with native output files ``<name>_native.raw`` first (see the module docstring)."""
        candidates = dict.fromkeys([name, name.replace(":", "_"), fio.sanitize_qnn_name(name)])
        suffixes = ("_native.raw", ".raw") if native else (".raw",)
        for candidate in candidates:
            for suffix in suffixes:
                path = os.path.join(result_dir, *candidate.split("/")) + suffix
                if os.path.isfile(path):
                    return path
        found = sorted(os.path.relpath(p, result_dir) for p in glob.glob(os.path.join(result_dir, "**", "*.raw"),
                                                                          recursive=True))
        raise BackendRunError(f"[ONNXRuntimeError] : 11 : EP_FAIL : snpe-net-run wrote no output file for "
                                 f"'{name}' (found: {found}).", backend="snpe")


class SnpeBackend(Backend):
    """SNPE DLCs through snpe-net-run (QAIRT SDK) or qai_appbuilder; see the module docstring.

    Options (``backend_options``):
        artifact: path of the ``.dlc`` (default: resolved next to the ONNX model).
        onnx: ONNX model the DLC was converted from, when the model path is the DLC.
        runtime: ``"dsp"`` (default; HTP/DSP), ``"gpu"``, ``"cpu"`` or ``"aip"``.
        perf_profile: snpe-net-run ``--perf_profile`` value, default ``"burst"``.
        input_mode / output_mode: ``"auto"`` (default), ``"native"`` or ``"float"`` raw files.
        name_map: ``{ONNX tensor name: DLC tensor name}``.
        sdk_root: QAIRT/SNPE SDK root (default ``$QAIRT_SDK_ROOT`` then ``$SNPE_ROOT``).
        timeout: seconds allowed per snpe-net-run call (default 600).
        engine: ``"auto"`` (default), ``"net-run"`` or ``"qai_appbuilder"``.
    """

    name = "snpe"
    aliases = ("snpe-net-run", "dlc")
    execution_providers = ()
    npu = True
    options = {
        "artifact": OptionSpec("artifact", "path of the .dlc to run", None, os.fspath),
        "onnx": OptionSpec("onnx", "ONNX model the DLC was converted from (False: none, use the DLC's IO)", None,
                           companion_option),
        "runtime": OptionSpec("runtime", "SNPE runtime: dsp, gpu, cpu or aip", "dsp", lambda v: str(v).lower(),
                              tuple(_RUNTIME_FLAGS)),
        "perf_profile": OptionSpec("perf_profile", "snpe-net-run --perf_profile", "burst", lambda v: str(v).lower(),
                                   _PERF),
        "input_mode": OptionSpec("input_mode", "input raw files: auto, native or float", "auto", str, _MODES),
        "output_mode": OptionSpec("output_mode", "output raw files: auto, native or float", "auto", str, _MODES),
        "name_map": OptionSpec("name_map", "{ONNX name: DLC tensor name}", None, name_map_option),
        "sdk_root": OptionSpec("sdk_root", "QAIRT/SNPE SDK root folder", None, os.fspath),
        "timeout": OptionSpec("timeout", "seconds per snpe-net-run call", 600.0, float),
        "engine": OptionSpec("engine", "auto, net-run or qai_appbuilder", "auto", str,
                             ("auto", "net-run", "qai_appbuilder")),
    }

    @classmethod
    def locate_sdk(cls, root: str | None) -> tuple[Sdk | None, str]:
        """The SDK whose ``snpe-net-run`` runs the DLCs: the injection seam of this backend.

        The default is :func:`find_sdk` (``root``, ``$QAIRT_SDK_ROOT``, ``$SNPE_ROOT``, ``PATH``).
        Override it in a subclass to bind another SDK (one found by other rules, or tools that
        emulate snpe-net-run's command line and file formats) and register that subclass as the
        ``snpe`` backend through the entry-point group ``onnxwrapper.backends``.

        Returns:
            ``(Sdk, "")`` or ``(None, what was looked at)``.
        """
        return find_sdk(root)

    @classmethod
    def qai_backend(cls) -> type[QaiBackend]:
        """The backend class that runs DLCs for ``engine="qai_appbuilder"`` (default :class:`QaiBackend`)."""
        return QaiBackend

    @classmethod
    def probe(cls) -> Availability:
        """Available with an SDK (:meth:`locate_sdk`) or an available :meth:`qai_backend`. Never
        auto-selected (``auto_selectable=False``): used only with ``backend="snpe"``."""
        sdk, why = cls.locate_sdk(None)
        if sdk is not None:
            return Availability(True, reason=f"snpe-net-run in {sdk.root}", real_npu=True, auto_selectable=False,
                                details={"sdk_root": sdk.root, "arch": sdk.arch})
        qai = cls.qai_backend().probe()
        if qai.available:
            return Availability(True, reason=f"no QAIRT SDK ({why}); DLCs run through qai_appbuilder ({qai.reason})",
                                simulated=qai.simulated, real_npu=qai.real_npu, auto_selectable=False,
                                details=dict(qai.details))
        return Availability(False, reason=f"no QAIRT/SNPE SDK found ({why}) and qai_appbuilder unavailable "
                                          f"({qai.reason})", install_hint=_INSTALL)

    def open(self, request: SessionRequest):
        """Check the DLC against the model and prepare ``snpe-net-run`` calls (or delegate to ``qai``).

        Raises:
            BackendUnavailableError: no SDK (and qai_appbuilder not usable for ``engine="auto"``).
            ArtifactError: no DLC, unreadable DLC info, IO mismatch. ORT's errors for a bad ONNX model.
        """
        cfg = self.config
        sdk, why = self.locate_sdk(cfg["sdk_root"])
        engine = cfg["engine"]
        if engine == "auto":
            engine = "net-run" if sdk is not None else "qai_appbuilder"
        if engine == "qai_appbuilder":
            return self._open_with_qai(request, why)
        if sdk is None:
            raise BackendUnavailableError(f"Backend 'snpe' cannot run snpe-net-run: {why}. To fix: {_INSTALL}.",
                                          backend="snpe", reason=why, install_hint=_INSTALL)
        dlc, model = self._resolve(ModelSource.from_arg(request.path_or_bytes))
        natives = self._dlc_io(sdk, dlc)
        if model is not None:
            inputs, outputs, meta, unknown = fio.onnx_io(model)
        else:
            inputs, outputs = fio.node_args_from_native(natives[0]), fio.node_args_from_native(natives[1])
            meta, unknown = ModelMetadataInfo(graph_name=os.path.splitext(os.path.basename(dlc))[0]), set()
        plans = [fio.plan_io(args, nat, direction=d, mode=cfg[f"{d}_mode"], name_map=cfg["name_map"], where=dlc,
                             unknown_shapes=unknown) for args, nat, d in zip((inputs, outputs), natives, ("input", "output"))]
        flags = [*_RUNTIME_FLAGS[cfg["runtime"]], "--perf_profile", cfg["perf_profile"]]
        flags += ["--use_native_input_files"] if plans[0].mode == "native" else []
        flags += ["--use_native_output_files"] if plans[1].mode == "native" else []
        if "native" in (plans[0].mode, plans[1].mode):
            flags.append("--userbuffer_auto")  # the native-file flags "Must be used with --userbuffer_xxx"
        provider = f"SNPE({cfg['runtime']})"
        options = {"artifact": dlc, "runtime": cfg["runtime"], "perf_profile": cfg["perf_profile"],
                   "input_files": plans[0].mode, "output_files": plans[1].mode, "sdk_root": sdk.root}
        return SnpeSession(sdk=sdk, dlc=dlc, native_inputs=list(natives[0]), command_flags=flags,
                           timeout=cfg["timeout"], inputs=inputs, outputs=outputs, modelmeta=meta,
                           in_plan=plans[0], out_plan=plans[1], providers=[provider],
                           provider_options={provider: options}, sess_options=request.sess_options)

    def _open_with_qai(self, request: SessionRequest, why: str):
        qai_backend = self.qai_backend()
        if not qai_backend.probe().available:
            reason = f"no usable QAIRT SDK ({why}) and qai_appbuilder unavailable ({qai_backend.probe().reason})"
            raise BackendUnavailableError(f"Backend 'snpe' cannot run: {reason}. To fix: {_INSTALL}.",
                                          backend="snpe", reason=reason, install_hint=_INSTALL)
        cfg = self.config
        src = ModelSource.from_arg(request.path_or_bytes)
        options = {"runtime": {"dsp": "htp", "aip": "htp"}.get(cfg["runtime"], cfg["runtime"]),
                   "perf_profile": cfg["perf_profile"] if cfg["perf_profile"] in ("burst", "high_performance",
                                                                                  "default") else "default",
                   "input_mode": cfg["input_mode"], "output_mode": cfg["output_mode"], "name_map": cfg["name_map"]}
        if src.path is not None and src.path.endswith(".dlc"):
            options["onnx"] = cfg["onnx"]
        else:
            options["artifact"] = self._resolve(src)[0]
        return qai_backend({k: v for k, v in options.items() if v is not None}).open(request)

    def _resolve(self, src: ModelSource):
        """(absolute DLC path, companion ``onnx.ModelProto`` or None)."""
        cfg = self.config
        if src.path is not None and src.path.endswith(".dlc"):
            if not os.path.isfile(src.path):
                raise ArtifactError(f"DLC {src.path} does not exist.", path=src.path)
            onnx_path = companion_onnx(src.path, (".dlc",), cfg["onnx"])
            return os.path.abspath(src.path), (ModelSource(onnx_path, None).load_proto() if onnx_path else None)
        model = src.load_proto()
        explicit = cfg["artifact"]
        if explicit is not None:
            if not (os.path.isfile(explicit) and explicit.endswith(".dlc")):
                raise ArtifactError(f"backend_options['artifact'] = {explicit!r} is not an existing .dlc file.",
                                    path=explicit)
            return os.path.abspath(explicit), model
        if src.path is None:
            raise ArtifactError("A model given as bytes needs backend_options={'artifact': <.dlc path>}.")
        found, tried = find_artifact(src.directory, [f"{src.stem}.dlc", f"{src.stem}.onnx.dlc"])
        if found is None:
            raise ArtifactError(f"No DLC for {src.path}. Tried: {', '.join(tried)}. Convert the model (e.g. "
                                f"qairt-converter --input_network {os.path.basename(src.path)} --preserve_io "
                                f"--output_path {src.stem}.dlc) or pass backend_options={{'artifact': path}}.",
                                path=src.path)
        return os.path.abspath(found), model

    def _dlc_io(self, sdk: Sdk, dlc: str) -> tuple[list, list]:
        if sdk.dlc_info is None:
            raise ArtifactError(f"snpe-dlc-info is missing from {sdk.root}/bin/{sdk.arch}; it is needed to check the "
                                f"DLC's IO names, dims and types against the model.", path=dlc)
        with tempfile.TemporaryDirectory(prefix="onnxwrapper-dlcinfo-") as tmp:
            csv_path = os.path.join(tmp, "info.csv")
            try:
                proc = subprocess.run([sdk.dlc_info, "-i", dlc, "-s", csv_path], capture_output=True, text=True,
                                      timeout=self.config["timeout"], env=sdk.env(), cwd=tmp)
            except subprocess.TimeoutExpired as exc:
                raise ArtifactError(f"snpe-dlc-info timed out on {dlc}.", path=dlc) from exc
            if proc.returncode != 0:
                raise ArtifactError(f"snpe-dlc-info could not read {dlc} (exit {proc.returncode}): "
                                    f"{(proc.stderr or proc.stdout).strip()[-1500:]}", path=dlc)
            if os.path.isfile(csv_path):
                with open(csv_path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            else:
                text = proc.stdout
        return parse_dlc_info(text, dlc)
