"""One request to a compile worker, as plain (picklable) data: a compile, a DLC dump, or a job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = ["CompileRequest"]


@dataclass(frozen=True)
class CompileRequest:
    """One compile for a worker, as plain (picklable) data.

    Attributes:
        model: model path, or serialized model bytes (static shapes).
        out_dir: existing, empty folder the results are written to.
        ep_options: the QNN EP options (``QnnSettings.ep_options``).
        session_state: the user's session options (``_runtime.session_options_state``), or ``None``.
        original: serialized ``_compile.metadata_model`` of the original model (its metadata).
        external_data_dir: folder of the model's external data, or ``None``.
        ctx_name: file name of the EPContext model. kwargs: ORT keyword arguments.
        note: text for logs and the partition report. label: the model's name in errors.
        shapes: specialization shapes (errors, logs) or ``None``.
        provenance: record stamped into the ctx model (``_provenance.make_record``) or ``None``.
        kind: ``"epcontext"`` (:func:`~onnxwrapper.backends.qnn.compile._compile.generate_epcontext`) or
            ``"dlc"`` (:func:`~onnxwrapper.backends.qnn.compile._compile.dump_dlc`).
        budget_seconds / budget_mb: the compile budget (wall seconds, worker MiB), ``None``: unbounded.
        rung: the recovery rung this compile belongs to (progress lines), ``""`` for the first try.
        job: with ``kind == "job"``, a picklable function (a module-level one: the worker imports its
            module) the worker calls as ``job(*job_args)`` instead of a compile, budget and all —
            e.g. :func:`~onnxwrapper.backends.qnn.artifacts.first_compile_job`, whose parse of the
            model happens in the worker only.
    """

    model: str | bytes
    out_dir: str
    ep_options: Mapping[str, str]
    session_state: Mapping[str, Any] | None = None
    original: bytes = b""
    external_data_dir: str | None = None
    ctx_name: str = "model_ctx.onnx"
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""
    label: str = "the model"
    shapes: Mapping[str, Sequence[int]] | None = None
    provenance: Mapping[str, Any] | None = None
    kind: str = "epcontext"
    budget_seconds: float | None = None
    budget_mb: float | None = None
    rung: str = ""
    job: Any = None
    job_args: tuple = ()
