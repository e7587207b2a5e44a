"""Judging: compare captures of backends against the reference capture, call by call, output by output.

Calls are matched by ``(session ordinal, call index)`` — in live mode each backend ran the whole
script, in replay mode the replayed calls carry the reference's keys. Per matched call and output:

1. missing output → kind ``missing``; shape differs → ``shape``; dtype differs → ``dtype``
   (each a failure of its own kind, no metrics);
2. otherwise every metric of :func:`~onnxwrapper.diff._judge._metrics.DEFAULT_METRICS` is computed and
   each threshold of the output's :class:`~onnxwrapper.diff.Tolerance` is checked: the NaN/Inf rule
   gives kind ``nonfinite``, any other failed threshold kind ``tolerance``. Top-k agreement is
   computed for outputs the model graph marks as class scores, or whose values are probability
   distributions (:mod:`onnxwrapper.diff._judge._class_scores`).

NaN/Inf in the *inputs* are counted per run, model and feed (``DiffResult.nonfinite_feeds``): the
FP16 HTP maps NaN and ±Inf inputs to 131008, so a call fed them cannot agree with the reference.

Call-sequence problems (a session running another model, calls present on one side only, inputs
fed differently) are reported as *divergences* of that backend; in live mode they usually mean the
script is not deterministic — the message then recommends ``--replay``.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from onnxwrapper.diff._capture import Capture, fed_other_inputs
from onnxwrapper.diff._judge._class_scores import class_score_outputs
from onnxwrapper.diff._judge._metrics import DEFAULT_METRICS, ArrayPair, compute_metrics
from onnxwrapper.diff._judge._result import FAILURE_KINDS, CallComparison, DiffResult, OutputSummary
from onnxwrapper.diff._judge._tolerance import AbsRelThreshold, NonFiniteThreshold, Tolerance, Tolerances, precision_for

__all__ = ["compare_arrays", "compare_captures", "model_op_types"]

_MAX_FAILURES_KEPT = 1000
_MAX_DIVERGENCE_LINES = 20


def compare_arrays(y, r, tolerance: Tolerance | None = None, *, class_scores: bool | None = None) -> CallComparison:
    """Compare one backend array ``y`` with the reference ``r``.

    Args:
        y, r: arrays (any shape/dtype; strings are compared for equality only).
        tolerance: defaults to ``Tolerance()`` (Polygraphy's fp32 default, atol = rtol = 1e-5).
        class_scores: whether the output holds class scores (top-k agreement is reported only
            then); ``None`` = when ``r``'s rows are probability distributions.

    Returns:
        A :class:`CallComparison` with empty backend/model/output fields (callers fill them in).
    """
    tolerance = tolerance or Tolerance()
    res = CallComparison(backend="", model="", output="", session=0, index=0, ref_seq=0, seq=None)
    y, r = np.asarray(y), np.asarray(r)
    if y.shape != r.shape:
        res.kind, res.detail = "shape", f"shape {list(y.shape)} vs reference {list(r.shape)}"
        res.failed = [res.detail]
        return res
    if y.dtype != r.dtype:
        res.kind, res.detail = "dtype", f"dtype {y.dtype} vs reference {r.dtype}"
        res.failed = [res.detail]
        return res
    if r.dtype.kind in "USO":
        bad = int(np.count_nonzero(y != r))
        res.metrics = {"mismatched_elements": float(bad)}
        if bad:
            res.kind, res.failed = "tolerance", [f"{bad} of {r.size} string element(s) differ"]
        return res
    pair = ArrayPair(y, r, class_scores)
    res.metrics = compute_metrics(pair, _metrics_for(tolerance))
    # Polygraphy's "minimum required tolerance" (elementwise unless the check is a statistic), always
    # reported: it is what --atol/--rtol alone would need
    probe = AbsRelThreshold(0.0, 0.0, tolerance.check if tolerance.check != "none" else "elementwise",
                            tolerance.quantile)
    res.min_atol, res.min_rtol, _, _ = probe.min_tolerances(pair)
    for threshold in tolerance.thresholds():
        if not threshold.passed(pair):
            if res.kind == "pass":
                res.kind = "nonfinite" if isinstance(threshold, NonFiniteThreshold) else "tolerance"
            res.failed.append(threshold.describe())
            res.hints.append(threshold.required(pair))
    return res


def _metrics_for(tolerance: Tolerance):
    return DEFAULT_METRICS(tolerance.quantile)


def model_op_types(capture: Capture, key: str) -> set[str]:
    """Op types of the top-level graph of model ``key`` (empty when the model is not readable)."""
    return _model_facts(capture, key, {})[0]


def _model_facts(capture: Capture, key: str, cache: dict) -> tuple[set, set | None]:
    """``(op types, class-score output names or None when unreadable)`` of model ``key``."""
    if (capture.path, key) in cache:
        return cache[(capture.path, key)]
    facts: tuple[set, set | None] = (set(), None)
    info = capture.models.get(key)
    if info is not None:
        try:
            source = info.model_source()
            proto = (onnx.load_model_from_string(source) if isinstance(source, bytes)
                     else onnx.load(source, load_external_data=False))
            facts = ({n.op_type for n in proto.graph.node}, class_score_outputs(proto))
        except Exception:  # unreadable or missing model: no quantization or class-score hint
            pass
    cache[(capture.path, key)] = facts
    return facts


def _severity(c: CallComparison) -> tuple:
    kind_rank = FAILURE_KINDS.index(c.kind) if c.kind in FAILURE_KINDS else len(FAILURE_KINDS)
    snr = c.metrics.get("snr_db", math.inf)
    return (kind_rank, snr if not (isinstance(snr, float) and math.isnan(snr)) else -math.inf)


def compare_captures(reference: Capture, others: dict, *, tolerances: Tolerances | None = None,
                     mode: str = "live", check_inputs: bool = True, progress=None,
                     reference_label: str | None = None, incomplete=(), replayed: dict | None = None) -> DiffResult:
    """Compare each capture in ``others`` against ``reference``.

    Args:
        reference: the reference backend's :class:`~onnxwrapper.diff.Capture`.
        others: ``{backend name: Capture}``.
        tolerances: :class:`~onnxwrapper.diff.Tolerances`; default: precision-aware presets.
        mode: ``"live"``, ``"replay"`` or ``"check"`` (recorded in the result; live mode adds the
            ``--replay`` advice to divergences).
        check_inputs: compare the recorded inputs of matched calls and flag calls fed differently.
        progress: optional callable ``progress(done, total)`` called after each compared call.
        reference_label: the reference's name in the result (default: its sessions' backend).
        incomplete: labels (reference included) whose run did not complete: calls missing on one
            side are then a note, not a divergence (the run's failure is reported already).
        replayed: ``{backend name: Capture}`` of partial replays (live mode): calls of that
            backend whose inputs differ from the reference's are judged on the replayed call, which
            ran the reference's inputs; the input difference is then a note, not a divergence.

    Returns:
        A :class:`~onnxwrapper.diff.DiffResult` without run statuses (``runs`` is empty).
    """
    tolerances = tolerances or Tolerances()
    ref_backend = reference_label or (reference.sessions[0].backend if reference.sessions else "reference")
    replayed = replayed or {}
    result = DiffResult(reference=ref_backend, backends=list(others), mode=mode, tolerances=tolerances,
                        capture_dirs={ref_backend: reference.path, **{k: c.path for k, c in others.items()},
                                      **{f"{k}+replay": c.path for k, c in replayed.items()}})
    ref_calls = reference.calls_by_key()
    total = len(ref_calls) * max(1, len(others))
    done = 0
    ops_cache: dict = {}
    facts: dict = {}
    feeds = _FeedCounter()
    for call in reference.calls:
        feeds.add(ref_backend, call)
    for name, cap in others.items():
        lines: list[str] = []
        summaries: dict[tuple[str, str], OutputSummary] = {}
        b_calls = cap.calls_by_key()
        hard = _check_sessions(reference, cap, name, lines, result.notes)
        partial = bool(reference.truncated or cap.truncated or reference.header.get("skipped_calls")
                       or cap.header.get("skipped_calls") or reference.status == "recording"
                       or cap.status == "recording" or name in incomplete or ref_backend in incomplete)
        only_ref = sorted(set(ref_calls) - set(b_calls))
        only_b = sorted(set(b_calls) - set(ref_calls))
        if (only_ref or only_b) and not partial:
            if only_ref:
                lines.append(f"{len(only_ref)} call(s) of the reference have no counterpart on {name} "
                             f"(first: session {only_ref[0][0]} call {only_ref[0][1]}).")
            if only_b:
                lines.append(f"{len(only_b)} call(s) on {name} have no counterpart on the reference "
                             f"(first: session {only_b[0][0]} call {only_b[0][1]}).")
        elif only_ref or only_b:
            result.notes.append(f"{name}: {len(only_ref) + len(only_b)} call(s) not compared because a run did not "
                                f"complete or a capture is partial (size limit, max calls per model).")
        inputs_differ, replayed_keys = [], []
        r_calls = replayed[name].calls_by_key() if name in replayed else {}
        for call in cap.calls:
            feeds.add(name, call)
        for key in sorted(set(ref_calls) & set(b_calls)):
            rc, bc = ref_calls[key], b_calls[key]
            done += 1
            if rc.session in hard:
                continue  # reported by _check_sessions
            if rc.input_signature != bc.input_signature or (check_inputs and fed_other_inputs(rc, bc)):
                inputs_differ.append(key)
                if key in r_calls:
                    bc = r_calls[key]
                    replayed_keys.append(key)
            ref_out = rc.outputs()
            b_out = bc.outputs()
            precision = _precision(cap, bc, reference, rc, ops_cache)
            scores = _model_facts(reference, rc.model, facts)[1]
            for out_name, r_arr in ref_out.items():
                tol = tolerances.for_output(rc.model, out_name, precision)
                if out_name in b_out:
                    comp = compare_arrays(b_out[out_name], r_arr, tol,
                                          class_scores=True if scores and out_name in scores else None)
                else:
                    comp = CallComparison(backend="", model="", output="", session=0, index=0, ref_seq=0, seq=None,
                                          kind="missing", detail=f"output '{out_name}' not returned",
                                          failed=[f"output '{out_name}' not returned"])
                comp.backend, comp.model, comp.output = name, rc.model, out_name
                comp.session, comp.index, comp.ref_seq, comp.seq = key[0], key[1], rc.seq, bc.seq
                if replayed_keys and replayed_keys[-1] == key:
                    comp.replayed = True
                    comp.detail = (comp.detail + "; " if comp.detail else "") + "replayed on the reference's inputs"
                elif inputs_differ and inputs_differ[-1] == key:
                    comp.detail = (comp.detail + "; " if comp.detail else "") + "inputs differ from the reference's"
                _accumulate(summaries, comp, tol, precision)
                if not comp.passed and len(result.failures) < _MAX_FAILURES_KEPT:
                    result.failures.append(comp)
            result.compared_calls += 1
            if progress is not None:
                progress(done, total)
        result.inputs_differ[name] = list(inputs_differ)
        if inputs_differ:
            first = f"(first: session {inputs_differ[0][0]} call {inputs_differ[0][1]})"
            if len(replayed_keys) == len(inputs_differ):
                result.notes.append(
                    f"{name}: {len(inputs_differ)} call(s) were fed different inputs than on the reference {first} — "
                    f"the script's inputs depend on earlier outputs, randomness or time. They were judged by "
                    f"replaying the reference's inputs on {name}; the script's own output per backend shows the "
                    f"end-to-end effect.")
            else:
                advice = (" The script is not deterministic (random, time- or output-dependent inputs): use "
                          "--replay to feed every backend the reference's recorded inputs." if mode == "live" else "")
                lines.append(f"{len(inputs_differ) - len(replayed_keys)} call(s) were fed different inputs than "
                             f"on the reference {first}.{advice}")
        result.outputs.extend(summaries.values())
        result.divergences[name] = lines[:_MAX_DIVERGENCE_LINES]
    result.nonfinite_feeds = feeds.items()
    for item in result.nonfinite_feeds:
        result.notes.append(
            f"{item['run']}: input '{item['feed']}' of {item['model']} holds NaN/Inf in {item['calls']} call(s) "
            f"({item['nan']} NaN, {item['inf']} Inf; first: session {item['first'][0]} call {item['first'][1]}); "
            f"the FP16 HTP maps NaN and ±Inf inputs to 131008, so these calls cannot agree with the reference.")
    for run_name, cap in [(ref_backend, reference), *others.items()]:
        for rec in cap.header.get("sessions") or ():
            if isinstance(rec, dict) and rec.get("repaired"):
                result.notes.append(f"{run_name}: session {rec.get('ordinal')} ({rec.get('model')}) ran repaired by its "
                                    f"recipe: {str(rec['repaired'])[:400]}")
            if isinstance(rec, dict) and rec.get("buckets"):
                result.notes.append(f"{run_name}: session {rec.get('ordinal')} ({rec.get('model')}): "
                                    f"{_buckets_text(rec['buckets'])}")
        if cap.header.get("errors"):
            result.notes.append(f"{run_name}: capture errors: {'; '.join(cap.header['errors'][:3])}")
        if cap.truncated:
            result.notes.append(f"{run_name}: capture truncated — {cap.truncated.get('reason')}.")
    return result


def _buckets_text(buckets) -> str:
    """One phrase for a session record's ``buckets`` (JSON from a capture header: checked here, as a
    file from elsewhere may hold anything), e.g. ``"shape buckets: 40 shapes in 40 calls served by 7
    compiled sizes (33 compiles saved): 1x1, 1x2, 1x4, …"``."""
    rows = [b for b in buckets if isinstance(b, dict)] if isinstance(buckets, list) else []
    number = lambda v: int(v) if isinstance(v, int) and not isinstance(v, bool) else 0  # noqa: E731
    shapes = sum(number(b.get("distinct_shapes")) for b in rows)
    calls = sum(number(b.get("calls")) for b in rows)
    saved = number(rows[-1].get("saved")) if rows else 0
    sizes = ", ".join(str(b.get("shapes"))[:80] for b in rows[:6]) + (" …" if len(rows) > 6 else "")
    return (f"shape buckets: {shapes} shapes in {calls} calls served by {len(rows)} compiled size"
            f"{'s' if len(rows) != 1 else ''} ({saved} compile{'s' if saved != 1 else ''} saved): {sizes}")


