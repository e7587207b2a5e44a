"""QNN backend options: typed options, targets, raw QNN EP option validation, availability.

Nothing here compiles or runs a graph; option errors must be raised before the QNN EP sees
anything (the EP itself accepts most bad values silently, measured on onnxruntime-qnn 2.7.0).
"""

from __future__ import annotations

import sys

import pytest

import onnxwrapper
from onnxwrapper.backends.qnn import QnnBackend
from onnxwrapper.backends.qnn.platform._targets import TARGETS, find_target, validate_ep_options
from onnxwrapper.backends.qnn.settings._settings import resolve_settings
from onnxwrapper.errors import BackendOptionError, BackendUnavailableError
from tests import models
from tests.conftest import qnn_available

needs_qnn = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")


def _settings(options=None, raw=None, real_npu=False):
    return resolve_settings(QnnBackend.validate_options(options or {}), raw or {}, real_npu=real_npu)


def test_backend_declaration():
    assert QnnBackend.name == "qnn" and QnnBackend.aliases == ("qairt",)
    assert QnnBackend.execution_providers == ("QNNExecutionProvider",)
    assert QnnBackend.npu and not QnnBackend.process_global_config  # explicit soc_model + compile workers
    for key in ("target", "soc_model", "htp_arch", "precision", "htp_performance_mode", "strict", "profiling",
                "cache_dir", "max_specializations", "provider_options", "patches", "graph", "onnx", "max_feed_mb"):
        assert QnnBackend.options[key].doc


def test_target_table_and_aliases():
    assert {(t.chip, t.soc_model, t.htp_arch) for t in TARGETS.values()} >= {
        ("SC8380XP", 60, 73), ("SM8550", 43, 73), ("SM8650", 57, 75), ("SM8750", 69, 79)}
    for alias, name in [("X Elite", "snapdragon-x-elite"), ("8gen3", "snapdragon-8-gen-3"),
                        ("SM8550", "snapdragon-8-gen-2"), ("Snapdragon 8 Elite", "snapdragon-8-elite")]:
        assert find_target(alias).name == name


def test_default_settings_emulate_x_elite_fp16():
    s = _settings()
    assert (s.target, s.soc_model, s.htp_arch, s.precision) == ("snapdragon-x-elite", 60, 73, "fp16")
    assert s.ep_options == {"backend_type": "htp", "enable_htp_fp16_precision": "1", "htp_arch": "73",
                            "soc_model": "60"}
    assert s.describe() == "target=snapdragon-x-elite, soc_model=60, htp_arch=73, precision=fp16"


def test_named_target_and_raw_soc():
    assert (_settings({"target": "8 Gen 3"}).soc_model, _settings({"target": "8 Gen 3"}).htp_arch) == (57, 75)
    s = _settings({"soc_model": 69})
    assert (s.soc_model, s.htp_arch, s.target) == (69, 79, "snapdragon-8-elite")
    with pytest.raises(BackendOptionError, match="means soc_model=57"):
        _settings({"target": "8gen3", "soc_model": 60})


def test_fp32_is_simulator_only_with_an_explicit_fp32_soc_model():
    """fp32 passes soc_model=30 (SM8350, the HTP default) explicitly: a session without soc_model would
    inherit the last explicit one of the process (a user's FP16 session)."""
    s = _settings({"precision": "fp32"})
    assert s.soc_model == 30 and s.ep_options["soc_model"] == "30" and "enable_htp_fp16_precision" not in s.ep_options
    assert _settings({"precision": "fp32", "target": "8gen2"}).ep_options["htp_arch"] == "73"
    with pytest.raises(BackendOptionError, match="only available on the x86-64 HTP simulator"):
        _settings({"precision": "fp32"}, real_npu=True)
    with pytest.raises(BackendOptionError, match="cannot be combined with soc_model"):
        _settings({"precision": "fp32", "soc_model": 60})
    with pytest.raises(BackendOptionError, match="needs soc_model >= 36"):
        _settings({"soc_model": 30})


