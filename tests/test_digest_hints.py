"""Digest hints (a model file's last sha256 by file state, in the compile cache), the background
hash of ModelSource.prefetch_digest, and the façade's one re-open when a backend's guard finds the
session it described optimistically is not the one to use (ReopenSession)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading

import numpy as np
import pytest

import onnxwrapper
from onnxwrapper._registry import default_registry
from onnxwrapper.backends.base import Availability, Backend, OrtBackendSession, ReopenSession
from onnxwrapper.errors import InternalError
from onnxwrapper.kernel import ModelSource, record_digest, recorded_digest
from onnxwrapper.kernel import _model_source
from tests import models


@pytest.fixture
def settled(monkeypatch):
    """Files written by the test count as settled (RACY_SECONDS 0) and no digest is known yet in
    this process (as in a new process)."""
    monkeypatch.setattr(_model_source, "RACY_SECONDS", 0.0)
    monkeypatch.setattr(_model_source, "_BYTES_MEMO", {})
    monkeypatch.setattr(_model_source, "_CONTENT_MEMO", {})


def _model(tmp_path, name="m.onnx", seed=1) -> str:
    path = tmp_path / name
    path.write_bytes(models.smallconv(batch=1, seed=seed))
    return str(path)


def test_a_hint_is_returned_only_for_the_state_it_was_recorded_for(tmp_path, settled):
    path = _model(tmp_path)
    root = str(tmp_path / "cache")
    source = ModelSource(path, None)
    assert recorded_digest(root, source) is None
    record_digest(root, source, source.bytes_digest())
    assert recorded_digest(root, ModelSource(path, None)) == source.bytes_digest()
    old = os.stat(path)
    with open(path, "r+b") as f:  # same size, same inode, the old mtime forged back: ctime moved
        f.write(models.smallconv(batch=1, seed=2))
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert recorded_digest(root, ModelSource(path, None)) is None
    assert recorded_digest(root, ModelSource(None, b"bytes")) is None


def test_a_hint_of_a_file_changed_just_now_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setattr(_model_source, "RACY_SECONDS", 3600.0)
    path = _model(tmp_path)
    root = str(tmp_path / "cache")
    record_digest(root, ModelSource(path, None), "0" * 64)
    assert not os.path.exists(os.path.join(root, "digests")) or not os.listdir(os.path.join(root, "digests"))
    assert recorded_digest(root, ModelSource(path, None)) is None


@pytest.mark.parametrize("text", ["", "{", "[]", '{"format": 1}', '{"format": 1, "digest": 5}'])
def test_a_malformed_hint_is_ignored(tmp_path, settled, text):
    path = _model(tmp_path)
    root = str(tmp_path / "cache")
    source = ModelSource(path, None)
    record_digest(root, source, source.bytes_digest())
    (hint,) = os.listdir(os.path.join(root, "digests"))
    with open(os.path.join(root, "digests", hint), "w") as f:
        f.write(text)
    assert recorded_digest(root, source) is None


def test_a_hint_names_its_path_and_a_collision_is_not_trusted(tmp_path, settled):
    one, two = _model(tmp_path, "one.onnx"), _model(tmp_path, "two.onnx")
    root = str(tmp_path / "cache")
    record_digest(root, ModelSource(one, None), ModelSource(one, None).bytes_digest())
    (hint,) = os.listdir(os.path.join(root, "digests"))
    doc = json.load(open(os.path.join(root, "digests", hint)))
    assert doc["path"] == os.path.abspath(one)
    record_digest(root, ModelSource(two, None), "f" * 64)  # another file: another hint file
    assert len(os.listdir(os.path.join(root, "digests"))) == 2


def test_an_unwritable_cache_keeps_no_hint_and_raises_nothing(tmp_path, settled):
    path = _model(tmp_path)
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("x")
    record_digest(str(blocker), ModelSource(path, None), "0" * 64)
    assert recorded_digest(str(blocker), ModelSource(path, None)) is None


def test_the_prefetched_hash_is_the_hash_and_is_reused(tmp_path, settled, monkeypatch):
    path = _model(tmp_path)
    calls = []
    real = _model_source.ModelSource._hash_file
    monkeypatch.setattr(_model_source.ModelSource, "_hash_file",
                        staticmethod(lambda p: calls.append(threading.current_thread().name) or real(p)))
    ModelSource.prefetch_digest(path)
    ModelSource.prefetch_digest(path)  # one thread per file
    digest = ModelSource(path, None).bytes_digest()  # waits for the thread, hashes nothing itself
    assert calls == ["onnxwrapper-model-digest"]
    assert digest == ModelSource(None, open(path, "rb").read()).bytes_digest()
    assert ModelSource(path, None).known_digest() == digest
    for ignored in (str(tmp_path / "missing.onnx"), str(tmp_path), b"bytes", 42):
        ModelSource.prefetch_digest(ignored)
    assert _model_source._PREFETCHES == {}


class _Reopening(Backend):
    """Runs on ORT's CPU EP; its guard asks the façade to open again the first ``asks`` times (test double)."""

    name = "reopening"
    asks = 1
    opened: list = []
    closed: list = []

    @classmethod
    def probe(cls) -> Availability:
        return Availability(True, reason="test backend")

    def open(self, request):
        number = len(_Reopening.opened)
        _Reopening.opened.append(number)

        class Session(OrtBackendSession):
            def close(self) -> None:
                _Reopening.closed.append(number)

        @contextlib.contextmanager
        def guard():
            yield
            if number < _Reopening.asks:
                raise ReopenSession(f"open {number} was optimistic")

        session = Session(request.path_or_bytes, None, ["CPUExecutionProvider"], None, {})
        session.ort_args = dataclasses.replace(session.ort_args, guard=guard)
        return session


@pytest.fixture
def reopening():
    registry = default_registry()
    registry.register(_Reopening)
    _Reopening.opened.clear()
    _Reopening.closed.clear()
    yield _Reopening
    registry.unregister("reopening")


def test_the_facade_opens_again_once_when_the_guard_asks(tmp_path, reopening):
    path = _model(tmp_path)
    reopening.asks = 1
    session = onnxwrapper.InferenceSession(path, backend="reopening")
    assert reopening.opened == [0, 1] and reopening.closed == [0]
    feed = {"X": np.ones((1, 3, 8, 8), np.float32)}
    want = onnxwrapper.InferenceSession(path, backend="cpu").run(None, feed)[0]
    np.testing.assert_array_equal(session.run(None, feed)[0], want)


def test_a_second_request_to_open_again_is_an_internal_error(tmp_path, reopening):
    reopening.asks = 2
    with pytest.raises(InternalError, match="open 1 was optimistic"):
        onnxwrapper.InferenceSession(_model(tmp_path), backend="reopening")
    assert reopening.opened == [0, 1] and reopening.closed == [0, 1]
