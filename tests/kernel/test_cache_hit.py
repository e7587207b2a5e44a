"""The cache-hit path: ArtifactCache.peek, the per-process hash memo of ModelSource, and the qnn
backend's fast open of a cached static model (same session as the full path, no onnx import,
damage still caught)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import uuid

import numpy as np
import onnx
import pytest

import onnxwrapper
from onnxwrapper.kernel.cache._cache import ArtifactCache, make_key
from onnxwrapper.kernel.model import _model_source
from onnxwrapper.kernel.model._model_source import ModelSource
from tests import models
from tests.cache_damage import KINDS, damage_entry
from tests.conftest import qnn_available

_QNN = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")


def _entry(cache: ArtifactCache, payload: bytes = bytes(range(256)) * 4):
    def build(directory: str) -> dict:
        with open(os.path.join(directory, "artifact.bin"), "wb") as f:
            f.write(payload)
        return {"answer": 42}

    key = make_key({"peek": uuid.uuid4().hex})
    return key, build, cache.get_or_create(key, build)


@pytest.mark.parametrize("damage", KINDS)
def test_peek_misses_damaged_entries_silently_and_the_locked_path_repairs_them(tmp_path, caplog, damage):
    cache = ArtifactCache(tmp_path)
    key, build, entry = _entry(cache)
    assert cache.peek(key).hit and cache.peek(key).meta == {"answer": 42}
    damage_entry(entry, damage)
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.cache"):
        assert cache.peek(key) is None
    assert caplog.text == "" and os.path.isdir(entry.path)  # nothing said, nothing removed
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.cache"):
        again = cache.get_or_create(key, build)
    assert not again.hit and "corrupt" in caplog.text


def test_peek_takes_no_lock(tmp_path):
    cache = ArtifactCache(tmp_path)
    key, _build, _entry_ = _entry(cache)
    for name in os.listdir(tmp_path / "locks"):
        os.remove(tmp_path / "locks" / name)
    assert cache.peek(key) is not None and cache.peek(make_key({"absent": 1})) is None
    assert os.listdir(tmp_path / "locks") == []


def _counting(monkeypatch) -> list:
    calls = []
    real = _model_source.hash_file

    def counted(digest, f):
        calls.append(f.name)
        return real(digest, f)

    monkeypatch.setattr(_model_source, "hash_file", counted)
    return calls


def test_an_unchanged_file_is_hashed_once_per_process(tmp_path, monkeypatch):
    monkeypatch.setattr(_model_source, "RACY_SECONDS", 0.0)  # the file below was written just now
    path = tmp_path / "m.onnx"
    path.write_bytes(models.mul_1())
    calls = _counting(monkeypatch)
    first = ModelSource(str(path), None).content_hash()
    assert ModelSource(str(path), None).content_hash() == first and len(calls) == 1


def test_a_same_size_overwrite_is_a_new_hash_even_with_the_old_mtime(tmp_path, monkeypatch):
    monkeypatch.setattr(_model_source, "RACY_SECONDS", 0.0)
    path = tmp_path / "m.onnx"
    one = models.smallconv(batch=1, seed=1)
    two = models.smallconv(batch=1, seed=2)
    assert len(one) == len(two) and one != two
    path.write_bytes(one)
    old = os.stat(path)
    first = ModelSource(str(path), None).content_hash()
    with open(path, "r+b") as f:  # in place: same inode, same size; the old mtime forged back
        f.write(two)
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert ModelSource(str(path), None).content_hash() != first


def test_a_file_changed_just_before_it_is_hashed_is_hashed_every_time(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(models.mul_1())
    calls = _counting(monkeypatch)
    ModelSource(str(path), None).bytes_digest()
    ModelSource(str(path), None).bytes_digest()
    assert len(calls) == 2  # within RACY_SECONDS of its write: a same-tick rewrite could keep its stat


def _write(tmp_path, name: str, data: bytes) -> str:
    model = onnx.load_from_string(data)
    model.doc_string = uuid.uuid4().hex  # a fresh content: fresh cache key, fresh warn-once
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return str(path)


def _opened(path: str, cache: str):
    """(fast-path session or None, full-path session) of one request, without the façade."""
    from onnxwrapper.backends.base import SessionRequest
    from onnxwrapper.backends.qnn._backend import open_session
    from onnxwrapper.backends.qnn.artifacts._cache_hit import open_cached
    from onnxwrapper.backends.qnn import QnnBackend

    backend = QnnBackend({"cache_dir": cache})
    request = SessionRequest(path, None, None, None, {}, {})
    return (open_cached(backend.config, request, backend.probe()),
            open_session(backend.config, request, backend.probe()))


def _so_state(session) -> dict:
    so = session.describe().ort.sess_options
    state = {name: str(getattr(so, name)) for name in ("graph_optimization_level", "log_severity_level",
                                                       "intra_op_num_threads", "execution_mode",
                                                       "enable_profiling", "optimized_model_filepath")}
    for key in ("session.record_ep_graph_assignment_info", "session.disable_cpu_ep_fallback",
                "ep.qnnexecutionprovider.soc_model", "ep.qnnexecutionprovider.htp_arch",
                "ep.qnnexecutionprovider.enable_htp_fp16_precision"):
        try:
            state[key] = so.get_session_config_entry(key)
        except RuntimeError:
            state[key] = None
    return state


@_QNN
def test_the_fast_path_gives_the_full_paths_session(tmp_path):
    cache = str(tmp_path / "cache")
    path = _write(tmp_path, "conv.onnx", models.smallconv(batch=1))
    compiled = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"cache_dir": cache})
    assert compiled.backend_session.artifacts[0].origin == "compiled"
    fast, full = _opened(path, cache)
    assert fast is not None
    a, b = fast.artifacts[0], full.artifacts[0]
    assert (a.origin, a.ctx_path, a.key) == (b.origin, b.ctx_path, b.key) == ("cache", b.ctx_path, b.key)
    assert fast.partition().to_dict() == full.partition().to_dict()
    assert dataclasses.asdict(fast.modelmeta()) == dataclasses.asdict(full.modelmeta())
    assert fast.provider_options() == full.provider_options() and fast.providers() == full.providers()
    assert _so_state(fast) == _so_state(full)
    assert fast.describe().ort.kwargs == full.describe().ort.kwargs


@_QNN
def test_the_fast_path_declines_what_it_does_not_know(tmp_path):
    cache = str(tmp_path / "cache")
    path = _write(tmp_path, "conv.onnx", models.smallconv(batch=1))
    assert _opened(path, cache)[0] is None  # nothing recorded yet (the full path compiles and records)
    assert _opened(path, cache)[0] is not None
    size = os.path.getsize(path)
    assert os.path.getsize(_write(tmp_path, "conv.onnx", models.smallconv(batch=1))) == size  # other bytes
    assert _opened(path, cache)[0] is None
    dynamic = _write(tmp_path, "dyn.onnx", models.smallconv(batch="N"))
    _opened(dynamic, cache)
    assert _opened(dynamic, cache)[0] is None  # recorded as dynamic: compiled per feed shape


@_QNN
def test_a_damaged_facts_record_is_not_used_and_is_replaced(tmp_path, caplog):
    cache = str(tmp_path / "cache")
    path = _write(tmp_path, "conv.onnx", models.smallconv(batch=1))
    onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"cache_dir": cache})
    (record,) = [os.path.join(root, "facts.json") for root, _d, files in os.walk(cache) if "facts.json" in files]
    text = open(record).read()
    with open(record, "w") as f:  # same size, the model claimed dynamic
        f.write(text.replace('"dynamic": false', '"dynamic": 1    '))
    assert _opened(path, cache)[0] is None  # the second call (full path) reports and rewrites it
    assert json.load(open(record))["dynamic"] is False
    assert _opened(path, cache)[0] is not None


_CHILD = """
import json, sys
import onnxwrapper
s = onnxwrapper.InferenceSession(sys.argv[1], backend="qnn", backend_options={"cache_dir": sys.argv[2]})
out = s.run(None, {"X": __import__("numpy").ones((1, 3, 8, 8), "float32")})[0]
print(json.dumps({"origin": s.backend_session.artifacts[0].origin, "out": out.tolist(),
                  "loaded": sorted(m for m in ("onnx", "filelock", "onnxwrapper.patches", "onnxwrapper.repair",
                                               "concurrent.futures") if m in sys.modules)}))
