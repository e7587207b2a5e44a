"""FAKE for tests: the Python layer of qai_appbuilder 2.51 (``qai_appbuilder.qnncontext``).

Signatures follow the 2.51.40 wheel as recorded in shared research anchor_qai.md §A.2–A.5:

* ``QNNConfig.Config(runtime, log_level, profiling_level, log_path)`` — the 4-argument form
  without a libs path; a libs path passed positionally lands in ``runtime`` and raises
  ``ValueError("backend library does not exist: …")`` as the real wheel does.
* ``QNNContext(model_name, model_path, backend_lib_path, system_lib_path, is_async,
  input_data_type, output_data_type, deviceID, coreIdsStr, enable_graphs)``; a missing path raises
  ``ValueError("Model path does not exist: …")``.
* ``Inference(input, perf_profile=PerfProfile.DEFAULT, graphIndex=0)`` flattens every input *in
  the caller's list* (``reshape(-1,)``), then reshapes outputs to ``getOutputShapes()`` of graph 0
  (errors swallowed, so outputs may stay 1-D).
* getters take ``graph_index``; ``PerfProfile.SetPerfProfileGlobal`` is a no-op before
  ``Config`` or on GPU; ``release()``/``is_released``/``release_all()``.
"""

from __future__ import annotations

import os
import weakref

from . import _fake, appbuilder

__all__ = ["Runtime", "LogLevel", "ProfilingLevel", "PerfProfile", "DataType", "QNNConfig", "QNNContext",
           "release_all"]

_LIBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libs")
_config: dict = {}
_live: "weakref.WeakSet" = weakref.WeakSet()


def reset() -> None:
    _config.clear()
    _live.clear()


class Runtime:
    CPU = "Cpu"
    HTP = "Htp"
    GPU = "Gpu"


class LogLevel:
    ERROR = 1
    WARN = 2
    INFO = 3
    VERBOSE = 4
    DEBUG = 5

    @staticmethod
    def SetLogLevel(log_level, log_path="None"):
        appbuilder.set_log_level(log_level, log_path)


class ProfilingLevel:
    OFF = 0
    BASIC = 1
    DETAILED = 2
    INVALID = 3

    @staticmethod
    def SetProfilingLevel(profiling_level):
        appbuilder.set_profiling_level(profiling_level)


class DataType:
    FLOAT = "float"
    NATIVE = "native"


class PerfProfile:
    DEFAULT = "default"
    HIGH_PERFORMANCE = "high_performance"
    BURST = "burst"

    @staticmethod
    def SetPerfProfileGlobal(perf_profile):
        _fake.record("PerfProfile.SetPerfProfileGlobal", perf_profile=perf_profile)
        if not _config or _config.get("runtime") == Runtime.GPU:
            return
        appbuilder.set_perf_profile(perf_profile)

    @staticmethod
    def RelPerfProfileGlobal():
        _fake.record("PerfProfile.RelPerfProfileGlobal")
        if not _config or _config.get("runtime") == Runtime.GPU:
            return
        appbuilder.rel_perf_profile()


class QNNConfig:
    @staticmethod
    def Config(runtime: str = Runtime.HTP, log_level: int = LogLevel.ERROR,
               profiling_level: int = ProfilingLevel.OFF, log_path: str = "None"):
        _fake.record("QNNConfig.Config", runtime=runtime, log_level=log_level, profiling_level=profiling_level,
                     log_path=log_path)
        backend = os.path.join(_LIBS, f"Qnn{runtime}.dll")
        if runtime not in (Runtime.CPU, Runtime.HTP, Runtime.GPU):
            raise ValueError(f"backend library does not exist: {backend}")
        _config.update(runtime=runtime, backend=backend, system=os.path.join(_LIBS, "QnnSystem.dll"))
        LogLevel.SetLogLevel(log_level, log_path)
        ProfilingLevel.SetProfilingLevel(profiling_level)


def _reshape_input(inputs):
    for i in range(len(inputs)):
        try:
            inputs[i] = inputs[i].reshape(-1,)
        except (ValueError, TypeError, IndexError, AttributeError):
            pass
    return inputs


class QNNContext:
    """FAKE: one loaded model; see the module docstring."""

    def __init__(self, model_name: str = "None", model_path: str = "None", backend_lib_path: str = "None",
                 system_lib_path: str = "None", is_async: bool = False, input_data_type: str = DataType.FLOAT,
                 output_data_type: str = DataType.FLOAT, deviceID: int = 0, coreIdsStr: str = "None",
                 enable_graphs=None) -> None:
        _fake.record("QNNContext.__init__", model_name=model_name, model_path=model_path,
                     input_data_type=input_data_type, output_data_type=output_data_type, deviceID=deviceID,
                     coreIdsStr=coreIdsStr, enable_graphs=enable_graphs)
        if model_path == "None":
            raise ValueError("model_path must be specified!")
        if not os.path.exists(model_path):
            raise ValueError(f"Model path does not exist: {model_path}")
        self.model_name, self.model_path = model_name, model_path
        self.input_data_type, self.output_data_type = input_data_type, output_data_type
        self._released = False
        if backend_lib_path == "None":
            backend_lib_path = _config.get("backend", "None")
        appbuilder.initialize(model_name, model_path, backend_lib_path, system_lib_path, is_async,
                              input_data_type, output_data_type, deviceID, coreIdsStr)
        _live.add(self)

    def _ensure_live(self):
        if self._released:
            raise RuntimeError(f"QNNContext '{self.model_name}' has been released")

    def Inference(self, input, perf_profile=PerfProfile.DEFAULT, graphIndex=0):
        self._ensure_live()
        inputs = _reshape_input(input)
        outputs = appbuilder.inference(self.model_name, inputs, perf_profile, graphIndex,
                                       self.input_data_type, self.output_data_type)
        try:
            shapes = self.getOutputShapes()
        except RuntimeError:
            return outputs
        for i in range(len(outputs)):
            try:
                outputs[i] = outputs[i].reshape(shapes[i])
            except (ValueError, TypeError, IndexError):
                pass
        return outputs

    def getInputShapes(self, graph_index=0):
        return appbuilder.get_io(self.model_name, graph_index, "inputs", "shape")

    def getOutputShapes(self, graph_index=0):
        return appbuilder.get_io(self.model_name, graph_index, "outputs", "shape")

    def getInputDataType(self, graph_index=0):
        return appbuilder.get_io(self.model_name, graph_index, "inputs", "dtype")

    def getOutputDataType(self, graph_index=0):
        return appbuilder.get_io(self.model_name, graph_index, "outputs", "dtype")

    def getInputName(self, graph_index=0):
        return appbuilder.get_io(self.model_name, graph_index, "inputs", "name")

    def getOutputName(self, graph_index=0):
        return appbuilder.get_io(self.model_name, graph_index, "outputs", "name")

    def getGraphName(self, graph_index=0):
        return appbuilder.graph_name(self.model_name, graph_index)

    def getProviderMode(self):
        return "qnn"

    def isOnnxModel(self):
        return False

    def isTFLiteModel(self):
        return False

    @property
    def is_released(self) -> bool:
        return self._released

    def release(self) -> None:
        if not self._released:
            self._released = True
            _fake.record("QNNContext.release", model_name=self.model_name)
            appbuilder.destroy(self.model_name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def release_all() -> None:
    for ctx in list(_live):
        ctx.release()
