"""Red team, backend options recorded in a received diff folder (docs/security.md, "diff.json"): only
an allow-list of numerics-relevant settings is used when its runs are replayed; paths (profiling
files, the cache, backend libraries, artifacts, recipes) and limits never come from a folder."""

from __future__ import annotations

import os

import pytest

from onnxwrapper import diff
from onnxwrapper.diff import _capture
from tests.conftest import qnn_available
from tests.redteam.folders import diff_folder

ELSEWHERE = os.path.join(os.path.abspath(os.sep), "attacker")  # an absolute folder a received folder names

HOSTILE = {"target": "x-elite", "precision": "fp16", "patches": ["einsum"], "strict": False,
           "cache_dir": os.path.join(ELSEWHERE, "cache"), "profiling": "detailed",
           "repairs": os.path.join(ELSEWHERE, "recipe.json"), "onnx": os.path.join(ELSEWHERE, "passwd"),
           "artifact": os.path.join(ELSEWHERE, "evil.bin"), "sdk_root": os.path.join(ELSEWHERE, "sdk"),
           "compile_timeout": 1e9, "compile_memory_mb": 10 ** 9, "max_feed_mb": 10 ** 9,
           "provider_options": {"soc_model": "60", "htp_graph_finalization_optimization_mode": "3",
                                "profiling_file_path": os.path.join(ELSEWHERE, ".bashrc"), "profiling_level": "detailed",
                                "backend_path": os.path.join(ELSEWHERE, "libevil.so"),
                                "qnn_saver_path": os.path.join(ELSEWHERE, "saver.so"),
                                "ep.context_file_path": os.path.join(ELSEWHERE, "out.onnx")}}
KEPT = {"target": "x-elite", "precision": "fp16", "patches": ["einsum"], "strict": False,
        "provider_options": {"soc_model": "60", "htp_graph_finalization_optimization_mode": "3"}}


def test_only_numerics_relevant_options_are_taken_from_a_folder():
    kept, dropped = _capture.received_options(HOSTILE)
    assert kept == KEPT
    assert set(dropped) == {"cache_dir", "profiling", "repairs", "onnx", "artifact", "sdk_root", "compile_timeout",
                            "compile_memory_mb", "max_feed_mb", "provider_options.profiling_file_path",
                            "provider_options.profiling_level", "provider_options.backend_path",
                            "provider_options.qnn_saver_path", "provider_options.ep.context_file_path"}


@pytest.mark.parametrize("value", [{"nested": "x"}, "x" * 10_000, [1, 2], [{"a": 1}]])
def test_an_allowed_name_with_an_odd_value_is_dropped(value):
    kept, dropped = _capture.received_options({"target": value})
    assert kept == {} and dropped == ["target"]


def test_check_replays_a_received_folder_with_the_allowed_options_only(tmp_path):
    folder = diff_folder(tmp_path / "d", options=HOSTILE, backend="twin")
    result = diff.check(folder)
    assert result.runs["twin"].options == KEPT
    assert any("backend options recorded in the folder and not used" in n and "cache_dir" in n
               and "provider_options.profiling_file_path" in n for n in result.notes), result.notes


@pytest.mark.qnn
@pytest.mark.slow
@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_fix_of_a_received_folder_writes_no_profile_where_the_folder_says(tmp_path):
    """The QNN EP appends profiling rows to ``profiling_file_path``; a received folder's run options
    naming a file (and a cache of its own) reach no child of ``aipc fix``."""
    from onnxwrapper.repair.fix import fix

    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    attacker_cache = tmp_path / "attacker-cache"
    options = {"precision": "fp16", "profiling": "basic", "cache_dir": str(attacker_cache),
               "provider_options": {"profiling_level": "basic", "profiling_file_path": str(victim)}}
    folder = diff_folder(tmp_path / "d", options=options, backend="qnn")
    result = fix(folder, remedies=("precision",), localize=False, timeout=300)
    assert victim.read_text() == "keep\n"
    assert not os.path.exists(attacker_cache)
    assert result.models and result.models[0].baseline is not None
