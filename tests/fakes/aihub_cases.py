"""Test support for the ``aihub`` backend tests (not a fake): the qai-hub TEST DOUBLE plugged in as
the ``aihub`` backend, its client configuration, small models and the double's event log.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sys

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

from tests import models

FAKES = pathlib.Path(__file__).parent
S25 = {"device": "Samsung Galaxy S25"}
API = "https://workbench.aihub.qualcomm.com"

__all__ = ["API", "FAKES", "S25", "dynamic_model", "events", "int64_model", "jobs", "plugged_hub", "read_log", "relu_feed",
           "write_ini"]


def write_ini(path, token: str | None = "test-double-token", verbose: bool = True) -> str:
    """A qai-hub client configuration file as ``qai-hub configure`` writes it (``verbose`` True, its
    default); ``token=None`` leaves the ``api_token`` key out."""
    keys = {"api_token": token, "api_url": API, "web_url": API, "verbose": str(verbose)}
    path = pathlib.Path(path)
    path.write_text("[api]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items() if v is not None))
    return str(path)


def _drop_double() -> None:
    for name in [m for m in sys.modules if m == "qai_hub" or m.startswith("qai_hub.")]:
        del sys.modules[name]


@contextlib.contextmanager
def plugged_hub(tmp_path, monkeypatch, *, token: str | None = "test-double-token"):
    """The qai-hub double importable as ``qai_hub``, configured through ``$QAIHUB_CLIENT_INI``, the
    ``FakeAihubBackend`` plugin installed as ``aihub``, a fresh compile cache; yields the double."""
    _drop_double()
    monkeypatch.syspath_prepend(str(FAKES))
    from fake_backends import plugged_in

    monkeypatch.setenv("QAIHUB_CLIENT_INI", write_ini(tmp_path / "client.ini", token))
    monkeypatch.setenv("ONNXWRAPPER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("QAI_HUB_DOUBLE_PLAN", raising=False)
    monkeypatch.delenv("QAI_HUB_DOUBLE_LOG", raising=False)
    try:
        with plugged_in(aihub="fake_backends:FakeAihubBackend"):
            import qai_hub

            qai_hub.reset()
            yield qai_hub
    finally:
        _drop_double()


def events(hub, event: str | None = None, kind: str | None = None) -> list[dict]:
    """The double's recorded uploads/jobs, filtered."""
    return [e for e in hub.farm.events if (event is None or e["event"] == event) and (kind is None or e.get("kind") == kind)]


def jobs(hub, kind: str) -> list[dict]:
    """The jobs of ``kind`` (``"compile"``/``"inference"``) the double received."""
    return events(hub, "job", kind)


def read_log(path) -> list[dict]:
    """Events appended to a ``$QAI_HUB_DOUBLE_LOG`` file by any process."""
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()] if os.path.exists(path) else []


def dynamic_model() -> bytes:
    """``y = relu(x) * 2`` with x float["N", 3] (dynamic batch) → y float["N", 3]."""
    two = h.make_tensor("two", T.FLOAT, [1], [2.0])
    g = h.make_graph([h.make_node("Relu", ["x"], ["r"], name="relu"), h.make_node("Mul", ["r", "two"], ["y"], name="mul")],
                     "dyn", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 3])], [two])
    return models.make_model(g)


def int64_model() -> bytes:
    """``out = ids + 1`` with ids/out int64[1, 4] (QNN targets store int64 IO as int32)."""
    one = h.make_tensor("one", T.INT64, [1], [1])
    g = h.make_graph([h.make_node("Add", ["ids", "one"], ["out"])], "ids", [h.make_tensor_value_info("ids", T.INT64, [1, 4])],
                     [h.make_tensor_value_info("out", T.INT64, [1, 4])], [one])
    return models.make_model(g)


def relu_feed(n: int, seed: int = 0) -> dict:
    """A feed of :func:`dynamic_model` with batch ``n``."""
    return {"x": np.random.default_rng(seed).standard_normal((n, 3)).astype(np.float32)}
