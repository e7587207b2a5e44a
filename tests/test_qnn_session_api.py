"""ORT's public session API on the qnn backend, item by item, against ORT + the QNN plugin EP.

Every method and property of ``onnxruntime.InferenceSession`` and every ``SessionOptions`` /
``RunOptions`` field is covered (``test_every_public_name_is_covered`` fails when onnxruntime
adds one). Each item is a probe that returns what a script observes, run on both flavours of
``qrt`` (tests/qnn_flavours.py): either both observe the same expected value, or the item is a
deviation listed in docs/backends/qnn.md ("Session API: where the qnn backend differs from ORT +
QNN EP", checked by ``test_the_doc_lists_exactly_these_deviations``) and each flavour observes
its own documented value. Tiny models; compiles go to the session's shared cache.
"""

from __future__ import annotations

import json
import os
import re
import threading
import warnings
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto
from onnxruntime.capi import onnxruntime_pybind11_state as C

from onnxwrapper.errors import BackendCapabilityError
from onnxwrapper.kernel import PartialOffloadWarning
from tests import models

pytestmark = pytest.mark.qnn

X = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
ORT, OW = "onnxruntime+qnn", "onnxwrapper"
DOC = Path(__file__).resolve().parents[1] / "docs" / "backends" / "qnn.md"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api_models")
    paths = {}
    for name, data in (("static", models.mul_1()), ("dynamic", models.matmul_symbolic()),
                       ("string", models.identity(TensorProto.STRING, (2,))), ("lora", models.lora_two_params()),
                       ("meta", models.smallconv(batch=1)), ("partial", models.conv_det_relu()),
                       ("add_mul_add", models.add_mul_add())):
        paths[name] = str(folder / f"{name}.onnx")
        Path(paths[name]).write_bytes(data)
    paths["dir"] = str(folder)
    return paths


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


