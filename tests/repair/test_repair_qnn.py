"""The QNN backend's ``repairs`` option on the HTP simulator: a recipe's rewrites and CPU subgraphs applied
in memory, one session for QNN/CPU/QNN parts, refusal for another model, the compile cache, and the recipe
baked in by ``compile_model`` / ``aipc compile --repairs`` and applied by ``python -m aipc --repairs``."""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest

import onnxwrapper
from onnxwrapper.backends.qnn import compile_model
from onnxwrapper.errors import BackendOptionError, RecipeError, RecipeMismatchError
from onnxwrapper.repair import ModelRecipe, RecipeBook, Rewrite, model_sha256
from tests import repair_models
from tests.conftest import qnn_available

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed"),
              pytest.mark.filterwarnings("ignore::onnxwrapper.PartialOffloadWarning")]


def snr_db(y, r) -> float:
    y, r = np.asarray(y, np.float64), np.asarray(r, np.float64)
    err = float(np.sum((y - r) ** 2))
    return np.inf if err == 0 else 10 * np.log10(float(np.sum(r ** 2)) / err)


def cpu(data: bytes, feeds: dict):
    return onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.fixture
def pow_model(tmp_path):
    data = repair_models.pow_square()
    path = tmp_path / "pow.onnx"
    path.write_bytes(data)
    return path, model_sha256(data)


def recipe_file(tmp_path, sha, name="r.json", **fields):
    return RecipeBook({sha: ModelRecipe(sha, "pow.onnx", **fields)}).save(tmp_path / name)


def test_rewrite_recipe_repairs_the_pow_bug_and_enters_the_cache_key(tmp_path, pow_model):
    path, sha = pow_model
    x = repair_models.pow_inputs()
    ref = cpu(path.read_bytes(), {"x": x})
    plain = onnxwrapper.InferenceSession(str(path), backend="qnn")
    assert snr_db(plain.run(None, {"x": x})[0], ref) < 0  # Pow(-0, 2) = -4 on the HTP: Sqrt → 131008
    listing = sorted(os.listdir(tmp_path))
    rfile = recipe_file(tmp_path, sha, rewrites=(Rewrite("pow_square", "pow"),))
    sess = onnxwrapper.InferenceSession(str(path), backend="qnn", backend_options={"repairs": rfile})
    assert snr_db(sess.run(None, {"x": x})[0], ref) > 40
    report = sess.get_partition()
    assert report.offloaded_nodes == [] and [p["patch"] for p in report.patches] == ["pow_square"]
    assert "repaired: pow_square() at 'pow'" in report.summary()
    assert sorted(os.listdir(tmp_path)) == listing + ["r.json"]  # nothing written next to the model
    # the recipe is part of the compile-cache key: another recipe, another compiled artifact
    other = recipe_file(tmp_path, sha, "r2.json", rewrites=(Rewrite("pow_square", "pow"),),
                        cpu_subgraphs=(("sqrt",),))
    again = onnxwrapper.InferenceSession(str(path), backend="qnn", backend_options={"repairs": rfile})
    changed = onnxwrapper.InferenceSession(str(path), backend="qnn", backend_options={"repairs": other})
    keys = [s._ow_backend_session.artifacts[0].ctx_path for s in (plain, sess, again, changed)]
    assert keys[1] == keys[2] and len({keys[0], keys[1], keys[3]}) == 3


def test_cpu_subgraph_runs_behind_one_session_with_one_cpu_node(tmp_path, pow_model):
    path, sha = pow_model
    x = repair_models.pow_inputs(1)
    rfile = recipe_file(tmp_path, sha, cpu_subgraphs=(("pow",),))
    with warnings.catch_warnings():  # a PartialOffloadWarning (once per model and process) names the CPU node
        warnings.simplefilter("ignore", onnxwrapper.PartialOffloadWarning)
        sess = onnxwrapper.InferenceSession(str(path), backend="qnn", backend_options={"repairs": rfile})
    assert snr_db(sess.run(None, {"x": x})[0], cpu(path.read_bytes(), {"x": x})) > 40
    report = sess.get_partition()
    assert report.cpu_nodes == [("pow", "Pow")] and report.counts == {"QNNExecutionProvider": 3,
                                                                      "CPUExecutionProvider": 1}
    assert report.num_partitions == 3 and "repair recipe" in report.offloaded_nodes[0].reason
    assert sess.get_providers() == ["QNNExecutionProvider", "CPUExecutionProvider"]
    with pytest.raises(BackendOptionError, match="strict=True forbids"):
        onnxwrapper.InferenceSession(str(path), backend="qnn", backend_options={"repairs": rfile, "strict": True})


