"""Trust boundary, the compile cache (docs/security.md): a hit answers only when the entry's
provenance record is the session's; no symbolic link inside the cache is followed; what the cache
creates is private whatever the umask; a root another user could write is refused."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel.cache._cache import ArtifactCache, make_key
from tests import models
from tests.conftest import qnn_available, run_python

POSIX = pytest.mark.skipif(os.name != "posix", reason="POSIX owners and modes")


def mul(weights) -> bytes:
    """``Y = X * W`` with X, Y float[3,2] and the given W (same interface for every W)."""
    w = h.make_tensor("W", T.FLOAT, [3, 2], weights)
    g = h.make_graph([h.make_node("Mul", ["X", "W"], ["Y"])], "mul", [h.make_tensor_value_info("X", T.FLOAT, [3, 2])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [3, 2])], [w])
    return models.make_model(g)


PLANT = r"""
import glob, json, logging, os, shutil, sys
import numpy as np
import onnxwrapper
logging.basicConfig(level=logging.WARNING)
root, a, b = sys.argv[1:4]
x = np.ones((3, 2), np.float32)

def ctx_entries():
    return {os.path.basename(os.path.dirname(m)) for m in glob.glob(os.path.join(root, "entries", "*", "manifest.json"))
            if "partition" in json.load(open(m))["meta"]}

onnxwrapper.InferenceSession(a, backend="qnn", backend_options={"cache_dir": root}).run(None, {"X": x})
(key_a,) = ctx_entries()
onnxwrapper.InferenceSession(b, backend="qnn", backend_options={"cache_dir": root}).run(None, {"X": x})
(key_b,) = ctx_entries() - {key_a}
# the attacker's move: B's compiled files under A's key, the manifest's key patched
shutil.rmtree(os.path.join(root, "entries", key_a))
shutil.copytree(os.path.join(root, "entries", key_b), os.path.join(root, "entries", key_a))
manifest = os.path.join(root, "entries", key_a, "manifest.json")
doc = json.load(open(manifest)); doc["key"] = key_a; json.dump(doc, open(manifest, "w"))
y = onnxwrapper.InferenceSession(a, backend="qnn", backend_options={"cache_dir": root}).run(None, {"X": x})[0]
print(json.dumps(y.tolist()))
"""


@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_a_planted_entry_of_another_model_never_answers(tmp_path):
    (tmp_path / "a.onnx").write_bytes(mul([1, 2, 3, 4, 5, 6]))
    (tmp_path / "b.onnx").write_bytes(mul([10, 20, 30, 40, 50, 60]))
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    proc = run_python(PLANT, str(root), str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), timeout=600)
    assert proc.returncode == 0, proc.stderr
    answer = np.array(json.loads(proc.stdout.splitlines()[-1]))
    assert np.allclose(answer, [[1, 2], [3, 4], [5, 6]], rtol=1e-2)  # A's answer, not B's (10× larger)
    assert "does not answer for this session: it was compiled from another model than a.onnx" in proc.stderr


def _built(cache: ArtifactCache, name: str = "artifact.bin"):
    def build(directory: str) -> dict:
        with open(os.path.join(directory, name), "wb") as f:
            f.write(b"compiled" * 64)
        return {"answer": 42}

    key = make_key({"trust": name})
    return key, build, cache.get_or_create(key, build)


@POSIX
def test_last_used_never_follows_a_planted_symlink(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    key, build, entry = _built(cache)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    os.utime(victim, (1_000_000, 1_000_000))
    stamp = os.path.join(entry.path, ".last_used")
    os.remove(stamp)
    os.symlink(victim, stamp)
    assert cache.lookup(key).hit
    assert victim.read_text() == "keep" and victim.stat().st_mtime == 1_000_000  # not touched through the link
    assert not os.path.islink(stamp) and os.path.isfile(stamp)


@POSIX
def test_no_symlink_inside_an_entry_is_followed(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    key, build, entry = _built(cache)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"compiled" * 64)  # same size and content: only the link is wrong
    os.remove(entry.file("artifact.bin"))
    os.symlink(outside, entry.file("artifact.bin"))
    assert not cache.lookup(key)  # removed as corrupt
    again = cache.get_or_create(key, build)
    assert not again.hit and not os.path.islink(again.file("artifact.bin"))
    # a whole entry folder that is a link to another folder is no entry either
    other_key, _b, other = _built(cache, "other.bin")
    os.rename(other.path, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", other.path)
    assert cache.peek(other_key) is None and cache.lookup(other_key) is None


@POSIX
def test_cache_files_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        cache = ArtifactCache(tmp_path / "fresh" / "cache")
        key, _build, entry = _built(cache)
    finally:
        os.umask(old)
    for path in (cache.root, os.path.join(cache.root, "entries"), os.path.join(cache.root, "locks"), entry.path):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700, path
    for name in ("artifact.bin", "manifest.json", ".last_used"):
        assert stat.S_IMODE(os.stat(os.path.join(entry.path, name)).st_mode) == 0o600, name


@POSIX
def test_a_root_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(ArtifactError, match="group and others may write it .mode 777.") as info:
        ArtifactCache(shared)
    assert info.value.path == str(shared) and "chmod go-w" in str(info.value)
    os.chmod(shared, 0o775)
    with pytest.raises(ArtifactError, match="group may write it"):
        ArtifactCache(shared)
    os.chmod(shared, 0o755)
    assert ArtifactCache(shared).root == str(shared)
    link = tmp_path / "link"
    os.symlink(shared, link)  # a symlinked root is fine: its target is checked
    assert ArtifactCache(link).get_or_create(make_key({"x": 1}), lambda d: {}).hit is False


@POSIX
@pytest.mark.skipif(os.name == "posix" and os.geteuid() != 0, reason="needs root to chown")
def test_a_root_owned_by_another_user_is_refused(tmp_path):
    other = tmp_path / "theirs"
    other.mkdir(mode=0o755)
    os.chown(other, 12345, 12345)
    with pytest.raises(ArtifactError, match="owned by user id 12345"):
        ArtifactCache(other)
