"""Shared machinery of the operator patches: the :class:`Patch` base, :class:`PatchRecord`,
:class:`GraphView` (shape/dtype lookup and unique naming over one in-memory model) and
:class:`PatchError`.

A patch rewrites one node of the *top-level* graph of an in-memory ``onnx.ModelProto`` into an
equivalent composition of operators that more backends accept. Nodes inside subgraphs (``If``,
``Loop``, ``Scan`` bodies) are never visited. Patches never read or write files.

Shapes and element types come from ``onnx.shape_inference.infer_shapes`` (non-strict) run once on a
copy of the model when a :class:`GraphView` first needs them; a patch that needs a static dimension
and finds a symbolic one refuses with a reason instead of guessing.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxwrapper.errors import OnnxwrapperError

__all__ = ["PatchError", "PatchRecord", "Patch", "GraphView", "as_view", "constant_value", "constant_input"]


class PatchError(OnnxwrapperError, ValueError):
    """A patch cannot be applied to a node (or no patch of that name exists).

    Attributes:
        patch: registry name of the patch involved, or ``None``.
        node_name: name of the node involved ('' for unnamed nodes), or ``None``.
    """

    def __init__(self, message: str, *, patch: str | None = None, node_name: str | None = None) -> None:
        super().__init__(message)
        self.patch = patch
        self.node_name = node_name


@dataclass(frozen=True)
class PatchRecord:
    """What one patch application changed.

    Attributes:
        patch: registry name of the patch (``"mod"``, ``"einsum"``, ``"maxpool3d"``).
        node_name: name of the replaced node ('' when it had none).
        op_type: op type of the replaced node.
        node_index: position of the replaced node in ``graph.node`` before the rewrite.
        summary: one human-readable line, e.g. ``"Mod(fmod=1, float) -> Div, Abs, Floor, ..."``.
        added_nodes: ``(name, op_type)`` of every inserted node, in graph order.
        added_initializers: names of the inserted initializers (shape constants, axes).
        outputs: the output tensor names, unchanged by the rewrite.
    """

    patch: str
    node_name: str
    op_type: str
    node_index: int
    summary: str
    added_nodes: tuple[tuple[str, str], ...] = ()
    added_initializers: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every field."""
        return {"patch": self.patch, "node_name": self.node_name, "op_type": self.op_type,
                "node_index": self.node_index, "summary": self.summary,
                "added_nodes": [list(n) for n in self.added_nodes],
                "added_initializers": list(self.added_initializers), "outputs": list(self.outputs)}