def _check_sessions(reference: Capture, cap: Capture, label: str, lines: list, notes: list) -> set[int]:
    """Session ordinals whose models differ from the reference's (reported in ``lines``).

    A backend that hands ONNX Runtime a compiled artifact (an EPContext model) records that
    artifact's identity; when the declared input and output names equal the reference model's,
    the sessions are matched anyway and a note says so.
    """
    ref_sessions = {s.ordinal: s for s in reference.sessions}
    hard = set()
    for sess in cap.sessions:
        ref = ref_sessions.get(sess.ordinal)
        if ref is None or ref.model == sess.model:
            continue
        rm, bm = reference.models.get(ref.model), cap.models.get(sess.model)
        if rm is not None and bm is not None and rm.input_names == bm.input_names \
                and rm.output_names == bm.output_names:
            notes.append(f"{label}: session {sess.ordinal} recorded model {sess.model} where the reference has "
                         f"{ref.model} (the backend ran a compiled or rewritten model); matched by session order "
                         f"and input/output names.")
            continue
        hard.add(sess.ordinal)
        lines.append(f"session {sess.ordinal} runs model {sess.model} on {label} but {ref.model} on "
                     f"the reference: the sessions were created or first used in a different order.")
    return hard


class _FeedCounter:
    """NaN/Inf counts of floating inputs per (run, model, feed)."""

    def __init__(self) -> None:
        self._counts: dict[tuple, dict] = {}

    def add(self, run: str, call) -> None:
        if not any((m.get("dtype") or "").startswith(("float", "bfloat")) for m in call.input_meta):
            return
        try:
            arrays = call.inputs()
        except (OSError, ValueError, KeyError):
            return
        for feed, arr in arrays.items():
            if arr.dtype.kind != "f":
                continue
            nan, inf = int(np.count_nonzero(np.isnan(arr))), int(np.count_nonzero(np.isinf(arr)))
            if nan or inf:
                c = self._counts.setdefault((run, call.model, feed), {"run": run, "model": call.model, "feed": feed,
                                                                      "calls": 0, "nan": 0, "inf": 0,
                                                                      "first": [call.session, call.index]})
                c["calls"] += 1
                c["nan"] += nan
                c["inf"] += inf

    def items(self) -> list[dict]:
        return list(self._counts.values())


