"""The recovery ladder: what the backend does when the HTP compiler fails on a graph or runs past
its budget, instead of crashing the app: other options, a batch run as several smaller batches
(when the graph is proven to keep samples apart), the graph compiled as several contexts, and
the CPU for the parts that fail even alone (:class:`RecoveringCompile`; every compile path builds
its step with :func:`recovering_step`).
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.recovery._batch_split import BatchSplitRunner
from onnxwrapper.backends.qnn.recovery._recovery import RecoveringCompile, batch_split_of, recovering_step

__all__ = [
    "BatchSplitRunner",
    "RecoveringCompile",
    "batch_split_of",
    "recovering_step",
]
