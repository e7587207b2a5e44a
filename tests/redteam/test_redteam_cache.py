"""Red team, the compile cache (docs/security.md, "the compile cache"): a write that fails leaves no
entry (an entry is published only complete and checked); a folder of the cache of the wrong type,
or an entry moved while it is loaded, rebuilds or gives a typed error; everything it creates —
``digests/``, ``plugins/`` and ``diff-folders/`` too — is private under any umask, and under
``umask 000`` the first QNN session accepts the cache it created; a dangling symbolic link at the
default run-folder name gets a fresh name."""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import stat
import time

import pytest

from onnxwrapper import diff
from onnxwrapper.diff._capture import write_manifest
from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel import ArtifactCache, ModelSource, make_key, record_digest
from tests import models
from tests.conftest import qnn_available, run_python
from tests.redteam.hostile import POSIX

KEY = make_key({"redteam": "cache"})


def build(directory: str) -> dict:
    with open(os.path.join(directory, "artifact.bin"), "wb") as f:
        f.write(b"compiled" * 64)
    return {"answer": 42}


def leftovers(root) -> list:
    tmp = os.path.join(root, "tmp")
    return [n for n in os.listdir(tmp) if not n.startswith("trash.")] if os.path.isdir(tmp) else []


@pytest.mark.parametrize("folder", ["entries", "locks", "tmp"])
def test_a_cache_folder_of_the_wrong_type_is_replaced(tmp_path, folder):
    cache = ArtifactCache(tmp_path / "cache")
    os.makedirs(cache.root, mode=0o700)
    (tmp_path / "cache" / folder).write_text("not a folder")
    entry = cache.get_or_create(KEY, build)
    assert not entry.hit and os.path.isdir(os.path.join(cache.root, folder))
    assert cache.lookup(KEY).hit


@POSIX
def test_an_entry_folder_that_is_a_link_or_a_file_is_rebuilt(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")
    os.makedirs(os.path.join(cache.root, "entries"), mode=0o700)
    os.symlink(tmp_path / "nowhere", cache.entry_dir(KEY))  # dangling
    assert not cache.get_or_create(KEY, build).hit and not os.path.islink(cache.entry_dir(KEY))
    other = make_key({"redteam": "file"})
    with open(cache.entry_dir(other), "w") as f:
        f.write("x")
    assert not cache.get_or_create(other, build).hit and os.path.isdir(cache.entry_dir(other))


def test_a_write_back_that_fails_leaves_no_entry(tmp_path, monkeypatch):
    """A full disk: the builder's writes land in the page cache, the write-back fails (fsync reports
    ENOSPC). Nothing is published, no temporary is left, and the next request builds again."""
    cache = ArtifactCache(tmp_path / "cache")
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ArtifactError, match="could not be written completely .*No space left"):
        cache.get_or_create(KEY, build)
    assert cache.peek(KEY) is None and not os.path.exists(cache.entry_dir(KEY)) and not leftovers(cache.root)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert not cache.get_or_create(KEY, build).hit


def test_files_the_builders_check_refuses_are_never_published(tmp_path):
    cache = ArtifactCache(tmp_path / "cache")

    def cut(directory: str, meta) -> None:
        raise ValueError("the model ends after 12 of 512 bytes")

    with pytest.raises(ArtifactError, match="incomplete or unreadable .*12 of 512"):
        cache.get_or_create(KEY, build, cut)
    assert cache.peek(KEY) is None and not leftovers(cache.root)