_LOOSENESS = ("fp32", "fp16", "quantized")


def _precision(cap: Capture, call, reference: Capture, ref_call, cache: dict) -> str:
    """The preset for this call: the looser of the backend's and the reference's precisions (a
    reference that itself runs at FP16 cannot be matched to FP32 tolerances)."""
    key = (cap.path, call.model, call.session)
    if key not in cache:
        ops = model_op_types(reference, ref_call.model) or model_op_types(cap, call.model)
        mine = precision_for(call.backend, call.backend_options, ops)
        theirs = precision_for(ref_call.backend, ref_call.backend_options, ops)
        cache[key] = max(mine, theirs, key=_LOOSENESS.index)
    return cache[key]


def _accumulate(summaries: dict, comp: CallComparison, tol: Tolerance, precision: str) -> None:
    key = (comp.model, comp.output)
    s = summaries.get(key)
    if s is None:
        s = summaries[key] = OutputSummary(backend=comp.backend, model=comp.model, output=comp.output,
                                           tolerance=tol, precision=precision)
    s.calls += 1
    s.min_atol = max(s.min_atol, comp.min_atol)
    s.min_rtol = max(s.min_rtol, comp.min_rtol)
    s.per_call.append((comp.session, comp.index, comp.metrics.get("max_abs_error"),
                       comp.metrics.get("cosine_similarity"), comp.passed, comp.metrics.get("snr_db")))
    if not comp.passed:
        s.failed_calls += 1
        if s.kind == "pass" or FAILURE_KINDS.index(comp.kind) < FAILURE_KINDS.index(s.kind):
            s.kind = comp.kind
    if s.worst is None or _severity(comp) < _severity(s.worst):
        s.worst = comp
