"""``onnxwrapper.repair.fix``: ``aipc fix`` — from a failing diff to a verified repair recipe (docs/repair.md).

:func:`fix` reads a diff folder, localizes each model that failed on values, tries the repair
candidates (:data:`REMEDIES`: exact rewrites, kernel-avoiding rewrites, the model's known FP16 fix,
the culprit on the CPU, CPU regions screened by an FP16 emulation; a simulator-only precision only
when asked for by name: :data:`SIMULATOR_MODES`), verifies each by replaying the model's recorded calls on
the backend with the candidate's recipe in a child process of its own (``python -m
onnxwrapper.repair.fix._child``), and writes the recipes that pass (:mod:`onnxwrapper.repair.recipe`)
with what they cost; the outcome is a :class:`FixResult`.

It builds on the stages of :mod:`onnxwrapper.diff` (runs, judging, localization, the diff folder's
files) and on the recipe format; nothing below it imports it (backends import only
:mod:`onnxwrapper.repair`, which does not import this package). ``onnxwrapper.diff.fix``,
``onnxwrapper.diff.FixResult`` and ``onnxwrapper.diff.REMEDIES`` still reach these names, with a
:class:`DeprecationWarning`, for one release.
"""

from __future__ import annotations

from onnxwrapper.repair.fix._api import SIMULATOR_MODES, fix
from onnxwrapper.repair.fix._candidates import REMEDIES
from onnxwrapper.repair.fix._result import FixResult

__all__ = ["FixResult", "REMEDIES", "SIMULATOR_MODES", "fix"]
