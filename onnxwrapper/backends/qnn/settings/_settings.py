"""Resolution of the QNN backend's options into the QNN EP options of one session.

Inputs, lowest precedence first: QNN EP options the user put on their own ``SessionOptions``
(``add_provider_for_devices``), options of a ``("QNNExecutionProvider", {...})`` entry in
``providers=`` (or the matching ``provider_options`` entry), the ``provider_options`` backend
option, then the typed backend options (``target``, ``soc_model``, ``htp_arch``, ``precision``,
``htp_performance_mode``, ``profiling``). A typed option and a raw option that disagree are an
error, never a silent choice. See :mod:`onnxwrapper.backends.qnn.platform._targets` for the sources.

:func:`qnn_setup` turns them into the :class:`QnnSetup` of one session or ``compile_model`` call:
settings errors come first; :meth:`QnnSetup.register` then registers the QNN plugin EP.

Every configuration passes an explicit ``soc_model`` to the QNN EP, ``precision="fp32"`` included
(:data:`~onnxwrapper.backends.qnn.platform._targets.FP32_SOC_MODEL`): the simulator's ``soc_model`` is
process-global and sticky (a session without one inherits the last explicit one, measured), so an
explicit value is what keeps a user's own QNN session from changing our numerics.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from onnxwrapper.backends.qnn.platform import (DEFAULT_SIMULATOR_TARGET, DeviceSoc, EP_NAME, FP16_MIN_SOC_MODEL,
                                               FP32_SOC_MODEL, RUNTIME_ONLY_EP_OPTIONS, TARGETS, convert_htp_arch,
                                               convert_soc_model, detected_soc, ensure_registered, htp_library_path,
                                               user_qnn_ep_options, validate_ep_options)
from onnxwrapper.backends.qnn.settings._options import disabled_patches
from onnxwrapper.errors import BackendOptionError
from onnxwrapper.kernel import ModelSource

__all__ = ["QnnSettings", "QnnSetup", "merge_raw_options", "qnn_setup", "request_ep_options", "resolve_settings"]


class _Record:
    """Value semantics of an immutable slotted class whose ``__init__`` sets every slot in order:
    ``repr``, equality and hash over the slots, no assignment or deletion, copy and pickle by the
    constructor. (Plain classes instead of frozen dataclasses: creating a frozen dataclass costs
    ~0.5 ms at import on Python 3.11, measured, and a cache hit imports these.)"""

    __slots__ = ()

    def _astuple(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__qualname__}({fields})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._astuple() == other._astuple()

    def __hash__(self) -> int:
        return hash(self._astuple())

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of immutable {type(self).__qualname__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of immutable {type(self).__qualname__}")

    def __reduce__(self) -> tuple:
        return type(self), self._astuple()


class QnnSettings(_Record):
    """Everything a QNN session needs, resolved and validated (immutable; equal when all fields are).

    Attributes:
        target: canonical target name (``"snapdragon-x-elite"``) or ``None``.
        soc_model / htp_arch: values passed to the QNN EP, or ``None`` when not passed.
        precision: ``"fp16"`` or ``"fp32"`` (fp32: simulator only, ``soc_model`` =
            :data:`~onnxwrapper.backends.qnn.platform._targets.FP32_SOC_MODEL`).
        ep_options: the exact ``{key: str}`` given to ``add_provider_for_devices``.
        strict: refuse any node off the QNN EP. cache_dir: cache root override or ``None``.
        max_specializations: live shape specializations per session (LRU bound).
        real_npu: True when a physical NPU runs the graphs.
        patches: ``True`` (apply every registered operator patch to nodes QNN leaves on CPU),
            ``False`` (none) or the tuple of patch names *not* to use
            (see :mod:`onnxwrapper.backends.qnn.pipeline._patching`).
        graph: graph name or index inside a raw QNN context binary, or ``None``.
        companion: ONNX model describing a raw context binary given as the model (path), ``False``
            for none, ``None`` for ``<stem>.onnx`` next to it.
        max_feed_mb: largest logical feed (MiB) a specialization is compiled for
            (:mod:`onnxwrapper.backends.qnn.model._feed_limits`).
        compile_timeout / compile_memory_mb: the budget of one compile (seconds, MiB;
            :mod:`onnxwrapper.backends.qnn.compile._budget`); ``None``: unbounded.
        compile_budget: seconds all compiles of one model's recovery ladder may take together.
        context_memory_mb: MiB of compiled contexts a session keeps loaded
            (:mod:`onnxwrapper.backends.qnn.session._context_budget`).
        device: on a real NPU whose SoC is not known (no ``soc_model`` passed: QNN compiles for
            the device it finds), what identifies that device in the compile-cache key; else ``None``.
        device_vtcm_mb: on a real NPU, the VTCM size (MB) QNN reports for it, or ``None`` (unknown;
            always ``None`` on the simulator). A graph gets 4 MB of it unless ``vtcm_mb`` asks for
            more (QNN HTP docs, ``QNN_HTP_GRAPH_CONFIG_OPTION_VTCM_SIZE_IN_MB``: default 4).
    """

    __slots__ = ("target", "soc_model", "htp_arch", "precision", "ep_options", "strict", "cache_dir",
                 "max_specializations", "real_npu", "patches", "graph", "companion", "max_feed_mb",
                 "compile_timeout", "compile_memory_mb", "context_memory_mb", "device", "device_vtcm_mb",
                 "compile_budget")

    target: str | None
    soc_model: int | None
    htp_arch: int | None
    precision: str
    ep_options: Mapping[str, str]
    strict: bool
    cache_dir: str | None
    max_specializations: int
    real_npu: bool
    patches: bool | tuple
    graph: int | str | None
    companion: str | bool | None
    max_feed_mb: int
    compile_timeout: float | None
    compile_memory_mb: float | None
    context_memory_mb: float | None
    device: str | None
    device_vtcm_mb: int | None
    compile_budget: float | None

    def __init__(self, target: str | None, soc_model: int | None, htp_arch: int | None, precision: str,
                 ep_options: Mapping[str, str] | None = None, strict: bool = False, cache_dir: str | None = None,
                 max_specializations: int = 8, real_npu: bool = False, patches: bool | tuple = True,
                 graph: int | str | None = None, companion: str | bool | None = None,
                 max_feed_mb: int = 1024, compile_timeout: float | None = None,
                 compile_memory_mb: float | None = None, context_memory_mb: float | None = None,
                 device: str | None = None, device_vtcm_mb: int | None = None,
                 compile_budget: float | None = None) -> None:
        values = (target, soc_model, htp_arch, precision, {} if ep_options is None else ep_options, strict,
                  cache_dir, max_specializations, real_npu, patches, graph, companion, max_feed_mb,
                  compile_timeout, compile_memory_mb, context_memory_mb, device, device_vtcm_mb, compile_budget)
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)

    def disabled_patches(self) -> tuple[str, ...] | None:
        """``disabled=`` for ``onnxwrapper.patches.patch_offloaded``; ``None`` when patching is off."""
        return disabled_patches(self.patches)

    def compile_options(self) -> dict[str, str]:
        """EP options that shape the compiled context (cache-key part): all but runtime-only ones, plus
        ``device`` when set (a real NPU of unknown SoC: the context is compiled for that device)."""
        options = {k: v for k, v in sorted(self.ep_options.items()) if k not in RUNTIME_ONLY_EP_OPTIONS}
        if self.device:
            options["device"] = self.device
        return options

    def describe(self) -> str:
        """One line for logs and errors."""
        name = f"target={self.target}, " if self.target else ""
        return f"{name}soc_model={self.soc_model}, htp_arch={self.htp_arch}, precision={self.precision}"


def merge_raw_options(*layers: Mapping[str, Any] | None) -> dict[str, str]:
    """Merge raw EP option dicts, later layers winning; values become ``str`` (as ORT does)."""
    merged: dict[str, str] = {}
    for layer in layers:
        for key, value in (layer or {}).items():
            merged[str(key)] = str(value)
    return merged


def request_ep_options(request) -> dict[str, str]:
    """Raw QNN EP options carried by a request, lowest precedence first: the user's SessionOptions
    entries ``ep.qnnexecutionprovider.*``, then the ``QNNExecutionProvider`` options of
    ``providers``/``provider_options`` (parsed once by backend selection: ``request.ep_options``),
    whether or not ``backend=`` was given too."""
    return merge_raw_options(user_qnn_ep_options(request.sess_options or None), request.ep_options.get(EP_NAME))


def _pick(typed: Any, raw: str | None, name: str, convert) -> Any:
    if raw is None:
        return typed
    raw_value = convert(raw)
    if typed is not None and typed != raw_value:
        raise BackendOptionError(f"Backend option {name}={typed!r} contradicts QNN EP option {name}={raw!r}; "
                                 f"give it once.", backend="qnn")
    return raw_value


def resolve_settings(config: Mapping[str, Any], raw: Mapping[str, Any], *, real_npu: bool,
                     default_profile_path: str | None = None, device_soc: DeviceSoc | None = None) -> QnnSettings:
    """Combine validated backend options and raw QNN EP options into :class:`QnnSettings`.

    On the simulator, without a target or ``soc_model`` the default target emulates a Snapdragon X
    Elite. On a real NPU the device's own SoC (``device_soc``) is used instead, so its
    ``soc_model``/``htp_arch`` go to the EP and into the cache key; when it is unknown no
    ``soc_model`` is passed (QNN compiles for the device it finds) and ``device`` names the device
    in the cache key.

    Args:
        config: ``QnnBackend.config`` (validated backend options with defaults).
        raw: raw QNN EP options from the user's SessionOptions / ``providers`` (unvalidated).
        real_npu: from ``QnnBackend.probe()``.
        default_profile_path: QNN profiling CSV path used when profiling is on and no path was given.
        device_soc: the SoC of the real NPU (:func:`~onnxwrapper.backends.qnn.platform._soc.detected_soc`),
            or ``None``; ignored on the simulator.

    Raises:
        BackendOptionError: bad or contradictory options (e.g. fp32 with a soc_model, fp32 on a
            device, an FP16 request with a soc_model below 36 on the simulator).
    """
    merged = merge_raw_options(raw, config.get("provider_options"))
    ep = validate_ep_options(merged, real_npu=real_npu)
    soc = _pick(config.get("soc_model"), ep.pop("soc_model", None), "soc_model", convert_soc_model)
    arch = _pick(config.get("htp_arch"), ep.pop("htp_arch", None), "htp_arch", convert_htp_arch)
    perf = _pick(config.get("htp_performance_mode"), ep.pop("htp_performance_mode", None), "htp_performance_mode",
                 lambda v: v)
    fp16_flag = ep.pop("enable_htp_fp16_precision", None)
    ep.pop("backend_type", None)
    precision = config.get("precision") or "fp16"
    target_name = config.get("target")
    target = TARGETS[target_name] if target_name else None

    if precision == "fp32":
        if real_npu:
            raise BackendOptionError(
                "precision='fp32' is only available on the x86-64 HTP simulator: on a Snapdragon device the HTP runs "
                "float32 graphs with FP16 math (QNN HTP backend docs). Use precision='fp16' (the default).",
                backend="qnn")
        if (soc is not None and soc >= FP16_MIN_SOC_MODEL) or fp16_flag is not None:
            raise BackendOptionError(
                f"precision='fp32' cannot be combined with soc_model >= {FP16_MIN_SOC_MODEL} or "
                f"enable_htp_fp16_precision: the simulator computes in FP16 for those (measured). Drop soc_model "
                f"(a target still sets htp_arch).", backend="qnn")
        soc = FP32_SOC_MODEL if soc is None else soc
        if arch is None and target is not None:
            arch = target.htp_arch
    else:
        if target is None and soc is None and not real_npu:
            target = TARGETS[DEFAULT_SIMULATOR_TARGET]
            target_name = target.name
        elif target is None and soc is None and device_soc is not None and device_soc.soc_model is not None:
            soc = device_soc.soc_model
            arch = device_soc.htp_arch if arch is None else arch
            known = [t for t in TARGETS.values() if t.soc_model == soc]
            target_name = known[0].name if known else None
        if target is not None:
            if soc is not None and soc != target.soc_model and config.get("target"):
                raise BackendOptionError(
                    f"target={target.name!r} means soc_model={target.soc_model}, but soc_model={soc} was given; "
                    f"give one of them.", backend="qnn")
            soc = target.soc_model if soc is None else soc
            if arch is None:
                arch = target.htp_arch
        elif soc is not None and arch is None:
            known = [t for t in TARGETS.values() if t.soc_model == soc]
            if known:
                arch, target_name = known[0].htp_arch, known[0].name
        if not real_npu and (soc is None or soc < FP16_MIN_SOC_MODEL):
            raise BackendOptionError(
                f"precision='fp16' needs soc_model >= {FP16_MIN_SOC_MODEL} on the HTP simulator (got {soc}): below "
                f"that the simulator computes in fp32 (measured). Use a target such as 'snapdragon-x-elite', or "
                f"precision='fp32' for fp32 math.", backend="qnn")
        ep["enable_htp_fp16_precision"] = "1"

    final = {"backend_type": "htp"}
    if soc is not None:
        final["soc_model"] = str(soc)
    if arch is not None:
        final["htp_arch"] = str(arch)
    if perf is not None:
        final["htp_performance_mode"] = perf
    profiling = config.get("profiling") or "off"
    if profiling != "off":
        if ep.get("profiling_level", profiling) != profiling:
            raise BackendOptionError(f"Backend option profiling={profiling!r} contradicts QNN EP option "
                                     f"profiling_level={ep['profiling_level']!r}.", backend="qnn")
        ep["profiling_level"] = profiling
        ep.setdefault("profiling_file_path", default_profile_path or os.path.abspath("onnxwrapper_qnn_profile.csv"))
    final.update(ep)
    device = None
    if real_npu and soc is None:
        device = device_soc.describe() if device_soc is not None else "a device of unknown SoC"
    return QnnSettings(target=target_name, soc_model=soc, htp_arch=arch, precision=precision,
                       ep_options=dict(sorted(final.items())), strict=bool(config.get("strict")),
                       cache_dir=config.get("cache_dir"),
                       max_specializations=int(config.get("max_specializations") or 8),
                       real_npu=real_npu, patches=config.get("patches", True), graph=config.get("graph"),
                       companion=config.get("onnx"), max_feed_mb=int(config.get("max_feed_mb") or 1024),
                       compile_timeout=config.get("compile_timeout"), compile_memory_mb=config.get("compile_memory_mb"),
                       context_memory_mb=config.get("context_memory_mb"), device=device,
                       device_vtcm_mb=device_soc.vtcm_mb if real_npu and device_soc is not None else None,
                       compile_budget=config.get("compile_budget"))


class QnnSetup(_Record):
    """What every compile of one session (or ``compile_model`` call) shares (immutable).

    Attributes:
        source: the model (:class:`onnxwrapper.kernel.ModelSource`). settings: resolved QNN settings.
        user_so: the user's ``SessionOptions`` or ``None`` (never modified).
        kwargs: ORT keyword arguments for the QNN sessions (``enable_fallback`` is always 0 there).
        label: the model's name in messages. devices: the QNN ``OrtEpDevice`` list of the registered
            plugin EP (``[]``, a fresh list, until :meth:`register`).
    """

    __slots__ = ("source", "settings", "user_so", "kwargs", "label", "devices")

    source: ModelSource
    settings: QnnSettings
    user_so: Any
    kwargs: Mapping[str, Any]
    label: str
    devices: list

    def __init__(self, source: ModelSource, settings: QnnSettings, user_so: Any, kwargs: Mapping[str, Any],
                 label: str, devices: list | None = None) -> None:
        values = (source, settings, user_so, kwargs, label, [] if devices is None else devices)
        for name, value in zip(self.__slots__, values):
            object.__setattr__(self, name, value)

    def register(self) -> "QnnSetup":
        """Register the QNN plugin EP (once per process); a copy with the devices.

        Raises:
            BackendUnavailableError: onnxruntime-qnn cannot be loaded or reports no device.
        """
        devices = ensure_registered()
        return QnnSetup(self.source, self.settings, self.user_so, self.kwargs, self.label, devices)

    def with_source(self, source: ModelSource) -> "QnnSetup":
        """A copy for another model ``source`` (same settings, options, label and devices)."""
        return QnnSetup(source, self.settings, self.user_so, self.kwargs, self.label, self.devices)


def qnn_setup(config: Mapping[str, Any], raw_ep_options: Mapping[str, Any], source: ModelSource, *, user_so,
              kwargs: Mapping[str, Any], label: str, real_npu: bool,
              default_profile_path: str | None = None) -> QnnSetup:
    """Resolve the settings of one session or compile (nothing native yet; see :meth:`QnnSetup.register`).

    Args:
        config: validated ``qnn`` backend options. raw_ep_options: raw QNN EP options (the user's
            SessionOptions, ``providers``). source: the model. user_so: the user's SessionOptions.
        kwargs: ORT keyword arguments. label: model name for messages. real_npu: from the probe.
        default_profile_path: QNN profiling CSV used when profiling is on without a path.

    Raises:
        BackendOptionError: bad or contradictory options.
    """
    device_soc = detected_soc(htp_library_path()) if real_npu else None
    settings = resolve_settings(config, raw_ep_options, real_npu=real_npu, default_profile_path=default_profile_path,
                                device_soc=device_soc)
    kwargs = {k: v for k, v in kwargs.items() if k != "enable_fallback"}
    return QnnSetup(source, settings, user_so, kwargs, label)
