"""Running one model on several backends (``aipc run MODEL.onnx``, ``aipc diff --model``):
Polygraphy's ``Comparator.run``, one child process per backend, the same capture format as a
script run — so :func:`onnxwrapper.diff.compare_model_runs` judges it with the verdicts,
tolerances, reports and exit statuses of ``aipc diff``.

The run directory is a diff directory (``diff.json`` with ``mode: "model"``) holding
``inputs.npz`` (the feeds, in the tensor-file format of :mod:`onnxwrapper.diff._capture._tensor_files`), a
request file per run and one capture directory per run label; ``aipc diff --check DIR``
re-judges it. Timings are per iteration, ``session.run`` alone, after ``warm_up`` unrecorded runs
of the first feed; on a simulated backend (the QNN HTP simulator on x86-64) they are not device
timings.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from onnxwrapper._registry import default_registry
from onnxwrapper.diff._capture import (MANIFEST_FORMAT, CaptureFormatError, read_capture, relative_run, save_tensors,
                                       write_manifest)
from onnxwrapper.diff._runs._backend_run import BackendRun
from onnxwrapper.diff._runs._labels import check_backend_options, parse_backends
from onnxwrapper.diff._runs._model_inputs import ModelInputs, check_inputs, generate_inputs, model_facts
from onnxwrapper.diff._runs._orchestrate import run_child
from onnxwrapper.diff._runs._status import read_status

__all__ = ["Timing", "ModelRuns", "run_model", "timing_lines"]

INPUTS_FILE = "inputs.npz"


@dataclass
class Timing:
    """Wall time of one backend's iterations (``session.run`` alone), in seconds.

    Attributes:
        label / backend: the run. seconds: one entry per recorded iteration. warm_up: unrecorded
            runs before them. session_seconds: creating the session (QNN: compile or cache lookup).
        simulated: the backend's device is simulated here: not device speed.
        partition: ``get_partition().summary()`` of the run's session (``None``: not recorded).
    """

    label: str
    backend: str
    seconds: list[float] = field(default_factory=list)
    warm_up: int = 0
    session_seconds: float | None = None
    simulated: bool = False
    partition: str | None = None

    @property
    def min(self) -> float | None:
        """Fastest iteration (s), ``None`` without iterations."""
        return min(self.seconds) if self.seconds else None

    @property
    def median(self) -> float | None:
        """Median iteration (s), ``None`` without iterations."""
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def max(self) -> float | None:
        """Slowest iteration (s), ``None`` without iterations."""
        return max(self.seconds) if self.seconds else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the attributes plus ``iterations``, ``min``, ``median``, ``max`` (seconds)."""
        return {"label": self.label, "backend": self.backend, "iterations": len(self.seconds),
                "warm_up": self.warm_up, "min": self.min, "median": self.median, "max": self.max,
                "session_seconds": self.session_seconds, "simulated": self.simulated, "partition": self.partition,
                "seconds": list(self.seconds)}

    def __str__(self) -> str:
        if not self.seconds:
            return f"{self.label}: no iteration timed"
        text = (f"{self.label}: {len(self.seconds)} iteration(s), min {_ms(self.min)}, median {_ms(self.median)}, "
                f"max {_ms(self.max)}")
        extra = [f"after {self.warm_up} warm-up run(s)" if self.warm_up else "no warm-up"]
        if self.session_seconds is not None:
            extra.append(f"session created in {self.session_seconds:.2f} s")
        if self.simulated:
            extra.append("simulated device: not device speed")
        return f"{text} ({'; '.join(extra)})"

    def __repr__(self) -> str:
        return f"Timing({self})"


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.1f} ms" if ms >= 10 else f"{ms:.3g} ms"


