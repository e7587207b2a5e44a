"""The options of the ``qnn`` backend: their documentation, converters and defaults (``QnnBackend.options``).

The converters of ``patches`` and ``repairs`` import their modules when such an option is given:
the operator patches and the repair recipes (and onnx under them) are not needed to open a
session without them.
"""

from __future__ import annotations

import os
from typing import Any

from onnxwrapper.backends._artifact_files import companion_option
from onnxwrapper.backends.base import OptionSpec
from onnxwrapper.backends.qnn._budget import DEFAULT_COMPILE_TIMEOUT_S, convert_seconds
from onnxwrapper.backends.qnn._feed_limits import DEFAULT_MAX_FEED_MB
from onnxwrapper.backends.qnn._targets import (PERFORMANCE_MODES, PROFILING_LEVELS, TARGETS, convert_bool,
                                               convert_choice, convert_htp_arch, convert_positive_int,
                                               convert_provider_options, convert_soc_model, convert_target)

__all__ = ["OPTIONS", "REPAIRS_DOC", "convert_graph"]

_SRC = "QNN SDK QnnTypes.h Qnn_SocModel_t; QNN 'Supported Snapdragon devices'"
REPAIRS_DOC = ("Repair recipe written by `aipc fix` (a path), applied to the model whose sha256 it names: rewrites "
               "in memory, CPU subgraphs, precision; a recipe for another model raises RecipeMismatchError. "
               "{'file': PATH, 'required': False} leaves models without a recipe unchanged (python -m aipc "
               "--repairs). See docs/repair.md.")


def _convert_patches(value: Any):
    # imported here: onnxwrapper.patches (and onnx) only when the option is given
    from onnxwrapper.backends.qnn._patching import convert_patches

    return convert_patches(value)


def _convert_repairs(value: Any):
    # imported here: the repair recipes (and onnx) only when the option is given
    from onnxwrapper.backends.qnn._repair import convert_repairs

    return convert_repairs(value)


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
    return os.path.abspath(os.path.expanduser(os.fspath(value)))


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
    ("provider_options", None, convert_provider_options),
    ("patches", True, _convert_patches),
    ("graph", None, convert_graph),
    ("onnx", None, _convert_companion),
    ("repairs", None, _convert_repairs),
    ("max_feed_mb", DEFAULT_MAX_FEED_MB, convert_positive_int),
    ("compile_timeout", DEFAULT_COMPILE_TIMEOUT_S, convert_seconds),
    ("compile_memory_mb", None, convert_positive_int),
    ("context_memory_mb", None, convert_positive_int),
)}
