"""Finding the NPU on real Snapdragon platforms (issue 23, facts 1 and 6; issue 34), emulated on this host.

onnxruntime-qnn 2.7.0's QNN EP lists NPU and GPU devices in any order on Windows ARM64 (its CPU
device only with ``ORT_QNN_ENABLE_CPU_BACKEND`` set), an NPU device of its own on Linux aarch64
boards with ``/dev/fastrpc-cdsp*`` and nothing on boards with only the downstream
``/dev/adsprpc-smd`` unless the variable is set, and the CPU device (the simulator) on x86-64
(``tests/fakes/ep_devices.py`` models its factory). The probe must find the NPU wherever it is, hand
ORT that device only, never a GPU, tell an emulated x64 Python on ARM64 Windows apart from a real
x86-64 host, and say what to do when there is no device.
"""

from __future__ import annotations

import itertools
import os

import onnxruntime
import pytest

from onnxwrapper.backends.qnn import QnnBackend
from onnxwrapper.backends.qnn.platform._runtime import ensure_registered, is_x86_host
from tests.fakes import ep_devices
from tests.platform_doubles import AMD64, ARM64, emulate_linux, emulate_windows, qnn_lists

NPU, CPU, GPU = (onnxruntime.OrtHardwareDeviceType.NPU, onnxruntime.OrtHardwareDeviceType.CPU,
                 onnxruntime.OrtHardwareDeviceType.GPU)
pytest.importorskip("onnxruntime_qnn")


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_windows_arm64_finds_the_npu_in_any_position_and_hands_ort_only_it(monkeypatch, order):
    emulate_windows(monkeypatch, "win-arm64")
    qnn_lists(monkeypatch, [ep_devices.WINDOWS_SNAPDRAGON_X[i] for i in order])
    availability = QnnBackend._probe()
    assert availability.available and availability.real_npu and not availability.simulated, availability.reason
    assert "Hexagon NPU" in availability.reason
    handed = ensure_registered()
    assert [d.device.type for d in handed] == [NPU]
    assert len(availability.details["ep_devices"]) == 2  # NPU and GPU: the ARM64 build hides its CPU device
    assert os.environ["ADSP_LIBRARY_PATH"]  # the skels of onnxruntime-qnn, set because the user had not


def test_windows_arm64_with_the_cpu_backend_enabled_still_hands_ort_the_npu(monkeypatch):
    emulate_windows(monkeypatch, "win-arm64")
    monkeypatch.setenv("ORT_QNN_ENABLE_CPU_BACKEND", "1")
    qnn_lists(monkeypatch, list(reversed(ep_devices.WINDOWS_SNAPDRAGON_X)))
    availability = QnnBackend._probe()
    assert availability.real_npu and len(availability.details["ep_devices"]) == 3
    assert [d.device.type for d in ensure_registered()] == [NPU]


def test_windows_arm64_without_an_npu_device_says_what_to_install(monkeypatch):
    emulate_windows(monkeypatch, "win-arm64")
    qnn_lists(monkeypatch, ep_devices.WINDOWS_NO_NPU_DRIVER)
    availability = QnnBackend._probe()
    assert not availability.available and "NPU driver" in availability.reason


def test_windows_arm64_npu_added_by_the_factory_is_used(monkeypatch):
    emulate_windows(monkeypatch, "win-arm64")
    qnn_lists(monkeypatch, ep_devices.WINDOWS_NO_NPU_DRIVER, windows_soc_id=435)  # GetSocId: an older WoS SoC
    assert QnnBackend._probe().real_npu
    assert [d.device.type for d in ensure_registered()] == [NPU]


def test_linux_aarch64_upstream_board_uses_the_npu_device_the_ep_adds(monkeypatch):
    emulate_linux(monkeypatch, "aarch64")
    qnn_lists(monkeypatch, ep_devices.LINUX_QCS6490, dev=ep_devices.UPSTREAM_DEV)
    availability = QnnBackend._probe()
    assert availability.available and availability.real_npu, availability.reason
    assert "/dev/fastrpc-cdsp" in availability.reason and availability.details["ep_devices"] == [
        "NPU (Qualcomm, vendor 0x5143, device 0x0)"]  # no CPU device: ORT_QNN_ENABLE_CPU_BACKEND is unset
    assert [d.device.type for d in ensure_registered()] == [NPU]
    assert "ORT_QNN_ENABLE_CPU_BACKEND" not in os.environ
    assert "ADSP_LIBRARY_PATH" not in os.environ  # onnxruntime-qnn sets its own; a preset one makes it warn


