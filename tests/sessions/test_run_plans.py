"""Planned runs of a dynamic-shape model on the qnn backend behave as ORT + the QNN EP.

After a call has been validated and planned (onnxwrapper.kernel.RunPlans), later calls with the same
key skip validation; every call that differs in anything ORT checks — dtype, rank, a fixed dim,
an extra, missing or misspelt name, output names, the value types — must still get ORT's exact
error or result. One call sequence, run on both flavours (``qrt``, tests/qnn_flavours.py), each
bad call right after a planned good one and twice; plus what only onnxwrapper has: the plans
themselves, the NaN/±Inf warning, ``close()``, the LRU of specializations and run observers.
"""

from __future__ import annotations

import collections
import uuid
import warnings

import numpy as np
import onnx.helper as h
import onnxruntime
import pytest
from onnx import TensorProto as T

import onnxwrapper
from onnxwrapper.errors import SessionClosedError
from onnxwrapper.kernel import NonFiniteInputWarning
from tests import models
from tests.conftest import qnn_available

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]


def add_mul(doc: str = "", n="N") -> bytes:
    """``Y = X + Z``, ``V = X * Z``; X float[n, 2] (dynamic: ``n="N"``), Z float[1, 2] (fixed)."""
    g = h.make_graph([h.make_node("Add", ["X", "Z"], ["Y"]), h.make_node("Mul", ["X", "Z"], ["V"])], "add_mul",
                     [h.make_tensor_value_info("X", T.FLOAT, [n, 2]), h.make_tensor_value_info("Z", T.FLOAT, [1, 2])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [n, 2]), h.make_tensor_value_info("V", T.FLOAT, [n, 2])])
    return models.make_model(g, doc_string=doc or uuid.uuid4().hex)


X = np.array([[1, 2], [3, 4]], np.float32)  # small integers: exact in FP16 too
Z = np.array([[2, 3]], np.float32)
X4 = np.arange(16, dtype=np.float32).reshape(4, 4)


class _Sub(np.ndarray):
    """A numpy subclass: another value class, so another call key."""


def _calls():
    """``(label, output_names, feed, run_options)``; feeds are built anew for every call."""
    ro = onnxruntime.RunOptions()
    stop = onnxruntime.RunOptions()
    stop.terminate = True
    return [
        ("ok", None, lambda: {"X": X, "Z": Z}, None),
        ("ok again", None, lambda: {"X": X, "Z": Z}, None),
        ("subset", ["V"], lambda: {"X": X, "Z": Z}, None),
        ("reordered", ["V", "Y"], lambda: {"X": X, "Z": Z}, None),
        ("tuple names", ("Y",), lambda: {"X": X, "Z": Z}, None),
        ("empty names", [], lambda: {"X": X, "Z": Z}, None),
        ("str names", "Y", lambda: {"X": X, "Z": Z}, None),
        ("unknown output", ["nope"], lambda: {"X": X, "Z": Z}, None),
        ("non-str output", [1], lambda: {"X": X, "Z": Z}, None),
        ("dtype", None, lambda: {"X": X.astype(np.float64), "Z": Z}, None),
        ("int dtype", None, lambda: {"X": X.astype(np.int32), "Z": Z}, None),
        ("rank", None, lambda: {"X": X[None], "Z": Z}, None),
        ("fixed dim", None, lambda: {"X": X, "Z": np.ones((1, 3), np.float32)}, None),
        ("extra key", None, lambda: {"X": X, "Z": Z, "Q": Z}, None),
        ("missing", None, lambda: {"X": X}, None),
        ("reordered feed", None, lambda: {"Z": Z, "X": X}, None),
        ("list value", None, lambda: {"X": X.tolist(), "Z": Z}, None),
        ("OrtValue value", None, lambda: {"X": onnxruntime.OrtValue.ortvalue_from_numpy(X), "Z": Z}, None),
        ("tuple value", None, lambda: {"X": tuple(map(tuple, X.tolist())), "Z": Z}, None),
        ("scalar value", None, lambda: {"X": np.float32(1), "Z": Z}, None),
        ("non-contiguous", None, lambda: {"X": X4[::2, 1:3], "Z": Z}, None),
        ("broadcast view", None, lambda: {"X": np.broadcast_to(Z, (2, 2)), "Z": Z}, None),
        ("ndarray subclass", None, lambda: {"X": X.view(_Sub), "Z": Z}, None),
        ("OrderedDict feed", None, lambda: collections.OrderedDict(X=X, Z=Z), None),
        ("list feed", None, lambda: [X, Z], None),
        ("run options", None, lambda: {"X": X, "Z": Z}, ro),
        ("terminate", None, lambda: {"X": X, "Z": Z}, stop),
        ("bad run options", None, lambda: {"X": X, "Z": Z}, "fast"),
        ("other shape", None, lambda: {"X": np.ones((3, 2), np.float32), "Z": Z}, None),
        ("first shape again", ["Y"], lambda: {"X": X, "Z": Z}, None),
    ]


