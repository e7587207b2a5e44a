"""``onnxwrapper.repair``: repair recipes — what ``aipc fix`` found makes a model agree on a backend.

A recipe (:mod:`onnxwrapper.repair.recipe`, docs/repair.md) is a small versioned JSON file keyed
by the sha256 of the model file: registered rewrites (:mod:`onnxwrapper.patches`) at named nodes,
node groups to run on the CPU, and a precision. This package reads, validates and writes recipes,
applies their rewrites in memory (:func:`apply_recipe`), checks them against the model where they
are applied (:func:`check_recipe`: no constant and no recorded peak leaves FP16's range, else an
:class:`UnverifiedRecipeWarning`) and splits a model at its CPU nodes
(:func:`split_stages`, :func:`boundary_types`, :func:`part_model`, :func:`assemble`). Backends apply recipes (the QNN
backend's option ``repairs``); :func:`onnxwrapper.repair.fix.fix` (``aipc fix``) makes them.

Two subpackages: :mod:`onnxwrapper.repair.recipe` — the format, its checks, applying it and
splitting at CPU nodes (the kernel layer: backends apply recipes), re-exported here exactly; and
:mod:`onnxwrapper.repair.fix` — what makes and verifies recipes from a failing diff (it builds on
:mod:`onnxwrapper.diff`). Importing this package does not import :mod:`onnxwrapper.repair.fix`.

Example::

    from onnxwrapper.repair import load_recipes, apply_recipe, model_sha256

    book = load_recipes("aipc-repairs.json")
    data = open("model.onnx", "rb").read()
    recipe = book.for_model(model_sha256(data), "model.onnx")     # RecipeMismatchError if not its recipe
    repaired = apply_recipe(onnx.load_model_from_string(data), recipe)

Importing it imports onnx, onnxruntime and numpy only; no I/O.
"""

from __future__ import annotations

from onnxwrapper.repair import recipe
from onnxwrapper.repair.recipe import (FORMAT, PRECISIONS, TARGETS, VERSION, ModelPart, ModelRecipe, RecipeBook,
                                      RepairedModel, Rewrite, UnverifiedRecipeWarning, apply_recipe, assemble,
                                      boundary_types, check_recipe, load_recipes, model_sha256, part_model, read_names,
                                      recipe_targets, replica_copies, replicated_nodes, scaled_tensors, split_stages,
                                      tensor_types)

#: exactly :mod:`onnxwrapper.repair.recipe`'s names
__all__ = list(recipe.__all__)
