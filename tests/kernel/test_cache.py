"""onnxwrapper.kernel.cache._cache: atomic entries, integrity checks, LRU bound, one builder across processes."""

from __future__ import annotations

import json
import logging
import os
import sys

import pytest

from onnxwrapper.kernel.cache._cache import ArtifactCache, ENV_CACHE_DIR, default_cache_dir, make_key
from tests.cache_damage import KINDS, damage_entry


def _writer(payload: bytes, name: str = "artifact.bin", meta: dict | None = None):
    calls = []

    def build(directory: str):
        calls.append(directory)
        with open(os.path.join(directory, name), "wb") as f:
            f.write(payload)
        os.makedirs(os.path.join(directory, "sub"))
        with open(os.path.join(directory, "sub", "x.txt"), "w") as f:
            f.write("x")
        return meta or {"answer": 42}

    build.calls = calls
    return build


def test_make_key_is_canonical_and_content_sensitive():
    assert make_key({"a": 1, "b": [1, 2]}) == make_key({"b": [1, 2], "a": 1})
    assert make_key({"a": 1}) != make_key({"a": 2})
    assert len(make_key({})) == 64


def test_default_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_CACHE_DIR, str(tmp_path / "env"))
    assert default_cache_dir() == str(tmp_path / "env")
    assert default_cache_dir(tmp_path / "opt") == str(tmp_path / "opt")
    monkeypatch.delenv(ENV_CACHE_DIR)
    assert "onnxwrapper" in default_cache_dir()


def test_build_then_hit(tmp_path):
    cache = ArtifactCache(tmp_path)
    build = _writer(b"abc" * 100)
    key = make_key({"m": 1})
    first = cache.get_or_create(key, build)
    assert not first.hit and first.meta == {"answer": 42}
    assert first.files == {"artifact.bin": 300, "sub/x.txt": 1}
    assert open(first.file("sub/x.txt")).read() == "x"
    second = cache.get_or_create(key, build)
    assert second.hit and second.path == first.path and len(build.calls) == 1
    assert cache.lookup(key).hit
    assert cache.lookup(make_key({"m": 2})) is None
    assert not os.listdir(os.path.join(tmp_path, "tmp"))  # the temp build dir was moved, not copied


def test_failed_build_leaves_nothing(tmp_path):
    cache = ArtifactCache(tmp_path)

    def broken(directory):
        open(os.path.join(directory, "half"), "w").close()
        raise RuntimeError("compiler crashed")

    with pytest.raises(RuntimeError, match="compiler crashed"):
        cache.get_or_create("k" * 64, broken)
    assert cache.entries() == [] and not os.listdir(os.path.join(tmp_path, "tmp"))


@pytest.mark.parametrize("damage", KINDS)
def test_corrupt_entry_is_logged_and_rebuilt(tmp_path, caplog, damage):
    cache = ArtifactCache(tmp_path)
    key = make_key({"damage": damage})
    build = _writer(bytes(range(256)) * 4)
    entry = cache.get_or_create(key, build)
    damage_entry(entry, damage)
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.cache"):
        again = cache.get_or_create(key, build)
    assert not again.hit and len(build.calls) == 2
    assert "corrupt" in caplog.text
    assert open(again.file("artifact.bin"), "rb").read() == bytes(range(256)) * 4


def test_the_manifest_records_each_files_sha256_and_crc32(tmp_path):
    import hashlib
    import zlib

    payload = bytes(range(256)) * 4
    entry = ArtifactCache(tmp_path).get_or_create(make_key({"sums": 1}), _writer(payload))
    files = json.load(open(os.path.join(entry.path, "manifest.json")))["files"]
    assert files["artifact.bin"] == {"size": len(payload), "sha256": hashlib.sha256(payload).hexdigest(),
                                     "crc32": zlib.crc32(payload)}


