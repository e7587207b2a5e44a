"""aipc compile: compile a model ahead of time for the QNN HTP (EPContext model + QNN context
binary), optionally quantized (QDQ W8A16/W8A8 with captured calibration data), with operator
patches, a DLC export, an accuracy check and a per-op profile.

usage: aipc compile MODEL -o OUT [--target T] [--precision fp16|fp32|w8a16|w8a8]
                    [--calibration DIR] [--max-samples N]
                    [--shape NAME=D0,D1,...]... [--dim NAME=N]...
                    [--per-tensor] [--no-keep-fragile] [--dlc] [--profile]
                    [--no-patch] [--no-check] [--overwrite] [--json]
                    [--compile-timeout S] [--compile-memory-mb MIB]
       aipc compile --from-capture DIR [--jobs N] […]   every shape of a captured run, into the
                    compile cache, in parallel (`aipc compile --from-capture DIR --help`)

OUT is a directory (files named after MODEL) or the path of the EPContext model (*.onnx).
Files written:
  <stem>_ctx.onnx + <stem>_ctx_qnn.bin   EPContext model + raw QNN context binary (+ one
                                         <stem>_ctx_part<n>_qnn.bin per further QNN context when the
                                         recovery ladder split the graph)
  <stem>_ctx_compile.json                everything the summary shows (options, shapes, patches,
                                         partition, accuracy, profile, timings)
  <stem>_<precision>_qdq.onnx            the QDQ model (w8a16, w8a8)
  <stem>_dlc/*.dlc                       --dlc: one DLC per QNN partition (QNN's IR backend)
  <stem>_ctx_profile.csv                 --profile: the QNN EP profiling CSV
A <stem>_ctx.onnx in MODEL's own folder is used automatically by onnxwrapper sessions (and
`python -m aipc`) that open MODEL; any EPContext model can also be opened directly with
onnxwrapper.InferenceSession(path, backend="qnn").

Steps (progress bar on a terminal): static shapes (--shape/--dim, else the captured feed shapes);
patches for nodes the QNN EP rejects (in memory; --no-patch to skip); quantization
(onnxruntime.quantization's QNN configuration, QDQ); compilation
(onnxwrapper.backends.qnn.compile_model; with --dlc also the DLCs); the accuracy check on the
calibration samples (quantized: float on CPU vs QDQ on CPU vs QDQ on QNN; float: CPU vs QNN;
cosine and SNR per output, NaN/Inf per run and which run produced them); --profile (QNN EP
profiling, per-op cycles). Quantization converts the model in memory to the opset the quantizer
needs and keeps LayerNorm/Softmax denominators out of 8 bits (--no-keep-fragile: off); the
summary reports both. Simulator timings (x86-64 host) are not device timings.

A compile that fails (or runs past --compile-timeout / --compile-memory-mb, else
AIPC_COMPILE_TIMEOUT / AIPC_COMPILE_MEMORY_MB) goes through the recovery ladder of sessions, without
the batch split (the artifact keeps the model's shapes): other QNN options, else the graph as
several QNN contexts stitched into one EPContext model, with the nodes that fail even alone on the
CPU (listed with the reason); the summary's "recovery:" line says what was taken.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import time
from typing import Any

import onnxwrapper
from aipc import _console
from aipc._exit_codes import EXIT_UNAVAILABLE, EXIT_USAGE, UsageError
from aipc.args import add_compile_budget, compile_budget
from aipc.commands._compile_recipe import apply_to_proto, compile_option, recipe_for_file
from aipc.commands._compile_summary import format_summary
from aipc.commands._qnn_profile import profile_compiled, read_qnn_profile
from aipc.commands.inspect import add_model_options, model_options
from aipc_loader._report import say
from onnxwrapper.backends.qnn import compile_model
from onnxwrapper.errors import BackendUnavailableError
from onnxwrapper.kernel import PartialOffloadWarning, dynamic_inputs
from onnxwrapper.patches import apply_patches, find_patches, load_model_proto, name_unnamed_nodes
from onnxwrapper.toolkit import (CalibrationError, calibration_from_capture, make_static, quantize_qdq, rule_reason,
                                 three_way_check)

__all__ = ["add_arguments", "main", "read_qnn_profile"]  # read_qnn_profile: from aipc.commands._qnn_profile


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``aipc compile`` (see the module docstring)."""
    parser.add_argument("model", help="ONNX model file")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="output directory, or the EPContext model path (*.onnx)")
    add_model_options(parser, backend_help="backend to compile for: qnn (the only one with compiled artifacts)")
    parser.add_argument("--precision", default="fp16", choices=("fp16", "fp32", "w8a16", "w8a8"),
                        help="fp16 (default: the HTP's float math), fp32 (simulator only), or QDQ quantization "
                             "w8a16 / w8a8 (needs --calibration)")
    parser.add_argument("--calibration", metavar="DIR", help="capture directory (aipc capture) with the model's feeds")
    parser.add_argument("--max-samples", type=int, default=32, metavar="N",
                        help="calibration/check samples to use at most (default 32)")
    parser.add_argument("--per-tensor", action="store_true",
                        help="per-tensor weight quantization (default: per-channel, much more accurate on "
                             "transformer-style models, e.g. RapidOCR's recognizer: SNR 7 dB per-tensor vs 22 dB)")
    parser.add_argument("--no-keep-fragile", action="store_true",
                        help="quantize LayerNorm variances and Softmax denominators like every tensor (default: "
                             "fuse the LayerNorm or keep them at 16 bits; at 8 bits they can round to 0)")
    parser.add_argument("--dlc", action="store_true", help="also write a DLC through QNN's IR backend")
    parser.add_argument("--profile", action="store_true",
                        help="profile the compiled model with QNN EP profiling (per-op table; simulator timings "
                             "are not device timings)")
    parser.add_argument("--no-patch", action="store_true", help="do not apply operator patches")
    parser.add_argument("--repairs", metavar="FILE", help="repair recipe of this model (aipc fix): its rewrites, CPU "
                                                          "subgraphs and precision baked into the context model")
    parser.add_argument("--no-check", action="store_true", help="skip the accuracy check")
    parser.add_argument("--overwrite", action="store_true", help="replace existing output files")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="show onnxruntime.quantization's log messages")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_compile_budget(parser.add_argument_group("compile budget (past it, the recovery ladder takes over)"))


