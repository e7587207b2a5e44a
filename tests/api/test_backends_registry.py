"""Backend registry, selection order, option validation and the foreign-session path of the façade.

Uses clearly named in-process fake backends (``FakeNpuBackend``, ``FakeForeignBackend``) that
implement the real protocol of ``onnxwrapper.backends.base``.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnxruntime.capi import onnxruntime_pybind11_state as C

import onnxwrapper
from onnxwrapper._registry import BackendRegistry, default_registry
from onnxwrapper._selection import select_backend
from onnxwrapper.backends.base import Availability, Backend, ForeignBackendSession, OptionSpec, OrtBackendSession
from onnxwrapper.errors import (BackendCapabilityError, BackendNotFoundError, BackendOptionError,
                                BackendUnavailableError, BackendValidationError)
from onnxwrapper.kernel.model._metadata import modelmeta_from_onnx, node_args_from_onnx
from onnxwrapper.kernel.model._model_source import ModelSource
from tests import models

X = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float32)


class FakeNpuBackend(Backend):
    """FAKE: an ORT-based backend claiming a real NPU (for auto-selection tests)."""

    name = "fakenpu"
    aliases = ("fake-npu",)
    execution_providers = ("FakeNpuExecutionProvider",)
    options = {"level": OptionSpec("level", "an integer 0-3", default=1, convert=int, choices=(0, 1, 2, 3))}
    npu = True
    available = True
    real = True
    auto = True

    @classmethod
    def probe(cls):
        return Availability(cls.available, reason="" if cls.available else "no fake device",
                            install_hint="plug in the fake device", real_npu=cls.real, auto_selectable=cls.auto)

    def open(self, request):
        return OrtBackendSession(request.path_or_bytes, request.sess_options, None, None, {"enable_fallback": 0})


class FakeForeignSession(ForeignBackendSession):
    """FAKE: computes ``Y = X * W`` of mul_1 with numpy; records what it was given."""

    def __init__(self, model):
        self.inputs, self.outputs = node_args_from_onnx(model)
        self.meta = modelmeta_from_onnx(model)
        self.calls = []

    def run(self, output_names, input_feed, run_options=None):
        self.calls.append((output_names, {k: v.dtype for k, v in input_feed.items()}))
        return [np.ascontiguousarray(input_feed["X"]) * X]

    def get_inputs(self):
        return self.inputs

    def get_outputs(self):
        return self.outputs

    def get_modelmeta(self):
        return self.meta

    def get_providers(self):
        return ["FakeForeign"]


class FakeForeignBackend(Backend):
    """FAKE: a backend that does not run through ONNX Runtime."""

    name = "fakeforeign"

    @classmethod
    def probe(cls):
        return Availability(True, reason="fake")

    def open(self, request):
        return FakeForeignSession(ModelSource.from_arg(request.path_or_bytes).load_proto())


@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.delenv("ONNXWRAPPER_BACKEND", raising=False)
    reg = default_registry()
    FakeNpuBackend.available, FakeNpuBackend.real, FakeNpuBackend.auto = True, True, True
    reg.register(FakeNpuBackend)
    reg.register(FakeForeignBackend)
    yield reg
    reg.unregister("fakenpu")
    reg.unregister("fakeforeign")


def test_cpu_is_listed_first_and_available():
    infos = onnxwrapper.get_available_backends()
    assert infos[0].name == "cpu" and infos[0].available
    assert infos[0].distribution == "onnxwrapper"


def test_selection_order(fakes, monkeypatch):
    sel = select_backend("CPU", ["FakeNpuExecutionProvider"], {"ONNXWRAPPER_BACKEND": "fakenpu"}, fakes)
    assert (sel.name, sel.source) == ("cpu", "argument")
    sel = select_backend(None, [("FakeNpuExecutionProvider", {"a": 1})], {"ONNXWRAPPER_BACKEND": "cpu"}, fakes)
    assert (sel.name, sel.source, dict(sel.provider_options)) == ("fakenpu", "providers", {"a": "1"})
    sel = select_backend(None, None, {"ONNXWRAPPER_BACKEND": "Fake-NPU"}, fakes)
    assert (sel.name, sel.source) == ("fakenpu", "environment")
    assert select_backend(None, None, {}, fakes).name == "fakenpu"  # auto: a real NPU
    FakeNpuBackend.auto = False
    fakes.register(FakeNpuBackend)
    assert select_backend(None, None, {}, fakes).name == "cpu"  # real NPU, but artifacts-only backend
    FakeNpuBackend.auto = True
    FakeNpuBackend.real = False
    fakes.register(FakeNpuBackend)
    sel = select_backend(None, None, {}, fakes)
    assert (sel.name, sel.source) == ("cpu", "auto")  # a simulated NPU is never auto-selected


def test_unavailable_backend(fakes):
    FakeNpuBackend.available = False
    fakes.register(FakeNpuBackend)
    with pytest.raises(BackendUnavailableError, match="not available on this host: no fake device.*plug in") as info:
        onnxwrapper.InferenceSession(models.mul_1(), backend="fakenpu")
    assert info.value.backend == "fakenpu" and info.value.install_hint
    with pytest.raises(BackendUnavailableError):
        select_backend(None, None, {"ONNXWRAPPER_BACKEND": "fakenpu"}, fakes)
    with pytest.warns(UserWarning, match="not available here"):
        sel = select_backend(None, ["FakeNpuExecutionProvider", "CPUExecutionProvider"], {}, fakes)
    assert sel.name == "cpu"


def test_unknown_backend_and_bad_options(fakes):
    with pytest.raises(BackendNotFoundError, match="Unknown backend 'nope'"):
        onnxwrapper.InferenceSession(models.mul_1(), backend="nope")
    with pytest.raises(BackendOptionError, match="Did you mean 'level'"):
        onnxwrapper.InferenceSession(models.mul_1(), backend="fakenpu", backend_options={"levl": 2})
    with pytest.raises(BackendOptionError, match="Expected one of"):
        onnxwrapper.InferenceSession(models.mul_1(), backend="fakenpu", backend_options={"level": 7})
    with pytest.raises(BackendOptionError, match="Unknown option 'x' for backend 'cpu'"):
        onnxwrapper.InferenceSession(models.mul_1(), backend="cpu", backend_options={"x": 1})
    sess = onnxwrapper.InferenceSession(models.mul_1(), backend="FAKENPU", backend_options={"level": "3"})
    assert sess.backend_name == "fakenpu" and sess._ow_backend.config == {"level": 3}


def test_npu_backend_never_falls_back_silently(fakes):
    sess = onnxwrapper.InferenceSession(models.mul_1(), backend="fakenpu")
    with pytest.warns(UserWarning, match="never moves an NPU session to CPU"):
        sess.enable_fallback()
    assert sess._enable_fallback is False


class _RefusingSession(OrtBackendSession):
    def before_providers_change(self, backend):
        if backend != "fakenpu":
            raise BackendCapabilityError(f"refusing to move to {backend}", backend="fakenpu")


def test_set_providers_on_an_npu_backend_checks_like_ort_then_reopens(fakes, monkeypatch):
    sess = onnxwrapper.InferenceSession(models.mul_1(), backend="fakenpu", backend_options={"level": 2})
    first = sess.backend_session
    with pytest.warns(UserWarning, match="'InvalidProvider' is not in available provider names"), \
            pytest.raises(RuntimeError, match="Unknown Provider Type: InvalidProvider"):
        sess.set_providers(["InvalidProvider"])
    with pytest.raises(ValueError, match="should be the same length"):
        sess.set_providers(["CPUExecutionProvider"], [{}, {}])
    assert sess.backend_session is first and sess.backend_name == "fakenpu"  # checked before anything changed
    sess.set_providers([("FakeNpuExecutionProvider", {"x": 1})])  # its own provider: the same backend again
    assert sess.backend_name == "fakenpu" and sess._ow_backend.config == {"level": 2}
    assert sess.backend_session is not first and sess._ow_request.ep_options == {"FakeNpuExecutionProvider": {"x": "1"}}
    sess.set_providers(["CPUExecutionProvider"])  # an explicit request: the session moves to the cpu backend
    assert sess.backend_name == "cpu" and sess.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_array_equal(sess.run(None, {"X": X})[0], X * X)
    monkeypatch.setattr(FakeNpuBackend, "open", lambda self, request: _RefusingSession(request.path_or_bytes))
    strict = onnxwrapper.InferenceSession(models.mul_1(), backend="fakenpu")
    with pytest.raises(BackendCapabilityError, match="refusing to move to cpu"):
        strict.set_providers(["CPUExecutionProvider"])
    assert strict.backend_name == "fakenpu"


def test_foreign_session_serves_run_and_metadata(fakes):
    sess = onnxwrapper.InferenceSession(models.mul_1(), backend="fakeforeign")
    assert sess.get_providers() == ["FakeForeign"]
    assert [(i.name, i.type, i.shape) for i in sess.get_inputs()] == [("X", "tensor(float)", [3, 2])]
    np.testing.assert_array_equal(sess.run(None, {"X": X.tolist()})[0], X * X)
    assert sess._ow_backend_session.calls[-1] == (["Y"], {"X": np.dtype(np.float32)})
    with pytest.raises(C.InvalidArgument, match="Unexpected input data type"):
        sess.run(None, {"X": X.astype(np.float64)})
    with pytest.raises(ValueError, match=r"Required inputs \(\['X'\]\)"):
        sess.run(None, {})
    with pytest.raises(C.InvalidArgument, match="Invalid output name:nope"):
        sess.run(["nope"], {"X": X})
    for call in (sess.io_binding, lambda: sess.run_with_ort_values(None, {}), sess.end_profiling,
                 sess.get_provider_graph_assignment_info, lambda: sess.set_providers(None)):
        with pytest.raises(BackendCapabilityError, match="not supported by backend 'fakeforeign'|set_providers"):
            call()
    assert sess.get_profiling_start_time_ns() == 0 and sess.get_partition() is None


def test_run_observer_sees_every_call(mul_1_path):
    seen = []
    early = onnxwrapper.InferenceSession(str(mul_1_path))  # created before the observer: fast path
    assert "run" in vars(early)
    undo = onnxwrapper.add_run_observer(lambda **rec: seen.append(rec))
    assert "run" not in vars(early)
    early.run(None, {"X": X})
    assert seen.pop()["session"] is early
    try:
        sess = onnxwrapper.InferenceSession(str(mul_1_path))
        sess.run(None, {"X": X})
        sess.run_with_ort_values(["Y"], {"X": onnxwrapper.OrtValue.ortvalue_from_numpy(X)})
    finally:
        undo()
    sess.run(None, {"X": X})
    early.run(None, {"X": X})
    assert "run" in vars(early) and "run" in vars(sess)
    assert [r["method"] for r in seen] == ["run", "run_with_ort_values"]
    assert seen[0]["session"] is sess and seen[0]["seconds"] >= 0
    np.testing.assert_array_equal(seen[0]["outputs"][0], X * X)


class _FakeEntryPoint:
    def __init__(self, name, target):
        self.name, self.value, self._target = name, f"fake.module:{name}", target

    def load(self):
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


def test_broken_plugins_are_reported_not_fatal(monkeypatch, caplog):
    reg = BackendRegistry(group="onnxwrapper.tests.none")
    reg._entry_points = {"broken": _FakeEntryPoint("broken", ImportError("no module named fake")),
                         "notabackend": _FakeEntryPoint("notabackend", dict),
                         "fakenpu": _FakeEntryPoint("fakenpu", FakeNpuBackend)}
    reg._classes["cpu"] = default_registry().get("cpu")
    infos = {i.name: i for i in reg.infos()}
    assert not infos["broken"].available and "could not be loaded" in infos["broken"].reason
    assert not infos["notabackend"].available and infos["fakenpu"].available
    with pytest.raises(BackendValidationError) as info:
        reg.get("broken")
    assert isinstance(info.value.__cause__, ImportError) and info.value.entry_point == "broken = fake.module:broken"
    monkeypatch.setenv("ONNXWRAPPER_DISABLE_BACKENDS", "broken, notabackend")
    assert reg.names() == ["cpu", "fakenpu"]
    assert reg.resolve("fake-npu") == "fakenpu"


class _CountingDistribution:
    """A distribution whose name is counted when read (importlib-metadata parses METADATA for it)."""

    reads = 0

    @property
    def name(self):
        type(self).reads += 1
        return "fake-dist"


def test_loading_a_backend_does_not_read_its_distribution_metadata():
    ep = _FakeEntryPoint("fakenpu", FakeNpuBackend)
    ep.dist = _CountingDistribution()
    reg = BackendRegistry(group="onnxwrapper.tests.none")
    reg._entry_points = {"fakenpu": ep}
    reg._classes["cpu"] = default_registry().get("cpu")
    assert reg.get("fakenpu") is FakeNpuBackend and reg.probe("fake-npu").available
    assert _CountingDistribution.reads == 0  # a session's hot path: no METADATA parse
    infos = {i.name: i for i in reg.infos()}
    assert infos["fakenpu"].distribution == "fake-dist" and _CountingDistribution.reads == 1
