"""The backend sessions the façade attaches to: ``QnnStaticSession`` and :class:`QnnDynamicSession`
(with their run plans), :class:`QnnCpuSession` for a model the QNN EP takes no node of, the session
the user holds (its options), the memory budget of the contexts a dynamic session keeps loaded,
the graph assignment ORT reports, and the partition verdict (:func:`check_partition`: ``strict``
raises, else a warning once per model).
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.session._assignment import ASSIGNMENT_KEY, records_assignment
from onnxwrapper.backends.qnn.session._buckets import BucketRouter
from onnxwrapper.backends.qnn.session._context_budget import context_budget_mb
from onnxwrapper.backends.qnn.session._no_node import (RECIPE_CPU_REASON, CpuSessionAhead, QnnCpuSession,
                                                      compile_or_verdict,
                                                      model_verdict,
                                                      no_node_policy, remember_verdict)
from onnxwrapper.backends.qnn.session._partition_check import check_partition
from onnxwrapper.backends.qnn.session._session import ArtifactInfo, QnnDynamicSession, nonfinite_check
from onnxwrapper.backends.qnn.session._user_session import (BAKED_IN, static_session, user_facing_options,
                                                            user_session_options)

__all__ = [
    "ASSIGNMENT_KEY",
    "ArtifactInfo",
    "BAKED_IN",
    "BucketRouter",
    "CpuSessionAhead",
    "QnnCpuSession",
    "QnnDynamicSession",
    "RECIPE_CPU_REASON",
    "check_partition",
    "compile_or_verdict",
    "context_budget_mb",
    "model_verdict",
    "no_node_policy",
    "nonfinite_check",
    "records_assignment",
    "remember_verdict",
    "static_session",
    "user_facing_options",
    "user_session_options",
]
