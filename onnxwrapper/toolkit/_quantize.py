"""QDQ quantization for the QNN HTP (W8A8, W8A16) and calibration data from captures.

Quantization is onnxruntime's own QNN flow (``onnxruntime.quantization.execution_providers.qnn``):
``qnn_preprocess_model`` (fusions the QNN EP wants) → ``get_qnn_qdq_config`` (QDQ format, the
QNN EP's per-op constraints, calibration with a :class:`onnxruntime.quantization.CalibrationDataReader`)
→ ``onnxruntime.quantization.quantize``. Precisions (ORT's QNN EP documentation, "Quantization"):

* ``w8a8``  — activations ``QUInt8``, weights ``QUInt8``;
* ``w8a16`` — activations ``QUInt16``, weights ``QUInt8`` (more accurate, ~1.2–1.6× slower on the
  simulator, measured with onnxruntime-qnn 2.7.0).

Before that, :func:`onnxwrapper.toolkit._quantize_prepare.prepare_for_quantizer` upgrades the opset
when the quantizer needs it (:mod:`onnxwrapper.toolkit._opset`) and keeps numerically fragile
tensors out of 8 bits (:mod:`onnxwrapper.toolkit._fragile`); :class:`QuantizeResult` reports both.

Calibration data are real feeds: :func:`calibration_from_capture` reads them from an
``aipc capture`` / :func:`onnxwrapper.diff.start_capture` directory, so they follow the script's
actual preprocessing. The three-way accuracy check is :func:`onnxwrapper.toolkit.three_way_check`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import onnx

from onnxwrapper.diff import read_capture
from onnxwrapper.errors import OnnxwrapperError
from onnxwrapper.toolkit._fragile import FragilePlan
from onnxwrapper.toolkit._opset import OpsetUpgrade, default_opset
from onnxwrapper.toolkit._quantize_prepare import prepare_for_quantizer

__all__ = ["PRECISIONS", "CalibrationError", "CalibrationSet", "FeedsDataReader", "QuantizeResult",
           "calibration_from_capture", "quantize_qdq"]

#: precision name -> (activation QuantType name, weight QuantType name)
PRECISIONS = {"w8a8": ("QUInt8", "QUInt8"), "w8a16": ("QUInt16", "QUInt8")}


class CalibrationError(OnnxwrapperError, ValueError):
    """Calibration data cannot be used for this model (no matching model, no feeds, bad shapes)."""


# -- calibration data ------------------------------------------------------------------------------
@dataclass
class CalibrationSet:
    """Feeds for calibration and accuracy checks.

    Attributes:
        feeds: ``[{input name: array}]`` — all with the same shapes (:attr:`shapes`).
        shapes: ``{input name: shape}`` shared by every feed.
        source: where they came from (capture directory or ``"<memory>"``).
        model_key: the capture's model key used, when read from a capture.
        skipped: feeds of the model left out because their shapes differ from the chosen ones.
        note: how the model was matched in the capture.
    """

    feeds: list[dict[str, np.ndarray]]
    shapes: dict[str, tuple] = field(default_factory=dict)
    source: str = "<memory>"
    model_key: str | None = None
    skipped: int = 0
    note: str = ""

    @classmethod
    def from_feeds(cls, feeds: Iterable[Mapping[str, np.ndarray]]) -> "CalibrationSet":
        """Wrap in-memory feeds (shapes taken from the first feed).

        Raises:
            CalibrationError: no feeds, or feeds with different shapes.
        """
        items = [dict(f) for f in feeds]
        if not items:
            raise CalibrationError("No calibration feeds were given.")
        shapes = {k: tuple(np.shape(v)) for k, v in items[0].items()}
        if any({k: tuple(np.shape(v)) for k, v in f.items()} != shapes for f in items):
            raise CalibrationError("Calibration feeds must all have the same input shapes.")
        return cls(items, shapes)


class FeedsDataReader:
    """A ``CalibrationDataReader`` over a list of feed dicts (``get_next()`` → dict or ``None``).

    Subclasses ``onnxruntime.quantization.CalibrationDataReader`` at construction time so that
    importing this module does not import onnxruntime.quantization.
    """

    def __new__(cls, feeds: Sequence[Mapping[str, np.ndarray]]):
        # on use: onnxruntime.quantization is only for quantizing
        from onnxruntime.quantization import CalibrationDataReader

        class _Reader(CalibrationDataReader):
            def __init__(self, items):
                self._items = [dict(f) for f in items]
                self._it: Iterator | None = None

            def get_next(self):
                if self._it is None:
                    self._it = iter(self._items)
                return next(self._it, None)

            def rewind(self):
                self._it = None

            def __len__(self):
                return len(self._items)

        return _Reader(feeds)


def _model_sha256(model: Any) -> tuple[str, str | None]:
    if isinstance(model, onnx.ModelProto):
        return hashlib.sha256(model.SerializeToString()).hexdigest(), None
    if isinstance(model, (bytes, bytearray)):
        return hashlib.sha256(bytes(model)).hexdigest(), None
    path = os.path.abspath(os.fspath(model))
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest(), path


def calibration_from_capture(directory: Any, model: Any, *, max_samples: int | None = None,
                             input_names: Sequence[str] | None = None) -> CalibrationSet:
    """The captured feeds of ``model`` in a capture directory.

    The model is matched by the sha256 of its file (what the capture stores), then by its path,
    then — if exactly one captured model has the same input names — by its inputs (noted in
    :attr:`CalibrationSet.note`). Only feeds with the most common input shapes are kept (a static
    compile has one shape); at most ``max_samples`` of them, in capture order.

    Args:
        directory: the capture directory. model: path, bytes or ``onnx.ModelProto``.
        max_samples: cap on the number of feeds (``None``: all).
        input_names: the model's graph inputs (read from the model when ``None``).

    Raises:
        CalibrationError: no model of the capture matches, or it has no recorded feeds.
        onnxwrapper.diff.CaptureFormatError: not a capture directory.
    """

    capture = read_capture(directory)
    sha, path = _model_sha256(model)
    if input_names is None:
        proto = model if isinstance(model, onnx.ModelProto) else (
            onnx.load_model_from_string(bytes(model)) if isinstance(model, (bytes, bytearray))
            else onnx.load(os.fspath(model), load_external_data=False))
        inits = {i.name for i in proto.graph.initializer}
        input_names = [i.name for i in proto.graph.input if i.name not in inits]
    note = "matched by sha256"
    info = next((m for m in capture.models.values() if m.sha256 == sha), None)
    if info is None and path is not None:
        info = next((m for m in capture.models.values() if m.path and os.path.abspath(m.path) == path), None)
        note = "matched by path (the file changed since the capture)"
    if info is None:
        same = [m for m in capture.models.values() if sorted(m.input_names) == sorted(input_names)]
        if len(same) == 1:
            info, note = same[0], f"matched by input names {sorted(input_names)} (model file differs)"
    if info is None:
        listed = ", ".join(f"{m.key} ({m.path or 'bytes'})" for m in capture.models.values()) or "(none)"
        raise CalibrationError(f"The capture {capture.path} holds no feeds of this model; it has: {listed}. "
                               f"Capture a script that runs this model (aipc capture script.py -o DIR).")
    calls = [c for c in capture.calls_of(info.key) if c.method != "run_with_iobinding"]
    if not calls:
        raise CalibrationError(f"The capture {capture.path} recorded no run() feeds of model {info.key}.")
    wanted = set(input_names)
    signatures = Counter(tuple((m["name"], tuple(m.get("shape") or ())) for m in c.input_meta
                               if m["name"] in wanted) for c in calls)
    best, _ = signatures.most_common(1)[0]
    chosen = [c for c in calls if tuple((m["name"], tuple(m.get("shape") or ())) for m in c.input_meta
                                        if m["name"] in wanted) == best]
    skipped = len(calls) - len(chosen)
    if max_samples is not None:
        chosen = chosen[:max_samples]
    feeds = [{k: v for k, v in c.inputs().items() if k in wanted} for c in chosen]
    missing = wanted - set(feeds[0])
    if missing:
        raise CalibrationError(f"Captured feeds of {info.key} lack inputs {sorted(missing)}.")
    return CalibrationSet(feeds, dict(best), capture.path, info.key, skipped, note)


# -- quantization ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class QuantizeResult:
    """What :func:`quantize_qdq` wrote.

    Attributes:
        path: the QDQ model. precision: ``"w8a8"``/``"w8a16"``. activation_type / weight_type:
        QuantType names. samples: calibration feeds used. preprocessed: whether
        ``qnn_preprocess_model`` (or, for a LayerNorm fusion it discarded, its optimizer pass) changed
        the model. seconds: wall time (s). qdq_nodes: number of
        QuantizeLinear + DequantizeLinear nodes in the result. opset_upgrades: the default-domain opset
        conversions, in order (:class:`onnxwrapper.toolkit._opset.OpsetUpgrade`). fragile: what the
        fragile-tensor policy fused or kept at 16 bits (:class:`onnxwrapper.toolkit._fragile.FragilePlan`).
    """

    path: str
    precision: str
    activation_type: str
    weight_type: str
    samples: int
    preprocessed: bool
    seconds: float
    qdq_nodes: int
    opset_upgrades: tuple[OpsetUpgrade, ...] = ()
    fragile: FragilePlan | None = None

    def __repr__(self) -> str:
        return (f"<QuantizeResult {self.precision} ({self.activation_type} activations, {self.weight_type} weights) "
                f"{self.path}: {self.qdq_nodes} Q/DQ nodes, {self.samples} calibration sample(s), {self.seconds:.1f} s>")


def quantize_qdq(model: Any, output_path: Any, calibration: CalibrationSet | Iterable[Mapping[str, np.ndarray]], *,
                 precision: str = "w8a16", per_channel: bool = True, calibrate_method: str = "MinMax",
                 preprocess: bool = True, op_types_to_quantize: Sequence[str] | None = None,
                 nodes_to_exclude: Sequence[str] | None = None, keep_fragile: bool = True) -> QuantizeResult:
    """Quantize a float model (static shapes) to a QNN-ready QDQ model at ``output_path``.

    Args:
        model: path or ``onnx.ModelProto`` of the float model (not modified).
        output_path: where to write the QDQ model (the caller's choice; nothing else is written
            outside a temporary directory).
        calibration: feeds (same shapes as the model's inputs), e.g. from :func:`calibration_from_capture`.
        precision: ``"w8a16"`` (default) or ``"w8a8"`` (see module doc).
        per_channel: per-channel weight quantization (default ``True``, unlike onnxruntime's
            default: on RapidOCR's recognizer W8A16 per-tensor weights gave SNR 7.0 dB against the
            float model, per-channel 22.1 dB — measured; ``aipc compile --per-tensor`` turns it off).
        calibrate_method: ``onnxruntime.quantization.CalibrationMethod`` member name
            (``"MinMax"``, ``"Entropy"``, ``"Percentile"``, ``"Distribution"``).
        preprocess: run ``qnn_preprocess_model`` first.
        op_types_to_quantize / nodes_to_exclude: passed to ``get_qnn_qdq_config``.
        keep_fragile: keep LayerNorm variances and Softmax denominators out of 8 bits (default
            ``True``; :mod:`onnxwrapper.toolkit._fragile`).

    The model is converted (in memory) to the opset the quantizer needs — 13 for per-channel
    weights, 17 to fuse a decomposed LayerNorm, 21 for 16-bit Q/DQ — and the result says so.

    Raises:
        ValueError: unknown precision or calibration method. CalibrationError: no feeds.
        OpsetConversionError: onnx's version converter cannot convert the model to that opset.
        Whatever onnxruntime.quantization raises for the model.
    """
    # on use: onnxruntime.quantization is only for quantizing
    from onnxruntime.quantization import CalibrationMethod, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)} for quantization, got {precision!r}")
    try:
        method = CalibrationMethod[calibrate_method]
    except KeyError as exc:
        raise ValueError(f"calibrate_method must be one of {[m.name for m in CalibrationMethod]}") from exc
    calib = calibration if isinstance(calibration, CalibrationSet) else CalibrationSet.from_feeds(calibration)
    act, weight = PRECISIONS[precision]
    start = time.perf_counter()
    output_path = os.fspath(output_path)
    original = model if isinstance(model, onnx.ModelProto) else onnx.load(os.fspath(model))
    work = onnx.ModelProto()
    work.CopyFrom(original)
    # onnxruntime 1.31's qnn_preprocess_model fails on models with metadata_props (TypeError in
    # save_and_reload_optimize_model); the metadata is put back on the QDQ model below.
    del work.metadata_props[:]
    with tempfile.TemporaryDirectory(prefix="onnxwrapper-quantize-") as tmp:
        prepared = prepare_for_quantizer(work, tmp, activation_type=act, weight_type=weight, per_channel=per_channel,
                                         preprocess=preprocess, keep_fragile=keep_fragile)
        config = get_qnn_qdq_config(prepared.path, FeedsDataReader(calib.feeds), calibrate_method=method,
                                    activation_type=QuantType[act], weight_type=QuantType[weight],
                                    per_channel=per_channel, init_overrides=prepared.fragile.overrides or None,
                                    op_types_to_quantize=list(op_types_to_quantize or []) or None,
                                    nodes_to_exclude=list(nodes_to_exclude or []) or None)
        os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
        quantize(prepared.path, output_path, config)
    qdq = onnx.load(output_path)
    upgrades = list(prepared.upgrades)
    if default_opset(qdq) != prepared.opset:  # onnxruntime.quantization's own update_opset_version
        upgrades.append(OpsetUpgrade(prepared.opset, default_opset(qdq), ("converted by onnxruntime.quantization",),
                                     by="onnxruntime.quantization"))
    _copy_metadata(original, qdq)
    onnx.save(qdq, output_path)
    count = sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in qdq.graph.node)
    return QuantizeResult(output_path, precision, act, weight, len(calib.feeds), prepared.preprocessed,
                          time.perf_counter() - start, count, tuple(upgrades), prepared.fragile)


def _copy_metadata(src: onnx.ModelProto, dst: onnx.ModelProto) -> None:
    """Give the QDQ model the float model's identity (producer, version, doc, metadata_props), so
    sessions on it report the same ``get_modelmeta()`` as the float model."""
    dst.producer_name, dst.producer_version = src.producer_name, src.producer_version
    dst.domain, dst.model_version, dst.doc_string = src.domain, src.model_version, src.doc_string
    dst.graph.name, dst.graph.doc_string = src.graph.name, src.graph.doc_string
    del dst.metadata_props[:]
    dst.metadata_props.extend(src.metadata_props)


# -- three-way accuracy check ----------------------------------------------------------------------
