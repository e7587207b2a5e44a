"""The recovery ladder on every compile path, not only a plain session's: ``compile_model`` (an
artifact for deployment: no batch split; a graph split writes one stitched EPContext model),
sessions with a repair recipe (its precision, or a part of a recipe with CPU subgraphs, failing
whole), ``precompile`` (the cache a later session replays). The models are fp32 GELU nets the
simulator cannot finalize whole (``tests/recovery_models.py``). Also the one memo the compile cache
keeps for a compile that gave no model."""

from __future__ import annotations

import logging
import os
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest

import onnxwrapper
from onnxwrapper.errors import CompileFailedError, PartitionError
from onnxwrapper.kernel import PartialOffloadWarning
from onnxwrapper.repair import ModelRecipe, RecipeBook, model_sha256
from tests import recovery_models as rm
from tests.conftest import qnn_available

needs_qnn = pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")


def _cpu(data: bytes, feed):
    return onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)[0]


def _rungs(report) -> list[tuple[str, str]]:
    return [(step["rung"], step["result"]) for step in report.recovery]


def _x(batch: int, length: int = 32):
    return np.random.default_rng(batch).standard_normal((batch, 4, length)).astype(np.float32)


@pytest.mark.qnn
@needs_qnn
def test_compile_model_rescues_a_graph_failing_whole_into_a_stitched_artifact_sessions_use(tmp_path):
    from onnxwrapper.backends.qnn import compile_model

    data = rm.gelu_net(batch=2, length=32)
    (tmp_path / "g.onnx").write_bytes(data)
    options = {"precision": "fp32", "cache_dir": str(tmp_path / "cache")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartialOffloadWarning)  # the Erf the QNN EP leaves on the CPU
        result = compile_model(str(tmp_path / "g.onnx"), tmp_path / "g_ctx.onnx", options)
        session = onnxwrapper.InferenceSession(str(tmp_path / "g.onnx"), backend="qnn", backend_options=options)
    report = result.partition
    assert _rungs(report) == [("as given", "failed"), ("batch split", "skipped"), ("graph split", "compiled")]
    assert report.recovery[1]["detail"] == "an EPContext artifact keeps the model's input shapes"
    assert "recovered by graph split" in repr(result)
    names = [os.path.basename(p) for p in result.bin_paths]
    assert names[0] == "g_ctx_qnn.bin" and names[1:] == [f"g_ctx_part{n}_qnn.bin" for n in range(1, len(names))]
    assert len(names) > 1 and result.bin_bytes == sum(os.path.getsize(p) for p in result.bin_paths)
    # the artifact next to the model is what the session loads (its provenance names g.onnx)
    assert session._ow_backend_session.artifacts[0].origin == "precompiled"
    np.testing.assert_allclose(session.run(None, {"x": _x(2)})[0], _cpu(data, {"x": _x(2)}), atol=1e-5)
    with pytest.raises(CompileFailedError) as info:
        compile_model(str(tmp_path / "g.onnx"), tmp_path / "strict_ctx.onnx", dict(options, strict=True))
    assert (info.value.rung, info.value.error_name) == ("graph split", "QNN_COMMON_ERROR_MEM_ALLOC")
    assert not (tmp_path / "strict_ctx.onnx").exists()


@pytest.mark.qnn
@needs_qnn
def test_a_compile_no_part_of_which_compiles_is_remembered_and_not_tried_again(tmp_path, caplog):
    from onnxwrapper.backends.qnn import compile_model

    (tmp_path / "g.onnx").write_bytes(rm.gelu_net(batch=1, length=16))
    options = {"cache_dir": str(tmp_path / "cache"), "compile_memory_mb": 1}  # below the compiler's start-up
    with pytest.raises(PartitionError, match="could compile no part .* budget:memory"):
        compile_model(str(tmp_path / "g.onnx"), tmp_path / "g_ctx.onnx", options)
    with caplog.at_level(logging.INFO, logger="onnxwrapper.qnn"), pytest.raises(PartitionError) as info:
        compile_model(str(tmp_path / "g.onnx"), tmp_path / "g_ctx.onnx", options)
    assert "recorded in the compile cache" in str(info.value) and info.value.report.recovery[-1]["rung"] == "cpu"
    assert "for the QNN HTP" not in caplog.text  # no compile tried again
    with pytest.raises(CompileFailedError, match="budget:memory"):  # strict: the typed compile failure
        compile_model(str(tmp_path / "g.onnx"), tmp_path / "g_ctx.onnx", dict(options, strict=True))
    assert not (tmp_path / "g_ctx.onnx").exists()


def _recipe(tmp_path, data: bytes, **fields) -> str:
    sha = model_sha256(data)
    return RecipeBook({sha: ModelRecipe(sha, "g.onnx", **fields)}).save(tmp_path / "recipe.json")