@POSIX
def test_records_next_to_the_entries_are_private_under_umask_000(tmp_path, monkeypatch):
    from onnxwrapper._entry_point_index import IndexLocation, write_index

    root = tmp_path / "cache"
    monkeypatch.setenv("ONNXWRAPPER_CACHE_DIR", str(root))
    model = tmp_path / "m.onnx"
    model.write_bytes(models.smallconv(batch=1))
    later = time.time_ns() + 10 ** 10  # the file looks settled (a digest hint is kept only for such files)
    monkeypatch.setattr(time, "time_ns", lambda: later)
    old = os.umask(0)
    try:
        source = ModelSource(str(model), None)
        record_digest(str(root), source, source.bytes_digest())
        write_index(IndexLocation("g", [], str(root / "plugins" / "entry-points-x.json")), {})
        (tmp_path / "d").mkdir()  # the diff's manifest writer records the folder in diff-folders/
        write_manifest(str(tmp_path / "d"), {"reference": "cpu", "target": {"argv": ["s.py"]}})
    finally:
        os.umask(old)
    for folder in ("digests", "plugins", "diff-folders"):
        path = root / folder
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, folder
        for item in path.iterdir():
            assert stat.S_IMODE(item.stat().st_mode) == 0o600, item
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    ArtifactCache(root)  # the root it made is accepted


def test_a_dangling_link_at_the_default_run_folder_name_gets_a_fresh_name(tmp_path):
    now = dt.datetime.now(dt.timezone.utc)
    for seconds in range(0, 5):  # the names of the next few seconds, all dangling links
        stamp = (now + dt.timedelta(seconds=seconds)).strftime("%Y%m%d-%H%M%S")
        os.symlink(tmp_path / "nowhere", tmp_path / f"aipc-diff-{stamp}")
    folder = diff.default_directory(str(tmp_path))
    assert not os.path.lexists(folder)
    os.makedirs(folder)


