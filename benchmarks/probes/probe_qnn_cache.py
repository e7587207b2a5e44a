"""Probe kinds: compile-cache faults (corruption, deletion, read-only, lock contention, kill -9, racing processes)
and files next to the model. Kinds marked ``isolate`` run alone in a fresh interpreter."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np

from probe_qnn_common import (
    HERE,
    REPORT,
    DEVIATION,
    SAME,
    SKIPPED,
    Outcome,
    as_arrays,
    attempt,
    kind,
    ort_cpu,
    ort_qnn,
    ow,
    result,
    snippet,
    write,
)
from probe_qnn_models import conv, mul

X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _populated(ctx, data=None, name="m.onnx"):
    """A model file + a cache holding its compiled entry: ``(path, cache dir, entry dir)``."""
    path = write(ctx, name, data or conv())
    cache = ctx.fresh_cache()
    ow(path, ctx, options={"cache_dir": cache}).run(None, {"X": X})
    entries = glob.glob(os.path.join(cache, "entries", "*"))
    return path, cache, entries[0] if entries else None


def _cache_kind(kind_id, title, damage):
    @kind(kind_id, title)
    def probe(k, ctx):
        path, cache, entry = _populated(ctx)
        damage(entry, cache)
        ref = attempt(lambda: ort_cpu(path).run(None, {"X": X}))
        return result(k, ref, attempt(lambda: ow(path, ctx, options={"cache_dir": cache}).run(None, {"X": X})))

    return probe


def _one(entry, pattern):
    return sorted(glob.glob(os.path.join(entry, pattern)))[0]


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _flip(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))


_cache_kind("cache.truncated_bin", "cache entry: context binary truncated", lambda e, c: _truncate(_one(e, "*.bin")))
_cache_kind(
    "cache.flipped_bin", "cache entry: one byte of the context binary flipped", lambda e, c: _flip(_one(e, "*.bin"))
)
_cache_kind(
    "cache.flipped_ctx", "cache entry: one byte of the EPContext model flipped", lambda e, c: _flip(_one(e, "*.onnx"))
)
_cache_kind("cache.bin_deleted", "cache entry: context binary deleted", lambda e, c: os.remove(_one(e, "*.bin")))
_cache_kind(
    "cache.manifest_deleted",
    "cache entry: manifest.json deleted",
    lambda e, c: os.remove(os.path.join(e, "manifest.json")),
)
_cache_kind(
    "cache.manifest_garbage",
    "cache entry: manifest.json garbage",
    lambda e, c: open(os.path.join(e, "manifest.json"), "w").write("{not json"),
)
_cache_kind(
    "cache.entry_empty_dir",
    "cache entry: directory emptied",
    lambda e, c: [os.remove(p) for p in glob.glob(os.path.join(e, "*"))],
)
_cache_kind(
    "cache.tmp_junk",
    "cache tmp/ full of stale junk",
    lambda e, c: [os.makedirs(os.path.join(c, "tmp", f"junk{i}"), exist_ok=True) for i in range(3)],
)


@kind("cache.deleted_mid_run", "cache entry deleted while a session uses it: run, then a new session")
def _deleted_mid_run(k, ctx):
    path, cache, entry = _populated(ctx)
    s = ow(path, ctx, options={"cache_dir": cache})
    shutil.rmtree(os.path.join(cache, "entries"))
    got = attempt(
        lambda: [s.run(None, {"X": X})[0], ow(path, ctx, options={"cache_dir": cache}).run(None, {"X": X})[0]]
    )
    ref = attempt(lambda: [ort_cpu(path).run(None, {"X": X})[0]] * 2)
    return result(k, ref, got)


@kind("cache.dir_is_file", "cache_dir is a regular file")
def _dir_is_file(k, ctx):
    path = write(ctx, "m.onnx", conv())
    bad = write(ctx, "notadir", b"x")
    return result(
        k,
        attempt(lambda: ort_cpu(path).run(None, {"X": X})),
        attempt(lambda: ow(path, ctx, options={"cache_dir": bad}).run(None, {"X": X})),
    )


def _readonly_kind(kind_id, title, populate):
    @kind(kind_id, title, isolate=True)
    def probe(k, ctx):
        if shutil.which("unshare") is None or os.geteuid() != 0 and not _can_chmod_ro():
            return result(k, None, None, SKIPPED, "needs root + unshare, or a non-root user")
        path = write(ctx, "m.onnx", conv())
        cache = ctx.fresh_cache()
        if populate:
            ow(path, ctx, options={"cache_dir": cache}).run(None, {"X": X})
        code = REPORT + f"""
