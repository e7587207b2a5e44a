"""Shared pieces of the qnn robustness probe: outcomes, the verdict rule, sessions, kinds, child interpreters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

SAME, TYPED, DEVIATION, SKIPPED = "same as ORT", "typed error", "deviation", "skipped"
QNN_EP = "QNNExecutionProvider"
#: EP options equal to the qnn backend's default target (Snapdragon X Elite: FP16 emulation on the simulator)
FP16_EP = {"backend_type": "htp", "soc_model": "60", "htp_arch": "73", "enable_htp_fp16_precision": "1"}


# -- outcomes and verdicts -------------------------------------------------------------------------
@dataclass
class Outcome:
    """What one call did: returned ``value`` or raised ``etype`` (``module.Class``) with ``message``."""

    ok: bool
    value: Any = None
    etype: str = ""
    message: str = ""
    seconds: float = 0.0
    warnings: list = field(default_factory=list)

    def brief(self) -> str:
        if self.ok:
            return "returned " + describe(self.value)
        return f"{self.etype.rsplit('.', 1)[-1]}: {first_line(self.message)[:90]}"

    @property
    def typed(self) -> bool:
        """Raised an onnxwrapper.errors class (a deliberate, explained refusal)."""
        return not self.ok and self.etype.startswith("onnxwrapper.")


def first_line(text: str) -> str:
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def describe(value) -> str:
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, np.ndarray) for v in value):
        return "[" + ", ".join(f"{v.dtype}{list(v.shape)}" for v in value) + "]"
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


def attempt(fn: Callable[[], Any]) -> Outcome:
    """Run ``fn`` and record what happened (warnings included)."""
    import warnings

    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = fn()
            out = Outcome(True, value)
        except BaseException as exc:  # noqa: BLE001 - the probe records everything, even SystemExit
            if isinstance(exc, KeyboardInterrupt):
                raise
            cls = type(exc)
            out = Outcome(False, None, f"{cls.__module__}.{cls.__name__}", str(exc) or traceback.format_exc(limit=1))
    out.seconds = time.perf_counter() - start
    out.warnings = [f"{w.category.__name__}: {first_line(str(w.message))[:80]}" for w in caught]
    return out


def _prefix(message: str) -> str:
    text = first_line(message)
    for sep in (" failed:", " for the following", "Actual:", " Got:", " are missing", "Name:'"):
        text = text.split(sep)[0]
    return text[:60]


def max_abs_diff(a, b) -> float:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.shape != b.shape or a.dtype != b.dtype:
            return float("inf")
        if a.size == 0:
            return 0.0
        if a.dtype.kind in "fc":
            both_nan = np.isnan(a) & np.isnan(b)
            d = np.abs(a.astype(np.float64) - b.astype(np.float64))
            d[both_nan] = 0
            return float(np.nan_to_num(d, nan=np.inf).max())
        return 0.0 if np.array_equal(a, b) else float("inf")
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return max([max_abs_diff(x, y) for x, y in zip(a, b)] or [0.0])
    return 0.0 if type(a) is type(b) else float("inf")


def judge(ref: Outcome, got: Outcome, *, tol: float = 2e-2, accept_return: bool = False) -> tuple[str, str]:
    """The verdict for ``got`` (onnxwrapper) against ``ref`` (ORT or ORT + QNN EP) and a one-line reason.

    ``tol``: allowed max |Δ| relative to ``1 + max |ref|`` (FP16 on the simulator). ``accept_return``: an
    onnxwrapper result where ORT raises is fine (e.g. ORT's own limitation).
    """
    if ref.ok and got.ok:
        d = max_abs_diff(ref.value, got.value)
        scale = 1.0 + max(
            (float(np.nanmax(np.abs(v))) for v in _arrays(ref.value) if v.size and v.dtype.kind == "f"), default=0.0
        )
        if d <= tol * scale:
            return SAME, f"both return {describe(got.value)}" + (f" (max|Δ| {d:.2g})" if d else "")
        if not _arrays(ref.value):
            return DEVIATION, f"returns {describe(got.value)} where ORT returns {describe(ref.value)}"
        return DEVIATION, f"wrong answer: max|Δ| {d:.3g} vs ORT ({describe(got.value)})"
    if not ref.ok and not got.ok:
        if ref.etype.rsplit(".", 1)[-1] == got.etype.rsplit(".", 1)[-1] and _prefix(ref.message) == _prefix(
            got.message
        ):
            return SAME, f"both raise {ref.etype.rsplit('.', 1)[-1]}: {_prefix(ref.message)[:60]}"
        if got.typed:
            return (
                TYPED,
                f"{got.etype.rsplit('.', 1)[-1]} where ORT raises {ref.etype.rsplit('.', 1)[-1]}: {first_line(got.message)[:80]}",
            )
        return DEVIATION, f"raises {got.brief()[:80]} where ORT raises {ref.brief()[:60]}"
    if ref.ok:
        if got.typed:
            return TYPED, f"{got.brief()[:120]}"
        return DEVIATION, f"raises {got.brief()[:100]} where ORT returns {describe(ref.value)}"
    if accept_return:
        return SAME, f"returns where ORT raises {ref.brief()[:60]} (accepted)"
    return DEVIATION, f"returns {describe(got.value)} where ORT raises {ref.brief()[:70]}"


def _arrays(value):
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, np.ndarray)]
    return []


def result(kind, ref: Outcome, got: Outcome, verdict=None, reason=None, **judge_kw) -> dict:
    """The JSON record of one kind."""
    if verdict is None:
        verdict, reason = judge(ref, got, **judge_kw)
    return {
        "id": kind.id,
        "group": kind.group,
        "title": kind.title,
        "verdict": verdict,
        "reason": reason,
        "ort": ref.brief() if ref is not None else "",
        "onnxwrapper": got.brief() if got is not None else "",
        "seconds": round((ref.seconds if ref else 0) + (got.seconds if got else 0), 3),
        "warnings": (got.warnings if got else [])[:3],
    }


def outcome_dict(o: Outcome) -> dict:
    d = asdict(o)
    d["value"] = describe(o.value)
    return d


# -- sessions --------------------------------------------------------------------------------------
def ort_cpu(model_arg, *args, **kw):
    import onnxruntime

    return onnxruntime.InferenceSession(model_arg, *args, **kw)  # no providers=: ORT's default (CPU) path


def qnn_devices():
    """Register onnxruntime-qnn's plugin EP once (tolerating an earlier registration) and return its devices."""
    import onnxruntime
    import onnxruntime_qnn

    if not any(d.ep_name == QNN_EP for d in onnxruntime.get_ep_devices()):
        onnxruntime.register_execution_provider_library(QNN_EP, onnxruntime_qnn.get_library_path())
    return [d for d in onnxruntime.get_ep_devices() if d.ep_name == QNN_EP]


def ort_qnn(model_arg, ep=None, configs=None, **kw):
    """A raw onnxruntime session with the QNN EP (default options = the qnn backend's default target)."""
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    for key, value in (configs or {}).items():
        so.add_session_config_entry(key, str(value))
    so.add_provider_for_devices(qnn_devices(), dict(FP16_EP if ep is None else ep))
    return onnxruntime.InferenceSession(model_arg, so, enable_fallback=0, **kw)


def ow(model_arg, ctx, *args, options=None, **kw):
    """An onnxwrapper qnn session with the probe's temporary cache (``ctx.cache``) unless options give one."""
    import onnxwrapper

    opts = {"cache_dir": ctx.cache}
    opts.update(options or {})
    return onnxwrapper.InferenceSession(model_arg, *args, backend="qnn", backend_options=opts, **kw)


def write(ctx, name: str, data: bytes) -> str:
    """Write ``data`` to a fresh sub-folder of the work dir; returns the file path."""
    folder = os.path.join(ctx.work, f"{name}.{os.getpid()}.{time.perf_counter_ns()}")
    os.makedirs(folder)
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


# -- kinds -----------------------------------------------------------------------------------------
@dataclass
class Kind:
    """One kind of bad input / fault: ``fn(kind, ctx) -> result dict``; ``isolate``: needs a fresh process."""

    id: str
    title: str
    fn: Callable
    isolate: bool = False
    slow: bool = False
    timeout: float = 180.0

    @property
    def group(self) -> str:
        return self.id.split(".", 1)[0]


KINDS: dict[str, Kind] = {}


def kind(kind_id: str, title: str, *, isolate: bool = False, slow: bool = False, timeout: float = 180.0):
    """Register a probe kind (decorator)."""

    def register(fn):
        KINDS[kind_id] = Kind(kind_id, title, fn, isolate, slow, timeout)
        return fn

    return register


@dataclass
class Context:
    """Per-child state: ``work`` (scratch folder) and ``cache`` (this child's compile cache)."""

    work: str
    cache: str

    def fresh_cache(self) -> str:
        path = os.path.join(self.work, f"cache.{os.getpid()}.{time.perf_counter_ns()}")
        os.makedirs(path)
        return path


# -- child interpreters -------------------------------------------------------------------------
HERE = os.path.dirname(os.path.abspath(__file__))


def snippet(code: str, *args: str, timeout: float = 300, prefix: list | None = None) -> Outcome:
    """Run ``code`` in a fresh interpreter (probe modules importable); its last stdout line is a JSON Outcome."""
    full = "import sys, json\nsys.path.insert(0, %r)\n" % HERE + textwrap.dedent(code)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            (prefix or []) + [sys.executable, "-c", full, *args], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return Outcome(False, None, "probe.Timeout", f"no answer within {timeout:.0f} s", timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = [line for line in proc.stderr.splitlines() if line.strip()][-1:] or [""]
        return Outcome(
            False, None, "probe.ProcessDied", f"exit {proc.returncode}: {tail[0][:150]}", time.perf_counter() - start
        )
    data = json.loads(lines[-1])
    return Outcome(
        data["ok"], data.get("value"), data.get("etype", ""), data.get("message", ""), time.perf_counter() - start
    )


#: prelude of snippets: report(fn) prints fn()'s Outcome as JSON (arrays as nested lists)
REPORT = """
from probe_qnn_common import attempt
def report(fn):
    o = attempt(fn)
    v = o.value
    if isinstance(v, list):
        v = [x.tolist() if hasattr(x, "tolist") else x for x in v]
    print(json.dumps({"ok": o.ok, "value": v, "etype": o.etype, "message": o.message}, default=str))
"""


def as_arrays(o: Outcome) -> Outcome:
    if o.ok and isinstance(o.value, list):
        o.value = [np.asarray(v, np.float32) for v in o.value]
    return o
