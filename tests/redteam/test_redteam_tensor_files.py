"""Red team, tensor files and recipes (docs/security.md, "tensor files", "repair recipes"): the byte
order of a ``.npy`` is honoured (converted, never reinterpreted), an ``.npz`` with two members of one
name is refused, a FIFO, ``/dev/zero`` or a folder given as a file is a typed error at once, and a
recipe with absurdly many rewrites is refused quickly."""

from __future__ import annotations

import io
import json
import os
import time
import warnings
import zipfile

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import onnxwrapper
from onnxwrapper import diff
from onnxwrapper.diff._capture import read_saved_report
from onnxwrapper.errors import MalformedFileError, RecipeError
from onnxwrapper.kernel import ModelSource
from onnxwrapper.repair import load_recipes
from tests import models
from tests.redteam.hostile import POSIX, no_hang, special_files

SPECS = [diff.TensorSpec("X", "tensor(float)", (2,))]


def identity() -> bytes:
    g = h.make_graph([h.make_node("Identity", ["X"], ["Y"])], "id", [h.make_tensor_value_info("X", T.FLOAT, [2])],
                     [h.make_tensor_value_info("Y", T.FLOAT, [2])])
    return models.make_model(g)


def test_a_big_endian_npy_keeps_its_values(tmp_path):
    np.save(tmp_path / "be.npy", np.array([1.0, 2.0], dtype=">f4"))
    x = diff.read_tensors(tmp_path / "be.npy", input_specs=SPECS).inputs[0]["X"]
    assert x.dtype == np.float32 and x.dtype.isnative
    y = onnxwrapper.InferenceSession(identity(), backend="cpu").run(None, {"X": x})[0]
    assert y.tolist() == [1.0, 2.0]  # read as little-endian it was [4.6e-41, 9.0e-44]


def test_big_endian_npz_members_keep_their_values(tmp_path):
    np.savez(tmp_path / "be.npz", X=np.array([3.0, -4.0], dtype=">f8"), I=np.array([7, 9], dtype=">i8"))
    got = diff.read_tensors(tmp_path / "be.npz").inputs[0]
    assert got["X"].dtype == np.float64 and got["X"].tolist() == [3.0, -4.0]
    assert got["I"].dtype == np.int64 and got["I"].tolist() == [7, 9]


def test_an_npz_with_two_members_of_one_name_is_refused(tmp_path):
    path = tmp_path / "dup.npz"
    with zipfile.ZipFile(path, "w") as z, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns about the duplicate name
        for value in (1.0, 2.0):
            buf = io.BytesIO()
            np.save(buf, np.full(2, value, np.float32))
            z.writestr("X.npy", buf.getvalue())
    with pytest.raises(MalformedFileError, match="two members of this name") as info:
        diff.read_tensors(path)
    assert info.value.path == str(path) and info.value.entry == "X"


def test_object_arrays_are_refused(tmp_path):
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(MalformedFileError, match="holds Python objects"):
        diff.read_tensors(tmp_path / "o.npy", input_specs=SPECS)


@POSIX
@pytest.mark.parametrize("name", ["t.npy", "t.npz", "t.json"])
def test_tensor_files_that_are_no_regular_file(tmp_path, name):
    for kind, path in special_files(tmp_path, name).items():
        with no_hang(f"{name} as {kind}"), pytest.raises((MalformedFileError, ValueError)) as info:
            diff.read_tensors(path, input_specs=SPECS)
        assert str(path) in str(info.value) or name in str(info.value), (kind, info.value)


@POSIX
def test_recipes_that_are_no_regular_file(tmp_path):
    for kind, path in special_files(tmp_path, "r.json").items():
        with no_hang(f"recipe as {kind}"), pytest.raises(RecipeError, match="not a regular file") as info:
            load_recipes(path)
        assert info.value.path == str(path), kind


@POSIX
def test_received_folder_files_that_are_no_regular_file(tmp_path):
    """diff.json, report.json and a capture's calls.jsonl as a FIFO: typed errors, not a hang."""
    for name in ("diff.json", "report.json"):
        folder = tmp_path / name.split(".")[0]
        folder.mkdir()
        if name == "report.json":
            (folder / "diff.json").write_text(json.dumps({"reference": "cpu"}))
        os.mkfifo(folder / name)
        with no_hang(name), pytest.raises(MalformedFileError, match="FIFO"):
            diff.check(folder) if name == "diff.json" else read_saved_report(str(folder))


@POSIX
def test_a_model_that_is_a_fifo_is_an_error_not_a_wait(tmp_path):
    os.mkfifo(tmp_path / "m.onnx")
    with no_hang("model FIFO"), pytest.raises(Exception, match="INVALID_PROTOBUF"):
        ModelSource(str(tmp_path / "m.onnx"), None).read_bytes()


def test_a_recipe_with_absurdly_many_rewrites_is_refused_quickly(tmp_path):
    rewrites = [{"rewrite": "rescale", "node": "conv", "params": {"log2": -1}}] * 200_000
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"format": "onnxwrapper-repair-recipe", "version": 1,
                                "models": {"a" * 64: {"rewrites": rewrites}}}))
    start = time.perf_counter()
    with pytest.raises(RecipeError, match="200000 rewrites; at most 10000"):
        load_recipes(path)
    assert time.perf_counter() - start < 2.0