def test_dynamic_shape_model_is_split_per_specialization(tmp_path):
    import onnx

    m = onnx.load_model_from_string(repair_models.pow_square())
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    # an output dim named otherwise stays symbolic after specialization (faster-whisper's VAD: the QNN
    # EP refuses an EPContext output declared so: the assembled model declares the static shape)
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "rows_out"
    data = m.SerializeToString()
    path = tmp_path / "dyn.onnx"
    path.write_bytes(data)
    rfile = RecipeBook({model_sha256(data): ModelRecipe(model_sha256(data), cpu_subgraphs=(("pow",),))}).save(
        tmp_path / "r.json")
    sess = onnxwrapper.InferenceSession(str(path), backend="qnn", backend_options={"repairs": str(rfile)})
    for rows in (2, 3):
        x = repair_models.pow_inputs(rows)[:rows]
        assert snr_db(sess.run(None, {"x": x})[0], cpu(data, {"x": x})) > 40
        assert sess.get_partition().cpu_nodes == [("pow", "Pow")]


def test_a_part_keeping_cpu_nodes_and_skip_tensors_crossing_a_cpu_subgraph_are_stitched(tmp_path):
    """A U-Net's shape: skip tensors cross the CPU subgraph, and an NPU part keeps a node the QNN EP does
    not take (``Shrink``): the tensors between that part's EPContext nodes and its CPU node are typed
    (was: "Op (EPContext) output arg (…) type inference failed" when the assembled model loaded)."""
    data = repair_models.unet_skips()
    path = tmp_path / "unet.onnx"
    path.write_bytes(data)
    rfile = RecipeBook({model_sha256(data): ModelRecipe(model_sha256(data), cpu_subgraphs=(("conv3", "inorm"),))}
                       ).save(tmp_path / "r.json")
    sess = onnxwrapper.InferenceSession(str(path), backend="qnn", backend_options={"repairs": str(rfile)})
    x = np.random.default_rng(3).standard_normal((1, 4, 16, 16)).astype(np.float32)
    assert snr_db(sess.run(None, {"x": x})[0], cpu(data, {"x": x})) > 40
    assert {n for n, _op in sess.get_partition().cpu_nodes} == {"conv3", "inorm", "act1"}


def test_scalars_computed_from_graph_inputs_do_not_cross_compiled_parts(tmp_path):
    """Rank-0 tensors computed from graph inputs (silero-vad op15's ``Cast(Mul(sr, c))`` and a bool from
    ``Shape(state)``) are recomputed in the part that reads them (was: QNN_GRAPH_ERROR_INVALID_TENSOR
    (6004) when they crossed from the first compiled part to the last)."""
    data = repair_models.scalar_crossing()
    rfile = RecipeBook({model_sha256(data): ModelRecipe(model_sha256(data), cpu_subgraphs=(("pow",),))}
                       ).save(tmp_path / "r.json")
    sess = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"repairs": str(rfile)})
    feeds = {"x": repair_models.pow_inputs(4), "state": np.ones((2, 1, 8), np.float32), "sr": np.array(3, np.int64)}
    y = sess.run(None, feeds)[0]
    assert snr_db(y, cpu(data, feeds)) > 40
    assert sess.get_partition().cpu_nodes == [("pow", "Pow")]


