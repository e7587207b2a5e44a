"""The options of the ``qnn`` backend: their documentation, converters and defaults (``QnnBackend.options``).

The converters of ``patches`` and ``repairs`` import the operator patches and the repair recipes
(and onnx under them) when such an option is given: they are not needed to open a session without
them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from onnxwrapper.backends._artifact_files import companion_option
from onnxwrapper.backends.base import OptionSpec, did_you_mean
from onnxwrapper.backends.qnn.compile import DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_TOTAL_BUDGET_S, convert_seconds
from onnxwrapper.backends.qnn.model import DEFAULT_MAX_FEED_MB
from onnxwrapper.backends.qnn.platform import (PERFORMANCE_MODES, PROFILING_LEVELS, TARGETS, convert_bool,
                                               convert_choice, convert_htp_arch, convert_positive_int,
                                               convert_provider_options, convert_soc_model, convert_target)
from onnxwrapper.errors import ArtifactError
from onnxwrapper.kernel import ArtifactCache

if TYPE_CHECKING:
    from onnxwrapper.repair import RecipeBook

__all__ = ["OPTIONS", "REPAIRS_DOC", "RepairsOption", "convert_graph", "convert_patches", "convert_repairs",
           "disabled_patches"]

_SRC = "QNN SDK QnnTypes.h Qnn_SocModel_t; QNN 'Supported Snapdragon devices'"
REPAIRS_DOC = ("Repair recipe written by `aipc fix` (a path), applied to the model whose sha256 it names: rewrites "
               "in memory, CPU subgraphs, precision; a recipe for another model raises RecipeMismatchError. "
               "{'file': PATH, 'required': False} leaves models without a recipe unchanged (python -m aipc "
               "--repairs). See docs/repair.md.")


def _registered_patches() -> list[str]:
    # imported here: onnxwrapper.patches (and onnx) only when the option is given
    from onnxwrapper.patches import list_patches

    return [p.name for p in list_patches()]


def convert_patches(value: Any) -> bool | tuple[str, ...]:
    """Converter of the ``patches`` backend option.

    Args:
        value: ``True`` (default: every registered patch), ``False`` / ``0`` (none), or a list or
            tuple of registered patch names (``onnxwrapper.patches.list_patches()``) to *disable*,
            case-insensitive.

    Returns:
        ``True``, ``False`` or the sorted tuple of disabled names (lower case).

    Raises:
        ValueError: an unknown patch name (lists the registered ones, suggests the closest).
        TypeError: another type.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, (list, tuple)):
        known = _registered_patches()
        disabled = set()
        for item in value:
            if not isinstance(item, str):
                raise TypeError(f"patch names must be strings, got {type(item).__name__}")
            name = item.strip().lower()
            if name not in known:
                hint = did_you_mean(name, known)
                raise ValueError(f"unknown patch '{item}'.{hint} Registered patches: {', '.join(known)}")
            disabled.add(name)
        return tuple(sorted(disabled))
    raise TypeError(f"expected True, False or a list of patch names to disable ({', '.join(_registered_patches())})")


def disabled_patches(option: bool | Sequence[str]) -> tuple[str, ...] | None:
    """The ``disabled=`` argument for :func:`onnxwrapper.patches.patch_offloaded` from a converted
    ``patches`` option: ``None`` when patching is off, else the names to skip."""
    if option is False:
        return None
    if option is True:
        return ()
    return tuple(option)


@dataclass(frozen=True)
class RepairsOption:
    """The converted ``repairs`` option.

    Attributes:
        book: the recipes. required: a model without a recipe is an error (``True``) or runs
            unrepaired (``False``). spec: the option as given (JSON-ready, for child processes).
    """

    book: RecipeBook
    required: bool
    spec: Any

    def __str__(self) -> str:
        return str(self.spec)


