"""Windows file semantics (issue 23, fact 4), emulated on this host by the double of
``tests/fakes/windows_files.py``: a file another process has mapped (onnxruntime-qnn maps context
binaries on win_arm64) cannot be renamed, replaced or deleted, nor can its folder.

* cache eviction skips an entry in use instead of half-deleting it;
* a corrupt entry in use is left whole and rebuilt beside it (no ArtifactError);
* a read-only cache is recognized at once, where filelock (3.x on Windows) reads EACCES as "held
  by another process" and would wait ``lock_timeout`` (3600 s);
* ``aipc compile --overwrite`` of an artifact in use fails cleanly and replaces nothing.
"""

from __future__ import annotations

import errno
import json
import os

import filelock
import pytest

from onnxwrapper.kernel.cache._cache import ArtifactCache, make_key
from tests.conftest import qnn_available
from tests.fakes.windows_files import WindowsFileSemantics


def _build(payload: bytes):
    def build(directory: str):
        with open(os.path.join(directory, "model_ctx_qnn.bin"), "wb") as f:
            f.write(payload)
        with open(os.path.join(directory, "model_ctx.onnx"), "wb") as f:
            f.write(b"ctx" + payload[:8])
        return {"ctx": "model_ctx.onnx"}
    return build


def _intact(entry) -> bool:
    return all(os.path.isfile(entry.file(name)) for name in entry.files) and os.path.isfile(
        os.path.join(entry.path, "manifest.json"))


def test_the_double_blocks_what_windows_blocks(monkeypatch, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.bin").write_bytes(b"x")
    (tmp_path / "d" / "b.txt").write_bytes(b"y")
    win = WindowsFileSemantics(monkeypatch)
    win.use(tmp_path / "d" / "a.bin")
    for call in (lambda: os.remove(tmp_path / "d" / "a.bin"), lambda: os.replace(tmp_path / "d", tmp_path / "e"),
                 lambda: os.replace(tmp_path / "d" / "b.txt", tmp_path / "d" / "a.bin")):
        with pytest.raises(PermissionError):
            call()
    import shutil

    shutil.rmtree(tmp_path / "d", ignore_errors=True)
    assert sorted(os.listdir(tmp_path / "d")) == ["a.bin"]  # Windows' rmtree: half-deleted


def test_eviction_skips_an_entry_in_use(monkeypatch, tmp_path):
    cache = ArtifactCache(tmp_path, max_bytes=0)
    used = cache.get_or_create(make_key({"m": "used"}), _build(b"u" * 1000))
    other = cache.get_or_create(make_key({"m": "other"}), _build(b"o" * 1000))
    win = WindowsFileSemantics(monkeypatch)
    win.use(used.file("model_ctx_qnn.bin"))  # an app has this context binary mapped
    evicted = cache.prune(0)
    assert evicted == [other.key]
    assert _intact(used)  # not half-deleted
    again = cache.lookup(used.key)
    assert again is not None and again.hit and open(again.file("model_ctx_qnn.bin"), "rb").read() == b"u" * 1000


def test_a_corrupt_entry_in_use_is_rebuilt_beside_it(monkeypatch, tmp_path):
    cache = ArtifactCache(tmp_path, max_bytes=0)
    key = make_key({"m": "corrupt"})
    entry = cache.get_or_create(key, _build(b"c" * 1000))
    with open(entry.file("model_ctx.onnx"), "wb") as f:  # corrupted; its binary is mapped elsewhere
        f.write(b"garbage!!!!")
    win = WindowsFileSemantics(monkeypatch)
    win.use(entry.file("model_ctx_qnn.bin"))
    rebuilt = cache.get_or_create(key, _build(b"c" * 1000))  # raised ArtifactError before
    assert not rebuilt.hit and rebuilt.path != entry.path
    assert open(rebuilt.file("model_ctx.onnx"), "rb").read() == b"ctx" + b"c" * 8
    assert open(entry.file("model_ctx_qnn.bin"), "rb").read() == b"c" * 1000  # the mapped file is untouched
    assert win.blocked  # the double really was in the way
    win.release()  # the app ended: the next process replaces the entry in place
    final = cache.get_or_create(key, _build(b"c" * 1000))
    assert final.path == entry.path and open(final.file("model_ctx.onnx"), "rb").read() == b"ctx" + b"c" * 8


class _Filelock3OnWindows:
    """filelock 3.x's WindowsFileLock: ``os.open`` failing with EACCES means "held by another process",
    so ``acquire`` polls until ``timeout`` (3600 s for the cache) — here it raises Timeout at once."""

    seen_eacces: list = []

    def __init__(self, lock_file, timeout=-1, **_kwargs) -> None:
        self.lock_file, self.timeout = lock_file, timeout

    def acquire(self) -> None:
        try:
            fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        except OSError as exc:
            if exc.errno != errno.EACCES:
                raise
            self.seen_eacces.append(self.lock_file)
            raise filelock.Timeout(self.lock_file) from exc  # after waiting `timeout` seconds
        os.close(fd)

    def release(self) -> None:
        pass


def test_a_read_only_cache_is_used_at_once_not_after_the_lock_timeout(monkeypatch, tmp_path):
    root = tmp_path / "shipped-cache"
    key = make_key({"m": "ro"})
    ArtifactCache(root).get_or_create(key, _build(b"r" * 100))
    real_open = os.open

    def read_only_open(path, flags, *args, **kwargs):  # an ACL that denies writes (EACCES, as on Windows)
        if str(path).startswith(str(root)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise PermissionError(errno.EACCES, "Access is denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)
    monkeypatch.setattr(filelock, "FileLock", _Filelock3OnWindows)
    monkeypatch.setattr(ArtifactCache, "_writable_roots", {})  # as in a process that opens it for the first time
    _Filelock3OnWindows.seen_eacces = []
    cache = ArtifactCache(root, lock_timeout=3600)
    entry = cache.lookup(key)
    assert entry is not None and open(entry.file("model_ctx_qnn.bin"), "rb").read() == b"r" * 100
    built = cache.get_or_create(make_key({"m": "missing"}), _build(b"n" * 10))  # goes to a scratch cache
    assert not str(built.path).startswith(str(root))
    assert _Filelock3OnWindows.seen_eacces == []  # never waited on a lock it cannot create


@pytest.mark.qnn
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_compile_overwrite_of_an_artifact_in_use_replaces_nothing(monkeypatch, tmp_path, capsys):
    from aipc.cli import main
    from tests import models

    model = tmp_path / "m.onnx"
    model.write_bytes(models.smallconv(batch=1, seed=0))
    out = tmp_path / "out"
    assert main(["compile", str(model), "-o", str(out), "--no-check", "--json"]) == 0
    ctx, binary = out / "m_ctx.onnx", out / "m_ctx_qnn.bin"
    before = ctx.read_bytes(), binary.read_bytes()
    model.write_bytes(models.smallconv(batch=1, seed=1))  # a new version of the model
    win = WindowsFileSemantics(monkeypatch)
    win.use(binary)  # the app still runs the old one
    capsys.readouterr()
    code = main(["compile", str(model), "-o", str(out), "--no-check", "--overwrite"])
    err = capsys.readouterr().err
    assert code == 1 and "in use" in err and "m_ctx_qnn.bin" in err and "Traceback" not in err
    assert (ctx.read_bytes(), binary.read_bytes()) == before  # neither file replaced: no half-replaced pair
    assert sorted(os.listdir(out)) == sorted(["m_ctx.onnx", "m_ctx_qnn.bin", "m_ctx_compile.json"])
    json.loads((out / "m_ctx_compile.json").read_text())