import numpy as np
from probe_qnn_common import Context, ow
ctx = Context({ctx.work!r}, {cache!r})
x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
report(lambda: ow({path!r}, ctx).run(None, {{"X": x}}))
"""
        if os.geteuid() == 0:  # root ignores permissions: a read-only bind mount in a private mount namespace
            prefix = [
                "unshare",
                "-rm",
                "sh",
                "-c",
                'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
                cache,
            ]
        else:
            subprocess.run(["chmod", "-R", "a-w", cache], check=True)
            prefix = None
        got = as_arrays(snippet(code, prefix=prefix))
        if os.geteuid() != 0:
            subprocess.run(["chmod", "-R", "u+w", cache], check=True)
        ref = attempt(lambda: ort_cpu(path).run(None, {"X": X}))
        if populate and ref.ok and not got.ok:  # a lookup needs no write: it must work
            return result(k, ref, got, DEVIATION, f"populated read-only cache unusable: {got.brief()[:110]}")
        return result(k, ref, got)

    return probe


def _can_chmod_ro():
    return os.name == "posix"


_readonly_kind("cache.readonly_populated", "read-only cache that already holds the entry", True)
_readonly_kind("cache.readonly_empty", "read-only empty cache (a miss)", False)


@kind("cache.lock_contention", "another process holds the entry's lock for 3 s", isolate=True)
def _lock(k, ctx):
    path, cache, entry = _populated(ctx)
    shutil.rmtree(entry)
    lock = glob.glob(os.path.join(cache, "locks", "*.lock"))[0]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import filelock, sys, time\nwith filelock.FileLock(sys.argv[1]):\n"
            "    print('held', flush=True); time.sleep(3)",
            lock,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    holder.stdout.readline()
    got = attempt(lambda: ow(path, ctx, options={"cache_dir": cache}).run(None, {"X": X}))
    holder.wait()
    r = result(k, attempt(lambda: ort_cpu(path).run(None, {"X": X})), got)
    r["reason"] += f" (waited {got.seconds:.1f} s)"
    return r


@kind("cache.kill9_compile", "kill -9 of a process in the middle of its compile, then a new session", isolate=True)
def _kill9(k, ctx):
    path = write(ctx, "big.onnx", conv(1, (96, 96)))
    cache = ctx.fresh_cache()
    code = f"""
from probe_qnn_common import Context, ow
import numpy as np
ow({path!r}, Context({ctx.work!r}, {cache!r}))
"""
    victim = subprocess.Popen(
        [sys.executable, "-c", "import sys\nsys.path.insert(0, %r)\n" % HERE + textwrap.dedent(code)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline and not glob.glob(os.path.join(cache, "tmp", "*")):
        time.sleep(0.02)
    victim.kill()
    victim.wait()
    x = np.ones((1, 3, 96, 96), np.float32)
    got = attempt(lambda: ow(path, ctx, options={"cache_dir": cache}).run(None, {"X": x}))
    return result(k, attempt(lambda: ort_cpu(path).run(None, {"X": x})), got)


@kind("cache.racing_processes", "4 processes open the same new model at once (one compile expected)", isolate=True)
def _racing(k, ctx):
    path = write(ctx, "race.onnx", conv(1, (32, 32)))
    cache = ctx.fresh_cache()
    code = REPORT + f"""
