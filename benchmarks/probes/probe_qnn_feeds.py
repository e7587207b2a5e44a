"""Probe kinds: bad feeds and bad models / paths / bytes."""

from __future__ import annotations

import os
import pathlib

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

from probe_qnn_common import DEVIATION, SAME, attempt, kind, ort_cpu, ort_qnn, ow, result, write
from probe_qnn_models import conv, conv_det_relu, gather_embedding, model, unary

_cache: dict = {}


def _pair(ctx, name, build, ref="cpu", **ow_kw):
    """``(reference session, onnxwrapper session)`` for model ``name`` (built once per process)."""
    key = (name, ref, tuple(sorted(ow_kw.items())))
    if key not in _cache:
        data = build()
        _cache[key] = (ort_cpu(data) if ref == "cpu" else ort_qnn(data), ow(data, ctx, **ow_kw))
    return _cache[key]


X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _feed_kind(kind_id, title, feed, *, dynamic=False, output_names=None, run_options=None, ref="cpu", method="run"):
    @kind(kind_id, title)
    def probe(k, ctx):
        r, o = _pair(
            ctx,
            "conv_dyn" if dynamic else "conv",
            lambda: conv("N" if dynamic else 1, ("H", "W") if dynamic else (8, 8)),
            ref,
        )
        f = feed() if callable(feed) else feed
        if method == "run":
            return result(
                k,
                attempt(lambda: r.run(output_names, f, run_options)),
                attempt(lambda: o.run(output_names, f, run_options)),
            )
        return result(k, attempt(lambda: method(r, f)), attempt(lambda: method(o, f)))

    return probe


for _dyn in (False, True):
    _p, _t = ("dyn_", " (dynamic model)") if _dyn else ("", "")
    _feed_kind(f"feed.{_p}ok", "valid feed" + _t, {"X": X}, dynamic=_dyn)
    _feed_kind(f"feed.{_p}float64", "float64 array for a float input" + _t, {"X": X.astype(np.float64)}, dynamic=_dyn)
    _feed_kind(f"feed.{_p}int32", "int32 array for a float input" + _t, {"X": X.astype(np.int32)}, dynamic=_dyn)
    _feed_kind(f"feed.{_p}rank", "rank 3 for a rank-4 input" + _t, {"X": X[0]}, dynamic=_dyn)
    _feed_kind(f"feed.{_p}name", "misnamed input" + _t, {"Z": X}, dynamic=_dyn)
    _feed_kind(f"feed.{_p}extra", "extra unknown input" + _t, {"X": X, "Z": X}, dynamic=_dyn)
    _feed_kind(f"feed.{_p}missing", "empty feed" + _t, {}, dynamic=_dyn)
    _feed_kind(f"feed.{_p}list", "nested Python list" + _t, lambda: {"X": X.tolist()}, dynamic=_dyn)
    _feed_kind(
        f"feed.{_p}noncontig",
        "non-contiguous (transposed) view" + _t,
        lambda: {"X": np.ascontiguousarray(X.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)},
        dynamic=_dyn,
    )
    _feed_kind(
        f"feed.{_p}broadcast",
        "stride-0 broadcast view" + _t,
        lambda: {"X": np.broadcast_to(np.float32(0.5), X.shape)},
        dynamic=_dyn,
    )
    _feed_kind(
        f"feed.{_p}ortvalue",
        "OrtValue input" + _t,
        lambda: {"X": __import__("onnxruntime").OrtValue.ortvalue_from_numpy(X)},
        dynamic=_dyn,
    )
    _feed_kind(f"feed.{_p}outname", "unknown output name" + _t, {"X": X}, dynamic=_dyn, output_names=["nope"])