def test_linux_aarch64_downstream_board_gets_the_cpu_device_driven_as_the_htp(monkeypatch):
    emulate_linux(monkeypatch, "aarch64")
    qnn_lists(monkeypatch, ep_devices.LINUX_QCS6490, dev=ep_devices.DOWNSTREAM_DEV)
    availability = QnnBackend._probe()
    assert availability.available and availability.real_npu, availability.reason
    assert "/dev/adsprpc-smd" in availability.reason and "backend_type=htp" in availability.reason
    assert os.environ["ORT_QNN_ENABLE_CPU_BACKEND"] == "1"  # set before the EP was registered, as it must be
    assert [d.device.type for d in ensure_registered()] == [CPU]


@pytest.mark.parametrize("value, why", [(None, "not set yet when the QNN EP was registered"),
                                              ("0", "set to '0'")])
def test_linux_aarch64_downstream_board_without_the_cpu_backend_says_what_to_set(monkeypatch, value, why):
    emulate_linux(monkeypatch, "aarch64")
    if value is not None:
        monkeypatch.setenv("ORT_QNN_ENABLE_CPU_BACKEND", value)
    qnn_lists(monkeypatch, ep_devices.LINUX_QCS6490, dev=ep_devices.DOWNSTREAM_DEV, registered_before=True)
    availability = QnnBackend._probe()
    assert not availability.available and availability.details.get("ep_devices", []) == []
    assert "/dev/adsprpc-smd" in availability.reason and why in availability.reason
    assert "Set ORT_QNN_ENABLE_CPU_BACKEND=1" in availability.reason


def test_linux_aarch64_without_a_dsp_is_unavailable_and_says_why(monkeypatch):
    emulate_linux(monkeypatch, "aarch64")
    qnn_lists(monkeypatch, ep_devices.LINUX_QCS6490, dev=("null", "tty"))
    availability = QnnBackend._probe()
    assert not availability.available and "fastrpc kernel module" in availability.reason
    assert "ORT_QNN_ENABLE_CPU_BACKEND" not in os.environ


def test_x64_python_on_arm64_windows_is_the_simulator_and_names_the_fix(monkeypatch):
    emulate_windows(monkeypatch, "win-amd64", native=ARM64)
    from onnxwrapper.kernel import host_architecture

    qnn_lists(monkeypatch, ep_devices.X86_64)  # the win_amd64 wheel's list: the simulator's CPU device
    host = host_architecture()
    assert (host.process_arch, host.os_arch, host.emulated) == ("x86_64", "arm64", True)
    assert is_x86_host()
    availability = QnnBackend._probe()
    assert availability.available and availability.simulated and not availability.real_npu
    assert "ARM64 Python" in availability.reason


@pytest.mark.parametrize("interpreter, native, expected", [
    ("win-arm64", ARM64, ("arm64", "arm64")), ("win-amd64", ARM64, ("x86_64", "arm64")),
    ("win-amd64", AMD64, ("x86_64", "x86_64")), ("win32", AMD64, ("x86", "x86_64"))])
def test_windows_process_and_os_architectures(monkeypatch, interpreter, native, expected):
    from onnxwrapper.kernel import host_architecture

    emulate_windows(monkeypatch, interpreter, native)
    host = host_architecture()
    assert (host.process_arch, host.os_arch) == expected and host.system == "Windows"
    assert host.emulated == (expected[0] != expected[1])
    assert bool(host.note()) == host.emulated


@pytest.mark.parametrize("machine, arch", [("aarch64", "arm64"), ("x86_64", "x86_64"), ("armv7l", "arm")])
def test_linux_architectures(monkeypatch, machine, arch):
    from onnxwrapper.kernel import host_architecture

    emulate_linux(monkeypatch, machine)
    host = host_architecture()
    assert (host.process_arch, host.os_arch, host.emulated) == (arch, arch, False)


def _host(system, process, os_arch=""):
    from onnxwrapper.kernel import HostArchitecture

    return HostArchitecture(system, process, os_arch or process, "3.11")


@pytest.mark.parametrize("hardware", [ep_devices.WINDOWS_SNAPDRAGON_X, ep_devices.X86_64, ep_devices.LINUX_QCS6490])
def test_choose_htp_device_never_hands_ort_a_gpu(hardware):
    from onnxwrapper.backends.qnn import choose_htp_device

    listed = ep_devices.qnn_factory(list(reversed(hardware)), environ={"ORT_QNN_ENABLE_CPU_BACKEND": "1"},
                                    arm64=True, linux_dev=("fastrpc-cdsp",))
    for host in (_host("Windows", "arm64"), _host("Linux", "x86_64"), _host("Linux", "arm64")):
        choice = choose_htp_device(listed, host, ("/dev/fastrpc-cdsp",))
        assert all(d.device.type != GPU for d in choice.devices)
        assert len(choice.devices) <= 1 and len(choice.listed) == len(listed)
