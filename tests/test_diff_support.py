"""Shared helpers of the ``aipc diff`` tests (no tests here).

``perturb``: a TEST-ONLY backend (ONNX Runtime on CPU whose float outputs are scaled by
``1 + scale``, optionally with a NaN, or that kills its process with SIGSEGV on the first run; or
that runs a perturbed copy of the model: one node's weights scaled or its bias shifted, every
weight with multiplicative noise, every float activation rounded to FP16 — an FP16 device
emulated on the CPU). It is installed for child processes the way a third-party plugin is: a
module plus a ``*.dist-info`` with an ``onnxwrapper.backends`` entry point, in a directory put on
``PYTHONPATH``; production code never detects it.
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
"""TEST ONLY backend for onnxwrapper.diff tests: ORT CPU with perturbed outputs or a perturbed model."""
import os
import signal
import zlib

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnxruntime.capi.onnxruntime_inference_collection import InferenceSession as ORT_SESSION

from onnxwrapper.backends.base import Availability, Backend, OptionSpec, OrtBackendSession, SessionDescription


def perturb_model(source, config):
    """The model with config's node/noise/fp16 perturbations applied (serialized)."""
    model = onnx.load_model_from_string(source) if isinstance(source, bytes) else onnx.load(source)
    inits = {i.name: i for i in model.graph.initializer}
    targets = set()
    for node in model.graph.node:
        if config["node"] and node.name == config["node"]:
            names = [n for n in node.input if n in inits]
            for k, name in enumerate(names):
                w = numpy_helper.to_array(inits[name]).astype(np.float32)
                if config["node_scale"] != 1.0 and w.size > 1:
                    w = w * np.float32(config["node_scale"])
                if config["node_shift"] and k == len(names) - 1:
                    w = w + np.float32(config["node_shift"])
                inits[name].CopyFrom(numpy_helper.from_array(w, name))
                targets.add(name)
    if config["weight_noise"]:
        for name, init in inits.items():
            w = numpy_helper.to_array(init)
            if w.dtype == np.float32 and w.size > 1 and name not in targets:
                rng = np.random.default_rng(zlib.crc32(name.encode()))
                noise = 1 + config["weight_noise"] * rng.standard_normal(w.shape)
                init.CopyFrom(numpy_helper.from_array((w * noise).astype(np.float32), name))
    if config["fp16"]:
        inferred = onnx.shape_inference.infer_shapes(model)
        floats = {v.name for v in list(inferred.graph.value_info) + list(inferred.graph.output)
                  if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
        nodes = []
        for node in model.graph.node:
            extra = []
            for k, out in enumerate(node.output):
                if out in floats:
                    node.output[k] = out + "__raw"
                    extra += [helper.make_node("Cast", [out + "__raw"], [out + "__h"], to=onnx.TensorProto.FLOAT16),
                              helper.make_node("Cast", [out + "__h"], [out], to=onnx.TensorProto.FLOAT)]
            nodes += [node] + extra
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return model.SerializeToString()


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
               "crash": OptionSpec("crash", "SIGSEGV on the first run", False, bool),
               "node": OptionSpec("node", "name of a node whose weights are perturbed", "", str),
               "node_scale": OptionSpec("node_scale", "factor on that node's weights", 1.0, float),
               "node_shift": OptionSpec("node_shift", "added to that node's last initializer (bias)", 0.0, float),
               "weight_noise": OptionSpec("weight_noise", "relative noise on every weight", 0.0, float),
               "fp16": OptionSpec("fp16", "round every float activation to FP16", False, bool),
               "precision": OptionSpec("precision", "declared precision (fp16/fp32)", "", str)}

    @classmethod
    def probe(cls):
        return Availability(True, reason="test-only backend")

    def open(self, request):
        source = request.path_or_bytes
        if self.config["node"] or self.config["weight_noise"] or self.config["fp16"]:
            source = perturb_model(source, self.config)
        return _PerturbSession(self.config, source, request.sess_options, request.providers,
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


def deep_mlp(layers: int = 40, width: int = 32, seed: int = 0, sumsq_after: int | None = None) -> bytes:
    """``layers`` × (MatMul ``mmNN`` → Add ``addNN`` → Relu ``reluNN``), He-initialised so the
    activations keep their scale; the last layer has no Relu (``Y`` = ``add<last>``); X, Y
    float[1, width].

    With ``sumsq_after=k`` a decomposed RMS normalisation follows layer k (magika's failure):
    ``sq`` (Mul h·h) → ``sumsq`` (ReduceSum over the features) → ``meansq`` (Div) → ``rms`` (Sqrt)
    → ``norm`` (Div h / rms): with activations of ~50, ``sumsq`` exceeds FP16's range while every
    other tensor stays within it.
    """
    rng = np.random.default_rng(seed)
    inits, nodes, prev = [], [], "X"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) * np.sqrt(2.0 / width)).astype(np.float32)
        b = (rng.standard_normal(width) * 0.1).astype(np.float32)
        inits += [onnx.numpy_helper.from_array(w, f"W{i:02d}"), onnx.numpy_helper.from_array(b, f"B{i:02d}")]
        last = i == layers - 1
        nodes += [h.make_node("MatMul", [prev, f"W{i:02d}"], [f"m{i:02d}"], name=f"mm{i:02d}"),
                  h.make_node("Add", [f"m{i:02d}", f"B{i:02d}"], ["Y" if last else f"a{i:02d}"], name=f"add{i:02d}")]
        if not last:
            nodes.append(h.make_node("Relu", [f"a{i:02d}"], [f"h{i:02d}"], name=f"relu{i:02d}"))
        prev = f"h{i:02d}"
        if sumsq_after is not None and i == sumsq_after:
            inits += [onnx.numpy_helper.from_array(np.array([-1], np.int64), "axes"),
                      onnx.numpy_helper.from_array(np.array(width, np.float32), "n_feat")]
            nodes += [h.make_node("Mul", [prev, prev], ["sq"], name="sq"),
                      h.make_node("ReduceSum", ["sq", "axes"], ["sumsq"], keepdims=1, name="sumsq"),
                      h.make_node("Div", ["sumsq", "n_feat"], ["meansq"], name="meansq"),
                      h.make_node("Sqrt", ["meansq"], ["rms"], name="rms"),
                      h.make_node("Div", [prev, "rms"], ["normed"], name="norm")]
            prev = "normed"
    g = h.make_graph(nodes, "deep_mlp", [h.make_tensor_value_info("X", T.FLOAT, [1, width])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [1, width])], inits)
    return models.make_model(g, opset=17)


MLP_SCRIPT = """
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession("mlp.onnx")
    for i in range(2):
        x = (np.random.default_rng(i).standard_normal((1, 32)) * {scale}).astype(np.float32)
        y = sess.run(None, {{"X": x}})[0]
        print("argmax", int(y.argmax()))
"""


def mlp_project(directory: Path, model: bytes, scale: float = 10.0) -> Path:
    """``mlp.onnx`` and ``script.py`` running it twice on N(0, scale²) inputs, printing the argmax."""
    (directory / "mlp.onnx").write_bytes(model)
    return write_script(directory, MLP_SCRIPT.format(scale=scale))