def test_a_cpu_if_of_a_model_with_control_inputs_runs_as_its_inlined_branch(tmp_path):
    """An ``If`` decided by a control input (silero-vad's ``sr``) put on the CPU: each specialization
    splits the model at the inlined branch's nodes (was refused: "cannot be combined with control
    inputs that decide an If")."""
    from tests import cf_models

    data = cf_models.if_lstm()
    rfile = RecipeBook({model_sha256(data): ModelRecipe(model_sha256(data), cpu_subgraphs=(("If_2",),))}
                       ).save(tmp_path / "r.json")
    sess = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"repairs": str(rfile)})
    ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    for sr, n in ((16000, 8), (8000, 4)):
        feeds = cf_models.if_feeds(n, sr)
        for y, r in zip(sess.run(None, feeds), ref.run(None, feeds)):
            assert np.array_equal(y, r)  # the branch ran on the CPU EP
        report = sess.get_partition()
        assert "LSTM" in {op for _n, op in report.cpu_nodes} and "If_2" in report.note


def test_a_recipe_running_all_of_a_control_input_model_on_the_cpu_takes_every_input(tmp_path, caplog):
    """Every node of a model with a control input (``sr``) on the CPU: the specialization folds the
    ``Equal(sr, 16000)`` the recipe names (nothing to place) and runs as ORT's CPU session of the whole
    model, which is fed ``sr`` too (was: "no node named …", then "Required inputs (['sr']) are missing")."""
    from onnxwrapper.patches import name_unnamed_nodes
    from tests import cf_models

    data = cf_models.if_lstm()
    named = onnx.load_model_from_string(data)
    name_unnamed_nodes(named)
    every = tuple(n.name for n in named.graph.node if n.op_type != "Constant")
    rfile = RecipeBook({model_sha256(data): ModelRecipe(model_sha256(data), cpu_subgraphs=(every,))}
                       ).save(tmp_path / "r.json")
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="onnxwrapper.qnn"):
        warnings.simplefilter("ignore")  # warned once per model and process: the log line is checked
        sess = onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"repairs": str(rfile),
                                                                                  "cache_dir": str(tmp_path / "c")})
        ref = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
        for sr, n in ((16000, 8), (8000, 4), (16000, 8)):
            feeds = cf_models.if_feeds(n, sr)
            for y, r in zip(sess.run(None, feeds), ref.run(None, feeds)):
                assert np.array_equal(y, r)
            assert sess.get_partition().target_nodes == 0
    assert "The repair recipe runs every node of" in caplog.text  # the recipe's choice, said as such
    assert "execution provider took none" not in caplog.text


def _compile_entries(root) -> dict:
    """``{key: provenance record}`` of the compile entries (not the assembled models) in cache ``root``."""
    entries = {}
    for manifest in glob.glob(os.path.join(root, "entries", "*", "manifest.json")):
        with open(manifest, encoding="utf-8") as f:
            meta = json.load(f)["meta"]
        if "provenance" in meta:
            entries[os.path.basename(os.path.dirname(manifest))] = meta["provenance"]
    return entries


