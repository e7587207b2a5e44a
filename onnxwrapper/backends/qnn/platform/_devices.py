"""Which ``OrtEpDevice`` of the QNN execution provider drives the HTP, on each platform.

What onnxruntime-qnn 2.7.0's EP factory lists (``QnnEpFactory::GetSupportedDevicesImpl``,
onnxruntime/onnxruntime-qnn ``onnxruntime/core/providers/qnn/qnn_provider_factory.cc``; the
ARM64 behaviour is documented in onnxruntime-qnn's README, "CPU backend availability", and its
strings are in the 2.7.0 ``win_arm64`` and ``manylinux_2_34_aarch64`` wheels' EP libraries):

* of the hardware devices ORT discovered, every **Qualcomm (vendor 0x5143) NPU or GPU** (NPU →
  the QnnHtp backend, GPU → QnnGpu);
* every **CPU** device — always in the x86-64 builds (their CPU device is the HTP simulator), but
  in the **ARM64 builds (Windows and Linux) only when the environment variable**
  ``ORT_QNN_ENABLE_CPU_BACKEND`` **is set** to a non-empty value other than ``0`` before the EP is
  registered;
* when no NPU was discovered, an **NPU device of its own** (vendor 0x5143, device 0) when
  ``qnn::soc::GetSocId()`` recognizes a Windows-on-Snapdragon SoC from the ACPI tables (older
  devices DXCore does not report), or, on **Linux aarch64**, when ``qnn::soc::HasFastRpcCdspDevice()``
  finds an entry of ``/dev`` whose name starts with ``fastrpc-cdsp`` (the upstream FastRPC driver's
  compute-DSP nodes: ``fastrpc-cdsp``, ``fastrpc-cdsp-secure``, ``fastrpc-cdsp1``).

ORT keeps the discovered devices in an ``std::unordered_set``, so **the order is unspecified**.
``backend_type`` decides the backend whatever the device's type (``QnnEpFactory::CreateEpImpl``
picks a default library from the device type only when neither ``backend_type`` nor
``backend_path`` is given), so the CPU device with ``backend_type=htp`` drives the HTP.

So, per platform:

* **Windows ARM64 (Snapdragon X):** NPU and Adreno GPU (and the CPU with the variable set), in any
  order; without the Hexagon NPU driver, no NPU.
* **Linux aarch64, upstream kernel** (``/dev/fastrpc-cdsp*``): the factory's own NPU device (ORT's
  Linux discovery, ``onnxruntime/core/platform/linux/device_discovery.cc``, finds CPUs and PCI DRM
  GPUs only), and the CPU with the variable set.
* **Linux aarch64, Qualcomm's downstream kernel** (``/dev/adsprpc-smd`` only): **no device at all**
  unless the variable is set; then the CPU device, which onnxwrapper drives with
  ``backend_type=htp`` — the FastRPC library reaches the cDSP through ``adsprpc-smd``. When it
  registers the EP itself onnxwrapper sets the variable for such a board
  (:func:`cpu_backend_needed`), and the reason names it when the EP was registered before.
* **x86-64 (Linux, Windows, an x64 Python on ARM64 Windows):** the CPU device; onnxruntime-qnn's
  x86-64 HTP backend is the simulator.

:func:`choose_htp_device` turns a listed device set plus these facts into an :class:`HtpDevice`:
the one device to hand ``SessionOptions.add_provider_for_devices`` (never a GPU, never "the first
one"), whether a real NPU is behind it, and — when there is none — the reason and what to do.
"""

from __future__ import annotations

import os
from typing import Mapping, NamedTuple, Sequence

from onnxwrapper.kernel import HostArchitecture

__all__ = ["CPU_BACKEND_ENV", "HtpDevice", "choose_htp_device", "cpu_backend_enabled", "cpu_backend_needed",
           "describe_device", "dsp_device_nodes"]

#: onnxruntime-qnn's ARM64 builds list their CPU device only when this is set (non-empty, not "0")
CPU_BACKEND_ENV = "ORT_QNN_ENABLE_CPU_BACKEND"
#: the prefix onnxruntime-qnn's ``HasFastRpcCdspDevice`` looks for in /dev (upstream FastRPC driver)
_UPSTREAM_PREFIX = "fastrpc-cdsp"
#: Qualcomm's downstream ``adsprpc`` driver: one node for every DSP domain, the cDSP included
_DOWNSTREAM_NODES = ("adsprpc-smd", "adsprpc-smd-secure")


def dsp_device_nodes(dev: str = "/dev") -> tuple[str, ...]:
    """The FastRPC device nodes of ``dev`` that reach a compute DSP: every entry whose name starts with
    ``fastrpc-cdsp`` (what onnxruntime-qnn looks for) and the downstream ``adsprpc-smd[-secure]``;
    sorted full paths, empty when ``dev`` cannot be listed (not Linux)."""
    try:
        names = os.listdir(dev)
    except OSError:
        return ()
    return tuple(sorted(os.path.join(dev, n) for n in names if n.startswith(_UPSTREAM_PREFIX) or n in _DOWNSTREAM_NODES))


def _upstream(nodes: Sequence[str]) -> list[str]:
    return [n for n in nodes if os.path.basename(n).startswith(_UPSTREAM_PREFIX)]


def cpu_backend_enabled(environ: Mapping[str, str]) -> bool:
    """True when ``ORT_QNN_ENABLE_CPU_BACKEND`` makes an ARM64 onnxruntime-qnn list its CPU device."""
    value = environ.get(CPU_BACKEND_ENV, "")
    return bool(value) and value != "0"


