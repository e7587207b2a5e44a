"""Shape buckets without the HTP: dim groups from the graph, padding and cutting, and the certificates
ORT's CPU gives (or refuses) on the generated decoders of tests/decoder_models.py."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from onnxwrapper.backends.qnn.model import (DimGroups, GroupRule, Linear, Padding, bucket_size, inferred_merges,
                                            parse_dim)
from onnxwrapper.backends.qnn.session._certify import certify, discover_rule, equal_outputs
from onnxwrapper.kernel import dynamic_inputs
from tests import decoder_models as dm


@pytest.mark.parametrize("text, terms, constant", [
    ("batch", (("batch", 1),), 0),
    ("past_sequence_length + 1", (("past_sequence_length", 1),), 1),
    ("past + seq", (("past", 1), ("seq", 1)), 0),
    ("2*frames - 1", (("frames", 2),), -1),
    ("-n + 8", (("n", -1),), 8),
])
def test_dim_params_are_read_as_linear_expressions(text, terms, constant):
    assert parse_dim(text) == Linear(terms, constant)


@pytest.mark.parametrize("text", ["n*2", "f(x)", "a +", "__import__('os').system('x')", "a/2", ""])
def test_anything_else_is_an_opaque_symbol_never_evaluated(text):
    assert parse_dim(text) is None


def test_the_ladder_is_powers_of_two():
    assert [bucket_size(n) for n in (0, 1, 2, 3, 4, 5, 8, 9, 40, 64, 65)] == [1, 1, 2, 4, 4, 8, 8, 16, 64, 64, 128]


def _groups(model, infer=True):
    return DimGroups.of(model, dynamic_inputs(model), merges=inferred_merges(model) if infer else None)


def test_a_total_length_is_resolved_by_shape_inference_not_by_its_name():
    model = dm.kv_decoder()
    groups = _groups(model)
    assert groups.groups == ["batch", "past_sequence_length", "sequence_length"]
    assert groups.merged == {"total_sequence_length": Linear((("past_sequence_length", 1), ("sequence_length", 1)), 0)}
    shapes = {"input_ids": (1, 1), "attention_mask": (1, 6), "position_ids": (1, 1), "past_key": (1, 2, 5, 8),
              "past_value": (1, 2, 5, 8)}
    assert groups.solve(shapes) == {"batch": 1, "sequence_length": 1, "past_sequence_length": 5}
    assert groups.solve(dict(shapes, attention_mask=(1, 7))) is None  # the mask disagrees: not bucketed
    by_name = _groups(model, infer=False)  # names alone: the mask's length is a group of its own
    assert "total_sequence_length" in by_name.groups


def test_padding_puts_left_groups_in_front_and_right_groups_behind():
    groups = _groups(dm.kv_decoder())
    sizes = {"batch": 1, "sequence_length": 3, "past_sequence_length": 5}
    rules = {"past_sequence_length": GroupRule("left", "zeros", {"present_key": (0, 0, 1, 0)}),
             "sequence_length": GroupRule("right", "zeros", {"present_key": (0, 0, 1, 0), "logits": (0, 1, 0)})}
    padding = Padding(groups, sizes, dict(sizes, past_sequence_length=8, sequence_length=4), rules)
    feed = {"attention_mask": np.ones((1, 8), np.int64), "past_key": np.ones((1, 2, 5, 8), np.float32),
            "input_ids": np.full((1, 3), 7, np.int64)}
    padded = padding.pad_feed(feed)
    assert padded["attention_mask"].tolist() == [[0, 0, 0] + [1] * 8 + [0]]
    assert padded["past_key"].shape == (1, 2, 8, 8) and not padded["past_key"][:, :, :3].any()
    assert padded["input_ids"].tolist() == [[7, 7, 7, 0]]
    present = np.arange(12, dtype=np.float32).reshape(1, 1, 12, 1)
    logits = np.arange(4, dtype=np.float32).reshape(1, 4, 1)
    cut = padding.cut_outputs(["present_key", "logits"], [present, logits])
    assert cut[0].ravel().tolist() == list(range(3, 11)) and cut[1].ravel().tolist() == [0, 1, 2]
    assert cut[0].flags.c_contiguous


def _cpu(model):
    session = onnxruntime.InferenceSession(model.SerializeToString())
    return (lambda feed: session.run(None, dict(feed))), [o.name for o in session.get_outputs()]


def _prefix_feed(length, batch=1):
    return {"input_ids": np.arange(1, length + 1, dtype=np.int64)[None].repeat(batch, 0) % dm.VOCAB,
            "encoder_hidden_states": dm.encoder_states(batch)}


def test_a_causal_prefix_is_certified_right_padded_and_its_logits_cut_at_the_end():
    model = dm.prefix_decoder()
    run, names = _cpu(model)
    groups, feed = _groups(model), _prefix_feed(5)
    sizes = groups.solve({k: v.shape for k, v in feed.items()})
    rule = discover_rule(run, names, feed, run(feed), groups, sizes, "decoder_sequence_length")
    assert rule == GroupRule("right", "zeros", {"logits": (0, 1, 0)})
    padding = Padding(groups, sizes, dict(sizes, decoder_sequence_length=8), {"decoder_sequence_length": rule})
    assert certify(run, names, feed, run(feed), padding) is None


def test_bidirectional_attention_over_the_padded_dim_is_refused_with_the_reason():
    model = dm.prefix_decoder(causal=False)
    run, names = _cpu(model)
    groups, feed = _groups(model), _prefix_feed(5)
    sizes = groups.solve({k: v.shape for k, v in feed.items()})
    why = discover_rule(run, names, feed, run(feed), groups, sizes, "decoder_sequence_length")
    assert isinstance(why, str) and "right/zeros: output 'logits' moves by" in why and "left/zeros" in why


@pytest.mark.parametrize("positions", ["rotary", "learned"])
def test_a_kv_cache_past_is_certified_left_padded_with_its_mask(positions):
    model = dm.kv_decoder(positions=positions)
    run, names = _cpu(model)
    groups = _groups(model)
    past = np.random.default_rng(3).standard_normal((1, 2, 5, 8)).astype(np.float32)
    feed = {"input_ids": np.array([[4]], np.int64), "attention_mask": np.ones((1, 6), np.int64),
            "position_ids": np.array([[5]], np.int64), "past_key": past, "past_value": past * 2}
    sizes = groups.solve({k: v.shape for k, v in feed.items()})
    rule = discover_rule(run, names, feed, run(feed), groups, sizes, "past_sequence_length")
    assert isinstance(rule, GroupRule) and (rule.side, rule.fill) == ("left", "zeros")
    assert rule.outputs == {"logits": (0, 0, 0), "present_key": (0, 0, 1, 0), "present_value": (0, 0, 1, 0)}


def test_positions_computed_from_the_past_length_are_refused():
    model = dm.kv_decoder(positions="past_length")
    run, names = _cpu(model)
    groups = _groups(model)
    past = np.ones((1, 2, 5, 8), np.float32)
    feed = {"input_ids": np.array([[4]], np.int64), "attention_mask": np.ones((1, 6), np.int64),
            "past_key": past, "past_value": past}
    sizes = groups.solve({k: v.shape for k, v in feed.items()})
    assert isinstance(discover_rule(run, names, feed, run(feed), groups, sizes, "past_sequence_length"), str)


def test_a_strided_output_axis_is_refused_by_its_shape():
    """Padding by two amounts tells a strided axis (ceil(n/2)) from a linear one."""
    ref = [np.zeros((1, 4))]
    from onnxwrapper.backends.qnn.session._certify import _coefficients

    assert isinstance(_coefficients(["y"], ref, [np.zeros((1, 4))], [np.zeros((1, 5))], (1, 2)), str)
    assert _coefficients(["y"], ref, [np.zeros((1, 5))], [np.zeros((1, 6))], (1, 2)) == {"y": (0, 1)}


def test_equal_outputs_means_the_cpus_own_precision():
    a = np.array([1.0, -2.0, np.nan], np.float32)
    assert equal_outputs(["y"], [a], [a + np.float32(1e-6)]) is None
    assert "moves by" in equal_outputs(["y"], [a], [a + np.float32(1e-3)])
    assert "NaN" in equal_outputs(["y"], [a], [np.array([1.0, -2.0, 0.0], np.float32)])
    assert "differs" in equal_outputs(["i"], [np.array([1, 2])], [np.array([1, 3])])
    assert "shape" in equal_outputs(["y"], [a], [a[:2]])


def test_one_dynamic_input_needs_no_shape_inference():
    """The dims of one input are never each other's expressions: no symbolic shape inference (10 s on
    an OCR detector, measured) for such a model; two or more dynamic inputs may be related."""
    from tests import models

    single = onnx_model(models.smallconv(batch="N", hw=("H", "W")))
    assert not DimGroups.of(single, dynamic_inputs(single)).needs_inference
    assert DimGroups.of(dm.kv_decoder(), dynamic_inputs(dm.kv_decoder())).needs_inference


def onnx_model(data: bytes):
    import onnx

    return onnx.load_from_string(data)
