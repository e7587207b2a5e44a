"""The records of a backend listing (:func:`onnxwrapper.get_available_backends`): :class:`BackendInfo`
and :class:`BackendList`.

Their own module so that ``import onnxwrapper`` does not create the ``BackendInfo`` dataclass (≈ 0.7 ms
on Python 3.11): :mod:`onnxwrapper._registry` imports it when a listing is made, and
``onnxwrapper.BackendInfo`` / ``onnxwrapper._registry.BackendInfo`` resolve to it on first use (PEP 562).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["BackendInfo", "BackendList", "SUMMARY_CHARS"]


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

    @property
    def status(self) -> str:
        """``"available"``, ``"available (simulated)"``, ``"available (NPU)"`` or ``"unavailable"``."""
        kind = " (simulated)" if self.simulated else " (NPU)" if self.real_npu else ""
        return f"available{kind}" if self.available else "unavailable"

    @property
    def summary(self) -> str:
        """The reason's first clause, at most :data:`SUMMARY_CHARS` characters, the home folder as ``~``
        (``"QNN HTP simulator on x86-64"``); :meth:`describe` has the whole reason."""
        text = _home_as_tilde(" ".join(self.reason.split()))
        cuts = [i for i in (text.find(sep) for sep in _CLAUSE_ENDS) if i >= _MIN_CLAUSE]
        text = text[:min(cuts)] if cuts else text
        return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 1].rstrip() + "…"

    def describe(self) -> str:
        """Every fact of the record, one per line: status, the whole reason, the fix, aliases,
        execution providers, distribution and ``details`` (the home folder as ``~``)."""
        facts = [("reason", self.reason), ("fix", "" if self.available else self.install_hint),
                 ("aliases", ", ".join(self.aliases)), ("execution providers", ", ".join(self.execution_providers)),
                 ("selected automatically", "" if self.auto_selectable else "no (only when asked for by name)"),
                 ("distribution", self.distribution or ""), *((k, str(v)) for k, v in self.details.items())]
        lines = [f"{self.name}: {self.status}"]
        lines += [f"  {key}: {_home_as_tilde(' '.join(value.split()))}" for key, value in facts if value]
        return "\n".join(lines)

    def __str__(self) -> str:
        """One short line, columns padded: ``qnn    available (simulated)  QNN HTP simulator on x86-64``."""
        return f"{self.name:<6} {self.status:<{_STATUS_WIDTH}}  {self.summary}"

    def __repr__(self) -> str:
        return f"<BackendInfo {self}>"


#: the longest summary of :meth:`BackendInfo.__str__` (so a line stays within 100 columns)
SUMMARY_CHARS = 70
_STATUS_WIDTH = len("available (simulated)")
_CLAUSE_ENDS = (" (", ": ", "; ", ". ")
_MIN_CLAUSE = 12  # a shorter first clause says too little: the cut goes further


def _home_as_tilde(text: str) -> str:
    home = os.path.expanduser("~")
    return text.replace(home, "~") if home not in ("~", "/", "") else text


class BackendList(list[BackendInfo]):
    """What :func:`get_available_backends` returns: a ``list`` of :class:`BackendInfo` that prints as
    one short line per backend (``print(ort.get_available_backends())``); :meth:`describe` gives
    every fact (whole reasons, fixes, versions)."""

    def __str__(self) -> str:
        return "\n".join(str(info) for info in self)

    def __repr__(self) -> str:
        return "[\n" + "".join(f"  {info!r},\n" for info in self) + "]" if self else "[]"

    def describe(self) -> str:
        """:meth:`BackendInfo.describe` of every backend, one block each."""
        return "\n".join(info.describe() for info in self)
