"""``--repairs FILE`` of ``aipc compile``: the recipe of the model file, applied before the compile pipeline.

``aipc compile`` transforms the model in memory before compiling it (static shapes, operator
patches, quantization), so the recipe is looked up by the sha256 of the *file the user named*
(:class:`~onnxwrapper.errors.RecipeMismatchError` for another model) and its rewrites are applied
first. Its CPU subgraphs and precision are then handed to ``compile_model`` as a recipe keyed by
the hash of the in-memory model that is compiled — derived from the verified one, never another
model — so they are baked into the written EPContext model.
"""

from __future__ import annotations

import dataclasses
import os

import onnx

from onnxwrapper.repair import ModelRecipe, RecipeBook, apply_recipe, load_recipes, model_sha256

__all__ = ["recipe_for_file", "apply_to_proto", "compile_option"]


def recipe_for_file(model_path: str, recipe_path: str) -> ModelRecipe:
    """The recipe of the model file ``model_path`` in ``recipe_path``.

    Raises:
        RecipeError: unreadable recipe. RecipeMismatchError: no recipe for this file's content.
    """
    with open(model_path, "rb") as f:
        sha = model_sha256(f.read())
    return load_recipes(recipe_path).for_model(sha, os.path.basename(model_path))


def apply_to_proto(proto: onnx.ModelProto, recipe: ModelRecipe) -> tuple[onnx.ModelProto, list]:
    """``(rewritten model, rewrite records as dicts)``; unnamed nodes get their recipe names."""
    repaired = apply_recipe(proto, recipe)
    return repaired.proto, [r.to_dict() for r in repaired.records]


def compile_option(compiled, recipe: ModelRecipe) -> RecipeBook | None:
    """The ``repairs`` option for ``compile_model(compiled, …)``: the recipe's CPU subgraphs and
    precision keyed by the hash of ``compiled`` (an ``onnx.ModelProto`` or a model file path; its
    rewrites are applied already); ``None`` when it has neither."""
    if not recipe.cpu_subgraphs and not recipe.precision:
        return None
    if isinstance(compiled, onnx.ModelProto):
        data = compiled.SerializeToString()
    else:
        with open(compiled, "rb") as f:
            data = f.read()
    sha = model_sha256(data)
    derived = dataclasses.replace(recipe, sha256=sha, rewrites=(), note=f"derived in memory from {recipe.sha256[:12]}")
    return RecipeBook({sha: derived})