@pytest.mark.qnn
@needs_qnn
@pytest.mark.filterwarnings("ignore::onnxwrapper.PartialOffloadWarning")
def test_a_repair_recipe_whose_precision_fails_whole_goes_through_the_ladder_in_sessions_and_compiles(tmp_path):
    """`aipc fix`'s candidate "precision fp32 for the whole model" on a model the simulator's fp32 mode
    cannot finalize whole: the repaired session is rescued like any session — also a recipe part
    between CPU subgraphs — and ``compile_model`` bakes the same into its artifact."""
    from onnxwrapper.backends.qnn import compile_model

    data = rm.gelu_net(batch=1, length=32)
    (tmp_path / "g.onnx").write_bytes(data)
    last = onnx.load_from_string(data).graph.node[-1].name
    expected = _cpu(data, {"x": _x(1)})
    for fields in ({"precision": "fp32"}, {"precision": "fp32", "cpu_subgraphs": ((last,),)}):
        recipe = _recipe(tmp_path, data, **fields)
        options = {"repairs": recipe, "cache_dir": str(tmp_path / "cache")}
        session = onnxwrapper.InferenceSession(str(tmp_path / "g.onnx"), backend="qnn", backend_options=options)
        np.testing.assert_allclose(session.run(None, {"x": _x(1)})[0], expected, atol=1e-5)
        report = session.get_partition()
        assert _rungs(report)[0] == ("as given", "failed") and report.recovery[-1]["rung"] == "graph split"
        assert "recovered by graph split" in report.summary() and "repaired:" in report.summary()
        if "cpu_subgraphs" in fields:  # the recipe's first part failed whole and was split itself
            assert {step["part"] for step in report.recovery} == {"1/2"}
            assert (last, "Conv") in report.cpu_nodes
        result = compile_model(str(tmp_path / "g.onnx"), tmp_path / "out" / "g_ctx.onnx", options, overwrite=True)
        assert result.partition.recovery[-1]["rung"] == "graph split" and len(result.bin_paths) > 1
        artifact = onnxwrapper.InferenceSession(result.ctx_path, backend="qnn")
        np.testing.assert_allclose(artifact.run(None, {"x": _x(1)})[0], expected, atol=1e-5)


@pytest.mark.qnn
@needs_qnn
@pytest.mark.filterwarnings("ignore::onnxwrapper.PartialOffloadWarning")
def test_precompile_rescues_a_signature_and_the_session_replays_it_from_the_cache(tmp_path, caplog):
    from onnxwrapper.backends.qnn import precompile

    data = rm.gelu_net(batch="N", length=32)
    options = {"precision": "fp32", "cache_dir": str(tmp_path / "cache")}
    [result] = precompile(data, [{"x": (2, 4, 32)}], options, jobs=1)
    assert not isinstance(result, BaseException), result
    assert result.origin == "compiled" and result.partition.recovery[-1]["rung"] == "graph split"
    assert ("batch split", "failed") in _rungs(result.partition)  # each sample fails alone too
    with caplog.at_level(logging.INFO, logger="onnxwrapper.qnn"):
        session = onnxwrapper.InferenceSession(data, backend="qnn", backend_options=options)
        got = session.run(None, {"x": _x(2)})[0]
    np.testing.assert_allclose(got, _cpu(data, {"x": _x(2)}), atol=1e-5)
    assert "using the recorded recovery (graph split)" in caplog.text
    assert "for the QNN HTP" not in caplog.text  # nothing compiled: every part is in the cache
    assert session.get_partition().recovery == result.partition.recovery


def test_one_compile_memo_keeps_each_fact_apart_and_is_not_read_on_a_cache_hit(tmp_path):
    from onnxwrapper.backends.qnn.compile import CompileMemo
    from onnxwrapper.kernel import ArtifactCache, make_key

    cache = ArtifactCache(str(tmp_path / "cache"))
    key = make_key({"compile": 1})
    recovery = CompileMemo(cache, {"qnn-recovery": key}, "recovery", unless_entry=key)
    no_node = CompileMemo(cache, {"qnn-took-no-node": key, "patches": "True"}, "partition", unless_entry=key)
    assert recovery.known() is None and no_node.known() is None
    recovery.remember({"rung": "graph split", "ranges": []})
    no_node.remember({"target_ep": "QNNExecutionProvider"})
    assert recovery.known() == {"rung": "graph split", "ranges": []}
    assert no_node.known() == {"target_ep": "QNNExecutionProvider"}
    assert CompileMemo(cache, {"qnn-recovery": make_key({"compile": 2})}, "recovery").known() is None
    cache.get_or_create(key, lambda _directory: {"ctx": "model_ctx.onnx"})  # the compile's own entry: a hit
    assert recovery.known() is None and no_node.known() is None
    unreadable = ArtifactCache(str(tmp_path / "missing" / "cache"))
    assert CompileMemo(unreadable, {"qnn-recovery": key}, "recovery").known() is None
