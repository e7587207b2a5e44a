"""The repair recipe: a small, versioned JSON file that says how to repair a model's accuracy on a backend.

Written by ``aipc fix`` (:func:`onnxwrapper.repair.fix.fix`), applied by the QNN backend (backend option
``repairs``, ``python -m aipc --repairs FILE``, ``aipc compile --repairs FILE``). Format (version 1)::

    {
      "format": "onnxwrapper-repair-recipe",
      "version": 1,
      "created": "2026-11-24T08:00:00Z",
      "tool": {"onnxwrapper": "0.1.0", "onnxruntime": "1.32.0"},
      "models": {
        "<sha256 of the model file>": {
          "name": "model.onnx",                  # the file name when the recipe was made (messages)
          "key": "model-fe2d2eb49c5f",           # the capture's model key (messages)
          "rewrites": [                          # registered rewrites (onnxwrapper.patches), in order
            {"rewrite": "rescale", "node": "LayerNorm_1/Square", "params": {"log2": -2}}
          ],
          "cpu_subgraphs": [["Pow_7"]],          # node names run on the CPU (after the rewrites)
          "precision": null,                     # or "fp32": the backend's higher precision
          "targets": ["simulator", "device"],    # where the recipe can hold (TARGETS; "fp32": simulator only)
          "verified": {...},                     # how aipc fix verified it (free object: proves nothing)
          "checks": {"peaks": {"x": 2.1e5}},     # largest |value| of each tensor a rescale scales (checked)
          "note": "..."
        }
      }
    }

Recipes are keyed by the **sha256 of the model file's bytes** (the hash ``sha256sum`` prints and
that ``aipc diff`` captures record): a recipe is looked up by the model's hash only, and a model
whose hash has no recipe is refused with :class:`~onnxwrapper.errors.RecipeMismatchError` — never
repaired with another model's recipe. Node names refer to the model after its unnamed nodes got
the deterministic names of :func:`onnxwrapper.patches.name_unnamed_nodes` (``<op_type>_<index>``).
Readers accept versions up to :data:`VERSION` and ignore unknown keys.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import onnxruntime

from onnxwrapper.errors import RecipeError, RecipeMismatchError
from onnxwrapper.kernel import __version__, read_regular
from onnxwrapper.patches import PatchError, get_patch

__all__ = ["FORMAT", "VERSION", "PRECISIONS", "TARGETS", "Rewrite", "ModelRecipe", "RecipeBook", "load_recipes",
           "model_sha256", "recipe_targets"]

FORMAT = "onnxwrapper-repair-recipe"
VERSION = 1
#: values of ``precision`` (``None``: the backend's default)
PRECISIONS = (None, "fp16", "fp32")
#: where a recipe can hold: ``"simulator"`` — the x86-64 QNN HTP simulator; ``"device"`` — a
#: Snapdragon HTP with FP16 (v69 or later), whose CPU runs a recipe's CPU subgraphs. A device has no
#: FP32 mode (QNN HTP backend docs: float32 graphs run with FP16 math), so a ``precision: "fp32"``
#: recipe holds on the simulator only.
TARGETS = ("simulator", "device")


def recipe_targets(precision: str | None) -> tuple:
    """The :data:`TARGETS` a recipe of ``precision`` can hold on: ``("simulator",)`` for ``"fp32"``
    (a simulator mode), both otherwise (rewrites, CPU subgraphs and FP16 run on a device too)."""
    return ("simulator",) if precision == "fp32" else TARGETS

#: the largest recipe file read (bytes) and the most rewrites one model's recipe may hold: ``aipc fix``
#: writes a handful; a file past either is refused at once (200,000 rewrites took minutes to apply)
MAX_RECIPE_BYTES = 64 << 20
MAX_REWRITES = 10_000


def model_sha256(data: bytes) -> str:
    """Hex sha256 of a model's serialized bytes (the key of its recipe)."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Rewrite:
    """One registered rewrite applied to one node.

    Attributes:
        rewrite: registry name (``onnxwrapper.patches.get_patch``). node: the node's name.
        params: the rewrite's parameters (``Patch.parameters``), e.g. ``{"log2": -2}``.
    """

    rewrite: str
    node: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """``{"rewrite", "node", "params"}``."""
        return {"rewrite": self.rewrite, "node": self.node, "params": dict(self.params)}

    def describe(self) -> str:
        """E.g. ``rescale(log2=-2) at 'LayerNorm_1/Square'``."""
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.params.items()))
        return f"{self.rewrite}({args}) at '{self.node}'"


