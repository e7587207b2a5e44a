"""Compiled artifacts next to a model, and the ONNX model that describes an artifact.

Shared by the ``qai``, ``snpe`` and ``qnn`` backends: :func:`find_artifact` (first existing file of
a naming convention, with converter-weight files refused), :func:`companion_onnx` (``det.htp.bin``
→ ``det.onnx``) and the option converters ``onnx`` (:func:`companion_option`) and ``name_map``
(:func:`name_map_option`).
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

__all__ = ["companion_onnx", "companion_option", "find_artifact", "name_map_option"]


def find_artifact(directory: str, names: Sequence[str], *, refuse_if: Mapping[str, str] | None = None):
    """First existing ``directory/name`` in ``names`` order, and the list of paths tried.

    Args:
        refuse_if: ``{candidate name: sibling name}``: skip the candidate when the sibling exists
            (e.g. ``model.bin`` next to ``model.cpp`` is a converter weight file, not a binary).
    """
    tried = []
    for name in names:
        path = os.path.join(directory, name)
        sibling = (refuse_if or {}).get(name)
        if os.path.isfile(path) and sibling and os.path.exists(os.path.join(directory, sibling)):
            tried.append(f"{path} (skipped: {sibling} next to it marks a converter weight file)")
            continue
        tried.append(path)
        if os.path.isfile(path):
            return path, tried
    return None, tried


def name_map_option(value) -> dict:
    """``backend_options["name_map"]`` converter: ``{ONNX tensor name: compiled tensor name}``."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TypeError("expected a dict {ONNX tensor name: compiled tensor name}")
    return dict(value)


def companion_option(value):
    """``backend_options["onnx"]`` converter: a path, or ``False`` for "no ONNX companion"."""
    if value is False:
        return False
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise TypeError("expected the path of an ONNX model, or False")
    return os.fspath(value)


def companion_onnx(artifact: str, suffixes: Sequence[str], option=None) -> str | None:
    """The ONNX model describing ``artifact``: ``option`` when it is a path, none when it is
    ``False``, else the file next to it (``det.htp.bin`` → ``det.onnx``; ``det.onnx.dlc`` →
    ``det.onnx``; longest matching artifact suffix first) or ``None`` if absent."""
    if option is False or option:
        return option or None
    base = os.path.basename(artifact)
    for suffix in sorted(suffixes, key=len, reverse=True):
        if base.endswith(suffix) and len(base) > len(suffix):
            stem = base[: -len(suffix)]
            name = stem if stem.endswith(".onnx") else stem + ".onnx"
            path = os.path.join(os.path.dirname(os.path.abspath(artifact)), name)
            return path if os.path.isfile(path) else None
    return None
