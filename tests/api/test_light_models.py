"""Real-architecture models shipped in the onnx wheel: onnxwrapper == onnxruntime, bit for bit.

``onnx/backend/test/data/light/light_*.onnx`` (alexnet, densenet121, inception v1/v2, resnet50,
shufflenet, squeezenet, vgg19, zfnet512) with their expected ``*_output_0.pb``. The same input
goes through onnxruntime and through onnxwrapper from a ``str`` path, a ``pathlib.Path`` and
``bytes``; outputs must be identical (``numpy.array_equal``) and match the stored output.
"""

from __future__ import annotations

import glob
import os
import pathlib

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import numpy_helper

import onnxwrapper

pytestmark = pytest.mark.slow  # outside the fast subset: real-architecture models, bit for bit

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = sorted(p for p in glob.glob(os.path.join(LIGHT_DIR, "light_*.onnx")))


def test_light_models_are_shipped():
    assert len(LIGHT_MODELS) >= 9, LIGHT_DIR


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=lambda p: os.path.basename(p)[6:-5])
def test_light_model_bit_for_bit(path):
    ref_sess = onnxruntime.InferenceSession(path)
    inp = ref_sess.get_inputs()[0]
    rng = np.random.default_rng(0)
    x = rng.random([d if isinstance(d, int) else 1 for d in inp.shape], dtype=np.float32)
    feeds = {inp.name: x}
    reference = ref_sess.run(None, feeds)
    del ref_sess
    expected = numpy_helper.to_array(onnx.load_tensor(path[: -len(".onnx")] + "_output_0.pb"))
    np.testing.assert_allclose(reference[0], expected, rtol=1e-4, atol=1e-6)
    data = pathlib.Path(path).read_bytes()
    for arg in (path, pathlib.Path(path), data):
        sess = onnxwrapper.InferenceSession(arg)
        assert sess.backend_name == "cpu"
        outputs = sess.run(None, feeds)
        assert len(outputs) == len(reference)
        for got, ref in zip(outputs, reference):
            assert got.dtype == ref.dtype and got.shape == ref.shape
            assert np.array_equal(got, ref)
        del sess
