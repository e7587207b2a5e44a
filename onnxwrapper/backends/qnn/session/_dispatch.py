"""Run plans of a dynamic-shape QNN session: a validated call goes straight to its specialization.

A :class:`~onnxwrapper.backends.qnn.session._session.QnnDynamicSession` runs each feed on the static ORT
session compiled for the feed's shapes (and control values). :func:`plan_run` decides that once
per call key (:class:`onnxwrapper.kernel.RunPlans`, whose key holds every feed shape and dtype):
the plan of a key holds the specialization's ORT session, the resolved output names and the
NaN/±Inf screen of its float inputs (:meth:`onnxwrapper.kernel.NonFiniteInputCheck.screen`), so a
call costs the screen and the ORT call. What stays per call:

* the screen (until the session has warned once): about 1 µs for a few hundred floats;
* the LRU order: when the previous run used another specialization, the owner's
  ``_specialization`` marks this one as the most recently used (and the partition reported);
* control values (rank-0 inputs deciding an ``If``, e.g. silero-vad's ``sr``): not part of the
  call key, so read per call (``.item()``) and looked up among the plan's specializations.

The owner clears its plans when it releases a specialization (LRU) and on ``close()``.

:func:`ort_runner` runs an ORT session without its Python ``run`` wrapper (measured on
onnxruntime 1.32: about 0.9 µs per call) when that wrapper has nothing left to do for a validated
feed: its missing-input check, ``OrtValue`` ownership check and default output names are done,
and the session has no CPU fallback and no WebGPU graph capture.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from onnxwrapper.backends.qnn.compile import ort_session_class
from onnxwrapper.kernel import screened_plan

__all__ = ["ort_runner", "plan_run"]

Runner = Callable[[list, Mapping[str, Any], Any], list]


def ort_runner(session) -> Runner:
    """``run(output_names, feed, run_options)`` of ORT ``InferenceSession`` ``session`` for feeds
    already validated against it (``output_names`` a resolved ``list[str]``): the native session's
    ``run`` when ORT's Python ``run`` would only forward to it (see the module docstring), else
    ``session.run``. Results and errors are ORT's."""
    native = getattr(session, "_sess", None)
    if (type(session) is ort_session_class() and native is not None and not session._enable_fallback
            and not getattr(native, "is_webgpu_graph_capture_enabled", lambda: False)()):
        return native.run
    return session.run


def plan_run(owner, feed: dict, names: list) -> Callable[[Mapping[str, Any], Any], list]:
    """The plan of a validated call of ``owner`` (a ``QnnDynamicSession``) with feed ``feed``
    (``{name: numpy.ndarray}``) and resolved output ``names``: compiles or loads the specialization
    now if needed (as the first ``run`` of these shapes would) and returns
    ``plan(input_feed, run_options) -> list of numpy arrays`` for every call with the same key.
    A feed with a size-0 dim is planned on the owner's CPU session of the original model."""
    check = owner.nonfinite_check
    screen = check.screen(feed) if check is not None else None
    if screen is not None:
        screen(feed)  # before compiling, as the unplanned run warns first
    shapes = {name: feed[name].shape for name in owner.dynamic_names if name in feed}
    if any(0 in shape for shape in shapes.values()):
        return screened_plan(ort_runner(owner._empty()), names, screen)
    if owner.buckets is not None:
        padding, usage = owner.padding_for(shapes, feed)
        if padding is not None:  # a certified shape bucket: run padded, cut the outputs back
            plan = plan_run_padded(owner, padding, padding.pad_feed(feed), padding.shapes(shapes), names)
            return _counted(plan, usage)
    else:
        usage = None
    shape_key = tuple(shapes.values())
    controls = tuple(name for name in owner.control_names if name in feed)
    if not owner.control_names:
        spec = owner._specialization(shape_key, shapes, feed)
        plan = _direct(owner, spec, shape_key, shapes, names, screen)
    else:
        keep = tuple(name for name in feed if name not in owner.control_names)
        plan = _by_values(owner, shape_key, shapes, controls, keep, names, screen)
    return plan if usage is None else _counted(plan, usage)


def plan_run_padded(owner, padding, padded_feed: dict, run_shapes: dict, names: list):
    """The plan of a kind of call served by a shape bucket: the feed is padded by ``padding``, run on the
    bucket's specialization (through the unpadded plan machinery, so LRU order, control values and
    the NaN/±Inf screen work as for any call), and the outputs are cut back."""
    all_names = list(names)
    inner = plan_run(_Unbucketed(owner), padded_feed, all_names)

    def plan(feed, run_options):
        return padding.cut_outputs(all_names, inner(padding.pad_feed(feed), run_options))
    return plan


class _Unbucketed:
    """``owner`` as seen by :func:`plan_run` for an already padded feed: the same session without buckets."""

    buckets = None

    def __init__(self, owner) -> None:
        self._owner = owner

    def __getattr__(self, name):
        return getattr(self._owner, name)


def _counted(plan, usage: dict):
    """``plan`` counting its calls in the bucket statistics' ``usage`` record."""
    def counted(feed, run_options):
        usage["calls"] += 1
        return plan(feed, run_options)
    return counted


def _direct(owner, spec, key: tuple, shapes: dict, names: list, screen):
    """The plan of a model without control inputs: one specialization per key."""
    run, report = ort_runner(spec.session), spec.report

    def plan(feed, run_options):
        if screen is not None:
            screen(feed)
        if owner._latest is not report:  # another specialization ran last: LRU order, reported partition
            current = owner._specialization(key, shapes, feed)
            if current is not spec:  # released and built again meanwhile
                return current.session.run(names, feed, run_options)
        return run(names, feed, run_options)
    return plan


def _by_values(owner, shape_key: tuple, shapes: dict, controls: tuple, keep: tuple, names: list, screen):
    """The plan of a model with control inputs: one specialization per tuple of control values,
    read per call; control inputs are not fed (the specialization holds them as constants) — except
    to a specialization that is ORT's CPU session of the whole model (the QNN EP takes no node of
    it, or a repair recipe runs all of it on the CPU), which takes every input."""
    targets: dict[tuple, tuple] = {}  # control values → (specialization, its runner, the inputs it takes)

    def plan(feed, run_options):
        if screen is not None:
            screen(feed)
        values = tuple([feed[name].item() for name in controls])  # rank-0 arrays: Python scalars
        target = targets.get(values)
        if target is None or owner._latest is not target[0].report:
            spec = owner._specialization((shape_key, values), shapes, feed)
            if target is None or target[0] is not spec:
                target = targets[values] = (spec, ort_runner(spec.session), _fed(spec.session, keep, controls))
        return target[1](names, {name: feed[name] for name in target[2]}, run_options)
    return plan


def _fed(session, keep: tuple, controls: tuple) -> tuple:
    """The inputs a specialization's session takes: ``keep``, and the control inputs it declares."""
    declared = {i.name for i in session.get_inputs()} if hasattr(session, "get_inputs") else set()
    return tuple(keep) + tuple(name for name in controls if name in declared)
