"""The hot patch in this process: every route to ``onnxruntime.InferenceSession`` is redirected,
onnxruntime's internals are not, and uninstall restores the identical objects.

A fake backend ``fakenpu`` (registered per test) makes redirection visible: it runs on ORT's CPU
provider but records every session it opens, the providers the caller asked for, and the type
of a helper session it creates itself (which must stay a plain ORT session).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types

import numpy as np
import onnxruntime
import pytest

import aipc_loader
import onnxwrapper
from aipc_loader import _patch
from onnxwrapper._registry import default_registry
from onnxwrapper.backends.base import Availability, Backend, OptionSpec, OrtBackendSession
from tests import models

REAL = onnxruntime.capi.onnxruntime_inference_collection.InferenceSession
REAL_INIT = vars(REAL)["__init__"]
FEED = {"X": np.arange(6, dtype=np.float32).reshape(3, 2)}


class FakeNpuBackend(Backend):
    """Runs on ORT's CPU EP; records what it was asked (test double)."""

    name = "fakenpu"
    aliases = ("fake-npu",)
    options = {"level": OptionSpec("level", "an integer test option", default=0, convert=int)}
    opened: list = []

    @classmethod
    def probe(cls) -> Availability:
        return Availability(True, reason="test backend")

    def open(self, request):
        helper = onnxruntime.InferenceSession(request.path_or_bytes, providers=["CPUExecutionProvider"])
        FakeNpuBackend.opened.append({"providers": request.providers, "config": dict(self.config),
                                      "helper": type(helper)})
        return OrtBackendSession(request.path_or_bytes, request.sess_options, ["CPUExecutionProvider"],
                                 None, request.kwargs)


@pytest.fixture(autouse=True)
def fake_backend():
    registry = default_registry()
    registry.register(FakeNpuBackend)
    FakeNpuBackend.opened.clear()
    yield FakeNpuBackend
    aipc_loader.uninstall()
    registry.unregister("fakenpu")
    assert vars(REAL)["__init__"] is REAL_INIT


def is_redirected(session) -> bool:
    return isinstance(session, onnxwrapper.InferenceSession) and session.backend_name == "fakenpu"


def test_import_forms_and_activation_orders(tmp_path):
    from onnxruntime import InferenceSession as bound_before  # bound before activation

    path = tmp_path / "m.onnx"
    path.write_bytes(models.mul_1())
    aipc_loader.install("fakenpu", level="2")
    import onnxruntime as ort
    from onnxruntime import InferenceSession as bound_after

    routes = [ort.InferenceSession, bound_before, bound_after,
              importlib.import_module("onnxruntime").InferenceSession,
              importlib.import_module(_patch.CLASS_MODULE).InferenceSession]
    for route in routes:
        assert route is REAL
        session = route(str(path), providers=["CPUExecutionProvider"])
        assert is_redirected(session)
        assert isinstance(session, ort.InferenceSession)
        np.testing.assert_array_equal(session.run(None, FEED)[0], FEED["X"] * [[1, 2], [3, 4], [5, 6]])
    assert [o["providers"] for o in FakeNpuBackend.opened] == [["CPUExecutionProvider"]] * len(routes)
    assert all(o["config"] == {"level": 2} for o in FakeNpuBackend.opened)
    # the backend's own helper session was not redirected (re-entrancy guard)
    assert all(o["helper"] is REAL for o in FakeNpuBackend.opened)


