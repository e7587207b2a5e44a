"""Doubles of ``onnxruntime.get_ep_devices()`` as onnxruntime-qnn 2.7.0's EP factory builds it on each platform.

Modelled on ``QnnEpFactory::GetSupportedDevicesImpl`` (onnxruntime/onnxruntime-qnn,
``onnxruntime/core/providers/qnn/qnn_provider_factory.cc``; the ARM64 rules from onnxruntime-qnn's
README, "CPU backend availability", and the strings of the 2.7.0 ``win_arm64`` and
``manylinux_2_34_aarch64`` EP libraries): of the hardware devices ORT discovered, the QNN EP lists
every NPU or GPU whose vendor id is Qualcomm's (0x5143) and every CPU — in an ARM64 build only when
``ORT_QNN_ENABLE_CPU_BACKEND`` is set to a non-empty value other than ``0``; when none of them is an
NPU it adds an NPU of its own if ``qnn::soc::GetSocId()`` recognizes a Windows-on-Snapdragon SoC
(0 off Windows) or, in the Linux aarch64 build, if an entry of ``/dev`` starts with ``fastrpc-cdsp``
(``qnn::soc::HasFastRpcCdspDevice``). ORT keeps the discovered devices in an ``unordered_set``: the
order is unspecified, so tests permute it.

Hardware per platform (ORT's device discovery): Windows ARM64 (DXCore): CPU, Adreno GPU, NPU;
Linux aarch64 (``device_discovery.cc``: CPUs and PCI DRM GPUs, no NPU discovery): the CPU only;
x86-64: the CPU (and any non-Qualcomm GPU, which the QNN EP ignores).
"""

from __future__ import annotations

from types import SimpleNamespace

import onnxruntime

QUALCOMM = 0x5143
_TYPES = onnxruntime.OrtHardwareDeviceType


def hardware(kind: str, vendor: str, vendor_id: int, device_id: int = 0) -> SimpleNamespace:
    """An ``OrtHardwareDevice`` look-alike (``type``, ``vendor``, ``vendor_id``, ``device_id``, ``metadata``)."""
    return SimpleNamespace(type=getattr(_TYPES, kind), vendor=vendor, vendor_id=vendor_id, device_id=device_id,
                           metadata={})


def ep_device(device, ep_name: str = "QNNExecutionProvider", vendor: str = "Qualcomm") -> SimpleNamespace:
    """An ``OrtEpDevice`` look-alike of ``device`` (``ep_name``, ``ep_vendor``, ``device``, ``ep_metadata``, ``ep_options``)."""
    return SimpleNamespace(ep_name=ep_name, ep_vendor=vendor, device=device, ep_metadata={"version": "double"},
                           ep_options={})


def qnn_factory(discovered, windows_soc_id: int = 0, *, arm64: bool = False, linux_dev: tuple = (),
                environ=None) -> list:
    """The QNN EP's ``OrtEpDevice`` list for the ``discovered`` hardware, as its factory builds it.

    Args:
        discovered: ORT's hardware devices. windows_soc_id: what ``GetSocId()`` returns (Windows).
        arm64: an ARM64 build (CPU device hidden unless ``ORT_QNN_ENABLE_CPU_BACKEND`` is set).
        linux_dev: the names in ``/dev`` the Linux aarch64 build scans for ``fastrpc-cdsp*``.
        environ: the environment at registration (default: none set).
    """
    value = (environ or {}).get("ORT_QNN_ENABLE_CPU_BACKEND", "")
    cpu_listed = not arm64 or (bool(value) and value != "0")
    listed = [ep_device(d) for d in discovered
              if (d.type == _TYPES.CPU and cpu_listed) or (d.type in (_TYPES.NPU, _TYPES.GPU) and d.vendor_id == QUALCOMM)]
    fastrpc_cdsp = arm64 and any(name.startswith("fastrpc-cdsp") for name in linux_dev)
    if not any(d.device.type == _TYPES.NPU for d in listed) and (windows_soc_id or fastrpc_cdsp):
        listed.append(ep_device(hardware("NPU", "Qualcomm", QUALCOMM)))
    return listed


#: what ORT discovers per platform
WINDOWS_SNAPDRAGON_X = (hardware("CPU", "Qualcomm", QUALCOMM), hardware("GPU", "Qualcomm", QUALCOMM, 0x36334330),
                        hardware("NPU", "Qualcomm", QUALCOMM, 0x11))
WINDOWS_NO_NPU_DRIVER = WINDOWS_SNAPDRAGON_X[:2]
LINUX_QCS6490 = (hardware("CPU", "ARM", 0x41),)
#: /dev of a board on an upstream kernel (drivers/misc/fastrpc.c) and on Qualcomm's downstream one (adsprpc)
UPSTREAM_DEV = ("fastrpc-adsp", "fastrpc-cdsp", "fastrpc-cdsp-secure", "null", "tty")
DOWNSTREAM_DEV = ("adsprpc-smd", "adsprpc-smd-secure", "null", "tty")
X86_64 = (hardware("CPU", "AMD", 0x1022), hardware("GPU", "NVIDIA", 0x10DE))


def all_ep_devices(qnn_devices) -> list:
    """``onnxruntime.get_ep_devices()``: the CPU EP's device first, then the QNN EP's."""
    cpu = next((d.device for d in qnn_devices if d.device.type == _TYPES.CPU), hardware("CPU", "ARM", 0x41))
    return [ep_device(cpu, "CPUExecutionProvider", "Microsoft")] + list(qnn_devices)
