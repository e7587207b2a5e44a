"""An error on a session's first run is the error itself (issue 34): not chained to the internal
``KeyError`` of the run-plan lookup ("During handling of the above exception, another exception
occurred"), on every backend that plans its runs, as ORT raises it."""

from __future__ import annotations

import traceback

import numpy as np
import pytest

import onnxwrapper
from tests import models
from tests.conftest import qnn_available

_BAD_FEEDS = {"missing": {}, "dtype": {"X": np.ones((1, 3, 8, 8), np.float64)}, "rank": {"X": np.ones(3, np.float32)}}


@pytest.mark.parametrize("backend", ["cpu", pytest.param("qnn", marks=[
    pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")])])
@pytest.mark.parametrize("model", [models.smallconv, lambda: models.smallconv(batch=1)], ids=["dynamic", "static"])
@pytest.mark.parametrize("feed", list(_BAD_FEEDS), ids=list(_BAD_FEEDS))
def test_the_first_run_raises_ort_s_error_unchained(backend, model, feed):
    session = onnxwrapper.InferenceSession(model(), backend=backend)
    with pytest.raises(Exception) as info:
        session.run(None, _BAD_FEEDS[feed])
    text = "".join(traceback.format_exception(info.value))
    assert "During handling of the above exception" not in text and "KeyError" not in text, text[-1500:]
    assert info.value.__context__ is None or not isinstance(info.value.__context__, KeyError)
