"""Which Snapdragon SoC (``soc_model``, HTP architecture, VTCM) this host's NPU is.

Sources, most authoritative first (:func:`detected_soc` tries them in this order):

1. **QNN itself**: ``QnnDevice_getPlatformInfo`` of the HTP backend library (onnxruntime-qnn's
   ``libQnnHtp.so`` / ``QnnHtp.dll``), reached through ``QnnInterface_getProviders`` as
   onnxruntime-qnn's own HTP tests do (``QueryQnnPlatformAttributesDirectly``). Struct layouts from
   the QNN SDK 2.x headers: ``QnnInterface.h`` (``deviceGetPlatformInfo`` is function 37 and
   ``deviceFreePlatformInfo`` 38 of ``QNN_INTERFACE_VER_TYPE``, after ``backendId``,
   ``providerName`` and ``apiVersion``), ``QnnDevice.h`` (``QnnDevice_PlatformInfo_t`` →
   ``hwDevices`` → ``deviceInfoExtension``) and ``HTP/QnnHtpDevice.h``
   (``QnnHtpDevice_OnChipDeviceInfoExtension_t``: ``vtcmSize`` (MB), ``socModel``,
   ``signedPdSupport``, ``dlbcSupport``, ``arch``). On the x86-64 simulator it reports no hardware
   device (measured, onnxruntime-qnn 2.7.0): there is no SoC to find.
2. **The operating system**: Linux's Qualcomm socinfo driver (``/sys/devices/soc0/soc_id``, IDs of
   ``include/dt-bindings/arm/qcom,ids.h``: QCM6490 497, QCS6490 498, SM8550 519, X1E80100 555,
   SM8650 557, QCS8550 603, QCM8550 604, SC8280XP 449, SM8450 457) and ``machine``; Windows' CPU
   name (registry ``HKLM\\HARDWARE\\DESCRIPTION\\System\\CentralProcessor\\0``,
   ``ProcessorNameString``, e.g. "Snapdragon(R) X Elite - X1E78100 - Qualcomm(R) Oryon(TM) CPU").
3. **A compiled context binary's header** (``QnnSystemContext_BinaryInfo`` v3 ``socModel``, read by
   :func:`~onnxwrapper.backends.qnn.binary._binary.read_binary_info`): what a binary was compiled for;
   ``aipc doctor`` shows it for its canaries and ``aipc inspect model.bin`` for any binary.

Only the first two run when a session is configured, on a host with a real NPU; nothing runs at import.
"""

from __future__ import annotations

import ctypes as ct
import os
import re
import sys
from functools import lru_cache
from typing import NamedTuple

from onnxwrapper.backends.qnn.platform._targets import SocTarget, TARGETS, find_target, htp_has_fp16

__all__ = ["DeviceSoc", "LINUX_SOC_IDS", "detected_soc", "host_soc", "qnn_platform_soc", "read_platform_info",
           "target_for_soc"]

#: Linux socinfo ``soc_id`` (``qcom,ids.h``) → target name of ``_targets.TARGETS``
LINUX_SOC_IDS = {449: "snapdragon-8cx-gen-3", 457: "snapdragon-8-gen-1", 497: "qcs6490", 498: "qcs6490",
                 519: "snapdragon-8-gen-2", 555: "snapdragon-x-elite", 557: "snapdragon-8-gen-3", 603: "qcs8550",
                 604: "qcs8550"}
#: Windows CPU names → target name (checked in order; X2 before X)
_WINDOWS_NAMES = ((r"\bX2\s*Elite\b|\bX2E", "snapdragon-x2-elite"), (r"\bX\s*(Elite|Plus)\b|\bX1[EP]",
                                                                    "snapdragon-x-elite"),
                  (r"\b8cx\s*Gen\s*3\b", "snapdragon-8cx-gen-3"))


