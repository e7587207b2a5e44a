"""FAKE for tests: emulation of qai_appbuilder's *native* layer (``appbuilder`` pybind module).

Reproduces the native behaviours documented in shared research anchor_qai.md §A.6–A.7 (from
the library's C++ source), because onnxwrapper must cope with them:

* a process-global model map keyed by ``model_name`` whose insert never overwrites: a second
  model loaded under the same name silently keeps serving the first one (§C.12);
* ``.dlc`` paths load ``<path>.bin`` instead when it exists and the runtime is HTP;
* initialisation without a configured backend library, or with a model library path, ends the
  process (``exitWithMessage`` → here ``SystemExit``); an unreadable binary fails quietly (the
  Python constructor ignores ``ModelInitialize``'s result): every later getter logs
  ``"<getter>: model not found or released: <name>"`` and returns an empty result (``[]``, ``""``
  for ``getGraphName``), and ``Inference`` returns ``[]`` (``LibAppBuilder::get*``,
  ``pybind/AppBuilder.cpp`` of qai-appbuilder; the log strings are in 2.51.40's DLL); a graph index
  out of range does the same with ``"<getter>: invalid graphIdx: <i>, graphsCount: <n>"``;
* FLOAT mode has no float conversion for ``sfp8``/``sfp16``/``sfp32``/``ufp32`` tensors
  (``IOTensor.cpp`` ``copyFromFloatToNative``/``convertToFloat``: ``"Datatype not supported
  yet!"``): the context loads, the getters work, and every inference returns ``[]``;
* ``RelPerfProfileGlobal`` after the last model was destroyed logs ``"RelPerfProfileGlobal::HTP
  infrastructure is not available (context released?)"`` and fails (returns False): the
  context's power configuration is gone with it; without a prior ``SetPerfProfileGlobal`` it logs
  ``"You should set perf profile before you release it!"``;
* inference checks the *number* of input buffers only: each buffer is read for the byte length
  the graph expects — a longer buffer is silently truncated, a shorter one is over-read (here:
  padded with 0xA5 garbage bytes); FLOAT mode force-casts inputs to float32 first, NATIVE mode
  copies raw bytes;
* a failed execution returns ``[]``;
* outputs are 1-D; their numpy dtype is inferred from bytes per element (4 → float32, 2 → float16,
  1 → uint8/int8/bool, 8 → the reported type), so NATIVE ``uint16``/``int32`` data arrive
  mislabelled as ``float16``/``float32``; FLOAT mode returns float32 (dequantized).
"""

from __future__ import annotations

import os

import numpy as np

import fake_qnn_graph as fq

from . import _fake

_models: dict = {}
_state: dict = {"initialized": False}


def reset() -> None:
    _models.clear()
    _state.clear()
    _state["initialized"] = False


class _Engine:
    def __init__(self, path: str, spec: dict, in_type: str, out_type: str) -> None:
        self.path, self.spec, self.in_type, self.out_type = path, spec, in_type, out_type


def _is_float(data_type: str) -> bool:
    return data_type.lower() in ("float", "float32", "fp32")


def initialize(model_name: str, model_path: str, backend_lib_path: str, system_lib_path: str, is_async: bool,
               input_data_type: str, output_data_type: str, deviceID: int, coreIdsStr: str) -> bool:
    """Load a model under ``model_name``; see the module docstring for the quirks."""
    _fake.record("native.initialize", model_name=model_name, model_path=model_path,
                 backend_lib_path=backend_lib_path, input_data_type=input_data_type,
                 output_data_type=output_data_type, deviceID=deviceID, coreIdsStr=coreIdsStr)
    if backend_lib_path in ("None", "") or not os.path.basename(backend_lib_path).startswith("Qnn"):
        raise SystemExit(f"Error initializing QNN Function Pointers: could not load backend: {backend_lib_path}")
    if deviceID > 3:
        return False
    suffix = model_path.rsplit(".", 1)[-1]
    if suffix == "dlc" and "Htp" in backend_lib_path and os.path.exists(model_path + ".bin"):
        model_path = model_path + ".bin"
    elif suffix not in ("bin", "dlc"):
        raise SystemExit(f"Error initializing QNN Function Pointers: could not load model: {model_path}")
    try:
        spec = fq.load_artifact(model_path)
    except fq.NotAFakeArtifact:
        return False  # "Create From Binary failure"
    _models.setdefault(model_name, _Engine(model_path, spec, input_data_type, output_data_type))
    _state["initialized"] = True
    return True


def destroy(model_name: str) -> bool:
    _fake.record("native.destroy", model_name=model_name)
    return _models.pop(model_name, None) is not None


_GETTERS = {("inputs", "name"): "getInputName", ("inputs", "shape"): "getInputShapes",
            ("inputs", "dtype"): "getInputDataType", ("outputs", "name"): "getOutputName",
            ("outputs", "shape"): "getOutputShapes", ("outputs", "dtype"): "getOutputDataType"}
