"""The patch registry: an explicit table of patch classes, loaded on first use.

Naming rule: the registry name of a patch is its module name without the leading underscore
(``mod`` → ``onnxwrapper.patches._mod``); the class lives in that module. The table is explicit
(no module scanning) and is instantiated lazily, so ``import onnxwrapper.patches`` costs nothing.
"""

from __future__ import annotations

import copy
import importlib
import os
import re
import threading
from dataclasses import dataclass
from typing import Callable, Collection, Iterable, Union

import onnx

from onnxwrapper.patches._base import GraphView, Patch, PatchError, PatchRecord

__all__ = ["PatchMatch", "list_patches", "get_patch", "find_patches", "apply_patches", "patch_offloaded",
           "load_model_proto", "name_unnamed_nodes"]

#: registry name -> (module, class name); order = order of evaluation for a node. The first three
#: are automatic (operator support); the others are applied by name only (accuracy repairs).
_TABLE: tuple[tuple[str, str, str], ...] = (
    ("mod", "onnxwrapper.patches._mod", "ModToArithmetic"),
    ("einsum", "onnxwrapper.patches._einsum", "EinsumToMatMul"),
    ("maxpool3d", "onnxwrapper.patches._maxpool3d", "MaxPool3dTo2d"),
    ("pow_square", "onnxwrapper.patches._pow_square", "PowSquareToMul"),
    ("dilated_conv", "onnxwrapper.patches._dilated_conv", "DilatedConvToDense"),
    ("conv_taps", "onnxwrapper.patches._conv_taps", "ConvToTaps"),
    ("softmax_stable", "onnxwrapper.patches._softmax_stable", "NaiveSoftmaxToStable"),
    ("rescale", "onnxwrapper.patches._rescale", "PowerOfTwoRescale"),
    ("clamp_fp16", "onnxwrapper.patches._clamp_fp16", "ClampFp16"),
)
_loaded: dict[str, Patch] | None = None
_lock = threading.Lock()

ModelLike = Union[onnx.ModelProto, bytes, str, "os.PathLike[str]"]
NodeFilter = Union[Collection[str], Callable[[onnx.NodeProto], bool], None]


def _patches() -> dict[str, Patch]:
    global _loaded
    with _lock:
        if _loaded is None:
            table = {}
            for name, module, cls_name in _TABLE:
                cls = getattr(importlib.import_module(module), cls_name)
                if cls.name != name:  # a broken table is a bug, not a user error
                    raise RuntimeError(f"patch class {module}.{cls_name} declares name {cls.name!r}, "
                                       f"registered as {name!r}")
                table[name] = cls()
            _loaded = table
        return _loaded


def list_patches(*, automatic: bool | None = None) -> list[Patch]:
    """Every registered patch, in evaluation order.

    Args:
        automatic: ``True``: only the patches backends apply on their own to nodes they leave off
            their EP (operator support: mod, einsum, maxpool3d); ``False``: only those applied by
            name (accuracy repairs: pow_square, dilated_conv, conv_taps, softmax_stable, rescale, clamp_fp16); ``None``: all.
    """
    return [p for p in _patches().values() if automatic is None or p.automatic == automatic]


def get_patch(name: str) -> Patch:
    """The patch registered as ``name`` (case-insensitive).

    Raises:
        PatchError: no such patch; the message lists the registered names.
    """
    table = _patches()
    patch = table.get(name.lower())
    if patch is None:
        raise PatchError(f"No patch named '{name}'. Registered patches: {', '.join(table)}.", patch=name)
    return patch


@dataclass(frozen=True)
class PatchMatch:
    """A node of the model that a registered patch targets.

    Attributes:
        node_index: position in ``graph.node``. node_name: its name ('' if unnamed). op_type.
        patch: registry name of the patch.
        applicable: True when the patch can rewrite this node as it is.
        reason: why not, when ``applicable`` is False ('' otherwise).
    """

    node_index: int
    node_name: str
    op_type: str
    patch: str
    applicable: bool
    reason: str = ""

    def to_dict(self) -> dict:
        """A JSON-safe dict of the match (``aipc inspect --json``)."""
        return {"node_index": self.node_index, "node_name": self.node_name, "op_type": self.op_type,
                "patch": self.patch, "applicable": self.applicable, "reason": self.reason}


def load_model_proto(model: ModelLike) -> onnx.ModelProto:
    """An in-memory ``ModelProto`` for ``model`` (a ModelProto is deep-copied; bytes parsed; a path
    loaded with its external data). Never writes anything.

    Raises:
        TypeError: unsupported type. FileNotFoundError: missing path.
        onnx.onnx_cpp2py_export.checker.ValidationError / google.protobuf.message.DecodeError: bad bytes.
    """
    if isinstance(model, onnx.ModelProto):
        return copy.deepcopy(model)
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_model_from_string(bytes(model))
    if isinstance(model, (str, os.PathLike)):
        return onnx.load(os.fspath(model))
    raise TypeError(f"model must be an onnx.ModelProto, bytes or a path, got {type(model).__name__}")


def _selector(only_for: NodeFilter) -> Callable[[onnx.NodeProto], bool]:
    if only_for is None:
        return lambda node: True
    if callable(only_for):
        return only_for
    names = set(only_for)
    return lambda node: node.name in names


