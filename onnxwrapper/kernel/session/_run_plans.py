"""Run plans: what one kind of ``run`` call does, decided once and looked up by the call's key.

A session whose backend serves ``run`` itself validates every call against the model's inputs
(:func:`onnxwrapper.kernel.validate_feed`, onnxruntime's exact errors) and then decides where the
feed goes (e.g. the QNN specialization compiled for its shapes). Both depend on the call's
*key* only (:func:`call_key`): the feed's class, the ``output_names`` argument's class and
contents, and per fed value, in feed order, its name, class, dtype and shape. A call whose key
is the key of a call that passed validation passes again and goes to the same place, so its
*plan* — ``plan(input_feed, run_options) -> outputs``, built after the first such call was
validated — can run it directly. Anything else (another dtype or shape, a list, an
``OrtValue``, an extra or missing name, other output names) misses and takes the full path, which
raises onnxruntime's errors.

Only calls that can be planned get plans (:func:`plannable`): a ``dict`` feed of ``numpy.ndarray``
values (the class itself, not a subclass) and ``output_names`` ``None`` or a ``list``/``tuple``
of ``str``. Looking a call up costs about 0.3 µs for one input (x86-64, CPython 3.11), against
about 10 µs for :func:`~onnxwrapper.kernel.validate_feed`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["RunPlans", "call_key", "plannable", "screened_plan"]

Plan = Callable[[Mapping[str, Any], Any], Any]
#: ``output_names`` types that have a key (read without consuming anything, e.g. not a generator)
_SEQUENCES = (list, tuple)


def call_key(output_names, input_feed) -> tuple:
    """The key of a ``run(output_names, input_feed)`` call (see the module docstring).

    Returns:
        A flat hashable tuple: feed class, ``output_names`` class, ``None`` or the tuple of names,
        then name, class, dtype, shape for each fed value in feed order.

    Raises:
        ``AttributeError`` / ``TypeError`` for a call that has no key (the feed is not a mapping,
        a value has no ``dtype``/``shape``, a name is unhashable, ``output_names`` is neither
        ``None`` nor a ``list``/``tuple``); such calls are never planned.
    """
    names = (output_names if output_names is None
             else tuple(output_names) if output_names.__class__ in _SEQUENCES else [])  # []: unhashable, no key
    key = [input_feed.__class__, output_names.__class__, names]
    for name, value in input_feed.items():
        key += (name, value.__class__, value.dtype, value.shape)
    key = tuple(key)
    hash(key)
    return key


def plannable(output_names, input_feed) -> bool:
    """Whether a call that passed validation may get a plan: ``input_feed`` is a ``dict`` whose
    values are all ``numpy.ndarray`` (exactly), ``output_names`` is ``None`` or a ``list``/``tuple``
    of ``str``."""
    if type(input_feed) is not dict or any(type(v) is not np.ndarray for v in input_feed.values()):
        return False
    if output_names is None:
        return True
    return type(output_names) in _SEQUENCES and all(isinstance(n, str) for n in output_names)


def screened_plan(run: Callable, names, screen: Callable | None) -> Callable:
    """The plan ``(feed, run_options) -> outputs`` that calls ``run(names, feed, run_options)``,
    after ``screen(feed)`` (a NaN/±Inf screen that warns, or ``None`` for no screen).

    Args:
        run: an ORT-style ``run(output_names, feed, run_options)``.
        names: the output names (``None``: all), list of str, already validated.
        screen: ``callable(feed)`` or ``None``.
    """
    if screen is None:
        return lambda feed, run_options: run(names, feed, run_options)

    def plan(feed, run_options):
        screen(feed)
        return run(names, feed, run_options)
    return plan


class RunPlans:
    """One session's plans, by call key.

    Args:
        build: ``build(feed, output_names) -> plan | None``, called with a validated feed
            (``{name: numpy.ndarray}``) and the resolved output names (``list[str]``, all outputs
            for ``None``/``[]``); returns the plan for every later call with the same key — it may
            compile or load whatever the call needs first — or ``None`` to plan nothing.
        limit: the most plans kept; adding one more drops them all (they are rebuilt on demand).

    Whoever makes a plan stale (a backend releasing the session a plan runs, ``close()``) calls
    :meth:`clear`; a call then misses and is validated and planned again. Thread-safe: the table
    is a ``dict`` changed by single operations.
    """

    __slots__ = ("table", "build", "limit")

    def __init__(self, build: Callable[[dict, list], Plan | None], limit: int = 64) -> None:
        self.table: dict[tuple, Plan] = {}
        self.build = build
        self.limit = limit

    @classmethod
    def calling(cls, run: Callable[..., Any]) -> "RunPlans":
        """Plans that call ``run(output_names, feed, run_options)`` — a backend's ``run`` that takes
        validated feeds — with the resolved output names and a fresh ``{name: numpy.ndarray}`` dict:
        validation once per call key, nothing else decided ahead."""
        def build(feed: dict, names: list) -> Plan:
            return lambda input_feed, run_options: run(names, dict(input_feed), run_options)
        return cls(build)

    @classmethod
    def checking(cls, check: Any, run: Callable[..., Any]) -> "RunPlans":
        """Plans for a session ONNX Runtime runs and checks itself (``run``: ORT's own ``run``) whose
        backend checks each feed first (``check``: a :class:`~onnxwrapper.kernel.NonFiniteInputCheck`):
        per call key, the check's cheaper ``screen`` for that key, then ``run`` with a copy of the
        call's ``output_names`` (``build`` gets the call's own feed and ``output_names``). Any
        error is ORT's: ORT's ``run`` checks every call."""
        def build(feed: dict, output_names) -> Plan:
            names = None if output_names is None else list(output_names)
            return screened_plan(run, names, check.screen(feed))
        return cls(build)

    def add(self, key: tuple, plan: Plan) -> None:
        """Keep ``plan`` for calls with ``key``."""
        if len(self.table) >= self.limit:
            self.table.clear()
        self.table[key] = plan

    def clear(self) -> None:
        """Drop every plan (later calls are validated and planned again)."""
        self.table.clear()

    def dispatcher(self, missed: Callable[..., Any]) -> Callable[..., Any]:
        """``run(output_names, input_feed, run_options=None)`` that runs the plan of the call's key,
        or ``missed(output_names, input_feed, run_options)`` — the full path, which validates and may
        :meth:`add` a plan — for a call without one. Same arguments and results as ORT's ``run``."""
        table = self.table

        def run(output_names, input_feed, run_options=None):
            try:  # the key of call_key(), inline: this is the hot path
                key = [input_feed.__class__, output_names.__class__, output_names if output_names is None else
                       tuple(output_names) if output_names.__class__ in _SEQUENCES else []]  # []: no key
                for name, value in input_feed.items():
                    key += (name, value.__class__, value.dtype, value.shape)
                plan = table[tuple(key)]
            except Exception:  # no key (ORT's error comes from the full path) or no plan yet
                return missed(output_names, input_feed, run_options)
            return plan(input_feed, run_options)

        return run