class GraphView:
    """Lookup helpers over one ``onnx.ModelProto`` that patches mutate in place.

    Args:
        model: the model to inspect and rewrite (not copied).

    Shape inference runs lazily, once, on a copy; results stay valid for the original tensors
    because every patch preserves the names, types and shapes of the tensors it touches.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        if not isinstance(model, onnx.ModelProto):
            raise TypeError(f"expected onnx.ModelProto, got {type(model).__name__}")
        self.model = model
        self._types: dict[str, onnx.TypeProto] | None = None
        self._used: set[str] | None = None

    # -- facts ---------------------------------------------------------------------------------
    @property
    def graph(self) -> onnx.GraphProto:
        """The model's top-level graph."""
        return self.model.graph

    @property
    def opset(self) -> int:
        """The default-domain (``ai.onnx``) opset version imported by the model."""
        for imp in self.model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                return int(imp.version)
        return 1

    def _type_table(self) -> dict[str, onnx.TypeProto]:
        if self._types is None:
            try:
                inferred = onnx.shape_inference.infer_shapes(self.model, strict_mode=False)
            except Exception:  # noqa: BLE001 - inference is best effort; declared types still count
                inferred = self.model
            table: dict[str, onnx.TypeProto] = {}
            g = inferred.graph
            for vi in list(g.input) + list(g.value_info) + list(g.output):
                table.setdefault(vi.name, vi.type)
            for init in self.model.graph.initializer:
                t = onnx.TypeProto()
                t.tensor_type.elem_type = init.data_type
                for d in init.dims:
                    t.tensor_type.shape.dim.add().dim_value = d
                table[init.name] = t
            self._types = table
        return self._types

    def elem_type(self, name: str) -> int | None:
        """ONNX element type (``onnx.TensorProto.FLOAT`` …) of tensor ``name``, or ``None`` if unknown."""
        t = self._type_table().get(name)
        if t is None or not t.HasField("tensor_type") or t.tensor_type.elem_type == 0:
            return None
        return int(t.tensor_type.elem_type)

    def shape(self, name: str) -> list[int | str | None] | None:
        """Shape of tensor ``name``: ints for fixed dims, ``str`` for dim_params, ``None`` for
        unknown dims; ``None`` when even the rank is unknown."""
        t = self._type_table().get(name)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        dims: list[int | str | None] = []
        for d in t.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value >= 0:
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append(None)
        return dims

    def initializer(self, name: str) -> np.ndarray | None:
        """The value of initializer ``name`` as a numpy array, or ``None``."""
        for init in self.graph.initializer:
            if init.name == name:
                return numpy_helper.to_array(init)
        return None

    def consumers(self, tensor: str) -> list[onnx.NodeProto]:
        """Top-level nodes reading ``tensor``."""
        return [n for n in self.graph.node if tensor in n.input]

    def is_graph_output(self, tensor: str) -> bool:
        """True when ``tensor`` is an output of the top-level graph."""
        return any(o.name == tensor for o in self.graph.output)

    # -- edits ---------------------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        """A node/tensor name not used anywhere in the top-level graph yet, derived from ``base``
        (deterministic: ``base``, ``base_1``, ``base_2`` …); it is reserved once returned."""
        if self._used is None:
            used: set[str] = set()
            g = self.graph
            for n in g.node:
                used.add(n.name)
                used.update(n.input)
                used.update(n.output)
            used.update(i.name for i in g.initializer)
            used.update(i.name for i in g.input)
            used.update(o.name for o in g.output)
            used.update(v.name for v in g.value_info)
            self._used = used
        name, k = base, 0
        while name in self._used:
            k += 1
            name = f"{base}_{k}"
        self._used.add(name)
        return name

    def add_initializer(self, base: str, value: np.ndarray) -> str:
        """Add ``value`` as an initializer under a unique name derived from ``base``; return the name."""
        name = self.unique_name(base)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node_index(self, node: onnx.NodeProto) -> int:
        """Index of ``node`` in ``graph.node`` (matched by its first output, unique in valid ONNX).

        Raises:
            PatchError: the node is not in the top-level graph.
        """
        key = (node.op_type, tuple(node.output))
        for i, n in enumerate(self.graph.node):
            if n.op_type == key[0] and tuple(n.output) == key[1]:
                return i
        raise PatchError(f"Node '{node.name}' ({node.op_type}) is not in the model's top-level graph.",
                         node_name=node.name)

    def replace_node(self, index: int, new_nodes: Sequence[onnx.NodeProto]) -> None:
        """Replace ``graph.node[index]`` with ``new_nodes`` at the same position (keeps topological order)."""
        nodes = list(self.graph.node)
        nodes[index:index + 1] = list(new_nodes)
        self.graph.ClearField("node")
        self.graph.node.extend(nodes)


def as_view(model: onnx.ModelProto | GraphView) -> GraphView:
    """``model`` itself when it is a :class:`GraphView`, else a new view over it."""
    return model if isinstance(model, GraphView) else GraphView(model)


@dataclass
class NodeBuilder:
    """Accumulates the replacement nodes of one patch application with derived, unique names.

    Args:
        view: the graph being rewritten.
        prefix: base of every new node and tensor name (usually the replaced node's name).
    """

    view: GraphView
    prefix: str
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[str] = field(default_factory=list)

    def tensor(self, hint: str) -> str:
        """A fresh intermediate tensor name."""
        return self.view.unique_name(f"{self.prefix}/{hint}")

    def const(self, hint: str, value: Any, dtype: Any) -> str:
        """Add an initializer holding ``np.asarray(value, dtype)``; return its name."""
        name = self.view.add_initializer(f"{self.prefix}/{hint}", np.asarray(value, dtype=dtype))
        self.initializers.append(name)
        return name

    def op(self, op_type: str, inputs: Iterable[str], *, output: str | None = None, hint: str | None = None,
           **attrs: Any) -> str:
        """Append ``op_type(inputs) -> output`` (fresh output name unless given); return the output name."""
        hint = hint or op_type.lower()
        out = output if output is not None else self.tensor(hint)
        name = self.view.unique_name(f"{self.prefix}/{hint}")
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def record(self, patch: str, node: onnx.NodeProto, index: int, summary: str) -> PatchRecord:
        """Put the accumulated nodes in place of ``graph.node[index]`` and describe the change."""
        self.view.replace_node(index, self.nodes)
        return PatchRecord(patch=patch, node_name=node.name, op_type=node.op_type, node_index=index,
                           summary=summary, added_nodes=tuple((n.name, n.op_type) for n in self.nodes),
                           added_initializers=tuple(self.initializers), outputs=tuple(node.output))


class Patch(abc.ABC):
    """One semantics-preserving rewrite of a node type into operators more backends accept.

    Subclasses set :attr:`name`, :attr:`op_type`, :attr:`description` and implement
    :meth:`reject_reason` and :meth:`_apply`. ``matches``/``apply`` are the public contract:

    * ``matches(node, model) -> bool``: the patch can rewrite this node exactly;
    * ``apply(model, node) -> PatchRecord``: rewrite it, **in place**, in the in-memory model.
    """

    name: ClassVar[str] = ""
    op_type: ClassVar[str] = ""
    domain: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: how close the rewrite is to the original: "bit-exact …" or the error bound (docs/repair.md)
    exactness: ClassVar[str] = ""
    #: True: backends apply it on their own to nodes they leave off their EP (operator support);
    #: False: applied only when asked by name, e.g. by a repair recipe (accuracy rewrites)
    automatic: ClassVar[bool] = True
    #: ``{parameter: one-line doc}`` accepted by :meth:`configure` (empty: no parameters)
    parameters: ClassVar[Mapping[str, str]] = {}

    def __init__(self, **params: Any) -> None:
        unknown = sorted(set(params) - set(self.parameters))
        if unknown:
            accepted = ", ".join(sorted(self.parameters)) or "none"
            raise PatchError(f"Patch '{self.name}' has no parameter(s) {', '.join(unknown)} (accepted: {accepted}).",
                             patch=self.name)
        self.params: dict[str, Any] = dict(params)

    def configure(self, **params: Any) -> "Patch":
        """A new instance of this patch with ``params`` (see :attr:`parameters`).

        Raises:
            PatchError: an unknown parameter, or a value the patch refuses (the message says why).
        """
        return type(self)(**params)

    def matches(self, node: onnx.NodeProto, model: onnx.ModelProto | GraphView) -> bool:
        """True when :meth:`apply` would rewrite ``node`` (no reason to refuse)."""
        return self.reject_reason(node, model) is None

    def targets(self, node: onnx.NodeProto) -> bool:
        """Cheap structural test: is ``node`` the kind of node this patch is about (op type and
        domain; subclasses may add attribute checks)? Used to list candidates, e.g. in ``aipc inspect``."""
        return node.op_type == self.op_type and (node.domain or "ai.onnx") == (self.domain or "ai.onnx")

    def reject_reason(self, node: onnx.NodeProto, model: onnx.ModelProto | GraphView) -> str | None:
        """``None`` when applicable, else why not (one sentence with the fix, for users)."""
        if not self.targets(node):
            return f"patch '{self.name}' does not target {node.op_type} node '{node.name}'"
        return self._reject_reason(node, as_view(model))

    @abc.abstractmethod
    def _reject_reason(self, node: onnx.NodeProto, view: GraphView) -> str | None:
        """Op-specific checks (:meth:`targets` is already true)."""

    def apply(self, model: onnx.ModelProto | GraphView, node: onnx.NodeProto) -> PatchRecord:
        """Rewrite ``node`` of ``model`` in place and return what changed.

        Args:
            model: the in-memory model (or a :class:`GraphView` of it) holding ``node`` in its
                top-level graph. It is modified; pass a copy to keep the original.
            node: the node to replace; its output names are kept, so consumers are untouched.

        Raises:
            PatchError: the patch does not apply to this node (the reason is in the message).
        """
        view = as_view(model)
        reason = self.reject_reason(node, view)
        if reason is not None:
            raise PatchError(f"Cannot apply patch '{self.name}' to node '{node.name}' ({node.op_type}): {reason}",
                             patch=self.name, node_name=node.name)
        index = view.node_index(node)
        return self._apply(view, node, index)

    @abc.abstractmethod
    def _apply(self, view: GraphView, node: onnx.NodeProto, index: int) -> PatchRecord:
        """Build the replacement (see :class:`NodeBuilder`) and return its record."""


def attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    """The value of attribute ``name`` of ``node`` (ints, floats, strings decoded), or ``default``."""
    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


def constant_value(view: GraphView, name: str) -> np.ndarray | None:
    """The value of tensor ``name`` when it is a constant of the top-level graph: an initializer
    that is not also a graph input (a graph input may override it at run time), or the output of
    a ``Constant`` node with a ``value`` attribute; else ``None``."""
    if not name or any(i.name == name for i in view.graph.input):
        return None
    value = view.initializer(name)
    if value is not None:
        return value
    for node in view.graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] == name:
            for a in node.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
            return None
    return None


def node_label(node: onnx.NodeProto) -> str:
    """A name prefix for nodes derived from ``node``: its name, else ``<op_type>_<first output>``."""
    return node.name or f"{node.op_type}_{node.output[0]}"


def constant_input(view: GraphView, node: onnx.NodeProto, position: int,
                   role: str) -> tuple[np.ndarray | None, str | None]:
    """Input ``position`` of ``node`` as a constant (:func:`constant_value`) for a patch's check.

    Returns:
        ``(value, None)``; or ``(None, reason)``, the reject reason naming the input by its ``role``
        (e.g. ``"weight"``) when the node has no such input or it is not a constant.
    """
    if len(node.input) <= position or not node.input[position]:
        return None, f"the {node.op_type} has no {role} input"
    value = constant_value(view, node.input[position])
    if value is None:
        return None, f"the {role} is not a constant (initializer or Constant node)"
    return value, None
