"""What ``aipc fix`` found: per model the candidates tried, what passed and at what cost (text and JSON)."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import time
from dataclasses import dataclass, field

from onnxwrapper.diff._judge import EXIT_BACKEND_FAILED, EXIT_MISMATCH, EXIT_NOTHING_TO_REPAIR, EXIT_OK
from onnxwrapper.diff._report import sanitize

__all__ = ["ModelFix", "FixResult", "FIX_SCHEMA"]

FIX_SCHEMA = "onnxwrapper-fix-report"


@dataclass
class ModelFix:
    """The repair of one (backend run, model).

    Attributes:
        backend: the run label. model: the model key. sha256: the model file's hash (the recipe key).
        localization: the localization used (the report's JSON object) or ``None``.
        calls: the replayed ``(session, index)`` keys. baseline: the unrepaired replay
            (:class:`~onnxwrapper.repair.fix._verify.Trial`). trials: the candidates, in the order tried.
        chosen: the first passing trial. recipe: its :class:`~onnxwrapper.repair.ModelRecipe` (with
            ``verified``). notes: facts for the report. seconds: wall time of its repair (value ranges,
            candidates, the baseline and the trials).
        path: the search path taken, one line per step (where the localization came from, what the
            CPU found, what was verified). stages: ``[[stage, seconds]]``, wall time per stage.
    """

    backend: str
    model: str
    sha256: str
    localization: dict | None = None
    calls: list = field(default_factory=list)
    baseline: object = None
    trials: list = field(default_factory=list)
    chosen: object = None
    recipe: object = None
    notes: list = field(default_factory=list)
    seconds: float = 0.0
    app_untried: list = field(default_factory=list)
    path: list = field(default_factory=list)
    stages: list = field(default_factory=list)

    def to_dict(self) -> dict:
        loc = self.localization or {}
        return {"backend": self.backend, "model": self.model, "sha256": self.sha256,
                "cause": loc.get("cause"), "culprit": (loc.get("culprit") or {}).get("node"),
                "calls": [list(c) for c in self.calls],
                "baseline": self.baseline.to_dict() if self.baseline is not None else None,
                "trials": [t.to_dict() for t in self.trials],
                "chosen": self.trials.index(self.chosen) if self.chosen is not None else None,
                "recipe": self.recipe.to_dict() if self.recipe is not None else None, "notes": list(self.notes),
                "seconds": self.seconds, "path": list(self.path), "stages": [list(s) for s in self.stages]}


def _db(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return f"{value:.1f} dB" if math.isfinite(value) else ("inf dB" if value > 0 else "-inf dB")


def _cost(trial, baseline) -> str:
    parts = []
    if trial.total_nodes:
        npu = f"NPU {trial.npu_nodes}/{trial.total_nodes} nodes"
        if baseline is not None and baseline.total_nodes and baseline.npu_nodes is not None:
            npu += f" (unrepaired {baseline.npu_nodes}/{baseline.total_nodes})"
        parts.append(npu)
    if trial.call_seconds is not None:
        run = f"{trial.call_seconds * 1e3:.1f} ms/call"
        if baseline is not None and baseline.call_seconds:
            run += f" ({trial.call_seconds / baseline.call_seconds:.2f}× unrepaired)"
        parts.append(run)
    if trial.open_seconds is not None:
        first = (f" + {trial.first_call_seconds:.1f} s first call per shape"
                 if trial.first_call_seconds is not None else "")
        parts.append(f"session {trial.open_seconds:.1f} s{first}")
    return ", ".join(parts)


def _best(m: ModelFix) -> str:
    """``no candidate passed`` and, when one came closer than the unrepaired model, how close."""
    ran = [t for t in m.trials if t.worst and isinstance(t.worst.get("snr_db"), (int, float))]
    if not ran:
        return "  no candidate passed"
    best = max(ran, key=lambda t: (t.outputs_passed, t.worst["snr_db"]))
    before = (m.baseline.worst or {}).get("snr_db") if m.baseline is not None else None
    return (f"  no candidate passed; closest: {best.title} — worst {_db(before)} → {_db(best.worst['snr_db'])}, "
            f"{best.outputs_passed} of {best.outputs} output(s) within tolerance")


@dataclass
class FixResult:
    """The outcome of :func:`~onnxwrapper.diff.fix`.

    Attributes:
        directory: the diff directory. remedies: the kinds tried. models: :class:`ModelFix` per
        failing (backend, model). recipe_path: the recipe file written (``None``: nothing passed).
        confirmation: the :class:`~onnxwrapper.diff.DiffResult` of the script run with the recipe,
        or ``None``. notes: general facts. seconds: wall time of the whole fix (confirmation included).
        app_untried: run labels whose script output differs (tensors passing) but whose app-level
        candidates were not tried, because judging them runs the script and no command was named.
        simulator_modes: the simulator-only modes searched (asked for by name; empty: device-valid
        recipes only). stages: ``[[stage, seconds]]`` of the whole fix (model-level repairs,
        confirmation, app-level search).
    """

    directory: str
    remedies: tuple = ()
    models: list = field(default_factory=list)
    recipe_path: str | None = None
    confirmation: object = None
    notes: list = field(default_factory=list)
    seconds: float = 0.0
    app_untried: list = field(default_factory=list)
    simulator_modes: tuple = ()
    stages: list = field(default_factory=list)

    def stage(self, name: str, since: float) -> None:
        """Record the wall time of stage ``name``, begun at ``time.perf_counter()`` value ``since``."""
        self.stages.append([name, round(time.perf_counter() - since, 3)])

    @property
    def repaired(self) -> bool:
        """Every failing model has a verified recipe (and the confirmation run, if any, passed)."""
        ok = bool(self.models) and all(m.recipe is not None for m in self.models)
        return ok and (self.confirmation is None or self.confirmation.passed)

    @property
    def exit_status(self) -> int:
        """0 repaired; 1 not every model could be repaired (or the confirmation failed); 2 a baseline
        could not run; 3 nothing to repair was found (the table of every aipc command, docs/loader.md)."""
        if not self.models:
            return EXIT_MISMATCH if self.app_untried else EXIT_NOTHING_TO_REPAIR
        if any(m.baseline is not None and m.baseline.status == "error" for m in self.models):
            return EXIT_BACKEND_FAILED
        return EXIT_OK if self.repaired else EXIT_MISMATCH

    def text(self) -> str:
        """The console report."""
        lines = [f"aipc fix — {self.directory}"]
        if self.app_untried:
            lines.append(f"not repaired: the script's output differs on {', '.join(self.app_untried)} while every "
                         "tensor passes; app-level candidates are judged by running the script, so name it: "
                         "aipc fix DIR --confirm-with SCRIPT ARGS… (or --confirm for the recorded one)")
        elif not self.models:
            lines.append("nothing to repair: no output of the diff failed on values (a crash, a divergence or "
                         "the app level alone cannot be repaired here)")
        for m in self.models:
            loc = m.localization or {}
            culprit = (loc.get("culprit") or {}).get("node")
            lines.append(f"\n{m.backend} · {m.model} (sha256 {m.sha256[:12]}…): cause {loc.get('cause') or '?'}"
                         + (f" at '{culprit}'" if culprit else "") + f"; {len(m.calls)} call(s) replayed"
                         + (f"; {m.seconds:.1f} s" if m.seconds else ""))
            b = m.baseline
            if b is not None:
                lines.append(f"  unrepaired          {b.status.upper():5s} worst {_db((b.worst or {}).get('snr_db'))} "
                             f"(bar {_db(b.bar_db)}) {_cost(b, None)}" + (f" — {b.message}" if b.message else ""))
            for k, t in enumerate(m.trials, 1):
                mark = " ← recipe" if t is m.chosen else ""
                lines.append(f"  {k}. {t.kind:9s} {t.status.upper():5s} worst {_db((t.worst or {}).get('snr_db'))}  "
                             f"{t.title}{mark} ({t.seconds:.1f} s)")
                why = t.why() if t is not m.chosen else ""
                if why:
                    lines.append(f"       why not: {why}")
                elif t.message:
                    lines.append(f"       {t.message}")
                if t.status not in ("error", "skipped"):
                    lines.append(f"       cost: {_cost(t, b)}")
                if t.emulated:
                    lines.append("       FP16 emulation on the CPU: " + ", ".join(
                        f"{o} {_db(v)}" for o, v in sorted(t.emulated.items())))
                if t.exactness and t is m.chosen:
                    lines.append(f"       exactness: {t.exactness}")
            if m.recipe is not None:
                targets = m.recipe.valid_targets
                lines.append(f"  recipe holds on: {', '.join(targets)}" + (
                    "" if "device" in targets else " — a simulator mode: a device refuses it"))
            lines += [f"  path: {p}" for p in m.path]
            if m.stages:
                lines.append("  time per stage: " + " · ".join(f"{n} {sec:.1f} s" for n, sec in m.stages))
            lines += [f"  note: {n}" for n in m.notes]
            if m.recipe is None:
                lines.append(_best(m) if m.trials else "  no candidate to try")
        if self.recipe_path:
            lines.append(f"\nrecipe: {self.recipe_path}")
            lines.append(f"  use: python -m aipc --repairs {self.recipe_path} SCRIPT …   |   "
                         f"aipc compile MODEL --repairs {self.recipe_path}")
        if self.confirmation is not None:
            lines.append(f"confirmation (the script again, with the recipe): {self.confirmation.verdict_line()}")
        lines += [f"note: {n}" for n in self.notes]
        lines.append("searched: " + ("what a device runs, and the simulator mode(s) " + ", ".join(self.simulator_modes)
                                     + " asked for by name" if self.simulator_modes else
                                     "only what a device runs (FP16, rewrites, CPU regions); simulator modes: "
                                     "--simulator-modes fp32"))
        if self.stages:
            lines.append("time per stage: " + " · ".join(f"{n} {sec:.1f} s" for n, sec in self.stages))
        state = "REPAIRED" if self.repaired else ("NOT REPAIRED" if self.models else "NOTHING TO REPAIR")
        lines.append(f"fix: {state} (exit status {self.exit_status})" + (f" in {self.seconds:.1f} s" if self.seconds else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The JSON report (``schema``: ``onnxwrapper-fix-report``, version 1)."""
        conf = self.confirmation
        return {"schema": FIX_SCHEMA, "schema_version": 1,
                "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "directory": self.directory, "remedies": list(self.remedies), "repaired": self.repaired,
                "exit_status": self.exit_status, "recipe": self.recipe_path,
                "models": [m.to_dict() for m in self.models], "seconds": self.seconds,
                "confirmation": None if conf is None else {"verdict_line": conf.verdict_line(), "state": conf.state,
                                                           "directory": conf.directory},
                "notes": list(self.notes), "app_untried": list(self.app_untried),
                "simulator_modes": list(self.simulator_modes), "stages": [list(x) for x in self.stages]}

    def write_json(self, path) -> str:
        """Write :meth:`to_dict` (non-finite numbers as strings) atomically; returns the path."""
        path = os.path.abspath(os.fspath(path))
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(sanitize(self.to_dict()), f, indent=1, default=str, allow_nan=False)
        os.replace(tmp, path)
        return path
