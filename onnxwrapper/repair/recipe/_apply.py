"""Applying a recipe's rewrites to a model, in memory (no file is written next to the user's model)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import onnx

from onnxwrapper.errors import RecipeError
from onnxwrapper.patches import GraphView, PatchError, get_patch, name_unnamed_nodes
from onnxwrapper.repair.recipe._format import ModelRecipe

__all__ = ["RepairedModel", "apply_recipe"]


@dataclass(frozen=True)
class RepairedModel:
    """A model with a recipe's rewrites applied.

    Attributes:
        proto: the rewritten ``onnx.ModelProto`` (a copy; the input is not modified).
        records: the ``PatchRecord`` of each rewrite, in order.
        cpu_nodes: the node names the recipe puts on the CPU (they exist in :attr:`proto`).
        precision: the recipe's precision (``None``: the backend's default). recipe: the recipe.
    """

    proto: onnx.ModelProto
    records: tuple
    cpu_nodes: tuple
    precision: str | None
    recipe: ModelRecipe


def apply_recipe(model: onnx.ModelProto, recipe: ModelRecipe) -> RepairedModel:
    """Apply ``recipe``'s rewrites to a copy of ``model`` and check its CPU node names.

    Unnamed nodes are named first (:func:`onnxwrapper.patches.name_unnamed_nodes`), as when the
    recipe was made.

    Raises:
        RecipeError: a named node is missing, or a rewrite does not apply to its node (the model is
            not the one the recipe was verified on, or the rewrite changed) — with the reason.
    """
    proto = copy.deepcopy(model)
    name_unnamed_nodes(proto)
    view = GraphView(proto)
    records = []
    for rewrite in recipe.rewrites:
        node = next((n for n in proto.graph.node if n.name == rewrite.node), None)
        if node is None:
            raise RecipeError(f"The repair recipe's {rewrite.describe()}: the model has no node '{rewrite.node}'.")
        try:
            records.append(get_patch(rewrite.rewrite).configure(**rewrite.params).apply(view, node))
        except PatchError as exc:
            raise RecipeError(f"The repair recipe's {rewrite.describe()} does not apply: {exc}") from exc
    names = {n.name for n in proto.graph.node}
    missing = [n for n in recipe.cpu_nodes if n not in names]
    if missing:
        raise RecipeError(f"The repair recipe puts nodes on the CPU that the model does not have: "
                          f"{', '.join(missing)}.")
    return RepairedModel(proto, tuple(records), recipe.cpu_nodes, recipe.precision, recipe)
