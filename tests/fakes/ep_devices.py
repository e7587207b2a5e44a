"""Doubles of ``onnxruntime.get_ep_devices()`` as onnxruntime-qnn's EP factory builds it on each platform.

Modelled on ``QnnEpFactory::GetSupportedDevicesImpl`` (onnxruntime/onnxruntime-qnn,
``onnxruntime/core/providers/qnn/qnn_provider_factory.cc``): of the hardware devices ORT discovered,
the QNN EP lists every CPU (any vendor) and every NPU or GPU whose vendor id is Qualcomm's
(0x5143); when none of them is an NPU and ``qnn::soc::GetSocId()`` recognizes a Windows-on-Snapdragon
SoC (0 off Windows), it adds an NPU of its own. ORT keeps the discovered devices in an
``unordered_set``: the order is unspecified, so tests permute it.

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


def qnn_factory(discovered, windows_soc_id: int = 0) -> list:
    """The QNN EP's ``OrtEpDevice`` list for the ``discovered`` hardware, as its factory builds it."""
    listed = [ep_device(d) for d in discovered
              if d.type == _TYPES.CPU or (d.type in (_TYPES.NPU, _TYPES.GPU) and d.vendor_id == QUALCOMM)]
    if not any(d.device.type == _TYPES.NPU for d in listed) and windows_soc_id:
        listed.append(ep_device(hardware("NPU", "Qualcomm", QUALCOMM)))
    return listed


#: what ORT discovers per platform
WINDOWS_SNAPDRAGON_X = (hardware("CPU", "Qualcomm", QUALCOMM), hardware("GPU", "Qualcomm", QUALCOMM, 0x36334330),
                        hardware("NPU", "Qualcomm", QUALCOMM, 0x11))
WINDOWS_NO_NPU_DRIVER = WINDOWS_SNAPDRAGON_X[:2]
LINUX_QCS6490 = (hardware("CPU", "ARM", 0x41),)
X86_64 = (hardware("CPU", "AMD", 0x1022), hardware("GPU", "NVIDIA", 0x10DE))


def all_ep_devices(qnn_devices) -> list:
    """``onnxruntime.get_ep_devices()``: the CPU EP's device first, then the QNN EP's."""
    cpu = next((d.device for d in qnn_devices if d.device.type == _TYPES.CPU), hardware("CPU", "ARM", 0x41))
    return [ep_device(cpu, "CPUExecutionProvider", "Microsoft")] + list(qnn_devices)
