"""``get_provider_graph_assignment_info()`` of a qnn session: ORT + QNN EP's answer, for the user's nodes.

ORT + QNN EP (measured on onnxruntime 1.32.0 + onnxruntime-qnn 2.7.0, ORT's ``add_mul_add.onnx``):

* without the session config entry ``session.record_ep_graph_assignment_info=1`` on the user's
  ``SessionOptions`` it raises ``Fail`` (``… must be set to "1" to retrieve EP graph assignment
  information.``);
* with it, one ``OrtEpAssignedSubgraph`` per partition in ORT's order, listing the *model's*
  nodes after ORT's transformations: ``[QNNExecutionProvider: add_0 Add, mul_0 Mul, add_1 Add]``.

A compiled qnn session loads the EPContext model, whose own answer would be one ``EPContext``
node; the partition recorded while compiling (:class:`~onnxwrapper.kernel.PartitionReport`) is
what ORT + QNN would say, so it is returned instead, as objects with ORT's interface
(:class:`AssignedSubgraph`: ``ep_name``, ``get_nodes()`` → :class:`AssignedNode`: ``name``,
``op_type``, ``domain``).
"""

from __future__ import annotations

from typing import NamedTuple

from onnxwrapper.kernel import assignment_not_enabled_error

__all__ = ["ASSIGNMENT_KEY", "AssignedNode", "AssignedSubgraph", "assigned_subgraphs", "records_assignment",
           "require_assignment_enabled"]

#: the session config entry that makes ORT record (and answer) the graph assignment
ASSIGNMENT_KEY = "session.record_ep_graph_assignment_info"


class AssignedNode(NamedTuple):
    """One node of a subgraph, as ORT's ``OrtEpAssignedNode``: ``name``, ``op_type``, ``domain``."""

    name: str
    op_type: str
    domain: str


class AssignedSubgraph(NamedTuple):
    """One partition, as ORT's ``OrtEpAssignedSubgraph``: ``ep_name`` and ``get_nodes()``."""

    ep_name: str
    nodes: tuple[AssignedNode, ...]

    def get_nodes(self) -> list[AssignedNode]:
        """The nodes of this partition, in ORT's order."""
        return list(self.nodes)


def assigned_subgraphs(report) -> list[AssignedSubgraph]:
    """``report`` (a :class:`~onnxwrapper.kernel.PartitionReport`) as ORT's list of subgraphs."""
    groups: dict[int, list[AssignedNode]] = {index: [] for index in range(len(report.partition_eps))}
    for node in report.nodes:
        groups.setdefault(node.partition, []).append(AssignedNode(node.name, node.op_type, node.domain))
    eps = list(report.partition_eps)
    return [AssignedSubgraph(eps[index] if index < len(eps) else report.target_ep, tuple(nodes))
            for index, nodes in sorted(groups.items())]


def records_assignment(user_so) -> bool:
    """True when the user's ``SessionOptions`` set ``session.record_ep_graph_assignment_info=1``."""
    if user_so is None:
        return False
    try:
        return user_so.get_session_config_entry(ASSIGNMENT_KEY) == "1"
    except RuntimeError:  # "SessionOptions does not have configuration with key: …"
        return False


def require_assignment_enabled(user_so) -> None:
    """Raise ORT's own error (class and message) unless the user's options enable the record.

    Raises:
        onnxruntime ``Fail``: ``session.record_ep_graph_assignment_info`` is not ``"1"``.
    """
    if not records_assignment(user_so):
        error = assignment_not_enabled_error()
        if error is not None:
            raise error
