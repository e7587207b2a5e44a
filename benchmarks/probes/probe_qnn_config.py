"""Probe kinds: the process-global QNN configuration (each kind in fresh interpreters)."""

from __future__ import annotations

import numpy as np

from probe_qnn_common import DEVIATION, TYPED, REPORT, as_arrays, attempt, kind, ort_cpu, result, snippet, write
from probe_qnn_models import conv

# -- process-global QNN configuration (fresh processes) -------------------------------------------------------
CONV_PRELUDE = REPORT + """
import numpy as np, onnxruntime
from probe_qnn_common import Context, ow, ort_qnn
from probe_qnn_models import conv
ctx = Context(sys.argv[1], sys.argv[2]); path = sys.argv[3]
x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
"""
#: the input every snippet feeds (``x`` of :data:`CONV_PRELUDE`)
X = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
#: snippet lines: a plain ORT QNN session (soc_model=60) first; the onnxwrapper fp32 run that is reported
RAW_SOC60_FIRST = "ort_qnn(conv())\n"
REPORT_FP32 = 'report(lambda: ow(path, ctx, options={"precision": "fp32"}).run(None, {"X": x}))'


def _conv_model(ctx):
    return write(ctx, "big.onnx", conv(1, (8, 8), seed=3, scale=8.0))


def _run(ctx, cache, path, body: str):
    """What ``body`` (after :data:`CONV_PRELUDE`) reports in a fresh interpreter, arrays as float32."""
    return as_arrays(snippet(CONV_PRELUDE + body, ctx.work, cache, path))


def _fp32_result(k, path, got):
    """``got`` judged against ORT CPU's FP32 result for :data:`X`."""
    return result(k, attempt(lambda: ort_cpu(path).run(None, {"X": X})), got, tol=1e-5)


@kind(
    "cfg.raw_soc60_then_fp32",
    "plain ORT QNN session (soc_model=60) first, then onnxwrapper precision='fp32'",
    isolate=True,
)
def _raw_then_fp32(k, ctx):
    path, cache = _conv_model(ctx), ctx.fresh_cache()
    return _fp32_result(k, path, _run(ctx, cache, path, RAW_SOC60_FIRST + REPORT_FP32))


@kind("cfg.poisoned_cache", "fresh process asks fp32 after the cache was filled by the case above", isolate=True)
def _poisoned(k, ctx):
    path, cache = _conv_model(ctx), ctx.fresh_cache()
    _run(ctx, cache, path, RAW_SOC60_FIRST + REPORT_FP32)
    return _fp32_result(k, path, _run(ctx, cache, path, REPORT_FP32))


@kind("cfg.failed_session_pins", "a session that fails (missing external data), then precision='fp32'", isolate=True)
def _failed_pins(k, ctx):
    path, cache = _conv_model(ctx), ctx.fresh_cache()
    got = _run(ctx, cache, path, """
import onnx, os
bad = os.path.join(ctx.work, "ext_missing.onnx")
onnx.save(onnx.load(path), bad, save_as_external_data=True, location="ext_missing.data", size_threshold=0)
os.remove(os.path.join(ctx.work, "ext_missing.data"))
try:
    ow(bad, ctx)
except Exception:
    pass
""" + REPORT_FP32)
    r = _fp32_result(k, path, got)
    if r["verdict"] == TYPED and "Conflict" in got.etype:
        r["verdict"], r["reason"] = (
            DEVIATION,
            "false BackendConfigConflictError: the failed session pinned its configuration",
        )
    return r


@kind("cfg.two_targets", "two qnn sessions with different targets in one process", isolate=True)
def _two_targets(k, ctx):
    path, cache = _conv_model(ctx), ctx.fresh_cache()
    got = _run(ctx, cache, path, """
ow(path, ctx).run(None, {"X": x})
report(lambda: ow(path, ctx, options={"target": "8gen3"}).run(None, {"X": x}))""")
    ref = _run(ctx, cache, path, """
report(lambda: ort_qnn(path, {"backend_type": "htp", "soc_model": "57", "htp_arch": "75"}).run(None, {"X": x}))""")
    return result(k, ref, got, tol=1e-6)


@kind("cfg.fp16_then_fp32", "precision fp16 then fp32 in one process", isolate=True)
def _fp16_fp32(k, ctx):
    path, cache = _conv_model(ctx), ctx.fresh_cache()
    return _fp32_result(k, path, _run(ctx, cache, path, 'ow(path, ctx).run(None, {"X": x})\n' + REPORT_FP32))


@kind(
    "cfg.ow_then_user_raw",
    "onnxwrapper session, then the user's own plain-ORT QNN session without soc_model",
    isolate=True,
)
def _ow_then_raw(k, ctx):
    path, cache = _conv_model(ctx), ctx.fresh_cache()
    raw_run = 'report(lambda: ort_qnn(path, {"backend_type": "htp"}).run(None, {"X": x}))'
    got = _run(ctx, cache, path, 'ow(path, ctx).run(None, {"X": x})\n' + raw_run)
    ref = _run(ctx, cache, path, RAW_SOC60_FIRST + raw_run)
    r = result(k, ref, got, tol=1e-6)
    r["reason"] += " (ref: plain ORT soc_model=60 session first: the sticky soc_model is ORT/QNN behaviour)"
    return r