"""


@_QNN
def test_a_new_process_opens_a_cached_model_without_onnx_and_catches_a_truncated_binary(tmp_path):
    cache = str(tmp_path / "cache")
    path = _write(tmp_path, "conv.onnx", models.smallconv(batch=1))
    first = onnxwrapper.InferenceSession(path, backend="qnn", backend_options={"cache_dir": cache})
    want = first.run(None, {"X": np.ones((1, 3, 8, 8), np.float32)})[0]

    def child() -> dict:
        done = subprocess.run([sys.executable, "-c", _CHILD, path, cache], capture_output=True, text=True,
                              check=True, cwd=tmp_path)
        return json.loads(done.stdout.strip().splitlines()[-1])

    hit = child()
    assert hit["origin"] == "cache" and hit["loaded"] == []
    np.testing.assert_array_equal(np.array(hit["out"], np.float32), want)
    binary = first.backend_session.artifacts[0].ctx_path.replace("model_ctx.onnx", "model_ctx_qnn.bin")
    del first
    os.truncate(binary, 100)
    assert child()["origin"] == "compiled"


@_QNN
def test_a_new_process_takes_the_digest_from_its_hint_and_a_changed_file_is_hashed(tmp_path, monkeypatch):
    from onnxwrapper.kernel import recorded_digest

    monkeypatch.setattr(_model_source, "RACY_SECONDS", 0.0)  # the files below were written just now
    cache = str(tmp_path / "cache")
    one = _write(tmp_path, "one.onnx", models.smallconv(batch=1, seed=1))
    feed = {"X": np.ones((1, 3, 8, 8), np.float32)}
    want = onnxwrapper.InferenceSession(one, backend="qnn", backend_options={"cache_dir": cache}).run(None, feed)[0]
    digest = ModelSource(one, None).bytes_digest()
    hashed = _counting(monkeypatch)

    def new_process_session():
        monkeypatch.setattr(_model_source, "_BYTES_MEMO", {})
        monkeypatch.setattr(_model_source, "_CONTENT_MEMO", {})
        monkeypatch.setattr(_model_source, "_HEX_MEMO", {})
        return onnxwrapper.InferenceSession(one, backend="qnn", backend_options={"cache_dir": cache})

    session = new_process_session()  # the full open recorded the hint: no sha256 of the model
    assert hashed == [] and session.backend_session.artifacts[0].origin == "cache"
    np.testing.assert_array_equal(session.run(None, feed)[0], want)
    old = os.stat(one)
    other = onnx.load(one)
    other.graph.initializer[0].raw_data = bytes(len(other.graph.initializer[0].raw_data))  # other weights
    data = other.SerializeToString()
    assert len(data) == old.st_size
    with open(one, "r+b") as f:  # in place, same size, the old mtime forged back
        f.write(data)
    os.utime(one, ns=(old.st_atime_ns, old.st_mtime_ns))
    session = new_process_session()
    assert len(hashed) == 1 and session.backend_session.artifacts[0].origin == "compiled"
    assert not np.array_equal(session.run(None, feed)[0], want)
    assert recorded_digest(ArtifactCache(cache).root, ModelSource(one, None)) != digest
