"""Argument groups (Polygraphy's ``BaseArgs`` pattern): a command's options as small classes it subscribes to.

An :class:`ArgGroup` owns a few options: it declares them (:meth:`ArgGroup.add_parser_args`),
turns the parsed values into Python values (:meth:`ArgGroup.parse`, raising
:class:`~aipc._exit_codes.UsageError`), and adds its step to the command's
:class:`~aipc.args._plan.Plan` (:meth:`ArgGroup.add_to_plan`). A command lists the groups it
subscribes to (:class:`Tool`); groups reach their peers as ``self.tool[OtherArgs]``, importing
only the peers they depend on (one way: the comparison groups depend on the run groups, never
back). The docstring's first line, ``"Title: description"``, is the help section's heading.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable

from aipc._exit_codes import UsageError
from aipc.args._plan import Plan

__all__ = ["ArgGroup", "Tool", "parse_bracketed", "absolute"]


class ArgGroup:
    """Base class of an argument group; see the module docstring. Subclasses implement
    ``add_parser_args_impl(group)``, ``parse_impl(args)`` and, when they take part in the plan,
    ``add_to_plan(plan)``."""

    tool: "Tool"

    @classmethod
    def heading(cls) -> tuple[str, str]:
        """``(title, description)`` from the docstring's first line ``"Title: description"``."""
        first = (cls.__doc__ or cls.__name__).strip().splitlines()[0]
        title, _, description = first.partition(":")
        return title.strip(), description.strip()

    def add_parser_args(self, parser: argparse.ArgumentParser) -> None:
        """Add this group's options to ``parser``, under its heading."""
        title, description = self.heading()
        self.add_parser_args_impl(parser.add_argument_group(title, description or None))

    def add_parser_args_impl(self, group) -> None:
        """Declare this group's options on ``group`` (an ``argparse`` argument group)."""
        raise NotImplementedError

    def parse(self, args: argparse.Namespace) -> None:
        """Read this group's values from ``args``.

        Raises:
            UsageError: a malformed or contradictory value (exit status 64).
        """
        self.parse_impl(args)

    def parse_impl(self, args: argparse.Namespace) -> None:
        """Read and check this group's values (see :meth:`parse`)."""
        raise NotImplementedError

    def add_to_plan(self, plan: Plan) -> None:
        """Add this group's calls to ``plan`` (default: none)."""


class Tool:
    """The groups one command subscribes to, in order; ``tool[GroupClass]`` is that group."""

    def __init__(self, *groups: ArgGroup) -> None:
        self.groups = list(groups)
        self._by_type = {type(g): g for g in groups}
        for g in groups:
            g.tool = self

    def __getitem__(self, cls: type) -> Any:
        return self._by_type[cls]

    def __contains__(self, cls: type) -> bool:
        return cls in self._by_type

    def add_parser_args(self, parser: argparse.ArgumentParser) -> None:
        """Add every group's options to ``parser``, in subscription order."""
        for g in self.groups:
            g.add_parser_args(parser)

    def parse(self, args: argparse.Namespace) -> None:
        """Parse every group's values, in subscription order (a group may read its peers' results).

        Raises:
            UsageError: the first group's error (exit status 64).
        """
        for g in self.groups:
            g.parse(args)

    def plan(self, plan: Plan) -> Plan:
        """Add every group's calls to ``plan`` and return it."""
        for g in self.groups:
            g.add_to_plan(plan)
        return plan


def parse_bracketed(text: str, option: str, *, named: bool = True,
                    convert: Callable[[str], Any] = int) -> tuple[str | None, list]:
    """``"name:[1,3,224,224]"`` → ``("name", [1, 3, 224, 224])`` (Polygraphy's ``--input-shapes``
    and ``--val-range`` syntax); ``"[0,1]"`` → ``(None, [0, 1])`` when ``named`` is False or the
    name is left out. A name may contain ``:`` (``input:0:[1,2]``): the last ``:[`` separates it.

    Raises:
        UsageError: not ``[name:][v0,v1,…]`` or a value ``convert`` rejects.
    """
    text = text.strip()
    name, sep, rest = text.rpartition(":[")
    if sep:
        body = "[" + rest
    else:
        name, body = "", text
    if not (body.startswith("[") and body.endswith("]")):
        raise UsageError(f"{option} {text!r}: expected {'NAME:' if named else ''}[V0,V1,…], e.g. "
                         f"{'x:[1,3,224,224]' if convert is int else 'x:[0,255]'}")
    try:
        values = [convert(v.strip()) for v in body[1:-1].split(",") if v.strip()]
    except ValueError as exc:
        raise UsageError(f"{option} {text!r}: {exc}") from exc
    return (name or None), values


def absolute(path: str | None) -> str | None:
    """``path`` made absolute (the generated script may run from another directory)."""
    return os.path.abspath(path) if path else path