def p_disable_fallback(qrt, f):
    s = _session(qrt, f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s.disable_fallback()
    return [str(w.message) for w in caught]


def p_enable_fallback(qrt, f):
    s = _session(qrt, f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s.enable_fallback()
    return [w.category.__name__ for w in caught]


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
    return {kind: [[(a.name, a.type, a.shape) for a in getter()] for getter in
                   (lambda s=_session(qrt, f, kind): s.get_inputs(), lambda s=_session(qrt, f, kind): s.get_outputs())]
            for kind in ("static", "dynamic", "string", "lora")}


def p_modelmeta(qrt, f):
    m = _session(qrt, f, "meta").get_modelmeta()
    return (m.producer_name, m.graph_name, m.domain, m.description, m.graph_description, m.version,
            m.custom_metadata_map)


def p_overridable_initializers(qrt, f):
    return [(o.name, o.shape) for o in _session(qrt, f, "lora").get_overridable_initializers()]


def _assignment(s):
    return [(g.ep_name, [n.op_type for n in g.get_nodes()]) for g in s.get_provider_graph_assignment_info()]


def _recording(qrt):
    so = qrt.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
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
    s = _session(qrt, f)
    return s.get_tuning_results(), s.set_tuning_results([])


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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        invalid = _error(lambda: s.set_providers(["InvalidProvider"]))
    s = _session(qrt, f)
    s.set_providers(["CPUExecutionProvider"])
    return invalid, s.get_providers(), bool(np.array_equal(s.run(None, {"X": X})[0], X * X))


def p_set_providers_qnn(qrt, f):
    s = _session(qrt, f)
    s.set_providers(["QNNExecutionProvider"])
    return s.get_providers()


def p_adapter(qrt, f):
    path = os.path.join(f["dir"], "lora.onnx_adapter")
    models.write_lora_adapter(path)
    adapter = onnxruntime.LoraAdapter()
    adapter.Load(path)
    ro = qrt.RunOptions()
    ro.add_active_adapter(adapter)
    return _session(qrt, f, "lora").run(None, _feed("lora"), ro)[0][0].round(1).tolist()


def p_run_config(qrt, f):
    ro = qrt.RunOptions()
    ro.add_run_config_entry("qnn.htp_perf_mode", "burst")
    ro.log_severity_level, ro.log_verbosity_level, ro.logid = 3, 0, "api"
    return ro.get_run_config_entry("qnn.htp_perf_mode"), np.allclose(_session(qrt, f).run(None, {"X": X}, ro)[0],
                                                                        X * X, rtol=1e-3)


def p_only_execute_path_to_fetches(qrt, f):
    ro = qrt.RunOptions()
    ro.only_execute_path_to_fetches = True
    return [o.shape for o in _session(qrt, f, "partial").run(["Y"], {"X": np.ones((1, 1, 2, 2), np.float32)}, ro)]


def p_terminate(qrt, f):
    ro = qrt.RunOptions()
    ro.terminate = True
    return _error(lambda: _session(qrt, f).run(None, {"X": X}, ro))


def p_add_initializer(qrt, f):
    so = qrt.SessionOptions()
    value = onnxruntime.OrtValue.ortvalue_from_numpy(np.array([[2.0, 1.0], [4.0, 3.0], [6.0, 5.0]], np.float32))
    so.add_initializer("W", value)
    return _session(qrt, f, "static", so).run(None, {"X": X})[0].round(2).tolist()  # the QNN EP compiles W: X·X


def p_add_provider(qrt, f):
    return _error(lambda: qrt.SessionOptions().add_provider("QNNExecutionProvider", {}))


def p_provider_for_devices(qrt, f):
    from onnxwrapper.backends.qnn._runtime import ensure_registered
    from tests.qnn_flavours import default_qnn_ep_options

    so = qrt.SessionOptions()
    so.add_provider_for_devices(ensure_registered(), dict(default_qnn_ep_options(), htp_performance_mode="burst"))
    return _session(qrt, f, "static", so).get_provider_options()["QNNExecutionProvider"]["htp_performance_mode"]


def p_provider_for_devices_invalid(qrt, f):
    from onnxwrapper.backends.qnn._runtime import ensure_registered
    from tests.qnn_flavours import default_qnn_ep_options

    so = qrt.SessionOptions()
    so.add_provider_for_devices(ensure_registered(), dict(default_qnn_ep_options(), qnn_context_priority="urgent"))
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


#: item → (ORT API names it covers, probe, expected: one value for both, or {flavour: value} for a deviation)
SAME = object()
ITEMS = {
    "create_ortvalue_from_shape_and_type": (["InferenceSession.create_ortvalue_from_shape_and_type"], p_create_ortvalue, [3, 2]),
    "disable_fallback": (["InferenceSession.disable_fallback"], p_disable_fallback, []),
    "enable_fallback": (["InferenceSession.enable_fallback"], p_enable_fallback, {ORT: [], OW: ["UserWarning"]}),
    "end_profiling": (["InferenceSession.end_profiling", "SessionOptions.enable_profiling", "SessionOptions.profile_file_prefix"],
                      p_end_profiling, {ORT: {"static": (True, True), "dynamic": (True, True)},
                                        OW: {"static": (True, True), "dynamic": (True, False)}}),
    "get_profiling_start_time_ns": (["InferenceSession.get_profiling_start_time_ns"], p_get_profiling_start_time_ns,
                                    {"static": True, "dynamic": True, "off": 0}),
    "get_input_epdevices": (["InferenceSession.get_input_epdevices"], p_epdevices,
                            {"static": ["QNNExecutionProvider"], "dynamic": ["CPUExecutionProvider"]}),
    "memory_infos": (["InferenceSession.get_input_memory_infos", "InferenceSession.get_output_memory_infos"],
                     p_memory_infos, [("Cpu", 0, "OrtMemType.DEFAULT")] * 2),
    "get_inputs_outputs": (["InferenceSession.get_inputs", "InferenceSession.get_outputs"], p_inputs_outputs, {
        "static": [[("X", "tensor(float)", [3, 2])], [("Y", "tensor(float)", [3, 2])]],
        "dynamic": [[("X", "tensor(float)", ["None", 2])], [("Y", "tensor(float)", ["None", 1])]],
        "string": [[("X", "tensor(string)", [2])], [("Y", "tensor(string)", [2])]],
        "lora": [[("input_x", "tensor(float)", [4, 4])], [("output", "tensor(float)", [4, 4])]]}),
    "get_modelmeta": (["InferenceSession.get_modelmeta"], p_modelmeta,
                      ("onnxwrapper-tests", "smallconv", "ai.onnxwrapper.tests", "small conv test model", "graph doc",
                       7, {"license": "MIT", "author": "tests"})),
    "get_overridable_initializers": (["InferenceSession.get_overridable_initializers"], p_overridable_initializers,
                                     [("lora_param_a", [4, "dim"]), ("lora_param_b", ["dim", 4])]),
    "get_provider_graph_assignment_info": (["InferenceSession.get_provider_graph_assignment_info"], p_assignment, {
        "off": ("Fail", Prefix("[ONNXRuntimeError] : 1 : FAIL : 1Session configuration entry 'session.record_ep")),
        "static": [("QNNExecutionProvider", ["Add", "Mul", "Add"])],
        "partial": [("QNNExecutionProvider", ["Transpose", "Conv", "Transpose", "Reshape"]),
                    ("QNNExecutionProvider", ["Relu"]), ("CPUExecutionProvider", ["Det"])]}),
    "get_provider_graph_assignment_info[dynamic]": (["InferenceSession.get_provider_graph_assignment_info"],
                                                    p_assignment_dynamic,
                                                    {ORT: [("CPUExecutionProvider", ["MatMul"])],
                                                     OW: [("QNNExecutionProvider", ["MatMul"])]}),
    "get_providers": (["InferenceSession.get_providers", "InferenceSession.get_provider_options"], p_providers,
                      {kind: (["QNNExecutionProvider", "CPUExecutionProvider"],
                              ["CPUExecutionProvider", "QNNExecutionProvider"])
                       for kind in ("static", "dynamic", "string", "partial")}),
    "get_session_options": (["InferenceSession.get_session_options", "SessionOptions.log_severity_level",
                             "SessionOptions.has_providers", "SessionOptions.get_session_config_entry"],
                            p_session_options, {kind: (-1, "GraphOptimizationLevel.ORT_ENABLE_ALL", 0, False, None, None)
                                                for kind in ("static", "string")}),
    "get_session_options[dynamic]": (["InferenceSession.get_session_options"], p_session_options_dynamic,
                                     {ORT: "GraphOptimizationLevel.ORT_ENABLE_ALL",
                                      OW: "GraphOptimizationLevel.ORT_DISABLE_ALL"}),
    "tuning_results": (["InferenceSession.get_tuning_results", "InferenceSession.set_tuning_results"], p_tuning,
                       ([], None)),
    "io_binding": (["InferenceSession.io_binding", "InferenceSession.run_with_iobinding"], p_iobinding, True),
    "io_binding[dynamic]": (["InferenceSession.run_with_iobinding"], p_iobinding_dynamic,
                            {ORT: None, OW: ("BackendCapabilityError", Prefix("run_with_iobinding() is not supported by backend 'qnn'"))}),
    "release_captured_graph": (["InferenceSession.release_captured_graph"], p_release_captured_graph, None),
    "run": (["InferenceSession.run"], p_run, (True, ("ValueError", Prefix("Required inputs (['X']) are missing")),
                                                ("InvalidArgument", Prefix("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "
                                                                           "Unexpected input data type")),
                                                ("InvalidArgument", Prefix("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "
                                                                           "Invalid output name:nope")),
                                                ["a", "b"])),
    "run[dynamic]": (["InferenceSession.run"], p_run_dynamic, {ORT: (True, True), OW: (True, False)}),
    "run_async": (["InferenceSession.run_async"], p_run_async, (True, "")),
    "run_with_ort_values": (["InferenceSession.run_with_ort_values"], p_run_with_ort_values, True),
    "run_with_ortvaluevector": (["InferenceSession.run_with_ortvaluevector"], p_ortvaluevector, (3, 2)),
    "run_with_ortvaluevector[dynamic]": (["InferenceSession.run_with_ortvaluevector"], p_ortvaluevector_dynamic,
                                         {ORT: None, OW: ("BackendCapabilityError",
                                                          Prefix("InferenceSession.run_with_ortvaluevector() is not "))}),
    "set_ep_dynamic_options": (["InferenceSession.set_ep_dynamic_options"], p_set_ep_dynamic_options, None),
    "set_providers": (["InferenceSession.set_providers"], p_set_providers,
                      (("RuntimeError", "Unknown Provider Type: InvalidProvider"), ["CPUExecutionProvider"], True)),
    "set_providers[QNNExecutionProvider]": (["InferenceSession.set_providers"], p_set_providers_qnn,
                                            {ORT: ["CPUExecutionProvider"],
                                             OW: ["QNNExecutionProvider", "CPUExecutionProvider"]}),
    "add_active_adapter": (["RunOptions.add_active_adapter"], p_adapter, [154.0, 176.0, 198.0, 220.0]),
    "run_config": (["RunOptions.add_run_config_entry", "RunOptions.get_run_config_entry", "RunOptions.log_severity_level",
                    "RunOptions.log_verbosity_level", "RunOptions.logid"], p_run_config, ("burst", True)),
    "only_execute_path_to_fetches": (["RunOptions.only_execute_path_to_fetches"], p_only_execute_path_to_fetches, [(1,)]),
    "terminate": (["RunOptions.terminate"], p_terminate,
                  ("Fail", Prefix("[ONNXRuntimeError] : 1 : FAIL : Exiting due to terminate flag"))),
    "add_initializer": (["SessionOptions.add_initializer"], p_add_initializer, (X * X).round(2).tolist()),
    "add_provider": (["SessionOptions.add_provider"], p_add_provider,
                     ("InvalidArgument", Prefix("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Failed to add provider"))),
    "add_provider_for_devices": (["SessionOptions.add_provider_for_devices"], p_provider_for_devices, "burst"),
    "add_provider_for_devices[invalid value]": (["SessionOptions.add_provider_for_devices"],
                                                p_provider_for_devices_invalid,
                                                {ORT: "created", OW: "BackendOptionError"}),
    "disable_cpu_ep_fallback": (["SessionOptions.add_session_config_entry"], p_disable_cpu_ep_fallback, {
        "static": None, "partial": ("Fail", Prefix("[ONNXRuntimeError] : 1 : FAIL : This session contains graph")),
        "dynamic": ("Fail", Prefix("[ONNXRuntimeError] : 1 : FAIL : This session contains graph"))}),
    "ep.context_enable": (["SessionOptions.add_session_config_entry"], p_ep_context_enable,
                          {ORT: ["m.onnx", "m_ctx.onnx", "m_qnn.bin"], OW: ["m.onnx"]}),
    "ep_context_data_read_func": (["SessionOptions.set_ep_context_data_read_func",
                                   "SessionOptions.clear_ep_context_data_read_func"], p_ep_context_read_func, []),
    "copied_attributes": ([f"SessionOptions.{a}" for a in (
        "enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse", "execution_mode", "execution_order",
        "inter_op_num_threads", "intra_op_num_threads", "use_deterministic_compute", "use_per_session_threads",
        "graph_optimization_level", "log_verbosity_level", "logid")], p_copied_attributes,
        ([False, False, False, onnxruntime.ExecutionMode.ORT_PARALLEL, onnxruntime.ExecutionOrder.PRIORITY_BASED, 2, 1,
          True, onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC, "api"], True)),
    "default_logger_callback": (["SessionOptions.log_severity_level"], p_log_callback,
                                {ORT: (True, True), OW: (True, False)}),
    "register_custom_ops_library": (["SessionOptions.register_custom_ops_library"], p_custom_ops, SAME),
    "set_load_cancellation_flag": (["SessionOptions.set_load_cancellation_flag"], p_cancel, "ModelLoadCanceled"),
    "provider_selection_policy": (["SessionOptions.set_provider_selection_policy",
                                   "SessionOptions.set_provider_selection_policy_delegate"], p_selection_policy,
                                  {ORT: "Fail", OW: "created"}),
    "optimized_model_filepath": (["SessionOptions.optimized_model_filepath"], p_optimized_model,
                                 (("Fail", Prefix("[ONNXRuntimeError] : 1 : FAIL : Unable to serialize model")), False)),
    "free_dimension_overrides": (["SessionOptions.add_free_dimension_override_by_name",
                                  "SessionOptions.add_free_dimension_override_by_denotation",
                                  "SessionOptions.add_external_initializers",
                                  "SessionOptions.add_external_initializers_from_files_in_memory"],
                                 p_free_dims, [3, 2]),
}
#: names of a class that carry no behaviour of their own beyond the items above
_SAME_RESULTS: dict = {}


@pytest.mark.parametrize("item", list(ITEMS))
def test_session_api(qrt, files, item):
    _names, probe, expected = ITEMS[item]
    got = probe(qrt, files)
    if expected is SAME:  # same as the other flavour, whatever it is (e.g. ORT's own error text)
        other = _SAME_RESULTS.setdefault(item, {})
        other[qrt.name] = got
        if len(other) == 2:
            assert other[ORT] == other[OW]
        return
    if isinstance(expected, dict) and set(expected) == {ORT, OW}:
        expected = expected[qrt.name]
    assert got == expected


def deviations() -> set[str]:
    """The items whose expected value differs between the flavours."""
    return {item for item, (_n, _p, expected) in ITEMS.items() if isinstance(expected, dict) and set(expected) == {ORT, OW}}


def test_the_doc_lists_exactly_these_deviations():
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Session API: where the qnn backend differs from ORT + QNN EP", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.M))
    assert listed == deviations()


def test_every_public_name_is_covered():
    covered = {name for names, _p, _e in ITEMS.values() for name in names}
    for cls in (onnxruntime.InferenceSession, onnxruntime.SessionOptions, onnxruntime.RunOptions):
        public = {f"{cls.__name__}.{n}" for n in dir(cls) if not n.startswith("_")}
        assert public <= covered, sorted(public - covered)


def test_strict_refuses_set_providers_to_cpu(files):
    import onnxwrapper

    s = onnxwrapper.InferenceSession(files["static"], backend="qnn", backend_options={"strict": True})
    with pytest.raises(BackendCapabilityError, match="strict=True"):
        s.set_providers(["CPUExecutionProvider"])
    assert s.get_providers() == ["QNNExecutionProvider", "CPUExecutionProvider"] and s.backend_name == "qnn"
