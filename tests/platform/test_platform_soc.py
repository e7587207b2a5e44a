"""Configuring the HTP for its SoC (issue 23, facts 2 and 3).

* The SoC comes from QNN (``QnnDevice_getPlatformInfo``, read through a ``QnnInterface_t``: here a
  double laid out from the QNN SDK headers), from the OS (Linux socinfo, the Windows CPU name) or
  from a context binary's header; on a real NPU it configures the session and enters the cache key.
* Simulator-only rules (``device_id`` 0, no shared-memory allocator, the 4 MiB VTCM row budget) hold
  on the simulator only; the X Elite default is a simulator default.
* HTP v68 has no FP16: a float model for it is refused at once, with the fix; v73 and v81 targets
  compile and run (the simulator), and the binary's header names their ``soc_model``.
"""

from __future__ import annotations

import ctypes as ct
import json
import os
import sys
import types

import numpy as np
import pytest

from onnxwrapper.backends.qnn.model._feed_limits import check_feed_rows
from onnxwrapper.backends.qnn.platform._precision_check import check_fp16_support
from onnxwrapper.backends.qnn.platform._soc import DeviceSoc, host_soc, read_platform_info
from onnxwrapper.backends.qnn.platform._targets import TARGETS, validate_ep_options
from onnxwrapper.backends.qnn.settings._settings import resolve_settings
from onnxwrapper.errors import BackendCapabilityError, BackendOptionError, PrecisionUnsupportedError
from tests import models
from tests.conftest import qnn_available, run_python

QCS6490 = DeviceSoc(93, 68, 2, "QNN platform info", "QCS6490")


# -- a QnnInterface_t double (QnnInterface.h, QnnDevice.h, HTP/QnnHtpDevice.h) ----------------------
class _OnChip(ct.Structure):  # QnnHtpDevice_OnChipDeviceInfoExtension_t
    _fields_ = [("vtcmSize", ct.c_size_t), ("socModel", ct.c_uint32), ("signedPdSupport", ct.c_bool),
                ("dlbcSupport", ct.c_bool), ("arch", ct.c_uint32)]


class _Extension(ct.Structure):  # QnnHtpDevice_DeviceInfoExtension_t
    _fields_ = [("devType", ct.c_uint32), ("onChipDevice", _OnChip)]


class _DeviceV1(ct.Structure):  # QnnDevice_HardwareDeviceInfoV1_t
    _fields_ = [("deviceId", ct.c_uint32), ("deviceType", ct.c_uint32), ("numCores", ct.c_uint32),
                ("cores", ct.c_void_p), ("deviceInfoExtension", ct.c_void_p)]


class _Device(ct.Structure):
    _fields_ = [("version", ct.c_uint32), ("v1", _DeviceV1)]


class _InfoV1(ct.Structure):
    _fields_ = [("numHwDevices", ct.c_uint32), ("hwDevices", ct.c_void_p)]


class _Info(ct.Structure):  # QnnDevice_PlatformInfo_t
    _fields_ = [("version", ct.c_uint32), ("v1", _InfoV1)]


_GET = ct.CFUNCTYPE(ct.c_uint64, ct.c_void_p, ct.POINTER(ct.c_void_p))
_FREE = ct.CFUNCTYPE(ct.c_uint64, ct.c_void_p, ct.c_void_p)


class _InterfaceDouble(ct.Structure):  # QnnInterface_t: backendId, providerName, apiVersion, 51 functions
    _fields_ = [("backendId", ct.c_uint32), ("providerName", ct.c_char_p), ("apiVersion", ct.c_uint32 * 6),
                ("functions", ct.c_void_p * 51)]


def _interface(soc_model: int, arch: int, vtcm: int, devices: int = 1):
    ext = _Extension(0, _OnChip(vtcm, soc_model, False, False, arch))
    device = _Device(1, _DeviceV1(0, 0, 1, None, ct.addressof(ext)))
    info = _Info(1, _InfoV1(devices, ct.addressof(device)))
    freed = []
    get = _GET(lambda logger, out: (out.__setitem__(0, ct.addressof(info)), 0)[1])
    free = _FREE(lambda logger, ptr: (freed.append(ptr), 0)[1])
    iface = _InterfaceDouble(6, b"HTP_QTI_AISW")
    iface.functions[37], iface.functions[38] = ct.cast(get, ct.c_void_p), ct.cast(free, ct.c_void_p)
    return iface, freed, (ext, device, info, get, free)


