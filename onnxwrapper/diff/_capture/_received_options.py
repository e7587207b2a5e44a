"""Backend options read back from a diff folder (or a tensor file's metadata): an allow-list.

A diff folder records each run's backend options (``diff.json``: ``runs.<label>.options``), and
``aipc fix`` / ``aipc diff --check DIR --localize`` replay the runs with them. Options are not all
numbers: some are paths and libraries — ``cache_dir`` (a cache where the folder says),
``provider_options.profiling_file_path`` (the QNN EP appends CSV rows to any file you can write),
``artifact``, ``sdk_root``, ``repairs``, ``onnx``, ``backend_path`` — and some are limits. A folder
from elsewhere chooses none of them (docs/security.md): only the settings that shape the numbers
the diff measured are taken (:data:`RECEIVED_OPTIONS`, for every backend, plus the names a backend
class lists in its ``received_options``), and of the raw QNN EP options (``provider_options``)
only :data:`RECEIVED_EP_OPTIONS`. Values must be JSON scalars (a string at most 200 characters),
or a list of strings (``patches``). Everything else is dropped, with a note naming it; your own
options (``aipc fix --backends …`` does not take any; ``aipc diff`` on your own command line) are
never filtered.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["RECEIVED_EP_OPTIONS", "RECEIVED_OPTIONS", "received_options"]

#: backend options a folder from elsewhere may set, whatever the backend: what decides the numbers
RECEIVED_OPTIONS = frozenset({
    "target", "soc_model", "htp_arch", "precision", "strict", "patches", "graph", "max_specializations",
    "device", "device_os", "target_runtime", "runtime", "input_mode", "output_mode", "name_map",
    "provider_options",
})
#: raw QNN EP options (``provider_options``) a folder may set: the HTP's numerics, never a path
RECEIVED_EP_OPTIONS = frozenset({
    "backend_type", "soc_model", "htp_arch", "enable_htp_fp16_precision", "vtcm_mb",
    "htp_graph_finalization_optimization_mode", "offload_graph_io_quantization", "enable_htp_spill_fill_buffer",
})
_MAX_TEXT = 200


def _plain(value: Any) -> bool:
    """A JSON scalar (short text), or a list of short texts."""
    if value is None or isinstance(value, (bool, int, float)):
        return True
    if isinstance(value, str):
        return len(value) <= _MAX_TEXT
    if isinstance(value, list):
        return len(value) <= 1000 and all(isinstance(v, str) and len(v) <= _MAX_TEXT for v in value)
    return False


def received_options(options: Mapping[str, Any], allowed: Iterable[str] = ()) -> tuple[dict, list[str]]:
    """The options of a run recorded in a file from elsewhere that may be used, and the names of
    those dropped (module docstring).

    Args:
        options: the recorded ``{option: value}`` (untrusted; any types).
        allowed: names the backend class adds (its ``received_options``).

    Returns:
        ``(kept options, dropped names)``; a dropped raw EP option is named ``provider_options.KEY``.
    """
    names = RECEIVED_OPTIONS | frozenset(allowed)
    kept, dropped = {}, []
    for key, value in dict(options or {}).items():
        if key == "provider_options" and isinstance(value, Mapping):
            raw = {k: v for k, v in value.items() if k in RECEIVED_EP_OPTIONS and _plain(v) and not isinstance(v, list)}
            dropped += [f"provider_options.{k}" for k in value if k not in raw]
            if raw:
                kept[key] = raw
        elif key == "name_map" and isinstance(value, Mapping) and all(
                isinstance(k, str) and isinstance(v, str) and len(v) <= _MAX_TEXT for k, v in value.items()):
            kept[key] = dict(value)
        elif key in names and key not in ("provider_options", "name_map") and _plain(value):
            kept[key] = value
        else:
            dropped.append(str(key))
    return kept, dropped
