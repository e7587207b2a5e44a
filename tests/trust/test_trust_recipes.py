"""Repair recipes checked where they are applied (docs/security.md): a ``rescale`` that drives values
beyond FP16's range is refused, one whose ranges nothing recorded (hand-written, or a forged
``verified`` object) is applied with a loud UnverifiedRecipeWarning, and ``aipc fix`` records the
peaks that make its own recipes checkable."""

from __future__ import annotations

import dataclasses
import warnings

import onnx
import pytest

import onnxwrapper
from onnxwrapper.repair.fix._ranges import reference_ranges
from onnxwrapper.repair.fix._rescale import exact_overflow_rewrites
from onnxwrapper.errors import RecipeError
from onnxwrapper.repair import (ModelRecipe, RecipeBook, Rewrite, UnverifiedRecipeWarning, apply_recipe, check_recipe,
                                load_recipes, model_sha256, scaled_tensors)
from tests import repair_models
from tests.conftest import qnn_available
from tests.repair.test_fix import feeds

FORGED = {"backend": "qnn", "worst_snr_db": 80.0, "bar_db": 27.1, "calls": [[1, 0]]}


def _recipe(data: bytes, log2: int, **fields) -> ModelRecipe:
    return ModelRecipe(model_sha256(data), "mm_ln.onnx", rewrites=(Rewrite("rescale", "proj", {"log2": log2}),),
                       **fields)


def _checked(data: bytes, recipe: ModelRecipe) -> list:
    model = onnx.load_model_from_string(data)
    return check_recipe(model, apply_recipe(model, recipe).proto, recipe)


def test_a_rescale_that_saturates_fp16_is_refused():
    data = repair_models.matmul_layernorm()
    with pytest.raises(RecipeError, match=r"rescale\(log2=20\) at 'proj' saturates FP16: rewritten constant\(s\) 'w/x2\^20'"):
        _checked(data, _recipe(data, 20, verified=FORGED))


def test_recorded_peaks_are_checked_and_unrecorded_ones_are_unverified():
    data = repair_models.matmul_layernorm()
    model = onnx.load_model_from_string(data)
    rewrites, _notes, _left = exact_overflow_rewrites(model, feeds("mm_ln"))
    made = ModelRecipe(model_sha256(data), rewrites=tuple(rewrites))
    ranges, _order = reference_ranges(model, feeds("mm_ln"))
    peaks = {t: ranges[t] for t in scaled_tensors(model, made)}
    assert peaks and _checked(data, dataclasses.replace(made, checks={"peaks": peaks})) == []
    # the same rewrite with a peak 2^8 larger than FP16 can take after scaling: refused
    big = {t: 65504.0 * 2.0 ** 8 for t in peaks}
    with pytest.raises(RecipeError, match="drives '.*' to .* beyond FP16's ±65504"):
        _checked(data, dataclasses.replace(made, checks={"peaks": big}))
    # hand-written, or with a forged "verified" object: unverified, said so
    assert "no recorded peak" in _checked(data, made)[0]
    assert "its 'verified' record proves nothing" in _checked(data, dataclasses.replace(made, verified=FORGED))[0]


def test_recipe_files_keep_their_checks_and_refuse_malformed_ones(tmp_path):
    data = repair_models.matmul_layernorm()
    recipe = _recipe(data, -5, checks={"peaks": {"a": 3.0e5}})
    path = RecipeBook({recipe.sha256: recipe}).save(tmp_path / "r.json")
    assert load_recipes(path).models[recipe.sha256].checks == {"peaks": {"a": 3.0e5}}
    for bad in ({"peaks": {"a": "big"}}, {"peaks": [1]}, {"peaks": {"a": float("inf")}}, [1]):
        doc = RecipeBook({recipe.sha256: recipe}).to_dict()
        doc["models"][recipe.sha256]["checks"] = bad
        with pytest.raises(RecipeError, match="'checks' must be"):
            load_recipes(doc)


@pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")
def test_the_qnn_backend_checks_a_recipe_at_first_use(tmp_path):
    data = repair_models.matmul_layernorm()
    (tmp_path / "mm_ln.onnx").write_bytes(data)
    saturating = RecipeBook({model_sha256(data): _recipe(data, 20, verified=FORGED)}).save(tmp_path / "bad.json")
    with pytest.raises(RecipeError, match="saturates FP16"):
        onnxwrapper.InferenceSession(str(tmp_path / "mm_ln.onnx"), backend="qnn", backend_options={"repairs": saturating})
    handmade = RecipeBook({model_sha256(data): _recipe(data, -5)}).save(tmp_path / "hand.json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = onnxwrapper.InferenceSession(str(tmp_path / "mm_ln.onnx"), backend="qnn",
                                               backend_options={"repairs": handmade})
    assert any(issubclass(w.category, UnverifiedRecipeWarning) and "UNVERIFIED" in str(w.message) for w in caught)
    assert "[UNVERIFIED: no recorded peak" in session.get_partition().note