_feed_kind("feed.wrong_dim", "wrong fixed dim", {"X": np.zeros((1, 3, 8, 4), np.float32)})
_feed_kind("feed.batch", "batch 2 for a fixed batch 1", {"X": np.zeros((2, 3, 8, 8), np.float32)})
_feed_kind("feed.feed_is_list", "input_feed is a list", [X])
_feed_kind("feed.py_scalar", "Python float as input", {"X": 1.5})
_feed_kind("feed.np_scalar", "numpy float32 scalar as input", {"X": np.float32(1.5)})
_feed_kind("feed.zero_d", "0-d array for a rank-4 input", {"X": np.array(1.5, np.float32)})
_feed_kind("feed.tuple", "tuple as input value", {"X": (1.0, 2.0)})
_feed_kind("feed.bad_list", "list of strings for a float input", {"X": [["a"]]})
_feed_kind("feed.fortran", "Fortran-ordered array", lambda: {"X": np.asfortranarray(X)})
_feed_kind("feed.readonly", "read-only array", lambda: {"X": _readonly(X)})
_feed_kind("feed.outnames_str", "output_names as a str", {"X": X}, output_names="Y")
_feed_kind("feed.outnames_empty", "output_names = []", {"X": X}, output_names=[])
_feed_kind("feed.runopts_dict", "run_options is a dict", {"X": X}, run_options={"a": 1})
_feed_kind(
    "feed.dyn_new_shapes",
    "dynamic model, 2nd and 3rd shapes",
    lambda: {"X": np.ones((2, 3, 4, 6), np.float32)},
    dynamic=True,
)


def _readonly(a):
    b = a.copy()
    b.setflags(write=False)
    return b


@kind("feed.dyn_size0", "dynamic dim of size 0")
def _size0(k, ctx):
    data = unary("Relu", ("N", 4))
    x = np.zeros((0, 4), np.float32)
    return result(
        k, attempt(lambda: ort_cpu(data).run(None, {"X": x})), attempt(lambda: ow(data, ctx).run(None, {"X": x}))
    )


@kind("feed.dyn_lru", "dynamic model, 6 shapes with max_specializations=2, revisited")
def _lru(k, ctx):
    data = unary("Relu", ("N", 4))
    r = ort_cpu(data)

    def run_all(s):
        rng = np.random.default_rng(1)
        return [s.run(None, {"X": rng.standard_normal((n, 4)).astype(np.float32)})[0] for n in (1, 2, 3, 4, 1, 2, 5, 1)]

    return result(
        k, attempt(lambda: run_all(r)), attempt(lambda: run_all(ow(data, ctx, options={"max_specializations": 2})))
    )


@kind("feed.dyn_ort_values", "dynamic model, run_with_ort_values")
def _ortvalues(k, ctx):
    import onnxruntime

    r, o = _pair(ctx, "conv_dyn", lambda: conv("N", ("H", "W")))
    f = {"X": onnxruntime.OrtValue.ortvalue_from_numpy(X)}
    return result(
        k,
        attempt(lambda: [v.numpy() for v in r.run_with_ort_values(None, f)]),
        attempt(lambda: [v.numpy() for v in o.run_with_ort_values(None, f)]),
    )


def _iob(s):
    b = s.io_binding()
    b.bind_cpu_input("X", X)
    b.bind_output("Y")
    s.run_with_iobinding(b)
    return b.copy_outputs_to_cpu()


@kind("feed.iobinding", "IOBinding on a static model")
def _iobinding(k, ctx):
    r, o = _pair(ctx, "conv", lambda: conv())
    return result(k, attempt(lambda: _iob(r)), attempt(lambda: _iob(o)))


@kind("feed.dyn_iobinding", "IOBinding on a dynamic model")
def _dyn_iobinding(k, ctx):
    r, o = _pair(ctx, "conv_dyn", lambda: conv("N", ("H", "W")))
    return result(k, attempt(lambda: _iob(r)), attempt(lambda: _iob(o)))


def _async(s):
    import threading

    done, box = threading.Event(), {}

    def cb(res, data, err):
        box.update(res=res, err=err)
        done.set()

    s.run_async(None, {"X": X}, cb, None)
    if not done.wait(60):
        raise TimeoutError("run_async callback not called within 60 s")
    if box["err"]:
        raise RuntimeError(box["err"])
    return box["res"]


for _dyn in (False, True):

    @kind(f"feed.{'dyn_' if _dyn else ''}run_async", "run_async" + (" (dynamic model)" if _dyn else ""))
    def _run_async(k, ctx, _dyn=_dyn):
        r, o = _pair(ctx, "conv_dyn" if _dyn else "conv", (lambda: conv("N", ("H", "W"))) if _dyn else (lambda: conv()))
        return result(k, attempt(lambda: _async(r)), attempt(lambda: _async(o)))


