"""The records of a backend listing (:func:`onnxwrapper.get_available_backends`): :class:`BackendInfo`
and :class:`BackendList`.

Their own module so that ``import onnxwrapper`` does not create the ``BackendInfo`` dataclass (≈ 0.7 ms
on Python 3.11): :mod:`onnxwrapper._registry` imports it when a listing is made, and
``onnxwrapper.BackendInfo`` / ``onnxwrapper._registry.BackendInfo`` resolve to it on first use (PEP 562).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["BackendInfo", "BackendList"]


@dataclass(frozen=True)
class BackendInfo:
    """One registered backend as seen from this host.

    Attributes:
        name: canonical name. aliases: other accepted names.
        available: whether sessions can be opened here; reason: why not (or a note).
        install_hint: what would make it available. real_npu / simulated: device kind.
        execution_providers: EP names that select it from ``providers=``.
        distribution: the Python distribution that registered it (``None`` for in-process ones).
        details: backend-specific facts (versions).
    """

    name: str
    aliases: tuple = ()
    available: bool = False
    reason: str = ""
    install_hint: str = ""
    real_npu: bool = False
    simulated: bool = False
    auto_selectable: bool = True
    execution_providers: tuple = ()
    distribution: str | None = None
    details: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        """One line: ``qnn  available (simulated)  QNN HTP simulator …`` (the fix when unavailable)."""
        state = "available" if self.available else "unavailable"
        kind = " (simulated)" if self.simulated else " (NPU)" if self.real_npu else ""
        fix = f"  fix: {self.install_hint}" if not self.available and self.install_hint else ""
        return f"{self.name:<6} {state}{kind}  {self.reason}{fix}"

    def __repr__(self) -> str:
        return f"<BackendInfo {self}>"


class BackendList(list[BackendInfo]):
    """What :func:`get_available_backends` returns: a ``list`` of :class:`BackendInfo` that prints as
    one line per backend (``print(ort.get_available_backends())``)."""

    def __str__(self) -> str:
        return "\n".join(str(info) for info in self)

    def __repr__(self) -> str:
        return "[\n" + "".join(f"  {info!r},\n" for info in self) + "]" if self else "[]"
