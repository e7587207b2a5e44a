"""What a device profile of an AI Hub inference job says, as plain data.

Source: qai-hub 0.56.0 ``InferenceJob.download_profile()`` → ``{"execution_summary": {...},
"execution_detail": [...]}`` (``client._profile_pb_to_python_dict``). Summary times are in
microseconds and memory in bytes (``InferenceJobSummary`` docstrings; ``InferenceJobResult``
prints ``estimated_inference_time / 1000`` as ms): ``estimated_inference_time``,
``estimated_inference_peak_memory``, ``warm_load_time``, ``first_load_time``, … Each detail entry is
one layer with ``name``, ``type``, ``compute_unit`` (``"NPU"``, ``"GPU"``, ``"CPU"`` or
``"UNSPECIFIED"``) and, when measured, ``execution_time`` (µs) and ``execution_cycles``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["DeviceProfile"]

_UNITS = ("NPU", "GPU", "CPU", "UNSPECIFIED")


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class DeviceProfile:
    """The profile of one compiled model (one shape specialization) on one AI Hub device.

    Attributes:
        device: the device name. job_id / job_url: the inference job that measured it.
        shapes: ``{input name: shape}`` of the specialization (``None`` for static models).
        latency_ms: estimated time of one inference on the device (ms; AI Hub's
            ``estimated_inference_time`` / 1000).
        peak_memory_bytes: estimated inference peak memory (bytes), when reported.
        warm_load_ms: time to load the compiled model on a warm device (ms), when reported.
        compute_units: ``{"NPU": n, "GPU": n, "CPU": n, ...}`` — how many layers run on each unit.
        layers: one ``{"name", "type", "compute_unit", "execution_time_us"}`` dict per layer.
        samples: inputs in the job that was profiled.
    """

    device: str
    job_id: str
    job_url: str
    shapes: Mapping[str, tuple] | None
    latency_ms: float | None
    peak_memory_bytes: int | None = None
    warm_load_ms: float | None = None
    compute_units: Mapping[str, int] = field(default_factory=dict)
    layers: tuple = ()
    samples: int = 0

    @classmethod
    def from_hub(cls, profile: Mapping[str, Any], *, device: str, job, shapes, samples: int) -> "DeviceProfile":
        """Build it from ``download_profile()``'s dict (see the module docstring)."""
        summary = profile.get("execution_summary") or {}
        detail = profile.get("execution_detail") or []
        units: dict[str, int] = {}
        layers = []
        for layer in detail:
            unit = str(layer.get("compute_unit") or "UNSPECIFIED")
            units[unit] = units.get(unit, 0) + 1
            layers.append({"name": layer.get("name"), "type": layer.get("type"), "compute_unit": unit,
                           "execution_time_us": _number(layer.get("execution_time"))})
        latency = _number(summary.get("estimated_inference_time"))
        load = _number(summary.get("warm_load_time"))
        memory = _number(summary.get("estimated_inference_peak_memory"))
        ordered = {u: units[u] for u in _UNITS if u in units} | {u: n for u, n in units.items() if u not in _UNITS}
        return cls(device=device, job_id=job.job_id, job_url=job.url,
                   shapes={k: tuple(v) for k, v in shapes.items()} if shapes else None,
                   latency_ms=None if latency is None else latency / 1000.0,
                   peak_memory_bytes=None if memory is None else int(memory),
                   warm_load_ms=None if load is None else load / 1000.0, compute_units=ordered,
                   layers=tuple(layers), samples=samples)

    def summary(self) -> str:
        """One line, e.g. ``"0.812 ms per inference on Samsung Galaxy S25; layers NPU 52, CPU 1 (job …)"``."""
        latency = "latency not reported" if self.latency_ms is None else f"{self.latency_ms:.3f} ms per inference"
        units = ", ".join(f"{unit} {count}" for unit, count in self.compute_units.items()) or "no layer detail"
        shapes = ""
        if self.shapes:
            shapes = " [" + ", ".join(f"{k}={'x'.join(str(d) for d in v)}" for k, v in sorted(self.shapes.items())) + "]"
        return f"{latency} on {self.device}{shapes}; layers {units} (job {self.job_url})"

    def to_dict(self) -> dict:
        """JSON-ready dict of every attribute."""
        return {"device": self.device, "job_id": self.job_id, "job_url": self.job_url,
                "shapes": {k: list(v) for k, v in self.shapes.items()} if self.shapes else None,
                "latency_ms": self.latency_ms, "peak_memory_bytes": self.peak_memory_bytes,
                "warm_load_ms": self.warm_load_ms, "compute_units": dict(self.compute_units),
                "layers": [dict(layer) for layer in self.layers], "samples": self.samples}
