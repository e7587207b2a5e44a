"""Fuzzing every file format aipc reads from elsewhere (docs/security.md): tensor files (.npz, .npy,
JSON, Polygraphy JSON), repair recipes, capture folders and diff folders get random truncations,
flipped bytes, type swaps and oversized fields. Each case must end with a typed error naming the
file (an ``OnnxwrapperError``, or a ``ValueError`` / ``FileNotFoundError`` whose message names it)
or a result, within a memory bound (tracemalloc: 64 MiB) and a hang guard (10 s per case, POSIX).

Fixed seed and case count by default (a few seconds); ``AIPC_FUZZ_SEED`` picks another seed and
``AIPC_FUZZ_SECONDS`` runs each format for that many seconds instead.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import signal
import time
import tracemalloc
import warnings
import zipfile

import numpy as np
import onnx
import pytest

import onnxwrapper
from onnxwrapper import diff
from onnxwrapper.errors import OnnxwrapperError
from onnxwrapper.repair import ModelRecipe, RecipeBook, Rewrite, apply_recipe, check_recipe, load_recipes, model_sha256
from tests import models, repair_models

SEED = int(os.environ.get("AIPC_FUZZ_SEED", "24"))
SECONDS = float(os.environ.get("AIPC_FUZZ_SECONDS", "0") or 0)
CASES = 60  # per format without AIPC_FUZZ_SECONDS
MEMORY = 64 << 20
GUARD_SECONDS = 10
SPECS = [diff.TensorSpec("X", "tensor(float)", (1, 3, 8, 8))]
WEIRD = [None, True, -1, 0, 2 ** 70, 10 ** 12, 1e308, float("nan"), "abc", "x" * 200_000, [], {}, [1, "a"],
         {"a": [None]}, "../../etc/passwd", os.path.join(os.path.abspath(os.sep), "etc", "passwd"), "(a+)+$", "\x1b[8m"]


class Hang(Exception):
    """A case ran past the hang guard."""


@contextlib.contextmanager
def bounded(label: str):
    """The case's memory bound and hang guard."""
    guard = hasattr(signal, "SIGALRM")
    if guard:
        def expire(*_):
            raise Hang(label)
        previous = signal.signal(signal.SIGALRM, expire)
        signal.alarm(GUARD_SECONDS)
    tracemalloc.start()
    try:
        yield
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        assert peak < MEMORY, f"{label}: {peak} bytes allocated"


def typed(exc: BaseException, path: str) -> bool:
    if isinstance(exc, OnnxwrapperError):
        return True
    return isinstance(exc, (ValueError, FileNotFoundError)) and os.path.basename(path) in str(exc)


# -- mutations ------------------------------------------------------------------------------------------
def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