def test_the_soc_comes_from_qnn_platform_info():
    iface, freed, _keep = _interface(93, 68, 2)
    soc = read_platform_info(ct.addressof(iface))
    assert (soc.soc_model, soc.htp_arch, soc.vtcm_mb, soc.name) == (93, 68, 2, "QCS6490")
    assert not soc.fp16 and "no FP16" in soc.describe() and freed
    empty, _freed, _keep2 = _interface(60, 73, 8, devices=0)
    assert read_platform_info(ct.addressof(empty)) is None


def test_the_soc_comes_from_linux_socinfo(tmp_path):
    (tmp_path / "soc_id").write_text("498\n")
    (tmp_path / "machine").write_text("QCS6490\n")
    soc = host_soc(str(tmp_path))
    assert (soc.soc_model, soc.htp_arch) == (TARGETS["qcs6490"].soc_model, 68)
    (tmp_path / "soc_id").write_text("603\n")
    (tmp_path / "machine").write_text("QCS8550\n")
    assert host_soc(str(tmp_path)).htp_arch == 73
    (tmp_path / "soc_id").write_text("1\n")
    (tmp_path / "machine").write_text("unknown board\n")
    assert host_soc(str(tmp_path)) is None


@pytest.mark.parametrize("cpu, target", [("Snapdragon(R) X Elite - X1E78100 - Qualcomm(R) Oryon(TM) CPU",
                                          "snapdragon-x-elite"),
                                         ("Snapdragon(R) X2 Elite Extreme - X2E96100 - Qualcomm Oryon CPU",
                                          "snapdragon-x2-elite"),
                                         ("Snapdragon (TM) 8cx Gen 3 @ 3.0 GHz", "snapdragon-8cx-gen-3")])
def test_the_soc_comes_from_the_windows_cpu_name(monkeypatch, cpu, target):
    class Key:  # winreg's documented API: OpenKey as a context manager, QueryValueEx -> (value, type)
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    winreg = types.SimpleNamespace(HKEY_LOCAL_MACHINE=0x80000002, OpenKey=lambda root, path: Key(),
                                   QueryValueEx=lambda key, name: (cpu, 1))
    monkeypatch.setitem(sys.modules, "winreg", winreg)
    monkeypatch.setattr(sys, "platform", "win32")
    assert host_soc().soc_model == TARGETS[target].soc_model


def test_a_real_npu_is_configured_for_its_own_soc_and_keys_the_cache_by_it():
    settings = resolve_settings({}, {}, real_npu=True, device_soc=DeviceSoc(66, 73, 8, "QNN platform info"))
    assert (settings.target, settings.soc_model, settings.htp_arch) == ("qcs8550", 66, 73)
    assert settings.compile_options()["soc_model"] == "66" and "device" not in settings.compile_options()
    unknown = resolve_settings({}, {}, real_npu=True, device_soc=None)
    assert unknown.soc_model is None and "soc_model" not in unknown.ep_options  # not the X Elite default
    assert unknown.compile_options()["device"]  # the device still keys the cache
    simulator = resolve_settings({}, {}, real_npu=False)
    assert (simulator.soc_model, simulator.htp_arch) == (60, 73)


def test_simulator_only_rules_hold_on_the_simulator_only():
    for key, value in (("device_id", "1"), ("enable_htp_shared_memory_allocator", "1")):
        assert validate_ep_options({key: value}, real_npu=True) == {key: value}
        with pytest.raises(BackendOptionError):
            validate_ep_options({key: value}, real_npu=False)
    row = [("x", [1, 3 * 2 ** 20], 4, 2)]  # a 6 MiB row in FP16: beyond the simulator's 4 MiB VTCM budget
    check_feed_rows(row, resolve_settings({}, {}, real_npu=True, device_soc=QCS6490._replace(htp_arch=73)), "m")
    with pytest.raises(BackendCapabilityError, match="VTCM"):
        check_feed_rows(row, resolve_settings({}, {}, real_npu=False), "m")