def _nonfinite_kind(kind_id, title, value, needs_warning=True):
    @kind(kind_id, title)
    def probe(k, ctx):
        r, _o = _pair(ctx, "conv", lambda: conv(), ref="qnn")
        o = ow(conv(), ctx)  # a session of its own: the warning is once per session
        x = X.copy()
        x[0, 0, 0, :4] = value
        ref, got = attempt(lambda: r.run(None, {"X": x})), attempt(lambda: o.run(None, {"X": x}))
        cpu = attempt(lambda: ort_cpu(conv()).run(None, {"X": x}))
        warned = any("finite" in w.lower() or "nan" in w.lower() or "inf" in w.lower() for w in got.warnings)
        verdict, reason = result(k, ref, got)["verdict"], None
        if verdict == SAME and not warned and needs_warning:
            big = float(np.nanmax(np.abs(got.value[0]))) if got.ok else 0
            verdict, reason = DEVIATION, (
                f"same as ORT + QNN EP, but silently: max |out| {big:.6g} where ORT CPU gives "
                f"{'non-finite' if cpu.ok and not np.isfinite(cpu.value[0]).all() else 'finite'} values; no warning"
            )
        return result(k, ref, got, verdict, reason or f"{verdict}; warned={warned}")

    return probe


_nonfinite_kind("feed.nan", "NaN values in the feed (FP16 target; ref: ORT + QNN EP)", np.nan)
_nonfinite_kind(
    "feed.inf", "+Inf / -Inf in the feed (FP16 target; ref: ORT + QNN EP)", np.array([np.inf, -np.inf, np.inf, -np.inf])
)
_nonfinite_kind(
    "feed.fp16_overflow",
    "finite values beyond FP16 range (1e6; saturation expected, ref ORT + QNN EP)",
    1e6,
    needs_warning=False,
)


@kind("feed.huge_view", "dynamic model, broadcast view of 1 x 2**23 floats (32 MiB logical)", timeout=300)
def _huge(k, ctx):
    data = unary("Relu", ("N", "M"))
    x = np.broadcast_to(np.float32(1), (1, 2**23))
    ref, got = attempt(lambda: [o.shape for o in ort_cpu(data).run(None, {"X": x})]), attempt(
        lambda: [o.shape for o in ow(data, ctx).run(None, {"X": x})]
    )
    r = result(k, ref, got)
    r["reason"] += f" (onnxwrapper took {got.seconds:.1f} s)"
    return r


@kind(
    "feed.huge_view_8gib",
    "dynamic model, broadcast view of 2 x 2**30 floats (8 GiB logical), under ulimit -v 6 GiB",
    isolate=True,
    slow=True,
    timeout=900,
)
def _huge_8gib(k, ctx):
    from probe_qnn_common import REPORT, snippet

    code = REPORT + f"""
import numpy as np
from probe_qnn_common import Context, ow, ort_cpu
from probe_qnn_models import unary
x = np.broadcast_to(np.float32(1), (2, 2 ** 30))
make = ort_cpu if sys.argv[1] == "ort" else (lambda d: ow(d, Context({ctx.work!r}, {ctx.cache!r})))
report(lambda: [o.shape for o in make(unary("Relu", ("N", "M"))).run(None, {{"X": x}})])
"""
    guard = ["bash", "-c", 'ulimit -v %d; exec "$@"' % (6 * 1024 * 1024), "guard"]
    ref, got = snippet(code, "ort", prefix=guard, timeout=600), snippet(code, "ow", prefix=guard, timeout=600)
    r = result(k, ref, got)
    r["reason"] += f" (ORT {ref.seconds:.1f} s, onnxwrapper {got.seconds:.1f} s)"
    return r


# -- models, paths, bytes ----------------------------------------------------------------------------
def _model_kind(kind_id, title, make_arg, feed=None, **judge_kw):
    @kind(kind_id, title)
    def probe(k, ctx):
        arg = make_arg(ctx)

        def go(make):
            s = make(arg)
            return s.run(None, feed) if feed is not None else [i.name for i in s.get_inputs()]

        return result(k, attempt(lambda: go(ort_cpu)), attempt(lambda: go(lambda a: ow(a, ctx))), **judge_kw)

    return probe


def _bad_op(op, domain=""):
    return model([h.make_node(op, ["X"], ["Y"], domain=domain)], [("X", T.FLOAT, [2])], [("Y", T.FLOAT, [2])])