def test_parts_are_cached_by_their_content_so_recipes_cutting_them_alike_share_them(tmp_path, pow_model, caplog):
    """Two recipes whose CPU subgraphs start at the same node (two ``aipc fix`` candidates) cut the same
    first NPU part: it is compiled once (was: every part keyed by the recipe's digest, so only a repeat
    of the same recipe hit the cache). The part's entry records the part's own content hash, so another
    part's files planted under its key do not answer (rebuilt, with a WARNING)."""
    from onnxwrapper.kernel import ModelSource
    from onnxwrapper.repair import boundary_types, part_model, split_stages

    path, sha = pow_model
    root = tmp_path / "cache"
    x = repair_models.pow_inputs(2)
    ref = cpu(path.read_bytes(), {"x": x})
    pow_only = recipe_file(tmp_path, sha, "a.json", cpu_subgraphs=(("pow",),))  # mul | pow | sum, sqrt
    pow_sum = recipe_file(tmp_path, sha, "b.json", cpu_subgraphs=(("pow", "sum"),))  # mul | pow, sum | sqrt

    def run(rfile) -> list:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="onnxwrapper.qnn"):
            sess = onnxwrapper.InferenceSession(str(path), backend="qnn",
                                                backend_options={"repairs": str(rfile), "cache_dir": str(root)})
            assert snr_db(sess.run(None, {"x": x})[0], ref) > 40
        return [r.getMessage() for r in caplog.records if "compiling" in r.getMessage()]

    first = run(pow_only)
    assert len(first) == 2 and "part 1/3" in first[0] and "part 3/3" in first[1], first
    before = _compile_entries(root)
    second = run(pow_sum)
    assert len(second) == 1 and "part 3/3" in second[0], second  # the first part came from the cache
    # every part's entry names the part's own content (the bytes it was compiled from)
    model = onnx.load(str(path))
    hashes = {}
    for cpu_nodes in (("pow",), ("pow", "sum")):
        parts = split_stages(model, cpu_nodes)
        types = boundary_types(model, parts)
        for p in parts:
            if p.kind == "npu":
                hashes[cpu_nodes, p.stage] = ModelSource(None, part_model(model, p, types).SerializeToString()
                                                         ).content_hash()
    entries = _compile_entries(root)
    assert len(set(hashes.values())) == 3 and {r["source_sha256"] for r in entries.values()} == set(hashes.values())
    # the attacker's move: the second recipe's last part planted under the shared first part's key
    (shared,) = [k for k, r in entries.items() if r["source_sha256"] == hashes[("pow",), 0]]
    (planted,) = [k for k in entries if k not in before]
    shutil.rmtree(root / "entries" / shared)
    shutil.copytree(root / "entries" / planted, root / "entries" / shared)
    manifest = root / "entries" / shared / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["key"] = shared
    manifest.write_text(json.dumps(doc))
    again = run(pow_only)
    assert len(again) == 1 and "part 1/3" in again[0], again
    assert "does not answer for this session: it was compiled from another model" in caplog.text


def test_a_recipe_for_another_model_is_refused_and_never_applied(tmp_path, pow_model):
    path, sha = pow_model
    other = tmp_path / "other.onnx"
    other.write_bytes(repair_models.naive_softmax())
    rfile = recipe_file(tmp_path, sha, rewrites=(Rewrite("pow_square", "pow"),))
    with pytest.raises(RecipeMismatchError) as err:
        onnxwrapper.InferenceSession(str(other), backend="qnn", backend_options={"repairs": rfile})
    assert err.value.model_sha256 == model_sha256(other.read_bytes()) and "never applied" in str(err.value)
    # not required (python -m aipc --repairs): the other model runs unrepaired
    sess = onnxwrapper.InferenceSession(str(other), backend="qnn",
                                        backend_options={"repairs": {"file": rfile, "required": False}})
    assert sess.get_partition().patches == ()
    with pytest.raises(BackendOptionError, match="is not a repair recipe"):
        (tmp_path / "bad.json").write_text('{"format": "x"}')
        onnxwrapper.InferenceSession(str(path), backend="qnn", backend_options={"repairs": str(tmp_path / "bad.json")})
    with pytest.raises(RecipeError, match="has no node 'gone'"):
        onnxwrapper.InferenceSession(str(path), backend="qnn", backend_options={
            "repairs": recipe_file(tmp_path, sha, "gone.json", rewrites=(Rewrite("pow_square", "gone"),))})


def test_compile_model_bakes_the_recipe_into_the_context_model(tmp_path, pow_model):
    path, sha = pow_model
    rfile = recipe_file(tmp_path, sha, rewrites=(Rewrite("pow_square", "pow"),), cpu_subgraphs=(("sum",),))
    out = tmp_path / "out" / "pow_ctx.onnx"
    result = compile_model(str(path), out, backend_options={"repairs": rfile})
    assert result.partition.cpu_nodes == [("sum", "ReduceSum")] and [p["patch"] for p in result.patches] == [
        "pow_square"]
    assert sorted(os.listdir(out.parent)) == ["pow_ctx.onnx", "pow_ctx_part2_qnn.bin", "pow_ctx_qnn.bin"]
    x = repair_models.pow_inputs(2)
    sess = onnxwrapper.InferenceSession(str(out), backend="qnn")
    assert snr_db(sess.run(None, {"x": x})[0], cpu(path.read_bytes(), {"x": x})) > 40
    with pytest.raises(RecipeMismatchError):
        compile_model(repair_models.naive_softmax(), tmp_path / "x_ctx.onnx", backend_options={"repairs": rfile})


