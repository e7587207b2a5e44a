"""Probe kinds: backend options, SessionOptions and session-API behaviour (``close()``, metadata)."""

from __future__ import annotations

import os

import numpy as np

from probe_qnn_common import DEVIATION, SAME, TYPED, attempt, kind, ort_cpu, ort_qnn, ow, result
from probe_qnn_models import conv, gather_embedding, mul

X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


# -- options and session options ------------------------------------------------------------------------
def _opt_kind(
    kind_id,
    title,
    args=(),
    kwargs=None,
    ow_options=None,
    ort_kwargs=None,
    ref="cpu",
    feed=True,
    isolate=False,
    **judge_kw,
):
    @kind(kind_id, title, isolate=isolate)
    def probe(k, ctx):
        a = [v(ctx) if callable(v) else v for v in args]
        run = (lambda s: s.run(None, {"X": X})) if feed else (lambda s: s.get_providers())
        ref_make = ort_cpu if ref == "cpu" else ort_qnn
        r = attempt(lambda: run(ref_make(conv(), *a, **(ort_kwargs if ort_kwargs is not None else kwargs or {}))))
        g = attempt(lambda: run(ow(conv(), ctx, *a, options=ow_options, **(kwargs or {}))))
        return result(k, r, g, **judge_kw)

    return probe


def _so(**attrs):
    def make(ctx):
        import onnxruntime

        so = onnxruntime.SessionOptions()
        for name, value in attrs.items():
            if name == "config":
                for key, v in value.items():
                    so.add_session_config_entry(key, v)
            elif name == "dim_override":
                so.add_free_dimension_override_by_name(*value)
            else:
                setattr(so, name, value(ctx) if callable(value) else value)
        return so

    return make


_opt_kind("opt.sess_options_str", "sess_options='abc'", args=("abc",))
_opt_kind("opt.sess_options_dict", "sess_options={} (dict)", args=({},))
_opt_kind("opt.unknown_backend_option", "backend_options with a typo (soc_modle)", ow_options={"soc_modle": 60})
_opt_kind("opt.bad_soc_model", "backend_options soc_model=-1", ow_options={"soc_model": -1})
_opt_kind(
    "opt.bad_raw_priority",
    "raw QNN option qnn_context_priority='urgent' (ORT: silently all on CPU)",
    ow_options={"provider_options": {"qnn_context_priority": "urgent"}},
)
_opt_kind(
    "opt.target_8gen3", "target='8gen3' (other FP16 target; ref: ORT CPU)", ow_options={"target": "8gen3"}, isolate=True
)
_opt_kind(
    "opt.disable_all",
    "graph_optimization_level=ORT_DISABLE_ALL",
    args=(_so(graph_optimization_level=__import__("onnxruntime").GraphOptimizationLevel.ORT_DISABLE_ALL),),
)
_opt_kind(
    "opt.threads",
    "intra_op_num_threads=1, inter_op_num_threads=1",
    args=(_so(intra_op_num_threads=1, inter_op_num_threads=1),),
)
_opt_kind("opt.log_warning", "log_severity_level=2 (warnings on)", args=(_so(log_severity_level=2),))


@kind("opt.optimized_model_filepath", "optimized_model_filepath set (ref: ORT + QNN EP)")
def _optimized_path(k, ctx):
    import onnxruntime

    from probe_qnn_common import FP16_EP, qnn_devices

    def make(which):
        so = onnxruntime.SessionOptions()
        so.optimized_model_filepath = os.path.join(ctx.work, f"opt_{which}_{os.getpid()}.onnx")
        if which == "ort":
            so.add_provider_for_devices(qnn_devices(), dict(FP16_EP))
            return onnxruntime.InferenceSession(conv(), so, enable_fallback=0)
        return ow(conv(), ctx, so)

    return result(k, attempt(lambda: make("ort").run(None, {"X": X})), attempt(lambda: make("ow").run(None, {"X": X})))


_opt_kind("opt.enable_fallback0", "enable_fallback=0 kwarg", kwargs={"enable_fallback": 0})
_opt_kind(
    "opt.disabled_optimizers",
    "disabled_optimizers=['ConstantFolding'] kwarg",
    kwargs={"disabled_optimizers": ["ConstantFolding"]},
)