# -- helpers used by main (public so that scripts can do the same) -------------------------------
@contextlib.contextmanager
def _quiet_root_logger(verbose: bool):
    """onnxruntime.quantization logs advice on the root logger; keep it off the CLI's stderr."""
    root = logging.getLogger()
    old = root.level
    if not verbose:
        root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(old)


class _Stages:
    """A tqdm bar over named steps, with wall time per step."""

    def __init__(self, names: list[str], enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=len(names), file=sys.stderr, disable=None if enabled else True,
                        bar_format="{desc:<28} {bar} {n_fmt}/{total_fmt} [{elapsed}]", leave=False)
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def step(self, name: str):
        self.bar.set_description(f"aipc compile: {name}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def _outputs(model_path: str, out: str, precision: str) -> dict[str, str]:
    stem = os.path.splitext(os.path.basename(model_path))[0]
    if out.lower().endswith(".onnx"):
        folder, ctx = os.path.dirname(os.path.abspath(out)), os.path.abspath(out)
    else:
        folder = os.path.abspath(out)
        ctx = os.path.join(folder, f"{stem}_ctx.onnx")
    paths = {"folder": folder, "ctx": ctx, "report": os.path.splitext(ctx)[0] + "_compile.json"}
    if precision.startswith("w8"):
        paths["qdq"] = os.path.join(folder, f"{stem}_{precision}_qdq.onnx")
    paths["dlc"] = os.path.join(folder, f"{stem}_dlc")
    return paths


def _fail(message: str, status: int = EXIT_USAGE) -> int:
    say(f"error: {message}")
    return status


def _random_feeds(model, count: int) -> list[dict] | None:
    """Uniform [0, 1) float inputs (seeded) when every input is float; else ``None``."""
    import numpy as np
    from onnx import helper

    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    specs = []
    for value in model.graph.input:
        if value.name in inits:
            continue
        t = value.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        if dtype.kind != "f":
            return None
        specs.append((value.name, dtype, [d.dim_value for d in t.shape.dim]))
    return [{n: rng.random(s).astype(d) for n, d, s in specs} for _ in range(count)]


def _cpu_node_names(report) -> set[str]:
    return {re.sub(r"(_token_\d+)+$", "", n.name) for n in report.offloaded_nodes}


def main(args: argparse.Namespace) -> int:
    """Run ``aipc compile``; returns the exit status (64 usage, 69 QNN unavailable, 1 failure)."""
    try:
        options, shapes, dims = model_options(args)
        options.update(compile_budget(args))  # --compile-timeout / --compile-memory-mb, else AIPC_COMPILE_*
    except (ValueError, UsageError) as exc:
        return _fail(str(exc))
    if args.backend not in ("qnn", "qairt"):
        return _fail(f"aipc compile compiles for --backend qnn only, not {args.backend!r}")
    quantized = args.precision.startswith("w8")
    if quantized and not args.calibration:
        return _fail(f"--precision {args.precision} needs calibration data: --calibration DIR (record it with "
                     f"`aipc capture -o DIR script.py …`, a script that runs this model on real inputs)")
    if args.max_samples < 1:
        return _fail("--max-samples must be >= 1")
    if not os.path.isfile(args.model):
        return _fail(f"{args.model}: no such file")

    if not any(i.name == "qnn" and i.available for i in onnxwrapper.get_available_backends()):
        return _fail("the qnn backend is not available here (pip install 'onnxwrapper[qnn]')", EXIT_UNAVAILABLE)
    paths = _outputs(args.model, args.output, args.precision)
    if not args.overwrite:
        for key in ("ctx", "qdq"):
            if key in paths and os.path.exists(paths[key]):
                return _fail(f"{paths[key]} exists already; pass --overwrite to replace it")
        if args.dlc and os.path.isdir(paths["dlc"]) and any(n.endswith(".dlc") for n in os.listdir(paths["dlc"])):
            return _fail(f"{paths['dlc']} holds DLCs already; pass --overwrite to replace them")
    steps = ["load", "patch"] + (["quantize"] if quantized else []) + ["compile"] \
        + ([] if args.no_check else ["check"]) + (["profile"] if args.profile else [])
    stages = _Stages(steps, enabled=not args.no_progress)
    import warnings

    try:
        with warnings.catch_warnings():
            # the partition (with the CPU nodes and reasons) is part of the summary printed below
            warnings.simplefilter("ignore", PartialOffloadWarning)
            summary = _compile(args, options, shapes, dims, quantized, paths, stages)
    except BackendUnavailableError as exc:
        return _fail(str(exc), EXIT_UNAVAILABLE)
    except _UsageProblem as exc:
        return _fail(str(exc))
    finally:
        stages.close()
    summary["seconds"] = {k: round(v, 3) for k, v in stages.seconds.items()}
    with open(paths["report"], "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2, default=str)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(_console.clean(format_summary(summary)))  # model, node and file names from elsewhere
    return 0


class _UsageProblem(Exception):
    """A problem with what the user asked for (exit status 64)."""


def _compile(args, options: dict, shapes: dict, dims: dict, quantized: bool, paths: dict, stages: _Stages) -> dict:
    import onnx
    from google.protobuf.message import DecodeError
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    summary: dict[str, Any] = {"model": os.path.abspath(args.model), "precision": args.precision,
                               "backend_options": options, "notes": []}
    calib = None
    with stages.step("load"):
        try:
            proto = load_model_proto(args.model)
        except DecodeError as exc:  # protobuf cannot read it: as `aipc run MODEL` says it
            raise _UsageProblem(f"{args.model}: not an ONNX model ({type(exc).__name__}: {exc})") from exc
        recipe = recipe_for_file(args.model, args.repairs) if args.repairs else None  # aipc.commands._compile_recipe
        if recipe is not None:
            proto, summary["repairs"] = apply_to_proto(proto, recipe)
        if args.calibration:
            try:
                calib = calibration_from_capture(args.calibration, args.model, max_samples=args.max_samples)
            except (CalibrationError, OSError, ValueError) as exc:
                raise _UsageProblem(f"--calibration {args.calibration}: {exc}") from exc
            summary["calibration"] = {"dir": calib.source, "model_key": calib.model_key, "samples": len(calib.feeds),
                                      "skipped_other_shapes": calib.skipped, "shapes": calib.shapes, "note": calib.note}
            if dynamic_inputs(proto) and not shapes and not dims:
                shapes = {k: list(v) for k, v in calib.shapes.items()}
                summary["notes"].append(f"static shapes taken from the captured feeds: {shapes}")
        try:
            static = make_static(proto, shapes, dims) if (shapes or dims) else proto
        except (ValueError, InvalidArgument) as exc:
            raise _UsageProblem(str(exc)) from exc
        pending = dynamic_inputs(static)
        if pending:
            raise _UsageProblem(f"inputs with dynamic dims {pending}: the QNN HTP needs static shapes; give "
                                f"--shape NAME=D0,D1,... or --dim NAME=N (or --calibration to take the captured "
                                f"shapes)")
        summary["input_shapes"] = {k: list(v) for k, v in (shapes or {}).items()} or None
        name_unnamed_nodes(static)
    patched, records = static, []
    with stages.step("patch"):
        if not args.no_patch:
            rejected = {n.name for n in static.graph.node if rule_reason(n, static, False)}
            usable = {m.node_name for m in find_patches(static, only_for=rejected) if m.applicable}
            if usable:
                patched, records = apply_patches(static, only_for=usable)
    qdq_path = None
    result = None
    # Calibration captured at other shapes than the compile's (e.g. --shape for the NPU pipeline's
    # shapes): quantization ranges do not depend on shapes, so the dynamic model is quantized and
    # the QDQ model's shapes are fixed afterwards.
    shape_free_calibration = bool(calib and (shapes or dims) and _shapes_differ(calib.shapes, static))
    if shape_free_calibration:
        if records:
            raise _UsageProblem("operator patches were needed and the --calibration shapes differ from the "
                                "compile shapes: capture the calibration data at the compile shapes")
        summary["notes"].append(f"calibration shapes {dict(calib.shapes)} differ from the compile shapes: the "
                                f"dynamic model was quantized, then its shapes were fixed")
    for attempt in range(2):
        if quantized:
            with stages.step("quantize"), _quiet_root_logger(args.verbose):
                source = proto if shape_free_calibration else patched
                q = quantize_qdq(source, paths["qdq"], calib, precision=args.precision,
                                 per_channel=not args.per_tensor, keep_fragile=not args.no_keep_fragile)
                qdq_path = q.path
                if shape_free_calibration:
                    dynamic_qdq = onnx.load(qdq_path)
                    onnx.save(make_static(dynamic_qdq, shapes, dims), qdq_path)
                summary["quantization"] = {"path": q.path, "activation_type": q.activation_type,
                                           "weight_type": q.weight_type, "samples": q.samples,
                                           "preprocessed": q.preprocessed, "qdq_nodes": q.qdq_nodes,
                                           "per_channel": not args.per_tensor,
                                           "opset_upgrades": [u.to_dict() for u in q.opset_upgrades],
                                           "fragile": q.fragile.to_dict(), "fragile_text": q.fragile.describe()}
        with stages.step("compile"):
            # patches are applied above (before quantization, with --no-patch honoured), not by compile_model
            repairs = compile_option(qdq_path or patched, recipe) if recipe is not None else None
            extra = {"repairs": repairs} if repairs else {}
            result = compile_model(qdq_path or patched, paths["ctx"],
                                   backend_options=dict(options, patches=False, **extra),
                                   overwrite=args.overwrite or attempt > 0, dlc_dir=paths["dlc"] if args.dlc else None,
                                   source_model=args.model)  # its provenance names MODEL, the file sessions open
        missed = set() if args.no_patch else _cpu_node_names(result.partition) - {r.node_name for r in records}
        fixable = {m.node_name for m in find_patches(patched, only_for=missed) if m.applicable}
        if attempt or not fixable:
            break
        patched, more = apply_patches(patched, only_for=fixable)
        records += more
        summary["notes"].append(f"patched {sorted(fixable)} after the compile left them on CPU; recompiled")
        stages.bar.total += 2 if quantized else 1
    summary["patches"] = [r.to_dict() for r in records]
    summary["compile"] = {"ctx": result.ctx_path, "ctx_bytes": result.ctx_bytes, "bin": result.bin_path,
                          "bins": list(result.bin_paths),
                          "bin_bytes": result.bin_bytes, "seconds": result.seconds, "ep_options": result.ep_options,
                          "versions": result.versions, "partition": result.partition.to_dict(),
                          "partition_summary": result.partition.summary()}
    if args.dlc:
        summary["dlc"] = [{"path": p, "bytes": os.path.getsize(p)} for p in result.dlc_paths]
        stages.seconds["dlc"] = result.dlc_seconds  # written by compile_model, after the EPContext
        stages.seconds["compile"] -= result.dlc_seconds
    feeds = calib.feeds if calib else None
    if feeds is None and (not args.no_check or args.profile):
        feeds = _random_feeds(static, 1)
        if feeds:
            summary["notes"].append("no --calibration: the check/profile used one random uniform [0,1) input")
    if not args.no_check:
        with stages.step("check"):
            if feeds and shape_free_calibration:
                # the compiled context binary has other shapes than the samples: the QNN leg runs the
                # dynamic QDQ model, specialized by the qnn backend for the samples' shapes
                report = three_way_check(proto, dynamic_qdq, feeds, qnn_model=dynamic_qdq, backend_options=options)
                summary["accuracy"] = report.to_dict()
                summary["accuracy_text"] = report.format_text()
                summary["notes"].append("accuracy check at the calibration shapes (QNN leg compiled for them)")
            elif feeds:
                report = three_way_check(static, qdq_path, feeds, qnn_model=result.ctx_path, backend_options=options)
                summary["accuracy"] = report.to_dict()
                summary["accuracy_text"] = report.format_text()
            else:
                summary["notes"].append("accuracy check skipped: no calibration data and non-float inputs")
    profile_feeds = _random_feeds(static, 1) if shape_free_calibration else feeds
    if args.profile and profile_feeds:
        with stages.step("profile"):
            summary["profile"] = profile_compiled(result.ctx_path, profile_feeds[:3], options, paths, patched)
    return summary


def _shapes_differ(calibration_shapes: dict, static) -> bool:
    """True when a captured input shape differs from the static model's input shape."""
    declared = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in static.graph.input}
    return any(name in declared and list(shape) != declared[name] for name, shape in calibration_shapes.items())
