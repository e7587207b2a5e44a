"""``onnxwrapper.repair.recipe``: the repair recipe format, its checks, and applying it.

A recipe (:mod:`onnxwrapper.repair.recipe._format`, docs/repair.md) is a small versioned JSON file
keyed by the sha256 of the model file. :func:`load_recipes` / :class:`RecipeBook` read, validate
and write it; :func:`apply_recipe` applies its rewrites in memory; :func:`check_recipe` checks it
against the model where it is applied; :func:`split_stages`, :func:`part_model` and
:func:`assemble` split a model at its CPU nodes and put the compiled parts back together. The
kernel layer: backends apply recipes, so nothing here imports the diff or the fix. The public
import path is :mod:`onnxwrapper.repair`, which re-exports exactly these names.
"""

from __future__ import annotations

from onnxwrapper.repair.recipe._apply import RepairedModel, apply_recipe
from onnxwrapper.repair.recipe._checks import UnverifiedRecipeWarning, check_recipe, scaled_tensors
from onnxwrapper.repair.recipe._format import (FORMAT, PRECISIONS, TARGETS, VERSION, ModelRecipe, RecipeBook, Rewrite,
                                               load_recipes, model_sha256, recipe_targets)
from onnxwrapper.repair.recipe._split import (ModelPart, assemble, boundary_types, part_model, read_names, replica_copies,
                                              replicated_nodes, split_stages, tensor_types)

__all__ = [
    "FORMAT",
    "ModelPart",
    "ModelRecipe",
    "PRECISIONS",
    "RecipeBook",
    "RepairedModel",
    "Rewrite",
    "TARGETS",
    "UnverifiedRecipeWarning",
    "VERSION",
    "apply_recipe",
    "assemble",
    "boundary_types",
    "check_recipe",
    "load_recipes",
    "model_sha256",
    "part_model",
    "read_names",
    "recipe_targets",
    "replica_copies",
    "replicated_nodes",
    "scaled_tensors",
    "split_stages",
    "tensor_types",
]