import numpy as np
from probe_qnn_common import Context, ow
s = ow({path!r}, Context({ctx.work!r}, {cache!r}))
report(lambda: [s.run(None, {{"X": np.ones((1, 3, 32, 32), np.float32)}})[0], s.get_partition().source])
"""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "import sys, json\nsys.path.insert(0, %r)\n" % HERE + textwrap.dedent(code)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outs = [
        json.loads([line for line in p.communicate(timeout=300)[0].splitlines() if line.startswith("{")][-1])
        for p in procs
    ]
    ref = ort_cpu(path).run(None, {"X": np.ones((1, 3, 32, 32), np.float32)})[0]
    if not all(o["ok"] for o in outs):
        bad = next(o for o in outs if not o["ok"])
        return result(k, Outcome(True, [ref]), Outcome(False, None, bad["etype"], bad["message"]))
    sources = sorted(o["value"][1] for o in outs)
    got = Outcome(True, [np.asarray(o["value"][0], np.float32) for o in outs])
    r = result(k, Outcome(True, [ref] * 4), got)
    r["reason"] += f"; partition sources {sources}"
    if sources.count("compile") != 1 and r["verdict"] == SAME:
        r["verdict"], r["reason"] = DEVIATION, f"{sources.count('compile')} compiles for one model: {sources}"
    return r


# -- files next to the model -------------------------------------------------------------------------------
def _neighbour_kind(kind_id, title, prepare):
    @kind(kind_id, title)
    def probe(k, ctx):
        path = write(ctx, "m.onnx", mul())
        prepare(ctx, path)
        x = np.arange(6, dtype=np.float32).reshape(3, 2)
        ref, got = attempt(lambda: ort_cpu(path).run(None, {"X": x})), attempt(
            lambda: ow(path, ctx).run(None, {"X": x})
        )
        if ref.ok and not got.ok:  # a file the user did not ask for must not block a valid model
            return result(k, ref, got, DEVIATION, f"unrequested neighbour blocks a valid model: {got.brief()[:110]}")
        return result(k, ref, got, tol=1e-3)

    return probe


def _ctx_of(data, path):
    """Compile ``data`` with plain ORT's EPContext generation into ``<dir>/m_ctx.onnx`` (+ ``m_ctx_qnn.bin``)."""
    src = os.path.join(os.path.dirname(path), "src_for_ctx.onnx")
    with open(src, "wb") as f:
        f.write(data)
    ort_qnn(
        src,
        configs={"ep.context_enable": "1", "ep.context_file_path": os.path.join(os.path.dirname(path), "m_ctx.onnx")},
    )
    os.remove(src)


def _retrained(ctx, path):
    _ctx_of(open(path, "rb").read(), path)
    with open(path, "wb") as f:
        f.write(mul(((-1, 0.5), (2, -3), (0, 1))))


def _unrelated(ctx, path):
    _ctx_of(conv(), path)


def _external_bin(ctx, path):
    import onnx

    onnx.save(onnx.load(path), path, save_as_external_data=True, location="m.bin", size_threshold=0)


_neighbour_kind(
    "nb.fresh_ctx",
    "m_ctx.onnx compiled (by plain ORT) from this very m.onnx",
    lambda c, p: _ctx_of(open(p, "rb").read(), p),
)
_neighbour_kind("nb.stale_ctx", "m_ctx.onnx compiled before m.onnx was retrained (same IO)", _retrained)
_neighbour_kind(
    "nb.unrelated_ctx", "m_ctx.onnx of an unrelated model with the same IO names/types (other shapes)", _unrelated
)
_neighbour_kind(
    "nb.garbage_ctx",
    "m_ctx.onnx that is garbage",
    lambda c, p: open(os.path.join(os.path.dirname(p), "m_ctx.onnx"), "wb").write(os.urandom(200)),
)
_neighbour_kind(
    "nb.random_bin",
    "a random m.bin next to m.onnx",
    lambda c, p: open(os.path.join(os.path.dirname(p), "m.bin"), "wb").write(os.urandom(4096)),
)
_neighbour_kind(
    "nb.random_bin_with_cpp",
    "random m.bin + m.cpp (converter output) next to m.onnx",
    lambda c, p: [open(os.path.join(os.path.dirname(p), n), "wb").write(os.urandom(64)) for n in ("m.bin", "m.cpp")],
)
_neighbour_kind("nb.external_data_bin", "the model's own external data named m.bin", _external_bin)
_neighbour_kind(
    "nb.random_htp_bin",
    "a random m.htp.bin (qai_appbuilder name) next to m.onnx",
    lambda c, p: open(os.path.join(os.path.dirname(p), "m.htp.bin"), "wb").write(os.urandom(4096)),
)
