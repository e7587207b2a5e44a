"""Shared helpers of the ``aipc diff`` tests (no tests here).

``perturb``: a TEST-ONLY backend (ONNX Runtime on CPU whose float outputs are scaled by
``1 + scale``, optionally with a NaN, or that kills its process with SIGSEGV on the first run). It is
installed for child processes the way a third-party plugin is: a module plus a ``*.dist-info``
with an ``onnxwrapper.backends`` entry point, in a directory put on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from tests import models

REPO = Path(__file__).resolve().parents[1]

PERTURB_SOURCE = '''
"""TEST ONLY backend for onnxwrapper.diff tests: ORT CPU with perturbed outputs."""
import os
import signal

import numpy as np
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession as ORT_SESSION

from onnxwrapper.backends.base import Availability, Backend, OptionSpec, OrtBackendSession, SessionDescription


class _PerturbSession(OrtBackendSession):
    """ORT's session on the façade for metadata; runs on a helper ORT session, then perturbed."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config = config
        args = self.ort_args
        self._helper = ORT_SESSION(args.path_or_bytes, args.sess_options, args.providers, args.provider_options,
                                   **dict(args.kwargs))

    def describe(self):
        return SessionDescription(ort=self.ort_args, runs={"run": self.run})

    def run(self, output_names, input_feed, run_options=None):
        if self.config["crash"]:
            os.kill(os.getpid(), signal.SIGSEGV)
        outs = self._helper.run(output_names, input_feed, run_options)
        result = []
        for out in outs:
            if isinstance(out, np.ndarray) and out.dtype.kind == "f":
                out = (out * (1.0 + self.config["scale"])).astype(out.dtype)
                if self.config["nan"]:
                    out.flat[0] = np.nan
            result.append(out)
        return result


class PerturbBackend(Backend):
    """TEST ONLY: ORT CPU; float outputs * (1 + scale); optional NaN; optional SIGSEGV."""

    name = "perturb"
    options = {"scale": OptionSpec("scale", "relative perturbation", 0.0, float),
               "nan": OptionSpec("nan", "put a NaN first in each float output", False, bool),
               "crash": OptionSpec("crash", "SIGSEGV on the first run", False, bool)}

    @classmethod
    def probe(cls):
        return Availability(True, reason="test-only backend")

    def open(self, request):
        return _PerturbSession(self.config, request.path_or_bytes, request.sess_options, request.providers,
                               request.provider_options, request.kwargs)
'''


def install_perturb(directory: Path) -> Path:
    """Write the perturb backend module and its dist-info into ``directory``; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "diff_perturb_backend.py").write_text(PERTURB_SOURCE)
    info = directory / "diff_perturb_backend-0.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: diff-perturb-backend\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[onnxwrapper.backends]\nperturb = diff_perturb_backend:PerturbBackend\n")
    return directory


@pytest.fixture(scope="session")
def child_env(tmp_path_factory) -> dict:
    """Environment for ``aipc diff`` subprocesses: the perturb plugin and the repository importable."""
    plugin = install_perturb(tmp_path_factory.mktemp("perturb_plugin"))
    path = os.pathsep.join([str(plugin), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def aipc_diff(args, cwd, env, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m aipc diff *args`` in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "aipc", "diff", "-q", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def write_script(directory: Path, body: str, name: str = "script.py") -> Path:
    """Write a dedented script file and return its path."""
    path = directory / name
    path.write_text(textwrap.dedent(body))
    return path


def overflow_model() -> bytes:
    """FP16 overflow on purpose: ``Y = Relu(((X + 1) * 1000) * 0.001)``; X, Y float[1, 16].

    Nodes ``add_in`` (Add), ``scale_up`` (Mul by 1000), ``scale_down`` (Mul by 0.001), ``relu``.
    With X in [150, 400], ``scale_up``'s output (1.5e5 … 4e5) exceeds the FP16 range (±65504), while
    FP32 returns X + 1 exactly enough.
    """
    consts = [onnx.numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
              (("one", 1.0), ("k_up", 1000.0), ("k_down", 0.001))]
    nodes = [h.make_node("Add", ["X", "one"], ["a"], name="add_in"),
             h.make_node("Mul", ["a", "k_up"], ["big"], name="scale_up"),
             h.make_node("Mul", ["big", "k_down"], ["small"], name="scale_down"),
             h.make_node("Relu", ["small"], ["Y"], name="relu")]
    g = h.make_graph(nodes, "fp16_overflow", [h.make_tensor_value_info("X", T.FLOAT, [1, 16])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [1, 16])], consts)
    return models.make_model(g)


CONV_SCRIPT = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession("conv.onnx")
    for i in range(3):
        x = np.linspace(-1, 1, 3 * 8 * 8, dtype=np.float32).reshape(1, 3, 8, 8) * (i + 1)
        y = sess.run(None, {"X": x})[0]
        print("sum", round(float(y.sum()), 3))
"""


def conv_project(directory: Path) -> Path:
    """``conv.onnx`` (tests.models.smallconv, batch 1) and ``script.py`` running it 3 times."""
    (directory / "conv.onnx").write_bytes(models.smallconv(batch=1))
    return write_script(directory, CONV_SCRIPT)
