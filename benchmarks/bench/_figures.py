"""What every benchmark script shares: a figure (a measurement as a ratio against raw onnxruntime
measured in the same run, with its target), the machine's load, and the JSON summary.

A shared 2-core machine drifts: figures are medians of paired ratios (each onnxwrapper
measurement divided by the raw one taken right next to it), and every figure carries the load
averages before and after it was measured. Run one script (``python benchmarks/bench_x.py``) or
all of them (``python benchmarks/run_all.py --json out.json``).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from dataclasses import asdict, dataclass, field
from typing import Sequence


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (``None`` where the OS has none, e.g. Windows)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def user_env(**changes: str) -> dict:
    """``os.environ`` for a timed child process as a user's shell has it, with ``changes`` applied.

    ``PYTHONDONTWRITEBYTECODE`` is dropped: a user's installation has its bytecode (pip writes the
    ``.pyc`` files at install, an editable checkout on its first import), while with the variable set
    every fresh process compiles the modules it imports from source again (≈ 80 ms of a no-node
    first open, measured), a cost no user pays."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(changes)
    return env


def paired_ratio(ours: Sequence[float], raw: Sequence[float]) -> float:
    """Median of the per-pair ratios ``ours[i] / raw[i]`` (robust to slow drifts of the machine)."""
    return statistics.median(a / b for a, b in zip(ours, raw))


@dataclass
class Figure:
    """One measured figure.

    Attributes:
        benchmark: the script's name. name: what was measured. unit: of ``value``/``raw``.
        value: onnxwrapper's median. raw: raw onnxruntime's median, measured in the same run.
        ratio: median of paired ratios value/raw (the figure the target applies to).
        target: the largest acceptable ratio, or ``None``. met: ``ratio <= target``.
        load_before / load_after: load averages around the measurement. samples: pairs measured.
        details: anything else worth keeping (per-phase times, counts).
        against: what ``raw`` is (raw onnxruntime, unless a figure has another yardstick).
    """

    benchmark: str
    name: str
    unit: str
    value: float
    raw: float
    ratio: float
    target: float | None = None
    samples: int = 0
    load_before: list | None = None
    load_after: list | None = None
    details: dict = field(default_factory=dict)
    against: str = "raw onnxruntime"

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.ratio <= self.target

    def line(self) -> str:
        target = "" if self.target is None else (f"   target ≤ {self.target:.2f}×: "
                                                  f"{'met' if self.met else 'NOT MET'}")
        return (f"{self.name}: {_fmt(self.value, self.unit)} vs {self.against} {_fmt(self.raw, self.unit)} → "
                f"{self.ratio:.3f}× (median of {self.samples} paired ratios){target}   "
                f"[load {_load(self.load_before)} → {_load(self.load_after)}]")

    def to_dict(self) -> dict:
        return {**asdict(self), "met": self.met}


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        if value < 1e-3:
            return f"{value * 1e6:.1f} µs"
        return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:.4g} {unit}"


def _load(load: list | None) -> str:
    return "n/a" if not load else "/".join(f"{x:.2f}" for x in load)


def host() -> dict:
    """Facts about the machine and the versions measured."""
    import onnxruntime

    facts = {"python": platform.python_version(), "platform": platform.platform(), "machine": platform.machine(),
             "cpus": os.cpu_count(), "onnxruntime": onnxruntime.__version__}
    try:
        import onnxruntime_qnn

        facts["onnxruntime_qnn"] = getattr(onnxruntime_qnn, "__version__", "?")
    except ImportError:
        pass
    try:
        import onnxwrapper

        facts["onnxwrapper"] = onnxwrapper.__version__
    except ImportError:
        pass
    return facts


def report(figures: Sequence[Figure], json_out: str | None) -> int:
    """Print every figure; write them to ``json_out`` (a JSON list) when given. Returns 0 when
    every target is met, 1 otherwise."""
    for figure in figures:
        print(figure.line())
    sys.stdout.flush()
    if json_out:
        with open(json_out, "w", encoding="utf-8") as f:
            json.dump([f.to_dict() for f in figures], f, indent=1)
    return 0 if all(f.met is not False for f in figures) else 1