def mutate_json(doc, rng: random.Random):
    """A copy of ``doc`` with one value swapped for a value of another type or size, or deleted."""
    doc = json.loads(json.dumps(doc))
    path = rng.choice([p for p in _paths(doc) if p])
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and rng.random() < 0.2:
        del parent[path[-1]]
    else:
        parent[path[-1]] = rng.choice(WEIRD)
    return doc


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Truncated, bytes flipped, or a JSON text with a deep nesting spliced in."""
    kind = rng.choice(["truncate", "flip", "nest"])
    if kind == "truncate" or not data:
        return data[: rng.randrange(len(data) + 1)]
    if kind == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    at = rng.randrange(len(data) + 1)
    return data[:at] + b"[" * 100_000 + data[at:]


def iterations(rng_label: str):
    rng = random.Random(f"{SEED}:{rng_label}")
    end = time.monotonic() + SECONDS
    count = 0
    while (count < CASES) if not SECONDS else (time.monotonic() < end):
        count += 1
        yield rng, count


# -- the formats ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """One good file of each format, and the model they belong to."""
    d = tmp_path_factory.mktemp("fuzz-seeds")
    (d / "m.onnx").write_bytes(models.smallconv(batch=1))
    x = np.random.default_rng(0).random((1, 3, 8, 8), dtype=np.float32)
    diff.save_tensors(d / "t.npz", [{"X": x}, {"X": x + 1}], [{"Y": x[:, :2]}], metadata={"model": {"sha256": "0"}})
    np.save(d / "t.npy", x)
    (d / "t.json").write_text(json.dumps([{"X": x.tolist()}]))
    buf = io.BytesIO()
    np.save(buf, x)
    import base64
    arr = {"polygraphy_class": "ndarray", "array": base64.b64encode(buf.getvalue()).decode()}
    (d / "p.json").write_text(json.dumps({"polygraphy_class": "RunResults", "lst": [["r", [
        {"polygraphy_class": "IterationResult", "outputs": {"X": arr}, "runner_name": "r"}]]]}))
    with diff.start_capture(d / "cap"):
        s = onnxwrapper.InferenceSession((d / "m.onnx").read_bytes(), backend="cpu")
        for k in range(2):
            s.run(None, {"X": x + k})
    run = {"backend": "cpu", "options": {}, "status": "ok", "returncode": 0, "capture_dir": "cpu", "seconds": 1.0,
           "stdout": "cpu/stdout.txt", "stderr": "cpu/stderr.txt", "calls": 2, "files": {}}
    folder = d / "diff"
    for label in ("cpu", "twin"):
        shutil.copytree(d / "cap", folder / label)
        (folder / label / "stdout.txt").write_text("1.5\n")
        (folder / label / "stderr.txt").write_text("")
    (folder / "diff.json").write_text(json.dumps({
        "format": "onnxwrapper-diff", "version": 1, "mode": "live", "reference": "cpu",
        "backends": {"cpu": "cpu", "twin": "cpu"}, "runs": {"cpu": dict(run, label="cpu"),
                                                            "twin": dict(run, label="twin", capture_dir="twin",
                                                                         stdout="twin/stdout.txt",
                                                                         stderr="twin/stderr.txt")},
        "target": {"argv": ["s.py"], "module": False, "cwd": None, "sha256": "0" * 64},
        "app": {"compare": ["stdout"], "filter": None, "rtol": None}}))
    data = repair_models.matmul_layernorm()
    (d / "mm_ln.onnx").write_bytes(data)
    recipe = ModelRecipe(model_sha256(data), "mm_ln.onnx", rewrites=(Rewrite("rescale", "proj", {"log2": -5}),),
                         cpu_subgraphs=(("bias",),), checks={"peaks": {"a": 3.0e5, "ab": 3.0e5}})
    RecipeBook({recipe.sha256: recipe}).save(d / "r.json")
    return d


def _run_case(label: str, path: str, action) -> None:
    with bounded(label):
        try:
            action()
        except Hang:
            raise
        except Exception as exc:  # noqa: BLE001 - the point: only typed errors may come out
            assert typed(exc, path), f"{label}: untyped {type(exc).__name__}: {exc}"


@pytest.mark.parametrize("name", ["t.npz", "t.npy", "t.json", "p.json"])
def test_tensor_files(seeds, tmp_path, name):
    good = (seeds / name).read_bytes()
    target = tmp_path / name
    for rng, k in iterations(name):
        if name.endswith(".json") and rng.random() < 0.6:
            target.write_text(json.dumps(mutate_json(json.loads(good), rng)))
        elif name == "t.npz" and rng.random() < 0.3:
            _swap_npz_member(seeds / name, target, rng)
        else:
            target.write_bytes(mutate_bytes(good, rng))
        _run_case(f"{name} #{k}", str(target), lambda: diff.read_tensors(target, input_specs=SPECS))


def _swap_npz_member(good, target, rng: random.Random) -> None:
    """A member replaced by a hostile .npy (huge declared shape, object dtype) or renamed."""
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(target, "w") as dst, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # duplicate member names are one of the mutations
        for info in src.infolist():
            blob = src.read(info)
            name = info.filename
            if rng.random() < 0.5:
                name = rng.choice(["input999999999999/X.npy", "output0/Y.npy", "__index__.npy", "x" * 300 + ".npy"])
            if rng.random() < 0.5:
                head = io.BytesIO()
                np.lib.format.write_array_header_1_0(head, {"descr": rng.choice(["<f4", "|O", "<U9", "<c16"]),
                                                            "fortran_order": False,
                                                            "shape": rng.choice([(10 ** 12,), (2, 10 ** 9), ()])})
                blob = head.getvalue() + blob[-16:]
            dst.writestr(name, blob)


def test_recipes(seeds, tmp_path):
    good = json.loads((seeds / "r.json").read_text())
    model = onnx.load_model_from_string((seeds / "mm_ln.onnx").read_bytes())
    target = tmp_path / "r.json"

    def apply():
        book = load_recipes(target)
        for recipe in book.models.values():
            repaired = apply_recipe(model, recipe)
            check_recipe(model, repaired.proto, recipe)

    for rng, k in iterations("recipe"):
        if rng.random() < 0.7:
            target.write_text(json.dumps(mutate_json(good, rng)))
        else:
            target.write_bytes(mutate_bytes(json.dumps(good).encode(), rng))
        _run_case(f"recipe #{k}", str(target), apply)


def _read_all(directory) -> None:
    cap = diff.read_capture(directory)
    for call in cap.calls:
        call.inputs(), call.outputs()
    for info in cap.models.values():
        with contextlib.suppress(FileNotFoundError):
            info.model_source()


@pytest.mark.parametrize("member", ["capture.json", "calls.jsonl", "calls/npz"])
def test_capture_folders(seeds, tmp_path, member):
    for rng, k in iterations(member):
        target = tmp_path / f"c{k}"
        shutil.copytree(seeds / "cap", target)
        if member == "capture.json":
            doc = json.loads((target / member).read_text())
            (target / member).write_text(json.dumps(mutate_json(doc, rng)))
        elif member == "calls.jsonl":
            lines = (target / member).read_text().splitlines()
            i = rng.randrange(len(lines))
            lines[i] = json.dumps(mutate_json(json.loads(lines[i]), rng)) if rng.random() < 0.7 else \
                mutate_bytes(lines[i].encode(), rng).decode("utf-8", "replace").replace("\n", " ")
            (target / member).write_text("\n".join(lines) + "\n")
        else:
            npz = sorted((target / "calls").iterdir())[0]
            npz.write_bytes(mutate_bytes(npz.read_bytes(), rng))
        _run_case(f"{member} #{k}", str(target), lambda: _read_all(target))
        shutil.rmtree(target)


def test_diff_folders(seeds, tmp_path):
    good = json.loads((seeds / "diff" / "diff.json").read_text())
    for rng, k in iterations("diff.json"):
        target = tmp_path / f"d{k}"
        shutil.copytree(seeds / "diff", target)
        if rng.random() < 0.8:
            (target / "diff.json").write_text(json.dumps(mutate_json(good, rng)))
        else:
            (target / "diff.json").write_bytes(mutate_bytes(json.dumps(good).encode(), rng))
        _run_case(f"diff.json #{k}", str(target), lambda: diff.check(target).table())
        shutil.rmtree(target)