def test_bytes_pathlike_positional_and_keyword_arguments(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(models.mul_1())
    with aipc_loader.activated("fakenpu"):
        so = onnxruntime.SessionOptions()
        for session in (onnxruntime.InferenceSession(models.mul_1()),
                        onnxruntime.InferenceSession(path, so, ["CPUExecutionProvider"]),
                        onnxruntime.InferenceSession(path_or_bytes=str(path), sess_options=so,
                                                     providers=[("CPUExecutionProvider", {})])):
            assert is_redirected(session)
            assert session.get_inputs()[0].name == "X"


def test_lazy_import_in_a_third_party_package(tmp_path, monkeypatch):
    pkg = tmp_path / "thirdparty"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "def load(model):\n"
        "    from onnxruntime import InferenceSession  # imported lazily, inside the library\n"
        "    return InferenceSession(model, providers=['CPUExecutionProvider'])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with aipc_loader.activated("fakenpu"):
        import thirdparty

        assert is_redirected(thirdparty.load(models.mul_1()))
    sys.modules.pop("thirdparty", None)


def test_subclass_in_user_code_is_redirected_and_keeps_its_methods():
    class MySession(onnxruntime.InferenceSession):
        def __init__(self, model, **kwargs):
            self.before = True
            super().__init__(model, **kwargs)
            self.after = self.get_inputs()[0].name

        def run(self, output_names, input_feed, run_options=None):
            return ["mine", *super().run(output_names, input_feed, run_options)]

    class OldStyle(onnxruntime.InferenceSession):
        def __init__(self, model):
            onnxruntime.InferenceSession.__init__(self, model, providers=["CPUExecutionProvider"])

    with aipc_loader.activated("fakenpu"):
        session = MySession(models.mul_1(), providers=["CPUExecutionProvider"])
        old = OldStyle(models.mul_1())
    for s in (session, old):
        assert is_redirected(s)
        assert isinstance(s, onnxruntime.InferenceSession)
    assert isinstance(session, MySession) and type(session).__name__ == "MySession"
    assert isinstance(old, OldStyle)
    assert session.before and session.after == "X"
    out = session.run(None, FEED)
    assert out[0] == "mine" and out[1].shape == (3, 2)
    assert old.run(None, FEED)[0].shape == (3, 2)
    plain = MySession(models.mul_1())          # after deactivation: ORT as usual
    assert type(plain) is MySession and not isinstance(plain, onnxwrapper.InferenceSession)


def test_uninstall_restores_the_identical_objects():
    before = {name: getattr(onnxruntime, name) for name in dir(onnxruntime) if not name.startswith("__")}
    signature = inspect.signature(onnxruntime.InferenceSession)
    aipc_loader.install("fakenpu")
    assert aipc_loader.is_active()
    assert inspect.signature(onnxruntime.InferenceSession) == signature
    assert vars(REAL)["__init__"] is not REAL_INIT
    assert is_redirected(onnxruntime.InferenceSession(models.mul_1()))
    aipc_loader.uninstall()
    aipc_loader.uninstall()  # idempotent
    assert not aipc_loader.is_active()
    assert vars(REAL)["__init__"] is REAL_INIT
    after = {name: getattr(onnxruntime, name) for name in dir(onnxruntime) if not name.startswith("__")}
    assert after.keys() == before.keys()
    assert all(after[name] is before[name] for name in before)
    assert type(onnxruntime.InferenceSession(models.mul_1())) is REAL


def test_onnxruntime_internals_are_the_real_objects():
    capi = importlib.import_module("onnxruntime.capi._pybind_state")
    names = ("SessionOptions", "OrtValue", "RunOptions", "get_available_providers")
    before = {n: getattr(onnxruntime, n) for n in names}
    with aipc_loader.activated("fakenpu"):
        assert importlib.import_module("onnxruntime.capi._pybind_state") is capi
        quantization = importlib.import_module("onnxruntime.quantization")
        tools = importlib.import_module("onnxruntime.tools.onnx_model_utils")
        assert quantization.quantize_static.__module__ == "onnxruntime.quantization.quantize"
        assert callable(tools.make_input_shape_fixed)

        assert {n: getattr(onnxruntime, n) for n in names} == before
        assert sys.modules["onnxruntime"] is onnxruntime
        value = onnxruntime.OrtValue.ortvalue_from_numpy(FEED["X"])
        assert type(value) is before["OrtValue"]


def test_sessions_created_by_onnxruntime_modules_keep_their_providers():
    created = []
    undo = _patch.add_session_listener(lambda session, **kw: created.append(session))
    try:
        with aipc_loader.activated("fakenpu"):
            for module_name in ("onnxruntime.quantization.calibrate", "onnxruntime.transformers.optimizer"):
                namespace = {"__name__": module_name, "IS": onnxruntime.InferenceSession, "m": models.mul_1()}
                exec("session = IS(m, providers=['CPUExecutionProvider'])", namespace)
                assert type(namespace["session"]) is REAL
            spec = types.SimpleNamespace(name="onnxruntime.tools.something")
            namespace = {"__name__": "__main__", "__spec__": spec, "IS": onnxruntime.InferenceSession,
                         "m": models.mul_1()}
            exec("session = IS(m)", namespace)          # python -m onnxruntime.tools.something
            assert type(namespace["session"]) is REAL
            namespace = {"__name__": "onnxruntime_extensions_like", "IS": onnxruntime.InferenceSession,
                         "m": models.mul_1()}
            exec("session = IS(m)", namespace)          # not inside the onnxruntime package
            assert is_redirected(namespace["session"])
    finally:
        undo()
    assert len(created) == 1


def test_quantization_calibration_sessions_keep_their_providers(tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    model = tmp_path / "conv.onnx"
    model.write_bytes(models.smallconv(batch=1))

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.feeds = iter([{"X": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(2)])

        def get_next(self):
            return next(self.feeds, None)

    created = []
    undo = _patch.add_session_listener(lambda session, **kw: created.append(session))
    try:
        with aipc_loader.activated("fakenpu"):
            quantize_static(str(model), str(tmp_path / "conv_q.onnx"), Reader(), quant_format=QuantFormat.QDQ)
            user = onnxruntime.InferenceSession(str(tmp_path / "conv_q.onnx"))
    finally:
        undo()
    assert created == [user] and is_redirected(user)
    assert FakeNpuBackend.opened and len(FakeNpuBackend.opened) == 1


def test_activated_nests_and_restores():
    assert not aipc_loader.is_active()
    with aipc_loader.activated("fakenpu", level=1) as outer:
        assert outer.backend == "fakenpu"
        with aipc_loader.activated("cpu") as inner:
            assert inner.backend == "cpu"
            s = onnxruntime.InferenceSession(models.mul_1())
            assert isinstance(s, onnxwrapper.InferenceSession) and s.backend_name == "cpu"
        assert _patch.current_activation() == outer
        assert is_redirected(onnxruntime.InferenceSession(models.mul_1()))
    assert not aipc_loader.is_active()
    assert vars(REAL)["__init__"] is REAL_INIT


def test_install_validates_before_activating():
    from onnxwrapper.errors import BackendNotFoundError, BackendOptionError

    with pytest.raises(BackendNotFoundError, match="Unknown backend 'nope'"):
        aipc_loader.install("nope")
    with pytest.raises(BackendOptionError, match="Did you mean 'level'"):
        aipc_loader.install("fakenpu", levle=1)
    with pytest.raises(BackendOptionError, match="Invalid value"):
        aipc_loader.install("fakenpu", level="high")
    assert not aipc_loader.is_active()
    aipc_loader.install("FAKE-NPU")  # aliases, any case
    assert _patch.current_activation().backend == "fakenpu"


def test_errors_of_the_constructor_are_the_facades():
    with aipc_loader.activated("fakenpu"):
        with pytest.raises(TypeError, match="path_or_bytes"):
            onnxruntime.InferenceSession()
        with pytest.raises(Exception, match="NO_SUCHFILE|No such file|doesn't exist|not exist"):
            onnxruntime.InferenceSession("does-not-exist.onnx")


def test_listener_gets_session_model_and_time():
    seen = []
    undo = _patch.add_session_listener(lambda session, **kw: seen.append((session, kw)))
    undo2 = _patch.add_session_listener(lambda session, **kw: None)
    undo2()
    undo2()
    try:
        with aipc_loader.activated("fakenpu"):
            s = onnxruntime.InferenceSession(models.mul_1())
    finally:
        undo()
    assert seen[0][0] is s
    assert seen[0][1]["model"] == models.mul_1() and seen[0][1]["seconds"] >= 0


def test_importing_the_package_patches_nothing():
    code = ("import sys, aipc_loader\n"
            "assert 'onnxruntime' not in sys.modules and 'onnxwrapper' not in sys.modules\n"
            "assert not aipc_loader.is_active()\n"
            "import onnxruntime\n"
            "from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession as S\n"
            "assert type(vars(S)['__init__']).__name__ == 'function'\n")
    from tests.test_loader_support import run

    result = run(["-c", code])
    assert result.returncode == 0, result.stderr