def convert_repairs(value: Any) -> RepairsOption | None:
    """Converter of the ``repairs`` option: ``None``; a recipe file path; a dict
    ``{"file": PATH, "required": bool}``; a :class:`~onnxwrapper.repair.RecipeBook`; or an already
    converted :class:`RepairsOption`.

    Raises:
        ValueError (a :class:`~onnxwrapper.errors.RecipeError`): unreadable or invalid recipe.
        TypeError: another type.
    """
    if value is None or isinstance(value, RepairsOption):
        return value
    # imported here: the repair recipes (and onnx) only when the option is given
    from onnxwrapper.repair import RecipeBook, load_recipes

    if isinstance(value, RecipeBook):
        return RepairsOption(value, True, value.path)
    if isinstance(value, (str, os.PathLike)):
        return RepairsOption(load_recipes(value), True, os.path.abspath(os.fspath(value)))
    if isinstance(value, Mapping):
        unknown = set(value) - {"file", "required"}
        if unknown or "file" not in value:
            raise ValueError(f"expected {{'file': PATH, 'required': bool}}, got keys {sorted(value)}")
        required = value.get("required", True)
        if not isinstance(required, bool):
            raise TypeError("'required' must be True or False")
        path = os.path.abspath(os.fspath(value["file"]))
        return RepairsOption(load_recipes(path), required, {"file": path, "required": required})
    raise TypeError(f"expected a recipe file path or {{'file': PATH, 'required': bool}}, got {type(value).__name__}")


