"""The public surface: every onnxruntime name is reachable, imports are quiet and lazy."""

from __future__ import annotations

import onnxruntime

import onnxwrapper
from tests.conftest import run_python


def test_every_public_onnxruntime_name_is_reachable_and_identical():
    own = {"InferenceSession", "SessionOptions", "__version__"}
    for name in dir(onnxruntime):
        if name.startswith("_") or name in own:
            continue
        assert getattr(onnxwrapper, name) is getattr(onnxruntime, name), name
    for name in ("RunOptions", "OrtValue", "SparseTensor", "IOBinding", "NodeArg", "ModelMetadata",
                 "GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder", "OrtMemType", "get_available_providers",
                 "get_all_providers", "get_device", "get_version_string", "get_build_info",
                 "set_default_logger_severity", "set_default_logger_verbosity", "set_seed", "enable_telemetry_events",
                 "disable_telemetry_events", "register_execution_provider_library", "get_ep_devices"):
        assert name in dir(onnxwrapper) and getattr(onnxwrapper, name) is getattr(onnxruntime, name)
    # SessionOptions is ORT's class plus a record of the calls ORT cannot report back
    assert issubclass(onnxwrapper.SessionOptions, onnxruntime.SessionOptions)
    assert isinstance(onnxwrapper.SessionOptions(), onnxruntime.SessionOptions)


def test_all_lists_ours_and_onnxruntime_names():
    assert set(onnxwrapper.__all__) >= {"InferenceSession", "get_available_backends", "SessionOptions", "OrtValue"}
    ns = {}
    exec("from onnxwrapper import *", ns)
    assert ns["InferenceSession"] is onnxwrapper.InferenceSession and ns["SessionOptions"] is onnxwrapper.SessionOptions


def test_version_is_ours():
    assert onnxwrapper.__version__ != onnxruntime.__version__
    assert onnxwrapper.get_version_string() == onnxruntime.get_version_string()
    assert issubclass(onnxwrapper.InferenceSession, onnxruntime.InferenceSession)


def test_import_is_quiet_and_lazy():
    res = run_python("""
        import logging, os, sys
        path_before = os.environ.get("PATH")
        import onnxwrapper as ort
        assert "onnxruntime_qnn" not in sys.modules, "backend SDK imported at import time"
        assert "qai_appbuilder" not in sys.modules
        assert "onnxwrapper.backends.qnn" not in sys.modules
        assert logging.getLogger().handlers == [] and logging.getLogger().level == logging.WARNING
        assert logging.getLogger("onnxwrapper").handlers == []
        assert os.environ.get("PATH") == path_before
        assert sys.modules["onnxruntime"].__name__ == "onnxruntime"
        import onnxruntime.quantization, onnxruntime.tools, onnxruntime.capi._pybind_state
        from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config
        from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession
        assert InferenceSession is sys.modules["onnxruntime"].InferenceSession
        print("clean")
    """)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "clean\n" and res.stderr == ""


def test_errors_have_a_documented_hierarchy():
    from onnxwrapper import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        assert cls.__doc__, name
        if name != "InternalError":
            assert issubclass(cls, errors.OnnxwrapperError), name
    assert not issubclass(errors.InternalError, errors.OnnxwrapperError)
    assert issubclass(errors.BackendOptionError, ValueError)
    assert issubclass(errors.BackendCapabilityError, NotImplementedError)
