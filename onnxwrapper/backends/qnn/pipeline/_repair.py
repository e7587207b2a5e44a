"""Repair recipes in the QNN backend: backend option ``repairs`` (docs/repair.md).

A recipe (:mod:`onnxwrapper.repair`) says how to make a model agree with the CPU on the HTP:
rewrites at named nodes, nodes to run on the CPU, a precision. At ``open`` (and in
``compile_model``):

1. the recipe of the model is looked up by the sha256 of the model's bytes — a recipe for
   another model is refused with :class:`~onnxwrapper.errors.RecipeMismatchError`, never applied;
2. its rewrites are applied to an in-memory copy (nothing is written next to the user's model);
3. the repaired model is compiled under its own cache key — the model's content hash combined with
   the recipe's digest (rewrites, CPU subgraphs, precision) and the onnxwrapper version — so a
   changed recipe never reuses a stale context binary;
4. with CPU subgraphs, the model is split into NPU, CPU, NPU … parts, each NPU part compiled to its
   own context binary, and the parts assembled into **one** EPContext model that one onnxruntime
   session runs (:mod:`onnxwrapper.backends.qnn.pipeline._stitch`); its partition report lists the CPU nodes
   with the reason and the rewrites as patches.

Precompiled ``<stem>_ctx.onnx`` artifacts next to the model are not used when a recipe applies
(they were compiled without it); ``aipc compile --repairs`` bakes a recipe into an artifact.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Any, Mapping

import onnx

from onnxwrapper.backends.qnn.pipeline._pipeline import CacheStore
from onnxwrapper.backends.qnn.pipeline._stitch import (StitchedEpContext, merge_reports, plain_step, split_parts,
                                                       write_stitched)
from onnxwrapper.backends.qnn.settings import convert_repairs
from onnxwrapper.errors import ArtifactError, BackendOptionError, PartitionError, RecipeError
from onnxwrapper.kernel import ModelSource, __version__, dynamic_inputs, make_key, specialize, user_stacklevel
from onnxwrapper.repair import (RepairedModel, UnverifiedRecipeWarning, apply_recipe, check_recipe, model_sha256,
                                part_model)

__all__ = ["RepairPlan", "compile_repaired", "prepare_repairs", "repaired_step", "with_recipe_records",
           "refuse_for_artifact"]


@dataclass(frozen=True)
class RepairPlan:
    """A recipe that applies to the model being opened or compiled.

    Attributes:
        repaired: the rewritten model (:class:`~onnxwrapper.repair.RepairedModel`).
        config: the backend options to use (``precision`` from the recipe when it sets one).
        unverified: why the recipe could not be checked against the model (empty: checked;
            :func:`onnxwrapper.repair.check_recipe`).
    """

    repaired: RepairedModel
    config: Mapping[str, Any]
    unverified: tuple = ()

    @property
    def proto(self):
        """The rewritten ``onnx.ModelProto``."""
        return self.repaired.proto

    @property
    def cpu_nodes(self) -> tuple:
        """Node names the recipe runs on the CPU (empty: no split)."""
        return self.repaired.cpu_nodes

    @property
    def records(self) -> list:
        """The rewrites as patch-record dicts (``PartitionReport.patches``)."""
        return [r.to_dict() for r in self.repaired.records]

    def model_hash(self, content_hash: str) -> str:
        """The cache identity of the repaired model: the original's content hash, the recipe's
        digest and the onnxwrapper version (the rewrites' implementation)."""
        return make_key({"model": content_hash, "recipe": self.repaired.recipe.digest(), "onnxwrapper": __version__})

    def describe(self) -> str:
        """One line: the recipe's rewrites, CPU nodes and precision (``[UNVERIFIED: …]`` when unchecked)."""
        return self.repaired.recipe.describe() + (f" [UNVERIFIED: {'; '.join(self.unverified)}]"
                                                  if self.unverified else "")


def prepare_repairs(config: Mapping[str, Any], source, proto, *, real_npu: bool = False) -> RepairPlan | None:
    """The recipe that applies to the model, applied in memory; ``None`` without option or recipe.

    Args:
        config: validated ``qnn`` backend options (``repairs`` converted by
            :func:`~onnxwrapper.backends.qnn.settings._options.convert_repairs`).
        source: the model's :class:`~onnxwrapper.kernel.ModelSource`. proto: its ``onnx.ModelProto``.
        real_npu: a physical NPU runs the graphs (a recipe whose ``targets`` do not include ``"device"``
            — e.g. ``precision: "fp32"`` — is refused there).

    Raises:
        RecipeMismatchError: the recipe is for another model (``required``), or for a model of
            the same file name with another content.
        RecipeError: a rewrite or CPU node of the recipe does not fit the model, its rescaling
            saturates FP16 (a rewritten constant, or a recorded peak times its scale, beyond ±65504),
            or it is not valid on a device (its ``targets``; ``precision: "fp32"``) on a real NPU.
        Warns UnverifiedRecipeWarning when its rescaling could not be checked (no recorded peaks).
        BackendOptionError: the recipe puts nodes on the CPU while ``strict=True``.
    """
    option = config.get("repairs")
    if option is None:
        return None
    name = os.path.basename(source.path) if source.path is not None else None
    recipe = option.book.for_model(model_sha256(source.read_bytes()), name, required=option.required)
    if recipe is None or recipe.empty:
        return None
    if real_npu and not recipe.device_valid:
        raise RecipeError(
            f"The repair recipe for {name or 'the model'} holds on {', '.join(recipe.valid_targets)} only"
            + (" (precision 'fp32', which only the x86-64 HTP simulator has: a Snapdragon device runs float32 graphs "
               "with FP16 math, QNN HTP backend docs)" if recipe.precision == "fp32" else "")
            + ", so this repair cannot hold here. Make the recipe again with aipc fix (by default it searches only "
              "what a device runs), or remove this model's entry from the recipe file.", path=option.book.path)
    if recipe.cpu_subgraphs and config.get("strict"):
        raise BackendOptionError(f"The repair recipe runs {len(recipe.cpu_nodes)} node(s) of {name or 'the model'} on "
                                 f"the CPU ({', '.join(recipe.cpu_nodes[:5])}), which strict=True forbids. Drop "
                                 f"strict, or make a recipe without CPU subgraphs.", backend="qnn")
    repaired = apply_recipe(proto, recipe)
    unverified = tuple(check_recipe(proto, repaired.proto, recipe))  # RecipeError: it saturates FP16
    if unverified:
        warnings.warn(UnverifiedRecipeWarning(
            f"onnxwrapper qnn: the repair recipe for {name or 'the model'} is UNVERIFIED — {'; '.join(unverified)}. "
            f"It is applied, but nothing shows that its rescaling keeps values within FP16's range; make the recipe "
            f"with `aipc fix` (it records what it measured) or check it with `aipc diff`."),
            stacklevel=user_stacklevel())
    new_config = dict(config)
    if recipe.precision:
        new_config["precision"] = recipe.precision
    return RepairPlan(repaired, new_config, unverified)


def with_recipe_records(compiled, plan: RepairPlan):
    """``compiled`` (a pipeline ``Compiled``) whose partition report also lists the recipe's
    rewrites (first) among its patches, and says it was repaired."""
    report = compiled.report
    report = report.with_patches(plan.records + [dict(p) for p in report.patches])
    note = (report.note + "; " if report.note else "") + f"repaired: {plan.describe()}"
    return dataclasses.replace(compiled, report=report.with_source(report.source, note))


def refuse_for_artifact(config: Mapping[str, Any], what: str) -> None:
    """Raise when ``repairs`` is given for a model that is already compiled (a ``.bin`` or an EPContext model).

    Raises:
        RecipeError: always when the option is set.
    """
    if config.get("repairs") is not None:
        raise RecipeError(f"Option 'repairs' applies to ONNX models before they are compiled; {what} is compiled "
                          f"already. Compile the original model with `aipc compile --repairs FILE` instead.")


def repaired_step(plan: RepairPlan, setup, content_hash: str, *, step_for=plain_step):
    """The compile step of a repaired session, called like ``EpContextFromOnnx``:
    ``step(model_input, proto, shapes=None, note="", values=None) -> Compiled``. Without CPU subgraphs it is the
    normal pipeline on the rewritten model under the repaired cache identity
    (:meth:`RepairPlan.model_hash`); with them, the split-compile-assemble step of
    :mod:`onnxwrapper.backends.qnn.pipeline._stitch`. Either way the report lists the recipe's rewrites.

    ``step_for(store, batch_split=…)`` makes the compile step of the rewritten model, or of each NPU
    part (the session passes :func:`onnxwrapper.backends.qnn.recovery.recovering_step`: a repaired
    model that fails to compile goes through the recovery ladder like any other)."""
    key = plan.model_hash(content_hash)
    inner = (StitchedEpContext(setup, plan.cpu_nodes, key, plan.proto, step_for=step_for) if plan.cpu_nodes
             else step_for(CacheStore(setup, plan.proto, key)))

    def step(model_input, proto, shapes=None, note="", values=None):
        # bound control inputs (a specialization of a model with If nodes): a CPU If is split as its
        # inlined branch (StitchedEpContext), the bound values enter the cache keys
        if values:
            return with_recipe_records(inner(model_input, proto, shapes, note, values), plan)
        return with_recipe_records(inner(model_input, proto, shapes, note), plan)
    return step


def compile_repaired(compile_model, model, output_path, backend_options, input_shapes, *, sess_options,
                     overwrite: bool, dlc_dir, source_model=None, real_npu: bool = False):
    """``compile_model`` with the ``repairs`` option: the recipe baked into the written EPContext model.

    Without CPU subgraphs the rewritten model is compiled as usual; with them, each NPU part is
    compiled and the parts are assembled into ``output_path`` with one context binary per part
    (``<stem>_qnn.bin`` for the first NPU part, ``<stem>_part<k>_qnn.bin`` for part ``k`` after it).
    ``CompileResult.patches`` lists the rewrites. ``source_model``: the model file the written
    artifact stands for (its provenance record names it; see ``compile_model``).

    Raises:
        RecipeMismatchError, RecipeError: as for sessions. BackendOptionError: dynamic dims left, or
        ``dlc_dir`` with CPU subgraphs. Everything ``compile_model`` raises.
    """
    options = dict(backend_options or {})
    option = convert_repairs(options.pop("repairs"))
    source = (ModelSource(None, model.SerializeToString()) if isinstance(model, onnx.ModelProto)
              else ModelSource.from_arg(model))
    plan = prepare_repairs({"repairs": option, "strict": options.get("strict")}, source, source.load_proto(),
                           real_npu=real_npu)
    if plan is None:
        return compile_model(model, output_path, options, input_shapes, sess_options=sess_options,
                             overwrite=overwrite, dlc_dir=dlc_dir, source_model=source_model)
    if plan.repaired.precision:
        options["precision"] = plan.repaired.precision
    if not plan.cpu_nodes:
        result = compile_model(plan.proto, output_path, options, input_shapes, sess_options=sess_options,
                               overwrite=overwrite, dlc_dir=dlc_dir, source_model=source_model)
        patches = tuple(plan.records) + tuple(result.patches)
        return dataclasses.replace(result, patches=patches, partition=result.partition.with_patches(patches))
    if dlc_dir is not None:
        raise BackendOptionError("DLC export of a model split by a repair recipe's CPU subgraphs is not supported; "
                                 "export without --dlc, or use a recipe without CPU subgraphs.", backend="qnn")
    shapes = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    proto = specialize(plan.proto, shapes) if shapes else plan.proto
    if dynamic_inputs(proto):
        raise BackendOptionError(f"Inputs {sorted(dynamic_inputs(proto))} have dynamic dims: pass their static shapes "
                                 f"to compile a model split by a repair recipe.", backend="qnn")
    start = time.perf_counter()
    output_path = os.path.abspath(os.fspath(output_path))
    folder, ctx_name = os.path.split(output_path)
    stem = os.path.splitext(ctx_name)[0]
    parts, types = split_parts(proto, plan.cpu_nodes)
    results, failed = {}, {}
    os.makedirs(folder, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".onnxwrapper-compile-") as tmp:
        for part in parts:
            if part.kind != "npu":
                continue
            try:  # compile_model runs the recovery ladder: a rescued part is itself a stitched model
                results[part.stage] = compile_model(part_model(proto, part, types),
                                                    os.path.join(tmp, f"part{part.stage}_ctx.onnx"), options,
                                                    sess_options=sess_options, overwrite=True)
            except PartitionError as exc:  # no node of the part on the NPU: it runs on the CPU
                if exc.report is not None and exc.report.recovery:
                    failed[part.stage] = exc.report
        def bin_name(stage: int, n: int) -> str:
            name = f"{stem}_qnn.bin" if n == 0 else f"{stem}_part{stage}_qnn.bin"
            if os.path.exists(os.path.join(folder, name)) and not overwrite:
                raise ArtifactError(f"{os.path.join(folder, name)} exists already; pass overwrite=True to replace it.",
                                    path=os.path.join(folder, name))
            return name

        if os.path.exists(output_path) and not overwrite:
            raise ArtifactError(f"{output_path} exists already; pass overwrite=True to replace it.", path=output_path)
        bins = write_stitched(folder, ctx_name, proto, parts, {k: r.ctx_path for k, r in results.items()}, types,
                              bin_name)
    report = merge_reports(proto, parts, {k: r.partition for k, r in results.items()}, source="compile",
                           note=f"repaired: {plan.describe()}", failed=failed).with_patches(plan.records)
    first = next(iter(results.values()), None)
    if first is None:
        raise PartitionError("The QNN execution provider took no node of any part of the repaired model.",
                             backend="qnn", cpu_nodes=report.cpu_nodes)
    bin_paths = [os.path.join(folder, b) for b in bins]
    return dataclasses.replace(first, ctx_path=output_path, bin_path=bin_paths[0] if bin_paths else None,
                               ctx_bytes=os.path.getsize(output_path),
                               bin_bytes=sum(os.path.getsize(p) for p in bin_paths), partition=report,
                               seconds=time.perf_counter() - start, input_shapes=shapes or None,
                               patches=tuple(plan.records), dlc_paths=(), dlc_seconds=0.0,
                               bin_paths=tuple(bin_paths))