@pytest.mark.parametrize("options, match", [
    ({"soc_modle": 60}, "Did you mean 'soc_model'"),
    ({"precison": "fp32"}, "Did you mean 'precision'"),
    ({"target": "snapdragon-9-gen-9"}, "unknown target"),
    ({"precision": "int8"}, "expected one of: fp16, fp32"),
    ({"htp_performance_mode": "turbo"}, "expected one of"),
    ({"htp_arch": 70}, "htp_arch must be one of"),
    ({"soc_model": "sixty"}, "soc_model must be an integer"),
    ({"strict": "maybe"}, "expected a boolean"),
    ({"max_specializations": 0}, "expected an integer >= 1"),
    ({"provider_options": {"qnn_context_priority": "urgent"}}, "expected one of: low, normal, normal_high, high"),
    ({"provider_options": {"backend_type": "cpu"}}, "only 'htp' is supported"),
    ({"provider_options": {"backend_path": "libQnnCpu.so"}}, "selects the HTP backend library"),
    ({"provider_options": {"htp_performance_mod": "burst"}}, "Did you mean 'htp_performance_mode'"),
    ({"provider_options": {"enable_htp_fp16_precision": "0"}}, "does not force fp32"),
    ({"provider_options": {"vtcm_mb": "-1"}}, "expected an integer"),
])
def test_bad_options_are_rejected(options, match):
    with pytest.raises(BackendOptionError, match=match):
        _settings(options)


def test_device_id_only_zero_on_simulator():
    with pytest.raises(BackendOptionError, match="only device 0"):
        _settings(raw={"device_id": "3"})
    assert _settings(raw={"device_id": "0"}).ep_options["device_id"] == "0"
    assert validate_ep_options({"device_id": 3}, real_npu=True) == {"device_id": "3"}


def test_raw_and_typed_options_merge_and_conflict():
    s = _settings({"htp_performance_mode": "burst"}, raw={"qnn_context_priority": "high", "soc_model": "60"})
    assert s.ep_options["htp_performance_mode"] == "burst" and s.ep_options["qnn_context_priority"] == "high"
    assert "htp_performance_mode" not in s.compile_options() and "soc_model" in s.compile_options()
    with pytest.raises(BackendOptionError, match="contradicts QNN EP option soc_model"):
        _settings({"soc_model": 57}, raw={"soc_model": "60"})


def test_profiling_sets_level_and_file(tmp_path):
    s = resolve_settings(QnnBackend.validate_options({"profiling": "basic"}), {}, real_npu=False,
                         default_profile_path=str(tmp_path / "p.csv"))
    assert s.ep_options["profiling_level"] == "basic" and s.ep_options["profiling_file_path"] == str(tmp_path / "p.csv")


@needs_qnn
@pytest.mark.qnn
@pytest.mark.parametrize("kwargs", [
    {"backend": "qnn", "backend_options": {"soc_modle": 60}},
    {"backend": "qairt", "backend_options": {"provider_options": {"device_id": "3"}}},
    {"providers": [("QNNExecutionProvider", {"qnn_context_priority": "urgent"})]},
    {"providers": ["QNNExecutionProvider"], "provider_options": [{"device_id": "7"}]},
    {"backend": "qnn", "providers": [("QNNExecutionProvider", {"vtcm_mb": "-3"})]},
])
def test_session_rejects_bad_options_before_the_ep(tmp_path, kwargs):
    path = tmp_path / "m.onnx"
    path.write_bytes(models.smallconv(batch=1))
    with pytest.raises(BackendOptionError):
        onnxwrapper.InferenceSession(str(path), **kwargs)


def test_unavailable_when_onnxruntime_qnn_cannot_be_imported(monkeypatch, tmp_path):
    from onnxwrapper._registry import default_registry

    monkeypatch.setitem(sys.modules, "onnxruntime_qnn", None)  # import → ImportError
    monkeypatch.setattr(QnnBackend, "_probe_result", None)
    monkeypatch.delitem(default_registry()._probes, "qnn", raising=False)
    availability = QnnBackend.probe()
    assert not availability.available and not availability.real_npu
    assert "onnxruntime-qnn is not installed" in availability.reason
    assert availability.install_hint == "pip install 'onnxwrapper[qnn]'"
    path = tmp_path / "m.onnx"
    path.write_bytes(models.smallconv(batch=1))
    with pytest.raises(BackendUnavailableError, match=r"pip install 'onnxwrapper\[qnn\]'") as info:
        onnxwrapper.InferenceSession(str(path), backend="qnn")
    assert info.value.backend == "qnn"
    monkeypatch.setattr(QnnBackend, "_probe_result", None)  # undone: the real probe comes back


@needs_qnn
def test_probe_reports_simulator_on_x86():
    from onnxwrapper.backends.qnn.platform._runtime import is_x86_host

    availability = QnnBackend.probe()
    assert availability.available
    if is_x86_host():
        assert availability.simulated and not availability.real_npu
        assert "simulator" in availability.reason
    assert availability.details["qnn_sdk"]
