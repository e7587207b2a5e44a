"""Trust boundary, malformed files (docs/security.md): tensor files, captures and diff folders from
elsewhere get a typed error naming the file, the entry and what was expected (exit status 64 on
the command line) — sizes are checked before any allocation, file names stay inside their folder,
a stored model must have its recorded sha256."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest
from numpy.lib import format as npformat

from aipc.commands._capture_signatures import plan_capture
from onnxwrapper import diff
from onnxwrapper.errors import MalformedFileError
from onnxwrapper.repair.fix import fix
from tests import models
from tests.conftest import run_python
from tests.test_diff_support import child_env  # noqa: F401 (fixture)

X = np.arange(2 * 3, dtype=np.float32).reshape(2, 3)


def npy(shape, dtype="<f4", data=None) -> bytes:
    """A .npy stream whose header declares ``shape`` and which holds ``data`` (default: 16 bytes)."""
    buf = io.BytesIO()
    npformat.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue() + (b"\0" * 16 if data is None else data)


def npz(path, members: dict) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, blob in members.items():
            z.writestr(name, blob)
    return str(path)


def read_bounded(path, **kw):
    """read_tensors under a 64 MiB bound on what Python and numpy allocate."""
    tracemalloc.start()
    try:
        return diff.read_tensors(path, **kw)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 64 << 20, f"{peak} bytes allocated reading {path}"


LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a regression fails here, not the host
from onnxwrapper import diff
try:
    diff.read_tensors(sys.argv[1])
except Exception as exc:
    print(type(exc).__name__, exc)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_AS: POSIX")
def test_a_huge_iteration_index_or_declared_shape_allocates_nothing(tmp_path):
    far = npz(tmp_path / "far.npz", {"input999999999999/x.npy": npy((2, 3), data=X.tobytes())})
    proc = run_python(LIMITED, far, timeout=120)  # under a 6 GiB address-space limit: main grew a list to 10**12
    assert proc.stdout.startswith("MalformedFileError ") and "input999999999999/…: iteration 999999999999 but no " \
        "input0" in proc.stdout, proc.stdout + proc.stderr
    huge = npz(tmp_path / "huge.npz", {"x.npy": npy((10 ** 12,))})
    with pytest.raises(MalformedFileError, match=r"huge.npz: x: its header declares shape \(1000000000000,\)"):
        read_bounded(huge)
    lying = npz(tmp_path / "lying.npz", {"x.npy": npy((4, 1000))})  # 16 kB declared, 16 bytes held
    with pytest.raises(MalformedFileError, match="holds 16 bytes"):
        read_bounded(lying)
    (tmp_path / "huge.npy").write_bytes(npy((10 ** 10, 10)))
    with pytest.raises(MalformedFileError, match="huge.npy: its header declares"):
        read_bounded(tmp_path / "huge.npy", input_specs=[diff.TensorSpec("x", "tensor(float)", (2, 3))])
    good = diff.save_tensors(tmp_path / "good.npz", [{"x": X}, {"x": X + 1}])
    back = read_bounded(good)
    assert [list(f) for f in back.inputs] == [["x"], ["x"]] and np.array_equal(back.inputs[1]["x"], X + 1)


@pytest.mark.parametrize("name, content, entry, message", [
    ("trunc.npz", "truncated", None, "not a readable .npz (ZIP) file"),
    ("obj.npz", {"x.npy": npy((1,), "|O", b"\0" * 8)}, "x", "holds Python objects"),
    ("index.npz", {"input0/x.npy": npy((1,), data=b"\0" * 4), "__index__.npy": "list"}, "__index__",
     "found list"),
    ("poly.json", {"x": {"polygraphy_class": "ndarray"}}, "'x'.array", "missing (or null)"),
    ("poly64.json", {"x": {"polygraphy_class": "ndarray", "array": "%%%"}}, "'x'.array", "not base64"),
    ("big.json", {"z": [2 ** 70]}, "'z'", "integers beyond 64 bits"),
    ("i64.json", {"i": [2 ** 70]}, "'i'", "fit int64"),
    ("ragged.json", {"x": [[1, 2], [3]]}, "'x'", "not a numeric array"),
    ("rr.json", {"polygraphy_class": "RunResults", "lst": [["r", 5]]}, "lst[0][1]", "found int 5"),
    ("rr2.json", {"polygraphy_class": "RunResults", "lst": "abc"}, "lst", "found str"),
    ("rr3.json", {"polygraphy_class": "RunResults", "lst": [["r", [{"outputs": []}]]]}, "lst[0][1][0].outputs",
     "found list"),
])
def test_malformed_tensor_files_name_the_file_and_the_entry(tmp_path, name, content, entry, message):
    path = tmp_path / name
    if content == "truncated":
        good = diff.save_tensors(tmp_path / "g.npz", [{"x": X}])
        data = open(good, "rb").read()
        path.write_bytes(data[: len(data) // 2])
    elif name.endswith(".npz"):
        if "__index__.npy" in content:
            buf = io.BytesIO()
            np.save(buf, np.array(json.dumps([1, 2])))
            content["__index__.npy"] = buf.getvalue()
        npz(path, content)
    else:
        path.write_text(json.dumps(content))
    specs = [diff.TensorSpec("x", "tensor(float)", (2, 3)), diff.TensorSpec("i", "tensor(int64)", (1,))]
    with pytest.raises(MalformedFileError, match=re.escape(message)) as e:
        read_bounded(path, input_specs=specs)
    assert e.value.entry == entry and e.value.path == str(path) and str(path) in str(e.value)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """A capture of a model given to its session as bytes (so the capture stores a copy)."""
    d = tmp_path_factory.mktemp("cap")
    (d / "m.onnx").write_bytes(models.smallconv(batch=1))
    (d / "other.onnx").write_bytes(models.mul_1())
    with diff.start_capture(d / "cap"):
        import onnxwrapper

        s = onnxwrapper.InferenceSession((d / "m.onnx").read_bytes(), backend="cpu")
        s.run(None, {"X": np.ones((1, 3, 8, 8), np.float32)})
    return d


def _edited(capture, tmp_path, edit_header=None, edit_call=None):
    d = tmp_path / "c"
    shutil.copytree(capture / "cap", d)
    if edit_header:
        header = json.loads((d / "capture.json").read_text())
        new = edit_header(header)
        header = new if isinstance(new, list) else header  # a list replaces the document
        (d / "capture.json").write_text(json.dumps(header))
    if edit_call:
        call = json.loads((d / "calls.jsonl").read_text().splitlines()[0])
        new = edit_call(call)
        call = new if isinstance(new, list) else call
        (d / "calls.jsonl").write_text(json.dumps(call) + "\n")
    return d


def _model(header):
    return next(iter(header["models"].values()))


def test_capture_stored_models_stay_inside_and_match_their_sha256(capture, tmp_path):
    cap = diff.read_capture(capture / "cap")
    (info,) = cap.models.values()
    assert info.stored and info.path is None and isinstance(info.model_source(), bytes)
    outside = _edited(capture, tmp_path / "a", lambda h: _model(h).update(stored="../../other.onnx"))
    with pytest.raises(MalformedFileError, match=r"models\.model-[0-9a-f]+\.stored: '../../other.onnx' leaves the folder"):
        diff.read_capture(outside)
    swapped = _edited(capture, tmp_path / "b")
    stored = diff.read_capture(swapped).models[info.key].stored
    shutil.copy(capture / "other.onnx", stored)  # another model under the recorded name
    with pytest.raises(MalformedFileError, match="its sha256 differs from the recorded one"):
        diff.read_capture(swapped).models[info.key].model_source()
    _, plans = plan_capture(str(swapped))
    assert plans[0].source is None and plans[0].error.startswith("ModelChanged: the capture's copy")


@pytest.mark.parametrize("edit_header, edit_call, entry, message", [
    (lambda h: h.update(models=[]), None, "models", "found list"),
    (lambda h: h.update(version="abc"), None, "version", "found str 'abc'"),
    (lambda h: _model(h)["inputs"][0].update(shape="abc"), None, ".inputs[0].shape", "found str"),
    (lambda h: _model(h).update(inputs={"a": 1}), None, ".inputs", "found dict"),
    (lambda h: _model(h).pop("sha256"), None, ".sha256", "missing"),
    (lambda h: h["sessions"][0].pop("ordinal"), None, "sessions[0].ordinal", "missing"),
    (lambda h: [h], None, "(document)", "found list"),
    (None, lambda c: c.pop("seq"), "line 1.seq", "missing"),
    (None, lambda c: c.update(file="../../etc/passwd"), "line 1.file", "leaves the folder"),
    (None, lambda c: c["inputs"][0].update(shape=["a"]), "line 1.inputs[0].shape", "found str"),
    (None, lambda c: [c], "line 1", "found list"),
])
def test_malformed_capture_headers_and_calls(capture, tmp_path, edit_header, edit_call, entry, message):
    d = _edited(capture, tmp_path, edit_header, edit_call)
    with pytest.raises(diff.CaptureFormatError, match=re.escape(message)) as e:
        diff.read_capture(d)
    assert isinstance(e.value, MalformedFileError) and e.value.entry.endswith(entry), e.value.entry


#: ``python -m aipc ARGS`` under a 6 GiB address-space limit (POSIX): a regression fails, the host does not
LIMITED_AIPC = ("import runpy, sys\n"
                "if sys.platform != 'win32':\n"
                "    import resource; resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"
                "sys.argv[0] = 'aipc'; runpy.run_module('aipc', run_name='__main__', alter_sys=True)")


def _aipc(args, cwd, env):
    return subprocess.run([sys.executable, "-c", LIMITED_AIPC, *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_command_line_exits_64_with_the_file_and_entry_never_a_traceback(capture, tmp_path, child_env):
    (tmp_path / "m.onnx").write_bytes(models.smallconv(batch=1))
    npz(tmp_path / "far.npz", {"input999999999999/X.npy": npy((1, 3, 8, 8), data=b"\0" * 768)})
    bad_cap = _edited(capture, tmp_path, lambda h: h.update(version="abc"))
    d = tmp_path / "d"
    shutil.copytree(bad_cap, d / "cpu")
    (d / "diff.json").write_text(json.dumps({"reference": "cpu", "runs": {"cpu": {"backend": "cpu",
                                                                                  "capture_dir": "../x"}}}))
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "onnxruntime.py").write_text("import onnxruntime\nprint(onnxruntime.InferenceSession)\n")
    cases = [(["run", "m.onnx", "--backend", "cpu", "--load-inputs", "far.npz"], tmp_path, "far.npz: input999999999999"),
             (["compile", "--from-capture", bad_cap], tmp_path, "version: found str 'abc'"),
             (["diff", "--check", d], tmp_path, "runs.cpu.capture_dir: '../x' leaves the folder"),
             (["fix", d], tmp_path, "runs.cpu.capture_dir: '../x' leaves the folder"),
             (["--backend", "cpu", "onnxruntime.py"], tmp_path / "own", "onnxruntime.py shadows the installed")]
    for args, cwd, message in cases:
        proc = _aipc(args, cwd, child_env)
        assert proc.returncode == 64 and message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_a_received_diff_json_is_checked_field_by_field(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    for doc, message in [({"reference": "cpu", "runs": []}, "runs: found list"),
                         ({"reference": "cpu", "runs": {"cpu": {"backend": "cpu", "stdout": os.path.join(os.path.abspath(os.sep), "etc", "passwd")}}},
                          "runs.cpu.stdout: found '/etc/passwd'"),
                         ({"reference": "cpu", "app": {"filter": "(a+)+$"}}, r"app.filter: '\(a\+\)\+\$' repeats"),
                         ({"reference": "cpu", "target": {"argv": [1]}}, r"target.argv\[0\]: found int"),
                         ({"reference": 3}, "reference: found int")]:
        (d / "diff.json").write_text(json.dumps(doc))
        with pytest.raises(MalformedFileError, match=message):
            diff.check(d)
    (d / "diff.json").write_text(json.dumps({"reference": "cpu", "runs": {}}))
    (d / "report.json").write_text(json.dumps({"tolerances": {"default": {"atol": "x"}}}))
    with pytest.raises(MalformedFileError, match=r"report.json: tolerances.default.atol: found str"):
        fix(d)


def test_polygraphy_arrays_are_read_without_unpickling(tmp_path):
    buf = io.BytesIO()
    np.save(buf, X)
    doc = [{"x": {"polygraphy_class": "ndarray", "array": base64.b64encode(buf.getvalue()).decode()}}]
    (tmp_path / "p.json").write_text(json.dumps(doc))
    assert np.array_equal(diff.read_tensors(tmp_path / "p.json").inputs[0]["x"], X)
