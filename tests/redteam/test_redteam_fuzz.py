"""Red team, fuzzed: hostile diff folders of every kind issue 33 lists, combined at random, read the
way ``aipc diff --check``, ``aipc fix`` and ``aipc fix --confirm`` read them.

Each case starts from a good folder (two CPU runs of a tiny model, built in-process) and applies
one to four hostile edits: a recorded command that names a standard-library module, a script the
folder ships (with its correct sha256), a link to one, arguments and a working directory for the
user's own script; backend options that are paths, libraries or limits; file names to compare
that leave the folder; Python modules planted in the folder (``json.py``, ``struct.py``); a run's
files made FIFOs, links to ``/dev/zero`` or folders; ``.npz`` members duplicated, big-endian or
holding objects; labels with terminal control sequences. Every case must end in a result or a
typed error naming the file, within the hang guard (10 s) and a memory bound (64 MiB traced),
with nothing run (no marker file), no recorded command chosen for ``--confirm``, no option outside
the allow-list used, and nothing written outside the folder.

The seed is fixed (a few seconds in CI); ``AIPC_FUZZ_SEED`` picks another, ``AIPC_FUZZ_SECONDS``
runs for that many seconds instead of the fixed count (as tests/trust/test_fuzz_files.py):

    AIPC_FUZZ_SEED=7 AIPC_FUZZ_SECONDS=60 python -m pytest -q tests/redteam/test_redteam_fuzz.py
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import subprocess
import sys
import time
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from onnxwrapper import diff
from onnxwrapper.diff import _capture
from onnxwrapper.errors import OnnxwrapperError
from onnxwrapper.repair.fix import _confirm
from tests.redteam.folders import copy_folder, diff_folder
from tests.redteam.hostile import POSIX, Hang, make_special, no_hang

SEED = int(os.environ.get("AIPC_FUZZ_SEED", "33"))
SECONDS = float(os.environ.get("AIPC_FUZZ_SECONDS", "0") or 0)
CASES = 40
MEMORY = 64 << 20
#: recorded options that name a path, a library or a limit: never used from a folder
NEVER = {"cache_dir", "repairs", "sdk_root", "artifact", "compile_timeout", "onnx"}
NEVER_EP = {"profiling_file_path", "backend_path"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the hostile edits: each takes (folder, rng, world) and changes the folder -------------------------------
def target_stdlib(folder, rng, world):
    code = f"open({str(world['marker'])!r}, 'w').write('timeit')"
    _edit(folder, lambda d: d["target"].update(argv=["timeit", code], module=True))


def target_shipped(folder, rng, world):
    payload = folder / rng.choice(["payload.py", "sub/evil.py", "__main__.py"])
    payload.parent.mkdir(exist_ok=True)
    payload.write_text(f"open({str(world['marker'])!r}, 'w').write('shipped')\n")
    path = payload
    if rng.random() < 0.5:
        path = folder / "link.py"
        os.symlink(payload, path)
    _edit(folder, lambda d: d["target"].update(argv=[str(path)], sha256=_sha(payload), module=False, cwd=str(folder)))


def target_users_script(folder, rng, world):
    script = world["script"]
    args = [str(world["outside"] / "victim.txt"), "--overwrite"]
    _edit(folder, lambda d: d["target"].update(argv=[str(script), *args], sha256=_sha(script), module=False,
                                               cwd=str(world["outside"])))


def hostile_options(folder, rng, world):
    bad = rng.choice([{"cache_dir": str(world["outside"] / "cache")},
                      {"provider_options": {"profiling_file_path": str(world["outside"] / "victim.txt")}},
                      {"provider_options": {"backend_path": str(world["outside"] / "libevil.so")}},
                      {"repairs": str(world["outside"] / "recipe.json")}, {"sdk_root": str(world["outside"])},
                      {"artifact": str(world["outside"] / "x.bin")}, {"compile_timeout": 1e18},
                      {"target": {"nested": "x"}}, {"precision": "x" * 100_000}])
    _edit(folder, lambda d: next(r for lb, r in d["runs"].items() if lb != "cpu")["options"].update(bad))


def compare_outside(folder, rng, world):
    name = rng.choice(["../outside/victim.txt", str(world["outside"] / "victim.txt"), "log.txt", "~/.bashrc"])
    _edit(folder, lambda d: d["app"].update(compare=["stdout", name]))


def planted_modules(folder, rng, world):
    for name in rng.sample(["json", "struct", "numpy", "zipfile", "argparse", "onnxruntime", "textwrap"], 3):
        (folder / f"{name}.py").write_text(f"open({str(world['marker'])!r}, 'w').write({name!r})\n")


def special_run_files(folder, rng, world):
    victim = folder / "twin" / rng.choice(["stdout.txt", "calls.jsonl", "capture.json", "status.json"])
    victim.unlink(missing_ok=True)
    make_special(victim, rng.choice(["fifo", "zero", "dir"]))


def hostile_npz(folder, rng, world):
    npz = sorted((folder / "twin" / "calls").iterdir())[0]
    with np.load(npz) as data:
        members = dict(data)
    key = rng.choice(sorted(members))
    kind = rng.choice(["duplicate", "big-endian", "object"])
    with zipfile.ZipFile(npz, "w") as z, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for name, value in members.items():
            buf = io.BytesIO()
            if name == key and kind == "big-endian":
                value = value.astype(value.dtype.newbyteorder(">"))
            if name == key and kind == "object":
                np.save(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
            else:
                np.save(buf, value)
            z.writestr(f"{name}.npy", buf.getvalue())
            if name == key and kind == "duplicate":
                buf2 = io.BytesIO()
                np.save(buf2, value * 1000)
                z.writestr(f"{name}.npy", buf2.getvalue())


def control_labels(folder, rng, world):
    evil = rng.choice(["twin\x1b]0;pwned\x07", "tw\x1b[8min", "tw\u202ein", "tw\rin"])

    def edit(d):
        d["runs"][evil] = dict(d["runs"].pop("twin"), label=evil)
        d["backends"][evil] = d["backends"].pop("twin")
    _edit(folder, edit)


EDITS = [target_stdlib, target_shipped, target_users_script, hostile_options, compare_outside, planted_modules,
         special_run_files, hostile_npz, control_labels]


def _edit(folder: Path, change) -> None:
    doc = json.loads((folder / "diff.json").read_text())
    change(doc)
    (folder / "diff.json").write_text(json.dumps(doc))


def _tree(path: Path) -> dict:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.rglob("*")) if p.is_file()}


# -- the cases -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return diff_folder(tmp_path_factory.mktemp("redteam-fuzz") / "good", backend="twin", scale=1.2)


def cases(label: str):
    rng = random.Random(f"{SEED}:{label}")
    end = time.monotonic() + SECONDS
    count = 0
    while (count < CASES) if not SECONDS else (time.monotonic() < end):
        count += 1
        yield rng, count


def _typed(exc: BaseException, folder: Path) -> bool:
    return isinstance(exc, OnnxwrapperError) or (isinstance(exc, (ValueError, OSError)) and str(folder) in str(exc))


def _read_like_fix(folder: Path) -> None:
    """What ``aipc diff --check`` and ``aipc fix --confirm`` read before any child could start."""
    result = diff.check(folder)
    result.table()
    for run in result.runs.values():  # only allow-listed options survive the reading
        assert not NEVER & set(run.options) and not NEVER_EP & set(run.options.get("provider_options") or {}), \
            run.options
        assert all(not isinstance(v, dict) or k == "provider_options" for k, v in run.options.items()), run.options
    target = _capture.read_manifest(str(folder)).get("target")
    for confirm in (True, None):
        command, _note = _confirm.confirm_command(target, confirm, None, _capture.local_record(str(folder)))
        assert command is None, (confirm, command)  # a received folder never chooses what runs


@POSIX
def test_hostile_folders(good, tmp_path):
    world = {"marker": tmp_path / "PWNED", "outside": tmp_path / "outside", "script": tmp_path / "app.py"}
    world["outside"].mkdir()
    (world["outside"] / "victim.txt").write_text("keep\n")
    world["script"].write_text("import sys\nopen(sys.argv[1], 'w').write('overwritten')\n")
    before = _tree(world["outside"])
    for rng, k in cases("folders"):
        folder = copy_folder(good, tmp_path / f"case{k}")
        edits = rng.sample(EDITS, rng.randint(1, 4))
        label = f"case {k}: {', '.join(e.__name__ for e in edits)}"
        for edit in edits:
            edit(folder, rng, world)
        tracemalloc.start()
        try:
            with no_hang(label):
                try:
                    _read_like_fix(folder)
                except Hang:
                    raise
                except AssertionError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the point: only typed errors may come out
                    assert _typed(exc, folder), f"{label}: untyped {type(exc).__name__}: {exc}"
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert peak < MEMORY, f"{label}: {peak} bytes allocated"
        assert not world["marker"].exists(), f"{label}: {world['marker'].read_text()}"
        assert _tree(world["outside"]) == before, label
    print(f"{k} hostile folders (seed {SEED})")


@POSIX
@pytest.mark.slow
def test_hostile_folders_through_the_command_line(good, tmp_path):
    """A few seeded cases through ``python -m aipc fix DIR --confirm`` run inside the folder: one
    line and a status of the exit table, never a traceback, nothing run or written outside."""
    world = {"marker": tmp_path / "PWNED", "outside": tmp_path / "outside", "script": tmp_path / "app.py"}
    world["outside"].mkdir()
    (world["outside"] / "victim.txt").write_text("keep\n")
    world["script"].write_text("import sys\nopen(sys.argv[1], 'w').write('overwritten')\n")
    rng = random.Random(f"{SEED}:cli")
    for k in range(4):
        folder = copy_folder(good, tmp_path / f"cli{k}")
        for edit in rng.sample(EDITS, 3):
            edit(folder, rng, world)
        proc = subprocess.run([sys.executable, "-m", "aipc", "fix", ".", "--confirm", "--no-localize"], cwd=folder,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode in (1, 2, 3, 64) and "Traceback" not in proc.stderr, proc.stderr
        assert "\x1b" not in proc.stdout + proc.stderr
        assert not world["marker"].exists() and (world["outside"] / "victim.txt").read_text() == "keep\n"
