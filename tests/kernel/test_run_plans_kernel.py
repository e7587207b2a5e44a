"""The kernel's run plans (call keys, the plan table, the dispatcher), the NaN/±Inf screen a plan
uses, and the façade's own plans for a backend that plans nothing (a foreign backend): after a
planned call, every bad call still raises what onnxruntime raises."""

from __future__ import annotations

import collections
import warnings

import numpy as np
import onnxruntime
import pytest

import onnxwrapper
from onnxwrapper._registry import default_registry
from onnxwrapper.kernel import NonFiniteInputCheck, NonFiniteInputWarning, RunPlans, call_key, plannable
from tests.api.test_backends_registry import FakeForeignBackend

X = np.array([[1, 2], [3, 4], [5, 6]], np.float32)


def test_call_key_tells_apart_everything_validation_reads():
    base = call_key(None, {"X": X})
    assert call_key(None, {"X": X.copy()}) == base and hash(call_key(None, {"X": X + 1})) == hash(base)
    others = [call_key(None, {"X": X.astype(np.float64)}), call_key(None, {"X": X[:2]}),
              call_key(None, {"Z": X}), call_key(None, {"X": X, "Z": X}), call_key(["Y"], {"X": X}),
              call_key(("Y",), {"X": X}), call_key([], {"X": X}),
              call_key(None, collections.OrderedDict(X=X)), call_key(None, {"X": X.view(np.matrix)})]
    assert len({base, *others}) == len(others) + 1
    assert call_key(["Y"], {"Z": X, "X": X}) != call_key(["Y"], {"X": X, "Z": X})  # feed order: ORT's messages
    for names, feed in ((None, [X]), (None, {"X": X.tolist()}), ([["Y"]], {"X": X}), ("Y", {"X": X}),
                        ((n for n in ["Y"]), {"X": X}), ({"Y"}, {"X": X}),
                        (None, {"X": onnxruntime.OrtValue.ortvalue_from_numpy(X)})):
        with pytest.raises((AttributeError, TypeError)):
            call_key(names, feed)


def test_plannable_calls():
    assert plannable(None, {"X": X}) and plannable(["Y"], {"X": X}) and plannable(("Y",), {"X": X})
    assert plannable([], {"X": X})
    for names, feed in (("Y", {"X": X}), ([1], {"X": X}), (None, {"X": X.tolist()}),
                        (None, collections.OrderedDict(X=X)), (None, {"X": X.view(np.matrix)}),
                        (None, {"X": np.float32(1)}), (None, {"X": onnxruntime.OrtValue.ortvalue_from_numpy(X)})):
        assert not plannable(names, feed), (names, feed)


def test_dispatcher_runs_plans_and_sends_the_rest_to_the_full_path():
    missed = []
    plans = RunPlans(lambda feed, names: None, limit=2)
    run = plans.dispatcher(lambda *args: missed.append(args) or "full")
    assert run(None, {"X": X}) == "full" and run(None, [X], "ro") == "full" and run("Y", {"X": X}) == "full"
    plans.add(call_key(None, {"X": X}), lambda feed, run_options: ("plan", run_options))
    assert run(None, {"X": X + 1}, "ro") == ("plan", "ro")
    assert run(None, {"X": X.astype(np.float64)}) == "full"
    assert len(missed) == 4 and missed[1] == (None, [X], "ro")
    plans.add(call_key(["Y"], {"X": X}), lambda feed, run_options: "y")
    plans.add(call_key(["Z"], {"X": X}), lambda feed, run_options: "z")  # over the limit: the table starts again
    assert list(plans.table) == [call_key(["Z"], {"X": X})]
    plans.clear()
    assert run(["Z"], {"X": X}) == "full"


def test_calling_plans_pass_resolved_names_and_a_fresh_dict():
    got = []
    plans = RunPlans.calling(lambda names, feed, run_options: got.append((names, feed, run_options)) or [1])
    feed = {"X": X}
    plan = plans.build(feed, ["Y"])
    assert plan(feed, None) == [1] and got[0][0] == ["Y"] and got[0][1] == feed and got[0][1] is not feed


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_screen_finds_every_nonfinite_position(dtype):
    template = {"a": np.ones((3, 4), dtype), "i": np.ones(2, np.int64), "b": np.full((5,), np.finfo(dtype).max, dtype)}
    for name in ("a", "b"):
        for position in range(template[name].size):
            for bad in (np.nan, np.inf, -np.inf):
                check = NonFiniteInputCheck("m", "t", "e")
                screen = check.screen(template)
                feed = {k: v.copy() for k, v in template.items()}
                feed[name].flat[position] = bad
                with pytest.warns(NonFiniteInputWarning, match=f"Input '{name}'"):
                    screen(feed)
                assert check.done
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        NonFiniteInputCheck("m", "t", "e").screen(template)(template)  # finite, even at the dtype's max: silent


def test_screen_views_large_arrays_and_feeds_without_floats():
    check = NonFiniteInputCheck("m", "t", "e")
    assert check.screen({"i": np.ones(3, np.int32), "e": np.ones((0, 2), np.float32)}) is None
    view = np.broadcast_to(np.array([1, np.inf], np.float32), (4, 2))
    with pytest.warns(NonFiniteInputWarning, match="4 \\+Inf"):
        check.screen({"v": view})({"v": view})
    large = np.ones(1 << 17, np.float32)
    check = NonFiniteInputCheck("m", "t", "e")
    screen = check.screen({"x": large})
    screen({"x": large})
    large[-1] = np.nan
    with pytest.warns(NonFiniteInputWarning, match="1 NaN"):
        screen({"x": large})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        screen({"x": large})  # warned once per session


@pytest.fixture
def fakemul():
    """The foreign test double of the registry tests (``fakeforeign``: mul_1 in numpy, records its calls)."""
    registry = default_registry()
    registry.register(FakeForeignBackend)
    yield
    registry.unregister("fakeforeign")


BAD = [(None, {"X": X.astype(np.float64)}), (None, {"X": X[:2]}), (None, {"X": X[None]}), (None, {"X": X, "Q": X}),
       (None, {"Q": X}), (["nope"], {"X": X}), ("Y", {"X": X}), (None, {"X": np.float32(1)}), (None, [X])]


def test_foreign_session_after_a_planned_call_raises_what_ort_raises(fakemul, mul_1_path):
    ours = onnxwrapper.InferenceSession(str(mul_1_path), backend="fakeforeign")
    theirs = onnxruntime.InferenceSession(str(mul_1_path))
    np.testing.assert_array_equal(ours.run(None, {"X": X})[0], theirs.run(None, {"X": X})[0])
    for names, feed in BAD:
        ours.run(None, {"X": X})  # planned
        with pytest.raises(Exception) as expected:
            theirs.run(names, feed)
        with pytest.raises(type(expected.value)) as got:
            ours.run(names, feed)
        assert str(got.value).splitlines()[0] == str(expected.value).splitlines()[0]
    np.testing.assert_array_equal(ours.run(["Y"], {"X": X.tolist()})[0], theirs.run(["Y"], {"X": X.tolist()})[0])
    assert len(ours.backend_session.calls) == len(BAD) + 2  # the bad calls never reached it
    ours.close()
    assert ours._ow_plans.table == {}
