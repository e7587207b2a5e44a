"""Probes of ORT's public session API for tests/qnn/test_qnn_session_api.py: each takes the flavour
(``qrt``, tests/qnn_flavours.py) and the module's tiny model files and returns what a script
observes (values, or ``(exception class, message)`` from :func:`_error`)."""

from __future__ import annotations

import json
import os
import threading
import warnings
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from onnxruntime.capi import onnxruntime_pybind11_state as C

from onnxwrapper.backends.qnn.platform._runtime import ensure_registered
from onnxwrapper.kernel import PartialOffloadWarning
from tests import models
from tests.qnn_flavours import default_qnn_ep_options, set_providers_warning

X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)


def _session(qrt, files, kind="static", so=None, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialOffloadWarning)
        return qrt.InferenceSession(files[kind], so, **kwargs)


class Prefix(str):
    """An expected message: equal to every text that starts with it."""
    def __eq__(self, other):
        return isinstance(other, str) and other.startswith(str(self))

    __hash__ = str.__hash__


def _error(call):
    """``(class name, message)`` of what ``call`` raises, else ``None``."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the observation is the exception
        return type(exc).__name__, str(exc)
    return None


def _feed(kind):
    return {"string": {"X": np.array(["a", "b"], object)}, "lora": {"input_x": np.ones((4, 4), np.float32)},
            "meta": {"X": np.ones((1, 3, 8, 8), np.float32)}}.get(kind, {"X": X})


# -- probes: what a script observes ------------------------------------------------------------------------
def p_create_ortvalue(qrt, f):
    return _session(qrt, f).create_ortvalue_from_shape_and_type([3, 2], np.float32, "cpu").shape()


def _warnings_of(call) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w.category.__name__ for w in caught]


def p_disable_fallback(qrt, f):
    return _warnings_of(_session(qrt, f).disable_fallback)


def p_enable_fallback(qrt, f):
    return _warnings_of(_session(qrt, f).enable_fallback)


def _profiled(qrt, f, kind):
    so = qrt.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(f["dir"], f"profile_{kind}_{qrt.name.replace('+', '_')}")
    s = _session(qrt, f, kind, so)
    s.run(None, _feed(kind))
    return s


def p_end_profiling(qrt, f):
    result = {}
    for kind in ("static", "dynamic"):
        path = _profiled(qrt, f, kind).end_profiling()
        events = json.load(open(path))
        result[kind] = (os.path.basename(path).startswith(f"profile_{kind}"), any(e.get("name") == "model_run"
                                                                                  for e in events))
    return result


def p_get_profiling_start_time_ns(qrt, f):
    return {kind: _profiled(qrt, f, kind).get_profiling_start_time_ns() > 0 for kind in ("static", "dynamic")} | {
        "off": _session(qrt, f).get_profiling_start_time_ns()}


def p_epdevices(qrt, f):
    return {kind: [d.ep_name for d in _session(qrt, f, kind).get_input_epdevices()] for kind in ("static", "dynamic")}


def p_memory_infos(qrt, f):
    s = _session(qrt, f)
    return [(m.name, m.device_id, str(m.mem_type)) for m in s.get_input_memory_infos() + s.get_output_memory_infos()]


def p_inputs_outputs(qrt, f):
    def io(s):
        return [[(a.name, a.type, a.shape) for a in args] for args in (s.get_inputs(), s.get_outputs())]
    return {kind: io(_session(qrt, f, kind)) for kind in ("static", "dynamic", "string", "lora")}


def p_modelmeta(qrt, f):
    m = _session(qrt, f, "meta").get_modelmeta()
    return (m.producer_name, m.graph_name, m.domain, m.description, m.graph_description, m.version,
            m.custom_metadata_map)


def p_overridable_initializers(qrt, f):
    return [(o.name, o.shape) for o in _session(qrt, f, "lora").get_overridable_initializers()]


def _assignment(s):
    return [(g.ep_name, [n.op_type for n in g.get_nodes()]) for g in s.get_provider_graph_assignment_info()]


def _recording(qrt):
    (so := qrt.SessionOptions()).add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    return so


def p_assignment(qrt, f):
    return {"off": _error(lambda: _session(qrt, f, "add_mul_add").get_provider_graph_assignment_info()),
            "static": _assignment(_session(qrt, f, "add_mul_add", _recording(qrt))),
            "partial": _assignment(_session(qrt, f, "partial", _recording(qrt)))}


def p_assignment_dynamic(qrt, f):
    s = _session(qrt, f, "dynamic", _recording(qrt))
    s.run(None, {"X": X})
    return _assignment(s)


def p_providers(qrt, f):
    return {kind: (_session(qrt, f, kind).get_providers(), list(_session(qrt, f, kind).get_provider_options()))
            for kind in ("static", "dynamic", "string", "partial")}


def _so_view(so):
    def entry(key):
        try:
            return so.get_session_config_entry(key)
        except RuntimeError:
            return None
    return (so.log_severity_level, str(so.graph_optimization_level), so.intra_op_num_threads, so.has_providers(),
            entry("session.record_ep_graph_assignment_info"), entry("session.disable_cpu_ep_fallback"))


def p_session_options(qrt, f):
    return {kind: _so_view(_session(qrt, f, kind).get_session_options()) for kind in ("static", "string")}


def p_session_options_dynamic(qrt, f):
    return _so_view(_session(qrt, f, "dynamic").get_session_options())[1]


def p_tuning(qrt, f):
    return (s := _session(qrt, f)).get_tuning_results(), s.set_tuning_results([])


def _bound_run(s):
    binding = s.io_binding()
    binding.bind_cpu_input("X", X)
    binding.bind_output("Y")
    s.run_with_iobinding(binding)
    return binding.copy_outputs_to_cpu()[0]


def p_iobinding(qrt, f):
    return np.allclose(_bound_run(_session(qrt, f)), X * X, rtol=1e-3)


def p_iobinding_dynamic(qrt, f):
    return _error(lambda: _bound_run(_session(qrt, f, "dynamic")))


def p_release_captured_graph(qrt, f):
    return _session(qrt, f).release_captured_graph(0)


def p_run(qrt, f):
    s = _session(qrt, f)
    return (np.allclose(s.run(None, {"X": X})[0], X * X, rtol=1e-3), _error(lambda: s.run(None, {})),
            _error(lambda: s.run(None, {"X": X.astype(np.float64)})), _error(lambda: s.run(["nope"], {"X": X})),
            _session(qrt, f, "string").run(None, _feed("string"))[0].tolist())


def p_run_dynamic(qrt, f):
    s = _session(qrt, f, "dynamic")
    got = s.run(None, {"X": X})[0]
    expected = X @ np.array([[1.0], [2.0]], np.float32)
    return bool(np.allclose(got, expected, rtol=1e-3)), bool(np.array_equal(got, expected))


def p_run_async(qrt, f):
    done, box = threading.Event(), {}

    def callback(results, user_data, error):
        box["out"], box["error"] = results, error
        done.set()

    _session(qrt, f).run_async(None, {"X": X}, callback, None)
    assert done.wait(60)
    return np.allclose(box["out"][0], X * X, rtol=1e-3), box["error"]


def p_run_with_ort_values(qrt, f):
    out = _session(qrt, f).run_with_ort_values(None, {"X": onnxruntime.OrtValue.ortvalue_from_numpy(X)})
    return np.allclose(out[0].numpy(), X * X, rtol=1e-3)


def _ortvaluevector(s):
    feeds, fetches = C.OrtValueVector(), C.OrtValueVector()
    feeds.push_back(onnxruntime.OrtValue.ortvalue_from_numpy(X)._ortvalue)
    s.run_with_ortvaluevector(onnxruntime.RunOptions(), ["X"], feeds, ["Y"], fetches,
                              [C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0, 0)])
    return fetches[0].numpy().shape


def p_ortvaluevector(qrt, f):
    return _ortvaluevector(_session(qrt, f))


def p_ortvaluevector_dynamic(qrt, f):
    return _error(lambda: _ortvaluevector(_session(qrt, f, "dynamic")))


def p_set_ep_dynamic_options(qrt, f):
    return _session(qrt, f).set_ep_dynamic_options({"ep.dynamic.workload_type": "Efficient"})


def p_set_providers(qrt, f):
    s = _session(qrt, f)
    with set_providers_warning(qrt), pytest.warns(UserWarning, match="not in available provider names"):
        invalid = _error(lambda: s.set_providers(["InvalidProvider"]))
    s = _session(qrt, f)
    with set_providers_warning(qrt):
        s.set_providers(["CPUExecutionProvider"])
    return invalid, s.get_providers(), bool(np.array_equal(s.run(None, {"X": X})[0], X * X))


def p_set_providers_qnn(qrt, f):
    with set_providers_warning(qrt):
        (s := _session(qrt, f)).set_providers(["QNNExecutionProvider"])
    return s.get_providers()


def p_adapter(qrt, f):
    path = os.path.join(f["dir"], "lora.onnx_adapter")
    models.write_lora_adapter(path)
    (adapter := onnxruntime.LoraAdapter()).Load(path)
    (ro := qrt.RunOptions()).add_active_adapter(adapter)
    return _session(qrt, f, "lora").run(None, _feed("lora"), ro)[0][0].round(1).tolist()


def p_run_config(qrt, f):
    ro = qrt.RunOptions()
    ro.add_run_config_entry("qnn.htp_perf_mode", "burst")
    ro.log_severity_level, ro.log_verbosity_level, ro.logid = 3, 0, "api"
    return ro.get_run_config_entry("qnn.htp_perf_mode"), np.allclose(_session(qrt, f).run(None, {"X": X}, ro)[0],
                                                                        X * X, rtol=1e-3)


def p_only_execute_path_to_fetches(qrt, f):
    (ro := qrt.RunOptions()).only_execute_path_to_fetches = True
    return [o.shape for o in _session(qrt, f, "partial").run(["Y"], {"X": np.ones((1, 1, 2, 2), np.float32)}, ro)]


def p_terminate(qrt, f):
    (ro := qrt.RunOptions()).terminate = True
    return _error(lambda: _session(qrt, f).run(None, {"X": X}, ro))


def p_add_initializer(qrt, f):
    so = qrt.SessionOptions()
    value = onnxruntime.OrtValue.ortvalue_from_numpy(np.array([[2.0, 1.0], [4.0, 3.0], [6.0, 5.0]], np.float32))
    so.add_initializer("W", value)
    return _session(qrt, f, "static", so).run(None, {"X": X})[0].round(2).tolist()  # the QNN EP compiles W: X·X


def p_add_provider(qrt, f):
    return _error(lambda: qrt.SessionOptions().add_provider("QNNExecutionProvider", {}))


def _with_qnn_devices(qrt, **options):
    """The user's own ``add_provider_for_devices`` with onnxwrapper's default QNN EP options + ``options``."""
    so = qrt.SessionOptions()
    so.add_provider_for_devices(ensure_registered(), dict(default_qnn_ep_options(), **options))
    return so


def p_provider_for_devices(qrt, f):
    so = _with_qnn_devices(qrt, htp_performance_mode="burst")
    return _session(qrt, f, "static", so).get_provider_options()["QNNExecutionProvider"]["htp_performance_mode"]


def p_provider_for_devices_invalid(qrt, f):
    so = _with_qnn_devices(qrt, qnn_context_priority="urgent")
    return (_error(lambda: _session(qrt, f, "static", so)) or ("created",))[0]


def p_disable_cpu_ep_fallback(qrt, f):
    result = {}
    for kind in ("static", "partial", "dynamic"):
        so = qrt.SessionOptions()
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        result[kind] = _error(lambda: _session(qrt, f, kind, so))
    return result


def p_ep_context_enable(qrt, f):
    folder = Path(f["dir"]) / f"ctx_{qrt.name.replace('+', '_')}"
    folder.mkdir(exist_ok=True)
    (folder / "m.onnx").write_bytes(models.mul_1())
    so = qrt.SessionOptions()
    so.add_session_config_entry("ep.context_enable", "1")
    qrt.InferenceSession(str(folder / "m.onnx"), so)
    return sorted(p.name for p in folder.iterdir())


def p_ep_context_read_func(qrt, f):
    calls = []
    so = qrt.SessionOptions()
    if not hasattr(so, "set_ep_context_data_read_func"):
        return calls
    so.set_ep_context_data_read_func(lambda *args: calls.append(args), 1 << 20)
    _session(qrt, f, "static", so)
    so.clear_ep_context_data_read_func()
    return calls


def p_copied_attributes(qrt, f):
    so = qrt.SessionOptions()
    so.enable_cpu_mem_arena, so.enable_mem_pattern, so.enable_mem_reuse = False, False, False
    so.execution_mode, so.execution_order = onnxruntime.ExecutionMode.ORT_PARALLEL, onnxruntime.ExecutionOrder.PRIORITY_BASED
    so.inter_op_num_threads, so.intra_op_num_threads, so.use_deterministic_compute = 2, 1, True
    so.use_per_session_threads, so.graph_optimization_level = True, onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_verbosity_level, so.logid = 0, "api"
    s = _session(qrt, f, "static", so)
    got = s.get_session_options()
    return ([getattr(got, a) for a in ("enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse",
                                       "execution_mode", "execution_order", "inter_op_num_threads",
                                       "intra_op_num_threads", "use_deterministic_compute",
                                       "graph_optimization_level", "logid")],
            bool(np.allclose(s.run(None, {"X": X})[0], X * X, rtol=1e-3)))


def p_log_callback(qrt, f):
    records = []
    onnxruntime.set_default_logger_callback(lambda *record: records.append(record), severity=0)
    try:
        folder = Path(f["dir"]) / f"log_{qrt.name.replace('+', '_')}"
        folder.mkdir(exist_ok=True)
        path = folder / "fresh.onnx"
        path.write_bytes(models.smallconv(batch=1, seed=99))
        qrt.InferenceSession(str(path))
    finally:
        onnxruntime.set_default_logger_callback(None)
        onnxruntime.set_default_logger_severity(2)
    # the QNN EP's graph-building messages (qnn_model_wrapper.cc) come from the compile, which
    # onnxwrapper runs in a session of its own that logs errors only unless the user set a level
    return len(records) > 0, any(record[3].startswith("qnn_model_wrapper.cc") for record in records)


def p_custom_ops(qrt, f):
    return _error(lambda: qrt.SessionOptions().register_custom_ops_library(os.path.join(f["dir"], "missing.so")))


def p_cancel(qrt, f):
    so = qrt.SessionOptions()
    so.set_load_cancellation_flag(True)
    return (_error(lambda: _session(qrt, f, "static", so)) or ("created",))[0]


def p_selection_policy(qrt, f):
    so = qrt.SessionOptions()
    so.set_provider_selection_policy(onnxruntime.OrtExecutionProviderDevicePolicy.PREFER_CPU)
    return (_error(lambda: _session(qrt, f, "static", so)) or ("created",))[0]


def p_optimized_model(qrt, f):
    so = qrt.SessionOptions()
    so.optimized_model_filepath = os.path.join(f["dir"], f"opt_{qrt.name.replace('+', '_')}.onnx")
    return _error(lambda: _session(qrt, f, "static", so)), os.path.exists(so.optimized_model_filepath)


def p_free_dims(qrt, f):
    so = qrt.SessionOptions()
    so.add_free_dimension_override_by_name("None", 3)
    return _session(qrt, f, "dynamic", so).get_inputs()[0].shape