def convert_graph(value: Any) -> int | str:
    """Option converter for ``graph``: a graph index (int ≥ 0) or a non-empty graph name."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "" or (
            isinstance(value, int) and value < 0):
        raise ValueError("expected a graph name (str) or a graph index (int >= 0)")
    return value


def _convert_companion(value: Any):
    return companion_option(value)


_float_precision = convert_choice("fp16", "fp32")


def _convert_precision(value: Any) -> str:
    """'fp16' or 'fp32'; an 8-bit word ('int8', 'w8a8', …) gets the way to a quantized model."""
    try:
        return _float_precision(value)
    except ValueError:
        text = str(value).strip().lower()
        if not text.startswith(("int", "uint", "w8", "w4", "a8", "a16", "qdq", "quant")):
            raise
        raise ValueError(f"expected one of: fp16, fp32. A session runs a float model at fp16 or fp32; {text!r} "
                         f"means a quantized (QDQ) model: make one with `aipc compile MODEL --precision w8a8 "
                         f"--calibration DIR` (or w8a16, 16-bit activations) and open the model it writes. See "
                         f"'Choosing a precision' (docs/precision.md).") from None


def _convert_cache_dir(value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise TypeError("expected a directory path (str or os.PathLike)")
    path = os.path.abspath(os.path.expanduser(os.fspath(value)))
    try:  # a cache others can write is refused when the option is given, before any work
        ArtifactCache(path)
    except ArtifactError as exc:
        raise ValueError(str(exc)) from None
    return path


_DOCS = {
    "target": f"Named SoC to compile for: {', '.join(TARGETS)} (aliases such as 'x-elite', '8gen3', 'sm8650' "
              f"accepted); sets soc_model/htp_arch ({_SRC}). Default without a real NPU: 'snapdragon-x-elite' (FP16 "
              f"emulation); on a device: the device itself.",
    "soc_model": "Raw QNN soc_model (int, Qnn_SocModel_t, e.g. 60 = SC8380XP). On the simulator >= 36 switches FP16 "
                 "emulation on (measured).",
    "htp_arch": "Raw Hexagon arch: 68, 69, 73, 75, 79, 81 (or 'v73'); default from the target.",
    "precision": "'fp16' (default: the HTP's float math) or 'fp32' (x86-64 simulator only, soc_model=30: an fp32 "
                 "reference, not a device mode; no fp32 kernels for Gather, LSTM, GRU, HardSigmoid, … — see "
                 "docs/backends/qnn.md; quantized models: docs/precision.md).",
    "htp_performance_mode": f"HTP power/performance mode: {', '.join(PERFORMANCE_MODES)} (ORT QNN EP docs; no "
                            f"effect in the simulator).",
    "strict": "True: any node outside the QNN EP raises PartitionError (default False: warn once).",
    "profiling": f"QNN profiling level: {', '.join(PROFILING_LEVELS)}; writes a CSV (QNN EP profiling_file_path, "
                 f"default ./onnxwrapper_qnn_profile_<model>.csv).",
    "cache_dir": "Compile-cache directory (default $ONNXWRAPPER_CACHE_DIR, else the platform user cache dir, e.g. "
                 "~/.cache/onnxwrapper).",
    "max_specializations": "Live static-shape specializations per session for dynamic models (LRU; evicted ones "
                           "stay in the disk cache). Default 8.",
    "shape_buckets": "True (default): a dynamic dim that grows from call to call (a decoder's length, a beam "
                     "search's batch) is served by compiled sizes on a ladder of powers of two, each call padded "
                     "up and its outputs cut back, where ORT's CPU certifies that padding changes no output; "
                     "False: one specialization per shape. See docs/backends/qnn.md, Shape buckets.",
    "provider_options": "Raw QNN EP options, validated before the EP sees them (qnn_context_priority, device_id, "
                        "vtcm_mb, htp_graph_finalization_optimization_mode, profiling_level, ...; see "
                        "docs/backends/qnn.md).",
    "patches": "Operator patches for nodes the QNN EP leaves on CPU: True (default: every registered patch, "
               "onnxwrapper.patches.list_patches()), False (none), or a list of patch names to disable, e.g. "
               "['einsum']. The patched model is compiled instead and the partition report lists the patches.",
    "graph": "Graph name (str) or index (int) inside a raw QNN context binary (.bin model path, or one found next "
             "to the model); default: the only graph, else the one matching the ONNX model's IO names.",
    "onnx": "ONNX model describing a raw context binary given as the model path (names, order, dtypes, metadata); "
            "default <stem>.onnx next to the .bin when present; False: use the binary's own tensor names.",
    "repairs": REPAIRS_DOC,
    "max_feed_mb": f"Largest feed (MiB, logical size: broadcast views count in full) a shape is compiled for; larger "
                   f"feeds raise BackendCapabilityError at once instead of exhausting the QNN compiler. Default "
                   f"{DEFAULT_MAX_FEED_MB}.",
    "compile_timeout": f"Wall-time budget of one QNN compile (seconds, default {DEFAULT_COMPILE_TIMEOUT_S:g}): a compile "
                       f"past it is stopped and the recovery ladder takes over (options, batch split, graph split, "
                       f"CPU); past 10 s a compile logs progress (aipc --compile-timeout).",
    "compile_budget": "Wall-time budget of all compiles of one model's recovery ladder together (seconds, default "
                      "600): past it the model runs on ORT's CPU for the rest of the run, with one line saying so "
                      "and how to precompile it; strict=True raises CompileBudgetError (aipc --compile-budget).",
    "compile_memory_mb": "Memory budget of one QNN compile (MiB of the compiler process; default half the physical "
                         "memory): past it the compile is stopped and the recovery ladder takes over "
                         "(aipc --compile-memory-mb).",
    "context_memory_mb": "MiB of compiled QNN contexts a session keeps loaded (its live shape specializations; "
                         "least recently used ones are released first). Default per target, see "
                         "docs/backends/qnn.md (2048 on the simulator).",
}

OPTIONS = {name: OptionSpec(name, _DOCS[name], default, convert) for name, default, convert in (
    ("target", None, convert_target),
    ("soc_model", None, convert_soc_model),
    ("htp_arch", None, convert_htp_arch),
    ("precision", "fp16", _convert_precision),
    ("htp_performance_mode", None, convert_choice(*PERFORMANCE_MODES)),
    ("strict", False, convert_bool),
    ("profiling", "off", convert_choice(*PROFILING_LEVELS)),
    ("cache_dir", None, _convert_cache_dir),
    ("max_specializations", 8, convert_positive_int),
    ("shape_buckets", True, convert_bool),
    ("provider_options", None, convert_provider_options),
    ("patches", True, convert_patches),
    ("graph", None, convert_graph),
    ("onnx", None, _convert_companion),
    ("repairs", None, convert_repairs),
    ("max_feed_mb", DEFAULT_MAX_FEED_MB, convert_positive_int),
    ("compile_timeout", DEFAULT_COMPILE_TIMEOUT_S, convert_seconds),
    ("compile_memory_mb", None, convert_positive_int),
    ("compile_budget", DEFAULT_TOTAL_BUDGET_S, convert_seconds),
    ("context_memory_mb", None, convert_positive_int),
)}