#: native types FLOAT mode cannot convert (IOTensor.cpp: "Datatype not supported yet!")
NO_FLOAT_CONVERSION = frozenset({"sfp8", "sfp16", "sfp32", "ufp32"})


def _graph(model_name: str, graph_index: int, getter: str) -> dict | None:
    """The graph, or ``None`` after logging what the real getter logs (it then returns ``{}``)."""
    engine = _models.get(model_name)
    if engine is None:
        _fake.log("WARN", f"{getter}: model not found or released: {model_name}")
        return None
    graphs = engine.spec["graphs"]
    if not 0 <= graph_index < len(graphs):
        _fake.log("WARN", f"{getter}: invalid graphIdx: {graph_index}, graphsCount: {len(graphs)}")
        return None
    return graphs[graph_index]


def get_io(model_name: str, graph_index: int, direction: str, field: str) -> list:
    """Getter backend: names, shapes (lists of int) or type names of a graph's inputs/outputs;
    ``[]`` (and a WARN log) for a model that failed to load or a bad graph index."""
    g = _graph(model_name, graph_index, _GETTERS[(direction, field)])
    if g is None:
        return []
    return [list(t[field]) if field == "shape" else t[field] for t in g[direction]]


def graph_name(model_name: str, graph_index: int) -> str:
    g = _graph(model_name, graph_index, "getGraphName")
    return "" if g is None else g["name"]


def _read_exact(buffer: np.ndarray, nbytes: int) -> bytes:
    raw = np.ascontiguousarray(buffer).tobytes()
    return raw[:nbytes] if len(raw) >= nbytes else raw + b"\xa5" * (nbytes - len(raw))


def _label(native: np.ndarray, reported: str) -> np.ndarray:
    per = native.dtype.itemsize
    flat = np.ascontiguousarray(native).reshape(-1)
    if per == 4:
        return flat.view(np.float32)
    if per == 2:
        return flat.view(np.float16)
    if per == 1:
        return flat.view(np.int8 if reported == "int8" else np.bool_ if reported == "bool_" else np.uint8)
    return flat


def inference(model_name: str, inputs: list, perf_profile: str, graph_index: int, input_data_type: str,
              output_data_type: str) -> list:
    """One native inference; returns 1-D arrays or ``[]`` on failure."""
    _fake.record("native.inference", model_name=model_name, perf_profile=perf_profile, graph_index=graph_index,
                 input_data_type=input_data_type, output_data_type=output_data_type,
                 input_nbytes=[int(np.asarray(i).nbytes) for i in inputs])
    engine = _models.get(model_name)
    if engine is None or not 0 <= graph_index < len(engine.spec["graphs"]):
        return []
    g = engine.spec["graphs"][graph_index]
    if len(inputs) != len(g["inputs"]) or g.get("fail") or _fake.take_failure():
        return []
    for mode, tensors in ((engine.in_type, g["inputs"]), (engine.out_type, g["outputs"])):
        if _is_float(mode) and any(t["dtype"] in NO_FLOAT_CONVERSION for t in tensors):
            _fake.log("ERROR", "Datatype not supported yet!")
            return []
    natives = []
    for t, buf in zip(g["inputs"], inputs):
        count = int(np.prod(t["shape"]))
        if _is_float(engine.in_type):
            values = np.frombuffer(_read_exact(np.asarray(buf, dtype=np.float32), count * 4), np.float32)
            natives.append(fq.from_float(values, t))
        else:
            st = fq.storage(t["dtype"])
            natives.append(np.frombuffer(_read_exact(np.asarray(buf), count * st.itemsize), st))
    try:
        outs = fq.compute(g, natives)
    except Exception:  # the real runtime reports a graph execution failure: []
        return []
    if _is_float(engine.out_type):
        return [np.ascontiguousarray(fq.to_float(o, t)).reshape(-1) for o, t in zip(outs, g["outputs"])]
    return [_label(o, t["dtype"]) for o, t in zip(outs, g["outputs"])]


def set_log_level(log_level: int, log_path: str) -> bool:
    _fake.record("native.set_log_level", log_level=log_level, log_path=log_path)
    return True


def set_profiling_level(level: int) -> bool:
    _fake.record("native.set_profiling_level", level=level)
    return True


def set_perf_profile(profile: str) -> bool:
    """Needs an initialized model first, as the real ``SetPerfProfileGlobal``."""
    _fake.record("native.set_perf_profile", profile=profile)
    if not _state.get("initialized"):
        return False
    _state["perf"] = profile
    return True


def rel_perf_profile() -> bool:
    """Fails (False, WARN log) without a prior set, or once no model is loaded any more."""
    _fake.record("native.rel_perf_profile")
    if _state.get("perf") is None:
        _fake.log("WARN", "You should set perf profile before you release it!")
        return False
    if not _models:
        _fake.log("WARN", "RelPerfProfileGlobal::HTP infrastructure is not available (context released?)")
        return False
    del _state["perf"]
    return True