def test_the_vtcm_rung_asks_for_what_the_device_reports_and_8_mb_on_the_simulator_only():
    """A graph gets 4 MB of VTCM unless ``vtcm_mb`` asks for more (QNN HTP docs); after MEM_ALLOC with
    a row beyond it, the recovery ladder asks for the device's own VTCM size, never a guess."""
    import onnx

    from onnxwrapper.backends.qnn.recovery import _recovery
    from tests import recovery_models as rm

    proto = onnx.load_from_string(rm.long_row(row=1 << 22))  # rows of 8 MiB in FP16
    failure = RuntimeError("Failed to finalize QNN graph. Error: QNN_COMMON_ERROR_MEM_ALLOC, Code: 1002")

    def candidates(settings):
        return _recovery.option_candidates(failure, proto, settings)

    fp16 = {"precision": "fp16"}
    assert candidates(resolve_settings(fp16, {}, real_npu=False)) == [{"vtcm_mb": "8"}]
    assert candidates(resolve_settings(fp16, {}, real_npu=True, device_soc=DeviceSoc(60, 73, 8, "QNN"))) == [
        {"vtcm_mb": "8"}]
    assert candidates(resolve_settings(fp16, {}, real_npu=True, device_soc=DeviceSoc(69, 79, 12, "QNN"))) == [
        {"vtcm_mb": "12"}]
    assert candidates(resolve_settings(fp16, {}, real_npu=True, device_soc=DeviceSoc(35, 68, 4, "QNN"))) == []
    assert candidates(resolve_settings(fp16, {}, real_npu=True, device_soc=DeviceSoc(60, 73, None, "QNN"))) == []
    assert candidates(resolve_settings(fp16, {"vtcm_mb": "8"}, real_npu=False)) == []


def test_fp16_on_v68_is_refused_with_the_fix_and_quantized_models_pass():
    import onnx

    float_model = onnx.load_from_string(models.smallconv(batch=1))
    for settings in (resolve_settings({"target": "qcs6490"}, {}, real_npu=False),
                     resolve_settings({}, {}, real_npu=True, device_soc=QCS6490),
                     resolve_settings({"target": "snapdragon-8cx-gen-3"}, {}, real_npu=False)):
        with pytest.raises(PrecisionUnsupportedError, match="FP16") as info:
            check_fp16_support(settings, float_model, "m.onnx")
        assert "--precision w8a16" in str(info.value) and info.value.htp_arch == 68
    check_fp16_support(resolve_settings({"target": "qcs8550"}, {}, real_npu=False), float_model, "m.onnx")
    qdq = onnx.load_from_string(models.smallconv(batch=1))
    qdq.graph.node.insert(0, onnx.helper.make_node("DequantizeLinear", ["q", "s"], ["d"]))
    check_fp16_support(resolve_settings({"target": "qcs6490"}, {}, real_npu=False), qdq, "m.onnx")




@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_a_v68_session_fails_at_once_before_any_compile(tmp_path):
    import onnxwrapper

    with pytest.raises(PrecisionUnsupportedError, match="no FP16 units"):
        onnxwrapper.InferenceSession(models.smallconv(batch=1), backend="qnn",
                                     backend_options={"target": "qcs6490", "cache_dir": str(tmp_path)})
    compiled = [n for _b, _d, files in os.walk(tmp_path) for n in files if n.endswith((".bin", "_ctx.onnx"))]
    assert compiled == []  # refused before compiling: no context binary anywhere in the cache


_TARGET_RUN = r"""
import json, sys
import numpy as np, onnxruntime
import onnxwrapper
from onnxwrapper.backends.qnn import compile_model, read_binary_info
from onnxwrapper.diff import PRESETS, compare_arrays
from tests import models
target, folder = sys.argv[1], sys.argv[2]
data = models.smallconv(batch=1)
result = compile_model(data, folder + "/m_ctx.onnx", {"target": target, "strict": True})
x = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)
y = onnxwrapper.InferenceSession(folder + "/m_ctx.onnx", backend="qnn", backend_options={"target": target}).run(
    None, {"X": x})[0]
ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
print(json.dumps({"soc_model": read_binary_info(result.bin_path).soc_model, "htp_arch": result.ep_options["htp_arch"],
                  "verdict": compare_arrays(y, ref, PRESETS["fp16"]).kind}))
"""


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
@pytest.mark.parametrize("target", ["qcs8550", "snapdragon-8-elite-gen-5", "snapdragon-x2-elite"])
def test_v73_and_v81_targets_compile_run_and_name_their_soc_in_the_binary(tmp_path, target):
    # a fresh process per target: the simulator keeps the HTP architecture of the process's first QNN
    # session, and a context of another architecture then fails to load (measured: v81 after v73)
    proc = run_python(_TARGET_RUN, target, str(tmp_path), cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found == {"soc_model": TARGETS[target].soc_model, "htp_arch": str(TARGETS[target].htp_arch),
                     "verdict": "pass"}
