"""The one QNN compile pipeline, shared by static sessions, shape specializations and
``compile_model``: lazy ``<Output>From<Input>`` steps (:class:`EpContextFromOnnx` over a
:class:`CacheStore` or :class:`FolderStore`), operator patches for the nodes QNN left on the CPU,
repair recipes applied before compiling, and NPU/CPU parts stitched into one EPContext model.
"""

from __future__ import annotations

from onnxwrapper.backends.qnn.pipeline._pipeline import (CacheStore, Compiled, EpContextFromOnnx, FolderStore,
                                                         compile_request)
from onnxwrapper.backends.qnn.pipeline._repair import (compile_repaired, prepare_repairs, refuse_for_artifact,
                                                       repaired_step)
from onnxwrapper.backends.qnn.pipeline._stitch import (copy_epcontext, merge_reports, part_store, self_contained,
                                                       write_stitched)

__all__ = [
    "CacheStore",
    "Compiled",
    "EpContextFromOnnx",
    "FolderStore",
    "compile_repaired",
    "compile_request",
    "copy_epcontext",
    "merge_reports",
    "part_store",
    "prepare_repairs",
    "refuse_for_artifact",
    "repaired_step",
    "self_contained",
    "write_stitched",
]