_model_kind("model.missing_path", "model path does not exist", lambda c: os.path.join(c.work, "nope", "m.onnx"))
_model_kind("model.directory", "a directory as model path", lambda c: c.work)
_model_kind("model.garbage_file", "a file of random bytes", lambda c: write(c, "g.onnx", os.urandom(300)))
_model_kind("model.truncated_bytes", "truncated model bytes", lambda c: conv()[:100])
_model_kind("model.empty_bytes", "empty bytes", lambda c: b"")
_model_kind("model.int_arg", "path_or_bytes=123", lambda c: 123)
_model_kind("model.pathlib", "pathlib.Path model path", lambda c: pathlib.Path(write(c, "m.onnx", conv())), {"X": X})
_model_kind("model.unknown_op", "unknown op in the default domain", lambda c: _bad_op("NoSuchOp"))
_model_kind("model.custom_domain", "custom-domain op without its library", lambda c: _bad_op("Foo", "custom.dom"))
_model_kind(
    "model.opset99",
    "opset 99",
    lambda c: model([h.make_node("Relu", ["X"], ["Y"])], [("X", T.FLOAT, [2])], [("Y", T.FLOAT, [2])], opset=99),
)
_model_kind(
    "model.ir99",
    "IR version 99",
    lambda c: model([h.make_node("Relu", ["X"], ["Y"])], [("X", T.FLOAT, [2])], [("Y", T.FLOAT, [2])], ir=99),
)
_model_kind("model.ort_format", "an .ort path", lambda c: write(c, "m.ort", conv()))
_model_kind(
    "model.raw_bin_garbage",
    "a .bin model path that is not a context binary",
    lambda c: write(c, "m.bin", os.urandom(512)),
)
_model_kind(
    "model.partial",
    "partially supported model (Det on CPU)",
    lambda c: conv_det_relu(),
    {"X": np.ones((1, 1, 2, 2), np.float32)},
)
_model_kind(
    "model.string_io",
    "string identity (no QNN node at all)",
    lambda c: model([h.make_node("Identity", ["X"], ["Y"])], [("X", T.STRING, [2])], [("Y", T.STRING, [2])]),
    {"X": np.array(["a", "b"], dtype=object)},
)
_model_kind(
    "model.bool_and",
    "bool inputs (And)",
    lambda c: model(
        [h.make_node("And", ["A", "B"], ["Y"])], [("A", T.BOOL, [2, 2]), ("B", T.BOOL, [2, 2])], [("Y", T.BOOL, [2, 2])]
    ),
    {"A": np.array([[1, 0], [1, 1]], bool), "B": np.array([[1, 1], [0, 1]], bool)},
)
_model_kind(
    "model.int64_gather",
    "int64 input (embedding Gather)",
    lambda c: gather_embedding(),
    {"ids": np.array([[1, 2, 3, 7]])},
)
_model_kind(
    "model.no_inputs",
    "graph without inputs (constant output)",
    lambda c: model(
        [h.make_node("Constant", [], ["Y"], value=h.make_tensor("v", T.FLOAT, [2], [1, 2]))], [], [("Y", T.FLOAT, [2])]
    ),
    {},
)


@kind("model.external_data", "model with external data (valid)")
def _ext(k, ctx):
    import onnx

    path = write(ctx, "ext.onnx", b"")
    onnx.save(onnx.load_from_string(conv()), path, save_as_external_data=True, location="ext.data", size_threshold=0)
    return result(
        k, attempt(lambda: ort_cpu(path).run(None, {"X": X})), attempt(lambda: ow(path, ctx).run(None, {"X": X}))
    )


@kind("model.external_missing", "model whose external-data file is missing")
def _ext_missing(k, ctx):
    import onnx

    path = write(ctx, "ext.onnx", b"")
    onnx.save(onnx.load_from_string(conv()), path, save_as_external_data=True, location="ext.data", size_threshold=0)
    os.remove(os.path.join(os.path.dirname(path), "ext.data"))
    return result(
        k, attempt(lambda: ort_cpu(path).run(None, {"X": X})), attempt(lambda: ow(path, ctx).run(None, {"X": X}))
    )


@kind("model.epcontext_direct", "an EPContext model (raw ORT output) given directly; ref: ORT + QNN EP")
def _ctx_direct(k, ctx):
    src = write(ctx, "m.onnx", conv())
    ctx_path = os.path.join(os.path.dirname(src), "m_ctx.onnx")
    ort_qnn(src, configs={"ep.context_enable": "1", "ep.context_file_path": ctx_path})
    return result(
        k,
        attempt(lambda: ort_qnn(ctx_path).run(None, {"X": X})),
        attempt(lambda: ow(ctx_path, ctx).run(None, {"X": X})),
    )