@pytest.mark.parametrize("damage", ["flip", "same_size"])
def test_an_entry_written_before_the_crc32_is_checked_against_its_sha256(tmp_path, caplog, damage):
    cache = ArtifactCache(tmp_path)
    key = make_key({"legacy": damage})
    build = _writer(bytes(range(256)) * 4)
    entry = cache.get_or_create(key, build)
    manifest_path = os.path.join(entry.path, "manifest.json")
    manifest = json.load(open(manifest_path))
    for info in manifest["files"].values():
        del info["crc32"]
    json.dump(manifest, open(manifest_path, "w"))
    assert ArtifactCache(tmp_path).peek(key) is not None  # intact: still a hit
    damage_entry(entry, damage)
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.cache"):
        again = ArtifactCache(tmp_path).get_or_create(key, build)
    assert not again.hit and "sha256" in caplog.text


@pytest.mark.parametrize("value", ["x", None, 1.5, [1]])
def test_a_malformed_crc32_in_the_manifest_is_a_corrupt_entry(tmp_path, caplog, value):
    cache = ArtifactCache(tmp_path)
    key = make_key({"malformed": repr(value)})
    build = _writer(b"payload")
    entry = cache.get_or_create(key, build)
    manifest_path = os.path.join(entry.path, "manifest.json")
    manifest = json.load(open(manifest_path))
    manifest["files"]["artifact.bin"]["crc32"] = value
    json.dump(manifest, open(manifest_path, "w"))
    os.utime(entry.file("artifact.bin"), ns=(0, 10**9))  # a new file state: checked again in this process
    with caplog.at_level(logging.WARNING, logger="onnxwrapper.cache"):
        again = ArtifactCache(tmp_path).get_or_create(key, build)
    assert not again.hit and "CRC-32" in caplog.text


def test_unwritable_root_is_an_artifact_error(tmp_path):
    from onnxwrapper.errors import ArtifactError

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ArtifactError, match="not usable"):
        ArtifactCache(blocker / "cache").get_or_create("b" * 64, _writer(b"1"))


def test_format_change_rebuilds(tmp_path):
    cache = ArtifactCache(tmp_path)
    build = _writer(b"1")
    entry = cache.get_or_create("a" * 64, build)
    manifest_path = os.path.join(entry.path, "manifest.json")
    manifest = json.load(open(manifest_path))
    manifest["format"] = 0
    json.dump(manifest, open(manifest_path, "w"))
    assert cache.lookup("a" * 64) is None


def test_lru_eviction_keeps_recent_entries(tmp_path):
    cache = ArtifactCache(tmp_path, max_bytes=2500)
    keys = [make_key({"i": i}) for i in range(3)]
    for i, key in enumerate(keys[:2]):
        cache.get_or_create(key, _writer(b"x" * 1000))
        stamp = os.path.join(cache.entry_dir(key), ".last_used")
        os.utime(stamp, (1000 + i, 1000 + i))
    cache.lookup(keys[0])  # keys[0] becomes the most recently used
    cache.get_or_create(keys[2], _writer(b"y" * 1000))  # total 3003 > 2500: evict the LRU one
    remaining = {k for k, _size, _used in cache.entries()}
    assert remaining == {keys[0], keys[2]}
    assert cache.size_bytes() <= 2500
    assert cache.clear() == 2 and cache.entries() == []


_CONCURRENT = """
import os, sys, time
from onnxwrapper.kernel.cache._cache import ArtifactCache
root, key, marker = sys.argv[1], sys.argv[2], sys.argv[3]
def build(directory):
    with open(marker, "a") as f:
        f.write("built %d\\n" % os.getpid())
    time.sleep(1.0)
    with open(os.path.join(directory, "a.bin"), "wb") as f:
        f.write(b"z" * 4096)
    return {"pid": os.getpid()}
entry = ArtifactCache(root).get_or_create(key, build)
print("HIT" if entry.hit else "BUILT", entry.meta["pid"])
"""


def test_one_build_across_processes(tmp_path):
    import subprocess

    marker = tmp_path / "builds.txt"
    key = make_key({"concurrent": True})
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-c", _CONCURRENT, str(tmp_path / "c"), key, str(marker)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    kinds = sorted(o[0].split()[0] for o in outs)
    assert kinds == ["BUILT", "HIT", "HIT", "HIT"], outs
    assert len(marker.read_text().splitlines()) == 1
    assert len({o[0].split()[1] for o in outs}) == 1  # everyone sees the builder's metadata
