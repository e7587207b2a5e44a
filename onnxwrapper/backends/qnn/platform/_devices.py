"""Which ``OrtEpDevice`` of the QNN execution provider drives the HTP, on each platform.

What onnxruntime-qnn's EP factory lists (``QnnEpFactory::GetSupportedDevicesImpl``,
onnxruntime/onnxruntime-qnn ``onnxruntime/core/providers/qnn/qnn_provider_factory.cc``): one
``OrtEpDevice`` per hardware device ORT discovered that is either **any CPU** (any vendor) or a
**Qualcomm (vendor 0x5143) NPU or GPU** — the NPU maps to the QnnHtp backend, the GPU to QnnGpu.
When ORT found no NPU but ``qnn::soc::GetSocId()`` recognizes a Windows-on-Snapdragon SoC from its
ACPI tables (older devices whose NPU DXCore does not report), the factory adds an NPU device of
its own. ``GetSocId`` returns 0 off Windows. ORT keeps discovered devices in an
``std::unordered_set``, so **the order of the list is unspecified**.

So, per platform:

* **Windows ARM64 (Snapdragon X):** CPU, GPU (Adreno) and NPU, in any order. The NPU device is the
  HTP; ``devices[0]`` may well be the CPU.
* **Linux aarch64 (QCS6490, QCS8550 boards):** ORT's Linux discovery
  (``onnxruntime/core/platform/linux/device_discovery.cc``) reads CPUs and DRM GPUs with a PCI
  ``vendor`` file and has no NPU discovery; the factory adds none (``GetSocId`` is 0), so the list
  is the **CPU device only** (a platform-bus Adreno has no ``vendor`` file). The QNN EP still runs on
  the HTP with ``backend_type=htp``: the device type only picks a default backend library when
  neither ``backend_type`` nor ``backend_path`` is given (``QnnEpFactory::CreateEpImpl``). The HTP
  is reached through FastRPC, whose device node (``/dev/fastrpc-cdsp`` upstream,
  ``/dev/adsprpc-smd`` on Qualcomm's downstream kernels) tells whether a compute DSP is there.
* **x86-64 (Linux, Windows, an x64 Python on ARM64 Windows):** the CPU device only; onnxruntime-qnn's
  x86-64 HTP backend is the simulator.

:func:`choose_htp_device` turns a listed device set plus these facts into an :class:`HtpDevice`:
the one device to hand ``SessionOptions.add_provider_for_devices`` (never a GPU, never "the first
one") and whether a real NPU is behind it.
"""

from __future__ import annotations

import os
from typing import Iterable, NamedTuple, Sequence

from onnxwrapper.kernel import HostArchitecture

__all__ = ["DSP_DEVICE_NODES", "HtpDevice", "choose_htp_device", "describe_device", "dsp_device_nodes"]

#: FastRPC device nodes of a compute DSP (cDSP): upstream ``drivers/misc/fastrpc.c`` names them
#: ``fastrpc-<domain>[-secure]``; Qualcomm's downstream ``adsprpc`` driver ``adsprpc-smd[-secure]``
DSP_DEVICE_NODES = ("/dev/fastrpc-cdsp", "/dev/fastrpc-cdsp-secure", "/dev/fastrpc-cdsp1", "/dev/adsprpc-smd",
                    "/dev/adsprpc-smd-secure")


def dsp_device_nodes(candidates: Iterable[str] = DSP_DEVICE_NODES) -> tuple[str, ...]:
    """The FastRPC compute-DSP device nodes present on this host (Linux; empty elsewhere)."""
    return tuple(path for path in candidates if os.path.exists(path))


def _type_name(device) -> str:
    kind = getattr(device.type, "name", str(device.type))
    return str(kind).rsplit(".", 1)[-1].upper()


def describe_device(ep_device) -> str:
    """One line for an ``OrtEpDevice``: ``"NPU (Qualcomm, vendor 0x5143, device 0x0)"``."""
    device = ep_device.device
    return (f"{_type_name(device)} ({device.vendor or '?'}, vendor 0x{int(device.vendor_id):X}, "
            f"device 0x{int(device.device_id):X})")