def _observe(session, output_names, feed, run_options):
    try:
        out = session.run(output_names, feed, run_options)
    except Exception as exc:  # noqa: BLE001 - the observation is the exception
        return type(exc).__name__, str(exc).splitlines()[0]
    return [np.asarray(o).round(3).tolist() for o in out]


def _sequence(qrt, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = qrt.InferenceSession(path)
    seen = []
    for label, names, feed, run_options in _calls():
        good = _observe(session, None, {"X": X, "Z": Z}, None)  # planned by now (after the first call)
        seen.append((label, _observe(session, names, feed(), run_options), _observe(session, names, feed(), run_options),
                     good))
    return session, seen


@pytest.fixture(scope="module", params=["dynamic", "static"])
def model_path(request, tmp_path_factory):
    """The model with X float[N, 2] (plans of the backend) or float[2, 2] (ORT's run after the screen)."""
    path = tmp_path_factory.mktemp("run_plans") / f"add_mul_{request.param}.onnx"
    path.write_bytes(add_mul(n="N" if request.param == "dynamic" else 2))
    return str(path)


def test_every_call_after_a_planned_one_behaves_as_ort(qrt, model_path):
    session, seen = _sequence(qrt, model_path)
    expected = _expected(model_path)
    for (label, first, second, good), (_, want, _, want_good) in zip(seen, expected):
        assert first == want, label
        assert second == want, label  # an error is not remembered as a plan, a result not changed by one
        assert good == want_good, label


_EXPECTED: dict = {}


def _expected(path):
    """The sequence as plain onnxruntime + QNN EP observes it (computed once per module)."""
    if path not in _EXPECTED:
        from tests.qnn_flavours import OrtQnn

        _EXPECTED[path] = _sequence(OrtQnn, path)[1]
    return _EXPECTED[path]


def test_only_validated_plannable_calls_get_plans(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(add_mul())
    session = onnxwrapper.InferenceSession(str(path), backend="qnn")
    plans = session.backend_session.plans
    assert plans.table == {} and session._ow_dispatch is not None  # run goes to the plan dispatcher
    session.run(None, {"X": X, "Z": Z})
    session.run(["V"], {"X": X, "Z": Z})
    assert len(plans.table) == 2
    for names, feed in ((None, {"X": X.astype(np.float64), "Z": Z}), (["nope"], {"X": X, "Z": Z}),
                        (None, {"X": X.tolist(), "Z": Z}), (None, {"X": X, "Z": Z, "Q": Z})):
        try:
            session.run(names, feed)
        except Exception:  # noqa: BLE001 - ORT's errors, checked above
            pass
    assert len(plans.table) == 2  # errors and lists are never planned
    assert len(session.backend_session.artifacts) == 1  # one compile for both plans


@pytest.mark.parametrize("n", ["N", 2])
def test_nan_after_a_planned_call_warns_once(tmp_path, n):
    path = tmp_path / "m.onnx"
    path.write_bytes(add_mul(n=n))
    session = onnxwrapper.InferenceSession(str(path), backend="qnn")
    session.run(None, {"X": X, "Z": Z})
    assert len(session._ow_plans.table) == 1  # dynamic: the backend's plans; static: the façade's
    bad = X.copy()
    bad[1, 0] = np.nan
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session.run(None, {"X": X, "Z": Z})
        session.run(None, {"X": bad, "Z": Z})
        session.run(None, {"X": X, "Z": np.array([[np.inf, 1]], np.float32)})
    nonfinite = [w for w in caught if issubclass(w.category, NonFiniteInputWarning)]
    assert len(nonfinite) == 1 and "Input 'X'" in str(nonfinite[0].message) and "1 NaN" in str(nonfinite[0].message)
    assert nonfinite[0].filename == __file__  # attributed to the user's run() call


def test_close_drops_the_plans_even_for_a_run_held_before(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(add_mul())
    session = onnxwrapper.InferenceSession(str(path), backend="qnn")
    run = session.run
    run(None, {"X": X, "Z": Z})
    session.close()
    assert session.backend_session.plans.table == {} and "run" not in session.__dict__
    for call in (run, session.run):
        with pytest.raises(SessionClosedError):
            call(None, {"X": X, "Z": Z})


def test_lru_release_and_alternating_shapes(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(add_mul())
    cpu = onnxruntime.InferenceSession(str(path))
    one = onnxwrapper.InferenceSession(str(path), backend="qnn", backend_options={"max_specializations": 1,
                                                                                "shape_buckets": False})
    two = onnxwrapper.InferenceSession(str(path), backend="qnn", backend_options={"max_specializations": 2,
                                                                                "shape_buckets": False})
    shapes = [(2, 2), (3, 2), (2, 2), (3, 2), (3, 2), (2, 2)]
    for shape in shapes:
        feed = {"X": np.ones(shape, np.float32), "Z": Z}
        for session in (one, two):
            np.testing.assert_allclose(session.run(None, feed)[0], cpu.run(None, feed)[0], atol=1e-3)
            latest = session.get_partition()
            live = session.backend_session._live
            assert latest is next(reversed(live.values())).report  # the partition of the shape just run
    assert len(one.backend_session._live) == 1 and len(two.backend_session._live) == 2
    assert len(two.backend_session.plans.table) == 2
    assert len(one.backend_session.plans.table) == 1  # the release cleared the other plan


def test_observers_see_planned_calls(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(add_mul())
    session = onnxwrapper.InferenceSession(str(path), backend="qnn")
    session.run(None, {"X": X, "Z": Z})
    dispatcher = session._ow_dispatch
    seen = []
    undo = onnxwrapper.add_run_observer(lambda **record: seen.append(record["output_names"]))
    try:
        assert session._ow_dispatch is None
        session.run(["V"], {"X": X, "Z": Z})
        with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument):
            session.run(None, {"X": X.astype(np.float64), "Z": Z})
    finally:
        undo()
    assert seen == [["V"]] and session._ow_dispatch is dispatcher


def test_control_inputs_are_read_per_call(tmp_path):
    """silero-vad's structure: ``sr`` is not part of the call key; each value has its specialization."""
    from tests import cf_models

    path = tmp_path / "vad.onnx"
    path.write_bytes(cf_models.if_lstm(seed=6, static=True, stride8k=8))  # both rates valid at 8 samples
    session = onnxwrapper.InferenceSession(str(path), backend="qnn")
    cpu = onnxruntime.InferenceSession(str(path))
    for sr in (16000, 8000, 16000, 8000):
        feed = cf_models.if_feeds(8, sr)
        for got, ref in zip(session.run(None, feed), cpu.run(None, feed)):
            np.testing.assert_allclose(got, ref, atol=2e-2)
    assert len(session.backend_session.plans.table) == 1  # one call key, both rates
    assert len(session.backend_session.artifacts) == 2  # compiled once per rate