@dataclass(frozen=True)
class ModelRecipe:
    """The repairs of one model (see the module docstring for the fields)."""

    sha256: str
    name: str = ""
    key: str = ""
    rewrites: tuple = ()
    cpu_subgraphs: tuple = ()
    precision: str | None = None
    verified: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""
    checks: Mapping[str, Any] = field(default_factory=dict)
    targets: tuple = ()

    @property
    def valid_targets(self) -> tuple:
        """Where the recipe holds: its recorded ``targets``, else those of its precision
        (:func:`recipe_targets`; recipes written before ``targets`` existed)."""
        return tuple(self.targets) or recipe_targets(self.precision)

    @property
    def device_valid(self) -> bool:
        """True when a device (a Snapdragon HTP, not the simulator) can run the recipe."""
        return "device" in self.valid_targets

    @property
    def cpu_nodes(self) -> tuple:
        """Every node name of :attr:`cpu_subgraphs`, in order, once."""
        return tuple(dict.fromkeys(n for group in self.cpu_subgraphs for n in group))

    @property
    def empty(self) -> bool:
        """True when the recipe changes nothing."""
        return not self.rewrites and not self.cpu_subgraphs and self.precision is None

    def digest(self) -> str:
        """Hex sha256 of what changes the compiled model (rewrites, CPU subgraphs, precision): a
        part of every compile-cache key of a repaired model (``targets`` changes nothing compiled)."""
        doc = {"format": FORMAT, "version": VERSION, "rewrites": [r.to_dict() for r in self.rewrites],
               "cpu_subgraphs": [list(g) for g in self.cpu_subgraphs], "precision": self.precision}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def describe(self) -> str:
        """One line: the rewrites, the CPU nodes and the precision."""
        parts = [r.describe() for r in self.rewrites]
        if self.cpu_subgraphs:
            parts.append(f"on the CPU: {', '.join(self.cpu_nodes)}")
        if self.precision:
            parts.append(f"precision {self.precision}")
        return "; ".join(parts) or "no change"

    def to_dict(self) -> dict:
        """The JSON object stored under the model's hash."""
        return {"name": self.name, "key": self.key, "rewrites": [r.to_dict() for r in self.rewrites],
                "cpu_subgraphs": [list(g) for g in self.cpu_subgraphs], "precision": self.precision,
                "targets": list(self.valid_targets), "verified": dict(self.verified), "note": self.note,
                "checks": dict(self.checks)}