@kind("opt.dim_override", "add_free_dimension_override_by_name('N', 1) on a dynamic model: get_inputs()")
def _dim_override(k, ctx):
    so = _so(dim_override=("N", 1))(ctx)
    data = conv("N", (8, 8))
    return result(
        k,
        attempt(lambda: [i.shape for i in ort_cpu(data, so).get_inputs()]),
        attempt(lambda: [i.shape for i in ow(data, ctx, so).get_inputs()]),
    )


@kind("opt.fp32_gather", "precision='fp32' on a model with a Gather (ref: ORT CPU, the fp32 reference)", isolate=True)
def _fp32(k, ctx):
    feed = {"ids": np.array([[1, 2, 3, 7]])}
    return result(
        k,
        attempt(lambda: ort_cpu(gather_embedding()).run(None, feed)),
        attempt(lambda: ow(gather_embedding(), ctx, options={"precision": "fp32"}).run(None, feed)),
    )


# -- session API ------------------------------------------------------------------------------------------
def _api_kind(kind_id, title, fn, model_fn=lambda: conv()):
    @kind(kind_id, title)
    def probe(k, ctx):
        data = model_fn()
        return result(k, attempt(lambda: fn(ort_cpu(data))), attempt(lambda: fn(ow(data, ctx))))

    return probe


def _meta(s):
    m = s.get_modelmeta()
    return (m.producer_name, m.graph_name, m.domain, m.description, m.version, m.custom_metadata_map)


_api_kind(
    "api.get_inputs",
    "get_inputs()/get_outputs() names, shapes, types",
    lambda s: [(i.name, i.shape, i.type) for i in s.get_inputs() + s.get_outputs()],
)
_api_kind(
    "api.dyn_get_inputs",
    "get_inputs() of a dynamic model",
    lambda s: [(i.name, i.shape, i.type) for i in s.get_inputs()],
    lambda: conv("N", ("H", "W")),
)
_api_kind("api.modelmeta", "get_modelmeta()", _meta)
_api_kind(
    "api.overridable", "get_overridable_initializers()", lambda s: [i.name for i in s.get_overridable_initializers()]
)
_api_kind(
    "api.set_providers_cpu",
    "set_providers(['CPUExecutionProvider'])",
    lambda s: s.set_providers(["CPUExecutionProvider"]),
)
_api_kind("api.end_profiling", "end_profiling() without profiling", lambda s: s.end_profiling())


@kind("api.close_then_run", "close() then run() (ORT has no close())")
def _close_run(k, ctx):
    s = ow(conv(), ctx)
    s.run(None, {"X": X})
    got = attempt(lambda: (s.close(), s.run(None, {"X": X}))[1])
    ref = attempt(lambda: ort_cpu(conv()).close())
    verdict = TYPED if got.typed else DEVIATION
    return result(k, ref, got, verdict, f"after close(): {got.brief()[:100]}")


@kind("api.close_then_run_dyn", "close() then run() on a dynamic model")
def _close_run_dyn(k, ctx):
    s = ow(conv("N", ("H", "W")), ctx)
    s.run(None, {"X": X})
    got = attempt(lambda: (s.close(), s.run(None, {"X": X}))[1])
    verdict = TYPED if got.typed else DEVIATION
    return result(k, attempt(lambda: ort_cpu(conv()).close()), got, verdict, f"after close(): {got.brief()[:100]}")


@kind("api.close_twice", "close() twice")
def _close_twice(k, ctx):
    s = ow(conv(), ctx)
    got = attempt(lambda: (s.close(), s.close()))
    return result(
        k,
        attempt(lambda: ort_cpu(conv()).close()),
        got,
        SAME if got.ok else DEVIATION,
        "idempotent" if got.ok else got.brief(),
    )


@kind("api.mul_values", "mul_1: exact small-integer results (ORT's own test)")
def _mul_values(k, ctx):
    x = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    return result(
        k, attempt(lambda: ort_cpu(mul()).run(None, {"X": x})), attempt(lambda: ow(mul(), ctx).run(None, {"X": x}))
    )