def in_fresh_cache(code: str, tmp_path):
    """Run ``code`` (argv: a new private cache root, a model path) in a fresh interpreter; it must end well."""
    (tmp_path / "m.onnx").write_bytes(models.smallconv(batch=1))
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    proc = run_python(code, str(root), str(tmp_path / "m.onnx"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


CUT_CTX = r"""
import glob, os, sys, numpy as np
import onnxwrapper
from onnxwrapper.backends.qnn.workers import WorkerPool
from onnxwrapper.errors import ArtifactError
root, model = sys.argv[1:3]
model = open(model, "rb").read()  # as bytes: compiled through this process's pool (a path's first compile is the worker's)
real_run = WorkerPool.run

def cut(self, request):  # the compiler "succeeds" but the disk filled: its EPContext model is cut short
    meta = real_run(self, request)
    for ctx in glob.glob(os.path.join(glob.escape(request.out_dir), "*.onnx")):
        with open(ctx, "r+b") as f:
            f.truncate(os.path.getsize(ctx) // 2)
    return meta

WorkerPool.run = cut
x = np.ones((1, 3, 8, 8), np.float32)
try:
    onnxwrapper.InferenceSession(model, backend="qnn", backend_options={"cache_dir": root}).run(None, {"X": x})
    print("FIRST: served")
except ArtifactError as exc:
    print("FIRST: ArtifactError", str(exc)[:80])
WorkerPool.run = real_run
entries = [d for d in glob.glob(os.path.join(root, "entries", "*")) if glob.glob(os.path.join(d, "*.onnx"))]
print("ENTRIES", len(entries))
y = onnxwrapper.InferenceSession(model, backend="qnn", backend_options={"cache_dir": root}).run(None, {"X": x})[0]
print("SECOND", float(y.sum()))
"""


@pytest.mark.qnn
@pytest.mark.slow
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_a_compile_cut_short_by_a_full_disk_is_never_served(tmp_path):
    proc = in_fresh_cache(CUT_CTX, tmp_path)
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("FIRST: ArtifactError") for ln in lines), proc.stdout
    assert "ENTRIES 0" in lines, proc.stdout
    assert any(ln.startswith("SECOND ") for ln in lines), proc.stdout + proc.stderr[-2000:]


MOVED = r"""
import glob, os, sys, numpy as np
import onnxruntime, onnxwrapper
from onnxwrapper.errors import ArtifactError
root, model = sys.argv[1:3]
x = np.ones((1, 3, 8, 8), np.float32)
want = onnxwrapper.InferenceSession(model, backend="qnn", backend_options={"cache_dir": root}).run(None, {"X": x})[0]
real = onnxruntime.InferenceSession._create_inference_session

def evicted_meanwhile(self, *args, **kwargs):  # another process evicts the entry as ORT starts to load it
    for d in glob.glob(os.path.join(root, "entries", "*")):
        if glob.glob(os.path.join(d, "*.onnx")):
            os.rename(d, d + ".moved")
    return real(self, *args, **kwargs)

onnxruntime.InferenceSession._create_inference_session = evicted_meanwhile
try:
    onnxwrapper.InferenceSession(model, backend="qnn", backend_options={"cache_dir": root})
    print("LOADED")
except ArtifactError as exc:
    print("ArtifactError", "moved, removed or damaged while it was loaded" in str(exc))
onnxruntime.InferenceSession._create_inference_session = real
y = onnxwrapper.InferenceSession(model, backend="qnn", backend_options={"cache_dir": root}).run(None, {"X": x})[0]
print("AGAIN", bool(np.allclose(y, want)))
"""


@pytest.mark.qnn
@pytest.mark.slow
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_an_entry_moved_while_it_is_loaded_is_a_typed_error_then_rebuilt(tmp_path):
    proc = in_fresh_cache(MOVED, tmp_path)
    assert "ArtifactError True" in proc.stdout and "AGAIN True" in proc.stdout, proc.stdout + proc.stderr[-2000:]


UMASK_000 = r"""
import os, sys, numpy as np
os.umask(0)
import onnxwrapper
y = onnxwrapper.InferenceSession(sys.argv[2], backend="qnn").run(None, {"X": np.ones((1, 3, 8, 8), np.float32)})[0]
print("RAN", float(y.sum()))
"""


@pytest.mark.qnn
@pytest.mark.slow
@POSIX
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_under_umask_000_the_first_qnn_session_accepts_the_cache_it_made(tmp_path):
    (tmp_path / "m.onnx").write_bytes(models.smallconv(batch=1))
    root = tmp_path / "fresh-cache"  # does not exist yet: the session creates it
    proc = run_python(UMASK_000, str(root), str(tmp_path / "m.onnx"), env={"ONNXWRAPPER_CACHE_DIR": str(root)},
                      timeout=600)
    assert proc.returncode == 0 and "RAN" in proc.stdout, proc.stderr[-3000:]
    for path in [root, *(p for p in root.rglob("*") if not p.is_symlink())]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600) or path.parent.name == "locks", (path, oct(mode))


def test_a_stitched_entry_with_a_cut_context_binary_is_never_published(tmp_path):
    """A stitched or graph-split model names several context binaries (``bins``); the check before
    publishing refuses an entry where any of them is missing or empty, not only the first."""
    from onnxwrapper.backends.qnn.compile import complete_epcontext

    (tmp_path / "model_ctx.onnx").write_bytes(models.smallconv(batch=1))
    (tmp_path / "part0_0_qnn.bin").write_bytes(b"\0" * 64)
    (tmp_path / "part2_0_qnn.bin").write_bytes(b"")
    meta = {"ctx": "model_ctx.onnx", "bin": "part0_0_qnn.bin", "bins": ["part0_0_qnn.bin", "part2_0_qnn.bin"],
            "partition": {}}
    with pytest.raises(ArtifactError, match="part2_0_qnn.bin is missing or empty"):
        complete_epcontext(str(tmp_path), meta)
    with pytest.raises(ArtifactError, match="part4_0_qnn.bin is missing or empty"):
        complete_epcontext(str(tmp_path), dict(meta, bins=["part0_0_qnn.bin", "part4_0_qnn.bin"]))
    complete_epcontext(str(tmp_path), dict(meta, bins=["part0_0_qnn.bin"]))  # whole: published
