"""The options of the aipc commands as argument groups, and the plan of calls behind ``--gen-script``.

Polygraphy's ``BaseArgs`` pattern (``polygraphy/tools/args``): each group owns a few options,
parses them into Python values and adds its public API calls to the command's :class:`Plan`,
which the command runs and ``--gen-script`` writes out. Modules, each one concept:

* :mod:`aipc.args._groups` — :class:`ArgGroup`, :class:`Tool` (the groups a command subscribes
  to; peers reach each other as ``self.tool[OtherArgs]``), value parsers;
* :mod:`aipc.args._plan` — :class:`Plan`, :class:`Call`, :class:`Ref` (with
  :mod:`aipc.args._script_literals`: names from elsewhere written as inert literals);
* :mod:`aipc.args._parser` — :class:`CommandParser`, whose errors are usage errors (exit status
  64) naming the nearest option (:mod:`aipc.args._option_suggest`);
* :mod:`aipc.args._run_options` — the run options of ``aipc run`` and their environment variables
  (their compile budget is shared by ``aipc diff`` and ``aipc compile``);
* :mod:`aipc.args._model` — the model workflows' groups (model, data loader, backends, run,
  golden outputs, ``--gen-script``);
* :mod:`aipc.args._compare` — the comparison's groups (tolerances, localization, reports), which
  depend on the run groups, never the other way round.

The commands (:mod:`aipc.commands`) import this package, never its modules.
"""

from aipc.args._compare import CompareArgs, LocalizeArgs, ReportArgs, ToleranceArgs
from aipc.args._groups import ArgGroup, Tool, absolute, parse_bracketed
from aipc.args._model import (BackendArgs, BackendsArgs, DataLoaderArgs, GenScriptArgs, GoldenArgs, ModelArgs,
                              ModelRunArgs, argv_text, parse_backend_options, with_compile_budget)
from aipc.args._option_suggest import misplaced_script
from aipc.args._parser import CommandParser
from aipc.args._plan import Call, Plan, Ref
from aipc.args._run_options import RunSettings, add_compile_budget, add_run_options, compile_budget, resolve_settings

__all__ = [
    "ArgGroup",
    "BackendArgs",
    "BackendsArgs",
    "Call",
    "CommandParser",
    "CompareArgs",
    "DataLoaderArgs",
    "GenScriptArgs",
    "GoldenArgs",
    "LocalizeArgs",
    "ModelArgs",
    "ModelRunArgs",
    "Plan",
    "Ref",
    "ReportArgs",
    "RunSettings",
    "ToleranceArgs",
    "Tool",
    "absolute",
    "add_compile_budget",
    "add_run_options",
    "argv_text",
    "compile_budget",
    "misplaced_script",
    "parse_backend_options",
    "parse_bracketed",
    "resolve_settings",
    "with_compile_budget",
]
