"""The ``aihub`` backend's options (``backend_options``) and their converters.

Job options are AI Hub command-line-like flag strings passed verbatim by the client
(``submit_compile_job(options=…)``, ``submit_inference_job(options=…)``; qai-hub 0.56 never parses
them, the service does). The backend accepts an allowlist of flags seen in Qualcomm's own code and
documentation (``quic/ai-hub-models`` ``qai_hub_models/models/common.py``; the client's
``submit_link_job`` docstring), owns ``--target_runtime`` and ``--truncate_64bit_io`` itself, and
refuses ``--quantize_io`` (quantized IO would no longer carry the ONNX model's dtypes). Everything
else is a :class:`~onnxwrapper.errors.BackendOptionError` with the closest allowed flag.
"""

from __future__ import annotations

import os
import shlex
from typing import Any

from onnxwrapper.backends._artifact_files import name_map_option
from onnxwrapper.backends.base import OptionSpec, did_you_mean

__all__ = ["COMPILE_FLAGS", "INFERENCE_FLAGS", "OPTIONS", "RUNTIMES", "flag_tokens"]

#: compile-job flags a user may pass (each takes one value)
COMPILE_FLAGS = ("--compute_unit", "--qairt_version", "--qnn_options", "--quantize_full_type")
#: inference-job flags a user may pass (each takes one value)
INFERENCE_FLAGS = ("--compute_unit", "--qairt_version", "--qnn_options", "--max_profiler_iterations")
_OWNED = {"--target_runtime": "set it with backend_options['target_runtime']",
          "--truncate_64bit_io": "the backend adds it when the model has int64 inputs or outputs",
          "--quantize_io": "quantized IO would no longer carry the ONNX model's dtypes; quantize the ONNX model "
                           "itself (QDQ) if you want integer IO"}
#: ``--target_runtime`` values this backend runs (both are QNN graphs on the device)
RUNTIMES = ("qnn_context_binary", "qnn_dlc")


def flag_tokens(text: str, allowed: tuple) -> list[str]:
    """``"--flag value --other=v"`` → ``["--flag", "value", "--other", "v"]`` (checked).

    Raises:
        ValueError: an unknown, owned or refused flag (with the closest allowed one), a flag without
            its value, or a stray value.
    """
    tokens = shlex.split(text)
    out: list[str] = []
    i = 0
    while i < len(tokens):
        flag, eq, inline = tokens[i].partition("=")
        if not flag.startswith("--"):
            raise ValueError(f"expected a flag starting with '--', got {tokens[i]!r}")
        if flag in _OWNED:
            raise ValueError(f"{flag} is not accepted here: {_OWNED[flag]}")
        if flag not in allowed:
            raise ValueError(f"unknown flag {flag}.{did_you_mean(flag, allowed)} Allowed: {', '.join(allowed)}")
        if eq:
            value = inline
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            i += 1
            value = tokens[i]
        else:
            raise ValueError(f"flag {flag} needs a value")
        out += [flag, value]
        i += 1
    return out


def _flags(allowed: tuple):
    def convert(value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError("expected a string of flags, e.g. '--compute_unit npu'")
        return " ".join(shlex.quote(t) for t in flag_tokens(value, allowed))
    return convert


def _device(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError("expected an AI Hub device name, e.g. 'Samsung Galaxy S25' (qai-hub list-devices)")
    return value.strip()


def _seconds(minimum: float):
    def convert(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise ValueError(f"expected a number of seconds >= {minimum:g}")
        return float(value)
    return convert


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError("expected a positive integer")
    return value


def _profile(value: Any):
    if value in ("auto", True, False):
        return value
    raise ValueError("expected 'auto' (profile batched runs only), True or False")


def _cache_dir(value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise TypeError("expected a directory path (str or os.PathLike)")
    return os.path.abspath(os.path.expanduser(os.fspath(value)))


OPTIONS = {spec.name: spec for spec in (
    OptionSpec("device", "AI Hub device name exactly as `qai-hub list-devices` prints it, e.g. 'Samsung Galaxy "
                         "S25' (required)", None, _device),
    OptionSpec("target", "the same as 'device' (so that `aipc --backend aihub --target 'Samsung Galaxy S25'` "
                         "works)", None, _device),
    OptionSpec("device_os", "OS version of the device ('15'), or a range '[14,16)'; default: the newest", "", str),
    OptionSpec("target_runtime", "compile target: 'qnn_context_binary' (default) or 'qnn_dlc'",
               "qnn_context_binary", lambda v: str(v).lower(), RUNTIMES),
    OptionSpec("compile_options", f"extra compile-job flags: {', '.join(COMPILE_FLAGS)}", "", _flags(COMPILE_FLAGS)),
    OptionSpec("inference_options", f"extra inference-job flags: {', '.join(INFERENCE_FLAGS)}", "",
               _flags(INFERENCE_FLAGS)),
    OptionSpec("profile", "profile inference jobs: 'auto' (batched runs, e.g. aipc diff --replay), True, False",
               "auto", _profile),
    OptionSpec("job_timeout", "seconds one job may take from submission to its end (default 3600)", 3600.0,
               _seconds(1.0)),
    OptionSpec("max_wait", "seconds of backoff allowed for rate limits and service errors per request "
                           "(default 900)", 900.0, _seconds(0.0)),
    OptionSpec("poll_interval", "seconds between job-status requests (default 10, the client's own)", 10.0,
               _seconds(0.001)),
    OptionSpec("max_batch_bytes", "largest input dataset of one job in bytes; bigger batches are split "
                                  "(default 256 MiB)", 256 * 1024 ** 2, _positive_int),
    OptionSpec("cache_dir", "compile-cache directory (default $ONNXWRAPPER_CACHE_DIR, else the user cache dir)",
               None, _cache_dir),
    OptionSpec("name_map", "{ONNX tensor name: compiled tensor name} when AI Hub renames tensors", None,
               name_map_option),
)}