def cpu_backend_needed(host: HostArchitecture, nodes: Sequence[str], environ: Mapping[str, str]) -> bool:
    """True for a Linux ARM64 process on a board with a downstream FastRPC node and no ``fastrpc-cdsp*``
    one, where the user has not set ``ORT_QNN_ENABLE_CPU_BACKEND``: onnxruntime-qnn would list no
    device there, and its CPU device (driven with ``backend_type=htp``) is the way to the HTP."""
    return (host.system == "Linux" and host.process_arch == "arm64" and bool(nodes) and not _upstream(nodes)
            and CPU_BACKEND_ENV not in environ)


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


def choose_htp_device(ep_devices: Sequence, host: HostArchitecture, dsp_nodes: Sequence[str] = (),
                      cpu_backend: str | None = None) -> HtpDevice:
    """Pick the QNN EP device that drives the HTP (see the module docstring for each platform).

    Args:
        ep_devices: the QNN EP's ``OrtEpDevice`` objects (``onnxruntime.get_ep_devices()`` filtered
            by ``ep_name``), in any order.
        host: :func:`onnxwrapper.kernel.host_architecture` of this process.
        dsp_nodes: FastRPC compute-DSP device nodes found (:func:`dsp_device_nodes`; Linux only).
        cpu_backend: the value of ``ORT_QNN_ENABLE_CPU_BACKEND`` (``None``: unset), for the reason
            when an ARM64 build lists no CPU device.

    Returns:
        :class:`HtpDevice`. Never a GPU device; an NPU device wherever one is listed.
    """
    listed = tuple(describe_device(d) for d in ep_devices)
    npus = _of_type(ep_devices, "NPU")
    cpus = _of_type(ep_devices, "CPU")
    seen = "; ".join(listed) or "no device"
    linux_arm64 = host.system == "Linux" and host.process_arch == "arm64"
    if npus:
        extra = f" (the QNN EP also lists {len(ep_devices) - 1} other device(s))" if len(ep_devices) > 1 else ""
        via = (f", listed by onnxruntime-qnn for {', '.join(_upstream(dsp_nodes))}"
               if linux_arm64 and _upstream(dsp_nodes) else "")
        return HtpDevice("npu", (npus[0],), f"Hexagon NPU: {describe_device(npus[0])}{via}{extra}", listed)
    if host.process_arch in ("x86_64", "x86"):
        if not cpus:
            return HtpDevice("none", (), f"the QNN EP lists no CPU device for its x86-64 HTP simulator ({seen})",
                             listed)
        note = host.note()
        return HtpDevice("simulator", (cpus[0],), "QNN HTP simulator on x86-64" + (f" ({note})" if note else ""),
                         listed)
    if linux_arm64:
        return _linux_arm64(cpus, dsp_nodes, cpu_backend, seen, listed)
    if host.system == "Windows" and host.process_arch == "arm64":
        return HtpDevice("none", (), f"the QNN EP lists no NPU device on this Windows ARM64 machine ({seen}): "
                         f"install or update the Qualcomm Hexagon NPU driver (Windows Update or the device "
                         f"maker's driver package)", listed)
    return HtpDevice("none", (), f"no Hexagon NPU on {host.system} {host.process_arch} ({seen})", listed)


def _linux_arm64(cpus: list, nodes: Sequence[str], cpu_backend: str | None, seen: str, listed: tuple) -> HtpDevice:
    """A Linux ARM64 board without a listed NPU device (module docstring)."""
    if not nodes:
        return HtpDevice("none", (), f"no compute-DSP device node (/dev/fastrpc-cdsp*, /dev/adsprpc-smd; the QNN EP "
                         f"lists {seen}): the board's FastRPC driver or DSP firmware is not up, so there is no HTP to "
                         f"run on. Check that the fastrpc kernel module is loaded and the cDSP is booted", listed)
    names = ", ".join(nodes)
    if cpus:
        return HtpDevice("npu", (cpus[0],), f"Hexagon NPU through FastRPC ({names}): onnxruntime-qnn lists no NPU "
                         f"device for this node, so its CPU device ({CPU_BACKEND_ENV} is set) is used with "
                         f"backend_type=htp", listed)
    if _upstream(nodes):
        return HtpDevice("none", (), f"the QNN EP lists no device although {names} exists: onnxruntime-qnn ≥ 2.7 adds "
                         f"an NPU device for it; update onnxruntime-qnn (pip install -U onnxruntime-qnn), or set "
                         f"{CPU_BACKEND_ENV}=1 before starting Python", listed)
    if cpu_backend is not None and not cpu_backend_enabled({CPU_BACKEND_ENV: cpu_backend}):
        why = f"it is set to {cpu_backend!r}"
    else:
        why = "it was not set yet when the QNN EP was registered, by this program or a library it uses"
    return HtpDevice("none", (), f"the QNN EP lists no device: this board's FastRPC node is {names} (Qualcomm's "
                     f"downstream driver), and onnxruntime-qnn adds its NPU device only for /dev/fastrpc-cdsp*; its "
                     f"CPU device, which onnxwrapper would drive with backend_type=htp, is listed only with "
                     f"{CPU_BACKEND_ENV} set ({why}). Set {CPU_BACKEND_ENV}=1 in the environment before starting "
                     f"Python (onnxwrapper sets it itself when it registers the QNN EP first)",
                     listed)