def _recipe_from(sha: str, doc: Any, path: str | None) -> ModelRecipe:
    where = f"recipe for model {sha[:12]}" + (f" in {path}" if path else "")
    if not isinstance(doc, Mapping):
        raise RecipeError(f"The {where} is not a JSON object.", path=path)
    rewrites = []
    items = doc.get("rewrites") or ()
    if not isinstance(items, (list, tuple)):
        raise RecipeError(f"The {where}: 'rewrites' must be a list, got {type(items).__name__}.", path=path)
    if len(items) > MAX_REWRITES:
        raise RecipeError(f"The {where} holds {len(items)} rewrites; at most {MAX_REWRITES} are accepted (aipc fix "
                          f"writes a few). It is not a recipe aipc made: check where it came from.", path=path)
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("rewrite"), str) or not isinstance(
                item.get("node"), str):
            raise RecipeError(f"The {where} has a rewrite without a 'rewrite' and 'node' name: {item!r}.", path=path)
        params = item.get("params") or {}
        if not isinstance(params, Mapping):
            raise RecipeError(f"The {where} has a rewrite whose 'params' is not an object: {item!r}.", path=path)
        try:
            get_patch(item["rewrite"]).configure(**params)
        except (PatchError, TypeError, ValueError, OverflowError) as exc:
            raise RecipeError(f"The {where} has an unusable rewrite {item!r}: {exc}", path=path) from exc
        rewrites.append(Rewrite(item["rewrite"].lower(), item["node"], dict(params)))
    groups = doc.get("cpu_subgraphs") or ()
    if not isinstance(groups, (list, tuple)) or not all(
            isinstance(g, (list, tuple)) and g and all(isinstance(n, str) and n for n in g) for g in groups):
        raise RecipeError(f"The {where}: 'cpu_subgraphs' must be a list of non-empty lists of node names.",
                          path=path)
    precision = doc.get("precision")
    if precision not in PRECISIONS:
        raise RecipeError(f"The {where}: precision must be null, 'fp16' or 'fp32', got {precision!r}.", path=path)
    verified = doc.get("verified") or {}
    if not isinstance(verified, Mapping):
        raise RecipeError(f"The {where}: 'verified' must be an object, got {type(verified).__name__}.", path=path)
    return ModelRecipe(sha, str(doc.get("name") or ""), str(doc.get("key") or ""), tuple(rewrites),
                       tuple(tuple(g) for g in groups), precision, dict(verified), str(doc.get("note") or ""),
                       _checks_from(doc.get("checks"), where, path), _targets_from(doc.get("targets"), precision,
                                                                                     where, path))


def _targets_from(doc: Any, precision: str | None, where: str, path: str | None) -> tuple:
    """The ``targets`` list: names of :data:`TARGETS`, none twice, none its precision cannot hold on
    (``"device"`` with ``precision: "fp32"``); ``()`` when absent (derived from the precision)."""
    if doc is None:
        return ()
    if not isinstance(doc, (list, tuple)) or not doc or any(t not in TARGETS for t in doc) or len(set(doc)) != len(doc):
        raise RecipeError(f"The {where}: 'targets' must be a non-empty list of distinct names from "
                          f"{', '.join(TARGETS)}, got {doc!r}.", path=path)
    if not set(doc) <= set(recipe_targets(precision)):
        raise RecipeError(f"The {where} claims targets {', '.join(doc)} at precision {precision!r}, which only the "
                          f"x86-64 HTP simulator has (a device runs float32 graphs with FP16 math).", path=path)
    return tuple(doc)


def _checks_from(doc: Any, where: str, path: str | None) -> dict:
    """The ``checks`` object: ``{"peaks": {tensor: largest |value| >= 0}}`` (``{}`` when absent)."""
    if doc is None:
        return {}
    peaks = doc.get("peaks", {}) if isinstance(doc, Mapping) else None
    if not isinstance(peaks, Mapping) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and v >= 0 for k, v in peaks.items()):
        raise RecipeError(f"The {where}: 'checks' must be {{\"peaks\": {{tensor name: a finite number >= 0}}}}.",
                          path=path)
    return {"peaks": {k: float(v) for k, v in peaks.items()}}


