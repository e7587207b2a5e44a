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

import re
from pathlib import Path

import onnxruntime
import pytest
from onnx import TensorProto

from onnxwrapper.errors import BackendCapabilityError
from tests import models
from tests.qnn_api_probes import X, Prefix
from tests.qnn_api_probes import (
    p_create_ortvalue, p_disable_fallback, p_enable_fallback, p_end_profiling, p_get_profiling_start_time_ns,
    p_epdevices, p_memory_infos, p_inputs_outputs, p_modelmeta, p_overridable_initializers, p_assignment,
    p_assignment_dynamic, p_providers, p_session_options, p_session_options_dynamic, p_tuning, p_iobinding,
    p_iobinding_dynamic, p_release_captured_graph, p_run, p_run_dynamic, p_run_async, p_run_with_ort_values,
    p_ortvaluevector, p_ortvaluevector_dynamic, p_set_ep_dynamic_options, p_set_providers, p_set_providers_qnn,
    p_adapter, p_run_config, p_only_execute_path_to_fetches, p_terminate, p_add_initializer, p_add_provider,
    p_provider_for_devices, p_provider_for_devices_invalid, p_disable_cpu_ep_fallback, p_ep_context_enable,
    p_ep_context_read_func, p_copied_attributes, p_log_callback, p_custom_ops, p_cancel, p_selection_policy,
    p_optimized_model, p_free_dims)

pytestmark = pytest.mark.qnn

ORT, OW = "onnxruntime+qnn", "onnxwrapper"
DOC = Path(__file__).resolve().parents[2] / "docs" / "backends" / "qnn.md"


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
