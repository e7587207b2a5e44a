"""The plan of public API calls behind ``--gen-script`` (Polygraphy's ``--gen-script`` idea, without ``exec``).

A :class:`Plan` is a list of public API calls — ``inputs = diff.generate_inputs(MODEL, seed=1)`` —
with literal arguments and references to earlier results. The argument groups of a command
(:mod:`aipc.args._groups`) add their calls to it. The command *runs* the plan (:meth:`Plan.run`:
each call resolved by name and called directly, never ``exec``), and ``--gen-script`` *writes*
the same plan as a standalone Python file (:meth:`Plan.render`); both come from the same objects,
so the script does what the command does. Arguments marked ``cli_only`` (progress bars) are
passed by the command and left out of the script.
"""

from __future__ import annotations

import importlib
import os
import pprint
from dataclasses import dataclass, field
from typing import Any, Iterable

from aipc.args._script_literals import comment_line, docstring

__all__ = ["Plan", "Call", "Ref"]


@dataclass(frozen=True)
class Ref:
    """A reference to a plan variable (``Ref("runs")``) or an attribute of one (``Ref("runs.directory")``)."""

    name: str


@dataclass
class Call:
    """One call of the plan: ``target = func(*args, **kwargs)``.

    Attributes:
        func: dotted name resolved against the plan's namespace (``"diff.run_model"``,
            ``"result.write_json"``, ``"print"``).
        args / kwargs: literals (``repr``-able), :class:`Ref` or nested :class:`Call` values.
        target: the variable that receives the result, or ``None``.
        comment: a comment line written above the call in the script.
        cli_only: keyword arguments passed by the command only (not written to the script).
    """

    func: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    target: str | None = None
    comment: str = ""
    cli_only: dict = field(default_factory=dict)


class Plan:
    """The calls a command makes, in order; see the module docstring."""

    def __init__(self, imports: Iterable[str] = ("from onnxwrapper import diff",)) -> None:
        self.imports = list(imports)
        self.constants: dict[str, Any] = {}
        self.calls: list[Call] = []
        self.result: str | None = None
        self.namespace: dict[str, Any] = {}

    def constant(self, name: str, value: Any) -> Ref:
        """A module-level constant of the script (``MODEL = "m.onnx"``); returns its :class:`Ref`."""
        self.constants[name] = value
        return Ref(name)

    def add(self, call: Call) -> Ref | None:
        """Append ``call``; returns a :class:`Ref` to its target (``None`` without one)."""
        self.calls.append(call)
        return Ref(call.target) if call.target else None

    def exit_with(self, ref: str) -> None:
        """The plan's result — the command's exit status — is the value of ``ref`` (e.g. ``"result.exit_status"``)."""
        self.result = ref

    # -- running ---------------------------------------------------------------------------------
    def run(self, namespace: dict[str, Any] | None = None) -> Any:
        """Make the calls; returns the value of :meth:`exit_with`'s reference (``None`` if unset).
        The variables stay readable in :attr:`namespace` afterwards."""
        ns: dict[str, Any] = {"diff": importlib.import_module("onnxwrapper.diff"), "os": os, "print": print}
        ns.update(self.constants)
        ns.update(namespace or {})
        self.namespace = ns
        for call in self.calls:
            value = self._call(call, ns, cli=True)
            if call.target:
                ns[call.target] = value
        return self._resolve(self.result, ns) if self.result else None

    def _call(self, call: Call, ns: dict, cli: bool) -> Any:
        func = self._resolve(call.func, ns)
        args = [self._value(a, ns) for a in call.args]
        kwargs = {k: self._value(v, ns) for k, v in call.kwargs.items()}
        if cli:
            kwargs.update(call.cli_only)
        return func(*args, **kwargs)

    def _value(self, value: Any, ns: dict) -> Any:
        if isinstance(value, Ref):
            return self._resolve(value.name, ns)
        if isinstance(value, Call):
            return self._call(value, ns, cli=True)
        return value

    @staticmethod
    def _resolve(dotted: str, ns: dict) -> Any:
        head, *rest = dotted.split(".")
        obj = ns[head]
        for part in rest:
            obj = getattr(obj, part)
        return obj

    # -- rendering -------------------------------------------------------------------------------
    def render(self, *, title: str, command: str) -> str:
        """The standalone script: a docstring, the imports, the constants, one block per call,
        and ``sys.exit(...)`` of the plan's result. ``title`` and ``command`` (which name files from
        elsewhere) are written as escaped literals (:mod:`aipc.args._script_literals`), never pasted."""
        import textwrap

        about = textwrap.wrap(f"Written by `{command}` with --gen-script. It calls onnxwrapper's public API "
                              f"exactly as the command does, and exits with the same status.", 96,
                              break_on_hyphens=False, break_long_words=False)
        lines = ["#!/usr/bin/env python3", docstring("\n".join([title, "", *about])), "",
                 "import os", "import sys", "", *self.imports, ""]
        for name, value in self.constants.items():
            lines.append(f"{name} = {_literal(value, len(name) + 3)}")
        for call in self.calls:
            if call.comment:
                lines += ["", comment_line(call.comment)]
            text = _render_call(call)
            lines.append(f"{call.target} = {text}" if call.target else text)
        if self.result:
            lines += ["", f"sys.exit({self.result})"]
        return "\n".join(lines) + "\n"


def _literal(value: Any, indent: int = 0) -> str:
    if isinstance(value, Ref):
        return value.name
    if isinstance(value, Call):
        return _render_call(value)
    text = pprint.pformat(value, width=100 - indent, sort_dicts=False)
    return text.replace("\n", "\n" + " " * indent)


def _render_call(call: Call) -> str:
    parts = [_literal(a) for a in call.args] + [f"{k}={_literal(v)}" for k, v in call.kwargs.items()]
    one = f"{call.func}({', '.join(parts)})"
    if len(one) <= 100:
        return one
    return f"{call.func}(\n" + "".join(f"    {_literal(a, 4)},\n" for a in call.args) + "".join(
        f"    {k}={_literal(v, 5 + len(k))},\n" for k, v in call.kwargs.items()) + ")"