def _wanted(names: Iterable[str] | None) -> list[Patch]:
    if names is None:
        return list_patches(automatic=True)
    return [get_patch(n) for n in names]


def find_patches(model: ModelLike | GraphView, *, names: Iterable[str] | None = None,
                 only_for: NodeFilter = None) -> list[PatchMatch]:
    """Every top-level node some registered patch targets, with whether it applies and why not.

    Args:
        model: the model (not modified).
        names: restrict to these patch names. Defaults to the automatic ones
            (``list_patches(automatic=True)``).
        only_for: node names, or a predicate on ``NodeProto``; other nodes are skipped.

    Returns:
        One :class:`PatchMatch` per (node, patch targeting it — :meth:`Patch.targets`), in graph
        order; ``applicable`` tells whether the rewrite is possible and ``reason`` why not.
    """
    view = model if isinstance(model, GraphView) else GraphView(
        model if isinstance(model, onnx.ModelProto) else load_model_proto(model))
    patches = _wanted(names)
    keep = _selector(only_for)
    found: list[PatchMatch] = []
    for i, node in enumerate(view.graph.node):
        if not keep(node):
            continue
        for patch in patches:
            if not patch.targets(node):
                continue
            reason = patch.reject_reason(node, view)
            found.append(PatchMatch(i, node.name, node.op_type, patch.name, reason is None, reason or ""))
    return found


def apply_patches(model: ModelLike, *, only_for: NodeFilter = None, names: Iterable[str] | None = None,
                  disabled: Iterable[str] = ()) -> tuple[onnx.ModelProto, list[PatchRecord]]:
    """Apply every applicable registered patch to a copy of ``model``, in memory.

    This is the hook backends call: e.g. the QNN backend passes the names of the nodes that its
    partition put on the CPU EP as ``only_for``, then builds its session from the returned model.

    Args:
        model: ``onnx.ModelProto`` (deep-copied, never modified), serialized bytes, or a path
            (read with its external data; nothing is written).
        only_for: restrict rewrites to these node names, or to nodes for which the predicate is
            True. Defaults to every node.
        names: patch names to use. Defaults to the automatic patches (``list_patches(automatic=True)``);
            repair rewrites (``automatic=False``) apply only when named here or by a recipe.
        disabled: patch names to skip (e.g. from a ``patches=`` backend option).

    Returns:
        ``(patched_model, records)``; ``records`` is empty (and the model an unchanged copy)
        when nothing applied. Each node is rewritten by at most one patch; nodes inserted by a
        patch are not revisited.

    Raises:
        PatchError: an unknown name in ``names``/``disabled``.
    """
    proto = load_model_proto(model)
    for n in disabled:
        get_patch(n)
    skip = {n.lower() for n in disabled}
    patches = [p for p in _wanted(names) if p.name not in skip]
    keep = _selector(only_for)
    view = GraphView(proto)
    records: list[PatchRecord] = []
    originals = [n for n in view.graph.node if keep(n)]
    for node in originals:
        for patch in patches:
            if patch.targets(node) and patch.matches(node, view):
                records.append(patch.apply(view, node))
                break
    return proto, records


def patch_offloaded(model: ModelLike, offloaded: Iterable, *, disabled: Iterable[str] = ()
                    ) -> tuple[onnx.ModelProto, list[PatchRecord]]:
    """Patch the nodes a backend's partition left off its EP — the hook for backends.

    Args:
        model: the model that was compiled (not modified).
        offloaded: the partition's off-target nodes, as ``(name, op_type)`` pairs (e.g.
            ``PartitionReport.cpu_nodes``) or objects with ``name``/``op_type`` (``NodeAssignment``).
            ORT's layout-transform suffixes (``_token_<n>``) are stripped from names; an unnamed
            node (ORT reports ``''``) matches every unnamed node of that op type.
        disabled: patch names not to use.

    Returns:
        ``(patched_model, records)`` as :func:`apply_patches`; ``records == []`` means nothing
        could be patched (recompiling would not change the partition).
    """
    names: set[str] = set()
    unnamed_ops: set[str] = set()
    for item in offloaded:
        name, op_type = (item.name, item.op_type) if hasattr(item, "op_type") else (item[0], item[1])
        name = re.sub(r"(_token_\d+)+$", "", name or "")
        if name:
            names.add(name)
        else:
            unnamed_ops.add(op_type)

    def wanted(node: onnx.NodeProto) -> bool:
        return node.name in names if node.name else node.op_type in unnamed_ops

    return apply_patches(model, only_for=wanted, disabled=disabled)


def name_unnamed_nodes(model: onnx.ModelProto) -> int:
    """Give every unnamed top-level node a unique, deterministic name ``<op_type>_<index>`` in place.

    Partition reports identify nodes by name; unnamed nodes (common in exported models) would be
    indistinguishable. Returns the number of nodes named.
    """
    view = GraphView(model)
    count = 0
    for i, node in enumerate(model.graph.node):
        if not node.name:
            node.name = view.unique_name(f"{node.op_type}_{i}")
            count += 1
    return count