AIPC_SCRIPT = """
import numpy as np
import onnx
import onnxruntime as ort
from tests import repair_models

y = ort.InferenceSession("pow.onnx").run(None, {"x": repair_models.pow_inputs(3)})[0]
z = ort.InferenceSession("softmax.onnx").run(None, {"x": np.zeros((8, 64), np.float32)})[0]
print(np.round(y.ravel(), 4).tolist(), round(float(z.sum()), 2))
"""


def test_python_m_aipc_repairs_and_aipc_compile_repairs(tmp_path, pow_model):
    path, sha = pow_model
    (tmp_path / "softmax.onnx").write_bytes(repair_models.naive_softmax())  # no recipe: runs as it is
    (tmp_path / "script.py").write_text(AIPC_SCRIPT)
    rfile = recipe_file(tmp_path, sha, rewrites=(Rewrite("pow_square", "pow"),))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    ref = subprocess.run([sys.executable, "-m", "aipc", "--backend", "cpu", "script.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    plain = subprocess.run([sys.executable, "-m", "aipc", "script.py"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    fixed = subprocess.run([sys.executable, "-m", "aipc", "--repairs", rfile, "script.py"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert ref.returncode == plain.returncode == fixed.returncode == 0, plain.stderr + fixed.stderr
    assert fixed.stdout == ref.stdout != plain.stdout
    bad = subprocess.run([sys.executable, "-m", "aipc", "--repairs", "missing.json", "script.py"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 64 and "does not exist" in bad.stderr
    proc = subprocess.run([sys.executable, "-m", "aipc", "compile", "pow.onnx", "-o", "build", "--repairs", rfile,
                           "--no-check", "--no-progress", "--json"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"patch": "pow_square"' in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "aipc", "compile", "softmax.onnx", "-o", "build2", "--repairs", rfile,
                           "--no-check", "--no-progress"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 64 and "no recipe for model 'softmax.onnx'" in proc.stderr  # a refused input


def test_a_precision_recipe_sets_the_backend_precision(tmp_path, pow_model):
    from tests.conftest import run_python

    path, sha = pow_model
    rfile = recipe_file(tmp_path, sha, precision="fp32")
    code = f"""
        import numpy as np, onnxruntime, onnxwrapper
        from tests import repair_models
        x = repair_models.pow_inputs(4)
        ref = onnxruntime.InferenceSession({str(path)!r}, providers=["CPUExecutionProvider"]).run(None, {{"x": x}})[0]
        s = onnxwrapper.InferenceSession({str(path)!r}, backend="qnn", backend_options={{"repairs": {rfile!r}}})
        opts = s.get_provider_options()["QNNExecutionProvider"]
        print(opts.get("soc_model"), float(np.max(np.abs(s.run(None, {{"x": x}})[0] - ref))))
    """
    proc = run_python(code, env={"PYTHONPATH": os.getcwd()})
    assert proc.returncode == 0, proc.stderr[-2000:]
    soc, err = proc.stdout.split()
    assert soc == "30" and float(err) < 1e-6  # fp32 simulation (explicit soc_model=30, SM8350), exact enough


def test_a_simulator_fp32_recipe_is_refused_on_a_real_npu_naming_the_recipe(tmp_path, pow_model):
    """A recipe whose precision is fp32 holds on the simulator only (a device runs float32 graphs in
    FP16): on a real NPU it is refused before any compile, with the file and the fix."""
    from onnxwrapper.backends.qnn.pipeline._repair import prepare_repairs
    from onnxwrapper.backends.qnn.settings import convert_repairs
    from onnxwrapper.kernel import ModelSource

    path, sha = pow_model
    config = {"repairs": convert_repairs(recipe_file(tmp_path, sha, precision="fp32"))}
    source = ModelSource.from_arg(str(path))
    assert prepare_repairs(config, source, source.load_proto(), real_npu=False).config["precision"] == "fp32"
    with pytest.raises(RecipeError, match="only the x86-64 HTP simulator has") as info:
        prepare_repairs(config, source, source.load_proto(), real_npu=True)
    assert info.value.path == str(tmp_path / "r.json") and "aipc fix" in str(info.value)
