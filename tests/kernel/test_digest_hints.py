"""Digest hints: a model file's last sha256 with its file state and CRC-32, kept in the compile
cache, used in a new process only after the state and a full CRC-32 of the file match."""

from __future__ import annotations

import json
import os

import pytest

from onnxwrapper.kernel import ModelSource, record_digest, recorded_digest
from onnxwrapper.kernel.model import _model_source
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


def test_a_hint_names_its_path_and_one_copied_to_another_path_is_not_used(tmp_path, settled):
    one, two = _model(tmp_path, "one.onnx"), _model(tmp_path, "two.onnx")
    root = str(tmp_path / "cache")
    record_digest(root, ModelSource(one, None), ModelSource(one, None).bytes_digest())
    (hint,) = os.listdir(os.path.join(root, "digests"))
    assert json.load(open(os.path.join(root, "digests", hint)))["path"] == os.path.abspath(one)
    record_digest(root, ModelSource(two, None), ModelSource(two, None).bytes_digest())
    (other,) = set(os.listdir(os.path.join(root, "digests"))) - {hint}
    os.replace(os.path.join(root, "digests", hint), os.path.join(root, "digests", other))  # one's hint as two's
    assert recorded_digest(root, ModelSource(two, None)) is None


def test_an_unwritable_cache_keeps_no_hint_and_raises_nothing(tmp_path, settled):
    path = _model(tmp_path)
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("x")
    record_digest(str(blocker), ModelSource(path, None), "0" * 64)
    assert recorded_digest(str(blocker), ModelSource(path, None)) is None


def test_a_matching_hint_becomes_the_process_digest_without_a_sha256(tmp_path, settled, monkeypatch):
    path = _model(tmp_path)
    root = str(tmp_path / "cache")
    digest = ModelSource(path, None).bytes_digest()
    record_digest(root, ModelSource(path, None), digest)
    monkeypatch.setattr(_model_source, "_BYTES_MEMO", {})  # a new process
    calls = []
    real = _model_source.ModelSource._hash_file
    monkeypatch.setattr(_model_source.ModelSource, "_hash_file", staticmethod(lambda p: calls.append(p) or real(p)))
    assert recorded_digest(root, ModelSource(path, None)) == digest
    assert ModelSource(path, None).bytes_digest() == digest and ModelSource(path, None).content_hash() == digest
    assert calls == []  # the CRC-32 was read, no sha256 computed
    with open(path, "r+b") as f:  # the content changes: the process digest follows it
        f.write(b"\x00" * 4)
    assert ModelSource(path, None).bytes_digest() != digest and len(calls) == 1


def test_a_hint_whose_crc32_differs_is_not_used(tmp_path, settled):
    path = _model(tmp_path)
    root = str(tmp_path / "cache")
    source = ModelSource(path, None)
    record_digest(root, source, source.bytes_digest())
    (hint,) = os.listdir(os.path.join(root, "digests"))
    doc = json.load(open(os.path.join(root, "digests", hint)))
    doc["crc32"] ^= 1  # as if the bytes had changed under the same state
    json.dump(doc, open(os.path.join(root, "digests", hint), "w"))
    assert recorded_digest(root, ModelSource(path, None)) is None


def test_recording_an_unchanged_hint_again_reads_nothing(tmp_path, settled, monkeypatch):
    from onnxwrapper.kernel.model import _digest_hints

    path = _model(tmp_path)
    root = str(tmp_path / "cache")
    digest = ModelSource(path, None).bytes_digest()
    record_digest(root, ModelSource(path, None), digest)
    reads = []
    monkeypatch.setattr(_digest_hints, "crc32_file", lambda p: reads.append(p))
    record_digest(root, ModelSource(path, None), digest)
    assert reads == []


def test_the_hints_folder_keeps_the_newest_hints_and_drops_dead_writers_files(tmp_path, settled, monkeypatch):
    from onnxwrapper.kernel.model import _digest_hints

    monkeypatch.setattr(_digest_hints, "MAX_HINTS", 3)
    root = str(tmp_path / "cache")
    folder = os.path.join(root, "digests")
    paths = [_model(tmp_path, f"m{i}.onnx", seed=i) for i in range(5)]
    os.makedirs(folder)
    dead, live = os.path.join(folder, "a.json.1.x.tmp"), os.path.join(folder, "b.json.2.y.tmp")
    for tmp in (dead, live):
        open(tmp, "w").close()
    os.utime(dead, (0, 0))  # a writer that died long ago
    for i, path in enumerate(paths):
        record_digest(root, ModelSource(path, None), ModelSource(path, None).bytes_digest())
        hints = [n for n in os.listdir(folder) if n.endswith(".json")]
        os.utime(os.path.join(folder, max(hints, key=lambda n: os.stat(os.path.join(folder, n)).st_mtime_ns)),
                 ns=(i * 10**9, (i + 1) * 10**9))  # written in this order, one second apart
    assert sorted(n for n in os.listdir(folder) if n.endswith(".json")) == sorted(
        os.path.basename(_digest_hints._hint_file(root, os.path.abspath(p))) for p in paths[2:])
    assert [recorded_digest(root, ModelSource(p, None)) is not None for p in paths] == [False, False, True, True, True]
    assert not os.path.exists(dead) and os.path.exists(live)