@dataclass(frozen=True)
class RecipeBook:
    """The recipes of a file, by model hash.

    Attributes:
        models: ``{sha256: ModelRecipe}``. path: the file it was read from (``None`` if built).
        created: ISO 8601 time it was written. tool: versions that wrote it.
    """

    models: Mapping[str, ModelRecipe]
    path: str | None = None
    created: str = ""
    tool: Mapping[str, str] = field(default_factory=dict)

    def for_model(self, sha256: str, name: str | None = None, *, required: bool = True) -> ModelRecipe | None:
        """The recipe of the model whose file hashes to ``sha256``.

        Args:
            name: the model's file name, for messages (and, with ``required=False``, to notice a
                model that changed: a recipe for a file of that name but another hash).
            required: raise when there is no recipe for this hash (``False``: return ``None`` for a
                model the recipes do not name — used by ``python -m aipc --repairs``, where a
                script's other models run as they are).

        Raises:
            RecipeMismatchError: ``required`` and no recipe for this hash; or a recipe exists for a
                model of the same file name with another hash (the model changed since ``aipc fix``).
        """
        recipe = self.models.get(sha256)
        if recipe is not None:
            return recipe
        held = {sha: (r.name or r.key or "?") for sha, r in self.models.items()}
        listing = ", ".join(f"{n} (sha256 {sha[:12]}…)" for sha, n in held.items()) or "no model"
        what = f"model {name!r}" if name else "the model"
        source = f"The repair recipe {self.path}" if self.path else "The repair recipe"
        same_name = [sha for sha, r in self.models.items() if name and r.name and r.name == name]
        if required or same_name:
            why = ("a model of that name had another content when the recipe was made: the model changed"
                   if same_name else "it holds recipes for other models only")
            raise RecipeMismatchError(
                f"{source} has no recipe for {what} (sha256 {sha256[:12]}…): {why}. It holds: {listing}. "
                f"A recipe is never applied to another model; run `aipc fix` on a diff of this model to make one.",
                path=self.path, model_sha256=sha256, recipe_models=held)
        return None

    def to_dict(self) -> dict:
        """The file's JSON document."""
        return {"format": FORMAT, "version": VERSION, "created": self.created, "tool": dict(self.tool),
                "models": {sha: r.to_dict() for sha, r in self.models.items()}}

    def save(self, path) -> str:
        """Write the file atomically (a temporary file, then ``os.replace``); returns its absolute path."""
        path = os.path.abspath(os.fspath(path))
        doc = self.to_dict()
        doc["created"] = self.created or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if not doc["tool"]:
            doc["tool"] = {"onnxwrapper": __version__, "onnxruntime": onnxruntime.__version__}
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=False)
            f.write("\n")
        os.replace(tmp, path)
        return path


def load_recipes(source) -> RecipeBook:
    """Read and validate a recipe file (a path) or an already parsed document (a dict).

    Raises:
        RecipeError: missing or unreadable file (also a FIFO, a device, a folder, or more than
            :data:`MAX_RECIPE_BYTES`), not JSON, another ``format``, a newer ``version``, more than
            :data:`MAX_REWRITES` rewrites for one model, an unknown rewrite or parameter, a bad
            ``cpu_subgraphs`` or ``precision`` (the message names the file and the entry).
    """
    path = None
    if isinstance(source, Mapping):
        doc = source
    elif isinstance(source, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(source))
        try:  # a regular file of bounded size: a FIFO or /dev/zero is an error, never a hang
            doc = json.loads(read_regular(path, MAX_RECIPE_BYTES).decode("utf-8"))
        except FileNotFoundError as exc:
            raise RecipeError(f"Repair recipe {path} does not exist (write one with `aipc fix`).", path=path) from exc
        except (OSError, ValueError, RecursionError) as exc:
            raise RecipeError(f"Repair recipe {path} is not a readable JSON file: {exc}.", path=path) from exc
    else:
        raise RecipeError(f"A repair recipe is a file path or a dict, got {type(source).__name__}.")
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise RecipeError(f"{path or 'The document'} is not a repair recipe (expected \"format\": \"{FORMAT}\").",
                          path=path)
    version = doc.get("version")
    if not isinstance(version, int) or version < 1 or version > VERSION:
        raise RecipeError(f"{path or 'The recipe'} has format version {version!r}; this onnxwrapper reads versions "
                          f"1 to {VERSION}. Update onnxwrapper or run `aipc fix` again.", path=path)
    models = doc.get("models")
    if not isinstance(models, Mapping):
        raise RecipeError(f"{path or 'The recipe'} has no 'models' object.", path=path)
    recipes = {}
    for sha, entry in models.items():
        if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise RecipeError(f"{path or 'The recipe'}: {sha!r} is not a sha256 hex digest of a model.", path=path)
        recipes[sha] = _recipe_from(sha, entry, path)
    tool = doc.get("tool") if isinstance(doc.get("tool"), Mapping) else {}
    return RecipeBook(recipes, path, str(doc.get("created") or ""), {str(k): str(v) for k, v in tool.items()})