class HtpDevice(NamedTuple):
    """The QNN EP device that drives the HTP on this host (immutable).

    Attributes:
        kind: ``"npu"`` (a physical Hexagon NPU), ``"simulator"`` (onnxruntime-qnn's x86-64 HTP
            simulator) or ``"none"`` (no HTP reachable: see ``reason``).
        devices: the ``OrtEpDevice`` list to hand ``add_provider_for_devices`` (one device; empty
            when ``kind == "none"``).
        reason: one line: what was found and how it was decided (and the fix when ``"none"``).
        listed: :func:`describe_device` of every QNN EP device, in ORT's order.
    """

    kind: str
    devices: tuple
    reason: str
    listed: tuple

    @property
    def real_npu(self) -> bool:
        """True when a physical NPU runs the graphs."""
        return self.kind == "npu"


def _of_type(devices: Sequence, name: str) -> list:
    return [d for d in devices if _type_name(d.device) == name]


def choose_htp_device(ep_devices: Sequence, host: HostArchitecture,
                      dsp_nodes: Sequence[str] = ()) -> HtpDevice:
    """Pick the QNN EP device that drives the HTP (see the module docstring for each platform).

    Args:
        ep_devices: the QNN EP's ``OrtEpDevice`` objects (``onnxruntime.get_ep_devices()`` filtered
            by ``ep_name``), in any order.
        host: :func:`onnxwrapper.kernel.host_architecture` of this process.
        dsp_nodes: FastRPC compute-DSP device nodes found (:func:`dsp_device_nodes`; Linux only).

    Returns:
        :class:`HtpDevice`. Never a GPU device; an NPU device wherever one is listed.
    """
    listed = tuple(describe_device(d) for d in ep_devices)
    npus = _of_type(ep_devices, "NPU")
    cpus = _of_type(ep_devices, "CPU")
    seen = "; ".join(listed) or "no device"
    if npus:
        extra = f" (the QNN EP also lists {len(ep_devices) - 1} other device(s))" if len(ep_devices) > 1 else ""
        return HtpDevice("npu", (npus[0],), f"Hexagon NPU: {describe_device(npus[0])}{extra}", listed)
    if host.process_arch in ("x86_64", "x86"):
        if not cpus:
            return HtpDevice("none", (), f"the QNN EP lists no CPU device for its x86-64 HTP simulator ({seen})",
                             listed)
        note = host.note()
        return HtpDevice("simulator", (cpus[0],), "QNN HTP simulator on x86-64" + (f" ({note})" if note else ""),
                         listed)
    if host.system == "Linux" and host.process_arch == "arm64":
        if not cpus:
            return HtpDevice("none", (), f"the QNN EP lists no CPU device ({seen})", listed)
        if dsp_nodes:
            return HtpDevice("npu", (cpus[0],), f"Hexagon NPU through FastRPC ({', '.join(dsp_nodes)}); ORT's Linux "
                             f"device discovery lists no NPU, so the QNN EP's CPU device is used with "
                             f"backend_type=htp", listed)
        return HtpDevice("none", (), f"no compute-DSP device node ({', '.join(DSP_DEVICE_NODES[:1] + DSP_DEVICE_NODES[3:4])}"
                         f"): the board's FastRPC driver or DSP firmware is not up, so there is no HTP to run on. "
                         f"Check that the fastrpc kernel module is loaded and the cDSP is booted", listed)
    if host.system == "Windows" and host.process_arch == "arm64":
        return HtpDevice("none", (), f"the QNN EP lists no NPU device on this Windows ARM64 machine ({seen}): "
                         f"install or update the Qualcomm Hexagon NPU driver (Windows Update or the device "
                         f"maker's driver package)", listed)
    return HtpDevice("none", (), f"no Hexagon NPU on {host.system} {host.process_arch} ({seen})", listed)