class DeviceSoc(NamedTuple):
    """The SoC of this host's NPU.

    Attributes:
        soc_model: QNN ``Qnn_SocModel_t`` value, or ``None`` when only a name was found.
        htp_arch: Hexagon architecture (68, 69, 73, 75, 79, 81) or ``None``.
        vtcm_mb: VTCM size in MB as QNN reports it, or ``None``.
        source: where it came from (``"QNN platform info"``, ``"/sys/devices/soc0"``, …).
        name: the SoC's name when known (``"QCS6490"``, ``"SC8380XP"``), else ``""``.
    """

    soc_model: int | None
    htp_arch: int | None
    vtcm_mb: int | None
    source: str
    name: str = ""

    @property
    def fp16(self) -> bool:
        """True when its HTP has FP16 units (unknown architecture: assumed True)."""
        return htp_has_fp16(self.htp_arch)

    def describe(self) -> str:
        """``"QCS6490 (soc_model 93, HTP v68, no FP16) from /sys/devices/soc0"``."""
        parts = [f"soc_model {self.soc_model}" if self.soc_model is not None else "soc_model unknown"]
        if self.htp_arch is not None:
            parts.append(f"HTP v{self.htp_arch}" + ("" if self.fp16 else ", no FP16"))
        if self.vtcm_mb:
            parts.append(f"VTCM {self.vtcm_mb} MB")
        return f"{self.name or 'SoC'} ({', '.join(parts)}) from {self.source}"


def target_for_soc(soc_model: int | None) -> SocTarget | None:
    """The known target with this ``soc_model`` (``None`` when unknown)."""
    return next((t for t in TARGETS.values() if soc_model is not None and t.soc_model == soc_model), None)


# -- QNN: QnnDevice_getPlatformInfo ---------------------------------------------------------------
class _OnChip(ct.Structure):
    _fields_ = [("vtcmSize", ct.c_size_t), ("socModel", ct.c_uint32), ("signedPdSupport", ct.c_bool),
                ("dlbcSupport", ct.c_bool), ("arch", ct.c_uint32)]


class _HtpExtension(ct.Structure):
    _fields_ = [("devType", ct.c_uint32), ("onChipDevice", _OnChip)]


class _HardwareDeviceV1(ct.Structure):
    _fields_ = [("deviceId", ct.c_uint32), ("deviceType", ct.c_uint32), ("numCores", ct.c_uint32),
                ("cores", ct.c_void_p), ("deviceInfoExtension", ct.POINTER(_HtpExtension))]


class _HardwareDevice(ct.Structure):
    _fields_ = [("version", ct.c_uint32), ("v1", _HardwareDeviceV1)]


class _PlatformInfoV1(ct.Structure):
    _fields_ = [("numHwDevices", ct.c_uint32), ("hwDevices", ct.POINTER(_HardwareDevice))]


class _PlatformInfo(ct.Structure):
    _fields_ = [("version", ct.c_uint32), ("v1", _PlatformInfoV1)]


class _ApiVersion(ct.Structure):
    _fields_ = [("core", ct.c_uint32 * 3), ("backend", ct.c_uint32 * 3)]


_GET_PLATFORM_INFO, _FREE_PLATFORM_INFO = 37, 38


class _Interface(ct.Structure):
    _fields_ = [("backendId", ct.c_uint32), ("providerName", ct.c_char_p), ("apiVersion", _ApiVersion),
                ("functions", ct.c_void_p * (_FREE_PLATFORM_INFO + 1))]


_GetInfoFn = ct.CFUNCTYPE(ct.c_uint64, ct.c_void_p, ct.POINTER(ct.POINTER(_PlatformInfo)))
_FreeInfoFn = ct.CFUNCTYPE(ct.c_uint64, ct.c_void_p, ct.POINTER(_PlatformInfo))
_HTP_ON_CHIP = 0