def timing_lines(timings: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Console lines of a ``{label: Timing.to_dict()}`` mapping (``DiffResult.timings``)."""
    if not timings:
        return []
    lines = ["model runs (time per iteration: session.run alone):"]
    for label, t in timings.items():
        timing = Timing(label, t.get("backend", ""), list(t.get("seconds") or ()), int(t.get("warm_up") or 0),
                        t.get("session_seconds"), bool(t.get("simulated")), t.get("partition"))
        lines.append(f"  {timing}")
        if timing.partition:
            lines.append(f"    partition: {timing.partition}")
    return lines


@dataclass
class ModelRuns:
    """What :func:`run_model` returns: the runs of one model with the same inputs.

    Attributes:
        model: absolute path of the model. directory: the run directory (a diff directory).
        inputs: the :class:`~onnxwrapper.diff.ModelInputs` fed. labels: ``{label: backend}``.
        runs: ``{label: BackendRun}`` (status, cause, capture directory).
        timings: ``{label: Timing}``. partitions: ``{label: partition summary or None}`` as
            ``get_partition().summary()`` reported it. providers: ``{label: get_providers()}``.
    """

    model: str
    directory: str
    inputs: ModelInputs
    labels: dict[str, str]
    runs: dict[str, BackendRun] = field(default_factory=dict)
    timings: dict[str, Timing] = field(default_factory=dict)
    partitions: dict[str, str | None] = field(default_factory=dict)
    providers: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when every run ended normally."""
        return all(r.ok for r in self.runs.values())

    @property
    def exit_status(self) -> int:
        """0 when every run ended normally, else 2 (as ``aipc diff``'s "incomplete")."""
        return 0 if self.ok else 2

    def outputs(self, label: str) -> list[dict[str, np.ndarray]]:
        """The outputs of run ``label``, one ``{output name: array}`` per iteration.

        Raises:
            KeyError: no such run. ValueError: the run left no readable capture.
        """
        run = self.runs[label]
        try:
            cap = read_capture(run.capture_dir)
        except (CaptureFormatError, FileNotFoundError, TypeError) as exc:
            raise ValueError(f"run '{label}' left no readable capture ({exc})") from exc
        return [c.outputs() for c in sorted(cap.calls, key=lambda c: c.index)]

    def save_outputs(self, path, label: str | None = None) -> str | None:
        """Save run ``label``'s outputs with the inputs they came from (one tensor file,
        :func:`onnxwrapper.diff.save_tensors`) — what ``--load-outputs`` reads on another machine.
        ``label`` defaults to the only run.

        Returns:
            The path written; ``None`` when the run recorded no output (it failed: ``runs[label]``
            says why). A run that failed after some iterations saves those.

        Raises:
            ValueError: several runs and no ``label``. KeyError: no such run.
        """
        if label is None:
            if len(self.runs) != 1:
                raise ValueError(f"several runs ({', '.join(self.runs)}): name the one to save")
            label = next(iter(self.runs))
        try:
            outputs = self.outputs(label)
        except ValueError:
            return None
        if not outputs:
            return None
        run = self.runs[label]
        facts = model_facts(self.model)
        return save_tensors(path, self.inputs.iterations[:len(outputs)], outputs,
                            metadata={"model": {"path": self.model, "sha256": facts.sha256},
                                      "backend": run.backend, "backend_options": run.options, "label": label})

    def table(self) -> str:
        """Per run: status, partition, outputs of the first iteration (dtype, shape, min/mean/max),
        and the timing line."""
        lines = [f"aipc run — model {os.path.basename(self.model)}; inputs {self.inputs.origin}, "
                 f"{len(self.inputs)} iteration(s)"]
        lines += [f"note: {n}" for n in self.inputs.notes]
        for label, run in self.runs.items():
            state = "ok" if run.ok else run.status.upper() + (f" ({run.signal})" if run.signal else "")
            lines.append(f"{label} ({run.backend}{', ' + _options(run.options) if run.options else ''}): {state}"
                         + (f" — {run.cause or run.message.splitlines()[0]}" if not run.ok and (run.cause or run.message)
                            else ""))
            if self.partitions.get(label):
                lines.append(f"  partition: {self.partitions[label]}")
            try:
                outs = self.outputs(label)
            except ValueError:
                outs = []
            for name, arr in (outs[0].items() if outs else ()):
                lines.append(f"  output {name}: {arr.dtype}{list(arr.shape)} {_stats(arr)}")
            if label in self.timings:
                lines.append(f"  timing: {str(self.timings[label]).split(': ', 1)[1]}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        runs = ", ".join(f"{lb}={r.status}" for lb, r in self.runs.items())
        return f"ModelRuns({os.path.basename(self.model)}: {len(self.inputs)} iteration(s); runs {runs}; {self.directory})"


def _options(options: Mapping) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items())


def _stats(arr: np.ndarray) -> str:
    if arr.size == 0 or arr.dtype.kind not in "fiub":
        return ""
    a = arr.astype(np.float64)
    finite = a[np.isfinite(a)]
    bad = a.size - finite.size
    text = (f"min {finite.min():.4g} mean {finite.mean():.4g} max {finite.max():.4g}" if finite.size else
            "no finite value")
    return text + (f", {bad} NaN/Inf" if bad else "")


def _simulated(backend: str) -> bool:
    try:
        return bool(default_registry().probe(backend).simulated)
    except Exception:  # noqa: BLE001 - unknown or broken backend: its run reports the problem
        return False


def run_model(model, inputs: ModelInputs | Sequence[Mapping[str, Any]] | None = None, *, backends="cpu,qnn",
              backend_options: Mapping[str, Mapping[str, Any]] | None = None, warm_up: int = 0,
              directory=None, timeout: float | None = None, progress: Callable | None = None) -> ModelRuns:
    """Run ``model`` with the same inputs on each backend, each in its own process.

    Args:
        model: path of an ONNX model (or of an EPContext model).
        inputs: :class:`~onnxwrapper.diff.ModelInputs` (from :func:`generate_inputs`,
            :func:`load_inputs`, :func:`load_data_loader`), a list of ``{name: array}`` feeds, or
            ``None`` for one generated iteration with the default seed.
        backends: ``"cpu,qnn"`` or a list; ``label=backend`` names a second run of a backend.
        backend_options: ``{label: {option: value}}``.
        warm_up: unrecorded runs of the first feed before the timed iterations (≥ 0).
        directory: the run directory (created; default a new temporary ``aipc-model-*`` directory).
        timeout: seconds per backend run. progress: ``progress(stage, done, total)``.

    Returns:
        :class:`ModelRuns`; never raises for a failing backend (its run says why).

    Raises:
        FileNotFoundError: no such model. ValueError / onnxwrapper.BackendNotFoundError /
            onnxwrapper.BackendOptionError: bad arguments (unknown backend, a bad option, inputs that
            do not fit the model, ``warm_up`` < 0), found before any run starts.
    """
    if warm_up < 0:
        raise ValueError(f"warm_up must be >= 0, got {warm_up}")
    facts = model_facts(model)
    if facts.path is None:
        raise ValueError("run_model needs the model as a path (its runs load it in other processes)")
    model_path = os.path.abspath(facts.path)
    if inputs is None:
        inputs = generate_inputs(model_path)
    elif not isinstance(inputs, ModelInputs):
        inputs = ModelInputs(check_inputs(facts.inputs, list(inputs)), origin="given")
    if not inputs.iterations:
        raise ValueError("no inputs to run")
    labels = parse_backends(backends)
    options = {label: dict((backend_options or {}).get(label) or {}) for label in labels}
    unknown = set(backend_options or {}) - set(labels)
    if unknown:
        raise ValueError(f"backend options given for {', '.join(sorted(unknown))}, which is not among the backends "
                         f"({', '.join(labels)})")
    check_backend_options(labels, options)  # a bad option is an error before any child starts
    directory = os.path.abspath(os.fspath(directory) if directory else tempfile.mkdtemp(prefix="aipc-model-"))
    os.makedirs(directory, exist_ok=True)
    inputs_path = save_tensors(os.path.join(directory, INPUTS_FILE), inputs.iterations,
                               metadata={"model": {"path": model_path, "sha256": facts.sha256},
                                         "origin": inputs.origin})
    manifest: dict[str, Any] = {
        "format": MANIFEST_FORMAT, "version": 1, "mode": "model", "reference": None, "backends": dict(labels),
        "target": {"argv": [model_path], "module": False, "cwd": None, "model": model_path}, "runs": {},
        "app": {"compare": ["none"], "filter": None, "rtol": None},
        "model_run": {"inputs": INPUTS_FILE, "origin": inputs.origin, "iterations": len(inputs), "warm_up": warm_up,
                      "notes": list(inputs.notes), "timings": {}, "partitions": {}}}
    write_manifest(directory, manifest)
    result = ModelRuns(model_path, directory, inputs, dict(labels))
    for k, (label, backend) in enumerate(labels.items()):
        if progress:
            progress(f"run {label}", k, len(labels))
        request = os.path.join(directory, f"{label}.request.json")
        with open(request, "w", encoding="utf-8") as f:
            json.dump({"model": model_path, "inputs": inputs_path, "warm_up": warm_up}, f)
        run = run_child(backend, options[label], os.path.join(directory, label), model_request=request,
                        timeout=timeout)
        run.label = label
        result.runs[label] = run
        status = read_status(run.capture_dir) or {}
        seconds = _call_seconds(run.capture_dir)
        result.timings[label] = Timing(label, backend, seconds, warm_up, status.get("session_seconds"),
                                       _simulated(backend), status.get("partition"))
        result.partitions[label] = status.get("partition")
        result.providers[label] = list(status.get("providers") or [])
        manifest["runs"][label] = relative_run(run, directory)
        manifest["model_run"]["timings"][label] = result.timings[label].to_dict()
        manifest["model_run"]["partitions"][label] = result.partitions[label]
        write_manifest(directory, manifest)
    if progress:
        progress("runs done", len(labels), len(labels))
    return result


def _call_seconds(capture_dir: str | None) -> list[float]:
    try:
        cap = read_capture(capture_dir)
    except (CaptureFormatError, FileNotFoundError, TypeError):
        return []
    return [c.seconds for c in sorted(cap.calls, key=lambda c: c.index)]
