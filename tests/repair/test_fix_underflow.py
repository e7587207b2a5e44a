"""``aipc fix`` for an FP16 underflow that ``--localize`` named: the upscale is tried at the named
tensor, the report says why it cannot help, and the underflow region goes to the CPU instead.

The candidates are chosen on the CPU (no NPU needed); the QNN runs are in test_fix_qnn.py.
"""

from __future__ import annotations

import onnx

from onnxwrapper.repair.fix._candidates import candidates_for
from tests import repair_models

LOC = {"cause": "underflow", "culprit": {"node": "power", "tensor": "power"}, "first": {"node": "log", "tensor": "logp"}}


def test_an_underflow_into_a_log_says_why_no_upscale_helps_and_offers_its_region_on_the_cpu():
    model = onnx.load_model_from_string(repair_models.cqt_log())
    feeds = [{"x": repair_models.cqt_inputs()}]
    cands, notes = candidates_for(model, LOC, feeds, "fp16", higher_precision="fp32")
    # the front end that computes the small values and the Log that needs them, the head on the NPU: the
    # underflow region, found also by the search of where FP16 rounding starts (judged once, noted)
    region = ("cqt_re", "cqt_im", "re_sq", "im_sq", "power", "log")
    assert any(c.kind == "cpu" and c.cpu_subgraphs == (region,) for c in cands), [c.title for c in cands]
    assert any("the FP16 underflow region on the CPU (6 node(s))" in n for n in notes), notes
    assert all(c.kind == "cpu" for c in cands[:3]) and cands[-1].kind == "precision"  # fp32 asked for: last
    why = next(n for n in notes if n.startswith("no exact upscale helps"))
    assert "'power' holds 60 of 64 non-zero values below 6.1e-05" in why and "Log 'log'" in why, why
    assert "cannot pass through exactly" in why


def test_an_upscale_that_reaches_the_operation_is_chosen_for_the_named_tensor():
    """The small values of one filter's power feeding a square root instead of a log: a power of two
    folded into the filter's weight travels through the square and the square root, exactly."""
    model = onnx.load_model_from_string(repair_models.cqt_log())
    graph = model.graph
    keep = [n for n in graph.node if n.name not in ("cqt_im", "im_sq", "power")]
    for node in keep:
        if node.op_type == "Log":
            node.op_type, node.input[0] = "Sqrt", "re2"
    del graph.node[:]
    graph.node.extend(keep)
    loc = {"cause": "underflow", "culprit": {"node": "re_sq", "tensor": "re2"}, "first": {"node": "log", "tensor": "logp"}}
    cands, notes = candidates_for(model, loc, [{"x": repair_models.cqt_inputs()}], "fp16", remedies=("exact",))
    assert [c.kind for c in cands] == ["exact"], notes
    (rewrite,) = cands[0].rewrites
    assert rewrite.rewrite == "rescale" and rewrite.node == "cqt_re" and rewrite.params["log2"] > 0
    assert any(n.startswith("'re2' holds") and "leaves" in n for n in notes), notes