def read_platform_info(interface_address: int) -> DeviceSoc | None:
    """The on-chip HTP that ``deviceGetPlatformInfo`` of the ``QnnInterface_t`` at
    ``interface_address`` reports, or ``None`` when it reports none (the x86-64 simulator), fails, or
    lacks the function.

    Args:
        interface_address: address of a ``QnnInterface_t`` (``QnnInterface_getProviders``' first
            provider) of an HTP backend library.
    """
    interface = _Interface.from_address(interface_address)
    get, free = interface.functions[_GET_PLATFORM_INFO], interface.functions[_FREE_PLATFORM_INFO]
    if not get:
        return None
    info = ct.POINTER(_PlatformInfo)()
    if _GetInfoFn(get)(None, ct.byref(info)) != 0 or not info:
        return None
    try:
        body = info.contents
        if body.version != 1:
            return None
        for i in range(body.v1.numHwDevices):
            device = body.v1.hwDevices[i]
            extension = device.v1.deviceInfoExtension if device.version == 1 else None
            if extension and extension.contents.devType == _HTP_ON_CHIP:
                chip = extension.contents.onChipDevice
                target = target_for_soc(int(chip.socModel))
                return DeviceSoc(int(chip.socModel), int(chip.arch) or None, int(chip.vtcmSize) or None,
                                 "QNN platform info", target.chip if target else "")
        return None
    finally:
        if free:
            _FreeInfoFn(free)(None, info)


def qnn_platform_soc(htp_library: str) -> DeviceSoc | None:
    """:func:`read_platform_info` of the HTP backend library at ``htp_library`` (``None`` when it
    cannot be loaded or reports no on-chip HTP)."""
    try:
        lib = ct.CDLL(htp_library)
        get = lib.QnnInterface_getProviders
    except (OSError, AttributeError):
        return None
    get.restype = ct.c_uint64
    get.argtypes = [ct.POINTER(ct.POINTER(ct.POINTER(_Interface))), ct.POINTER(ct.c_uint32)]
    providers, count = ct.POINTER(ct.POINTER(_Interface))(), ct.c_uint32()
    if get(ct.byref(providers), ct.byref(count)) != 0 or count.value == 0 or not providers:
        return None
    return read_platform_info(ct.addressof(providers[0].contents))


# -- the operating system -------------------------------------------------------------------------
def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _windows_cpu_name() -> str:
    try:
        import winreg  # Windows only
    except ImportError:
        return ""
    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, r"HARDWARE\DESCRIPTION\System\CentralProcessor\0") as key:
            return str(winreg.QueryValueEx(key, "ProcessorNameString")[0])
    except OSError:
        return ""


def host_soc(sysfs_root: str = "/sys/devices/soc0") -> DeviceSoc | None:
    """The SoC the operating system names (Linux socinfo under ``sysfs_root``, the Windows CPU
    name), mapped to a known target; ``None`` when it names none we know."""
    if sys.platform == "win32":
        cpu = _windows_cpu_name()
        for pattern, name in _WINDOWS_NAMES:
            if cpu and re.search(pattern, cpu, re.IGNORECASE):
                t = TARGETS[name]
                return DeviceSoc(t.soc_model, t.htp_arch, None, f"the Windows CPU name '{cpu}'", t.chip)
        return None
    soc_id = _read(os.path.join(sysfs_root, "soc_id"))
    machine = _read(os.path.join(sysfs_root, "machine"))
    target = TARGETS.get(LINUX_SOC_IDS.get(int(soc_id), "")) if soc_id.isdigit() else None
    if target is None and machine:
        target = find_target(machine)
    if target is None:
        return None
    where = f"{sysfs_root} (soc_id {soc_id or '?'}, machine {machine or '?'})"
    return DeviceSoc(target.soc_model, target.htp_arch, None, where, machine or target.chip)


@lru_cache(maxsize=4)
def detected_soc(htp_library: str | None) -> DeviceSoc | None:
    """This host's NPU SoC: QNN's platform info of ``htp_library``, else the OS's name for it
    (module docstring); ``None`` when neither says. Cached per library path; call it on a host
    with a real NPU only (the simulator has no SoC)."""
    found = qnn_platform_soc(htp_library) if htp_library else None
    if found is not None and found.htp_arch is None:
        target = target_for_soc(found.soc_model)
        found = found._replace(htp_arch=target.htp_arch if target else None)
    return found or host_soc()
