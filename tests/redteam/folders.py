"""A diff folder built in-process (no child process): two runs of a tiny model recorded on the CPU,
the second perturbed so that it fails; tests edit its ``diff.json`` into a hostile one (no tests here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

import onnxwrapper
from onnxwrapper import diff
from tests import models

X = np.linspace(-1, 1, 3 * 8 * 8, dtype=np.float32).reshape(1, 3, 8, 8)


def _capture(folder: Path, scale: float) -> None:
    with diff.start_capture(folder):
        session = onnxwrapper.InferenceSession(models.smallconv(batch=1), backend="cpu")
        for k in range(2):
            session.run(None, {"X": X * (k + 1)})
    if scale != 1.0:  # the second run's outputs, perturbed: it fails the comparison
        for npz in (folder / "calls").iterdir():
            with np.load(npz) as data:
                arrays = {k: (v * scale if k.startswith("o") and v.dtype.kind == "f" else v) for k, v in data.items()}
            np.savez(npz, **arrays)
    (folder / "stdout.txt").write_text("ok\n")
    (folder / "stderr.txt").write_text("")


def diff_folder(folder: Path, *, options: dict | None = None, backend: str = "qnn", scale: float = 1.5,
                target: dict | None = None) -> Path:
    """``folder``: a diff of ``cpu`` (reference) and ``label=backend`` whose recorded options are
    ``options``; the backend's outputs are the CPU's times ``scale``."""
    folder.mkdir(parents=True)
    _capture(folder / "cpu", 1.0)
    _capture(folder / backend, scale)
    runs = {label: {"backend": b, "label": label, "options": opts, "status": "ok", "returncode": 0, "calls": 2,
                    "capture_dir": label, "stdout": f"{label}/stdout.txt", "stderr": f"{label}/stderr.txt",
                    "seconds": 1.0}
            for label, b, opts in (("cpu", "cpu", {}), (backend, backend, dict(options or {})))}
    (folder / "diff.json").write_text(json.dumps({
        "format": "onnxwrapper-diff", "version": 1, "mode": "live", "reference": "cpu",
        "backends": {"cpu": "cpu", backend: backend}, "runs": runs,
        "target": target or {"argv": ["app.py"], "module": False, "cwd": None, "sha256": "0" * 64},
        "app": {"compare": ["stdout"], "filter": None, "rtol": None}}))
    return folder


def copy_folder(source: Path, folder: Path) -> Path:
    """A copy of a diff folder (as it arrives from elsewhere)."""
    shutil.copytree(source, folder)
    return folder
