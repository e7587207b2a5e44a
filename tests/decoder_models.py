"""Small generated generative decoders (onnx.helper, random weights) and the decoding loops that drive them.

Stand-ins for the generative apps of shape buckets (docs/backends/qnn.md, *Shape buckets*): each is a
one-layer transformer decoder of hidden size 16, 2 heads of 8, a vocabulary of 32, built the way
exporters write them (Hugging Face's ONNX exports: symbolic ``dim_param`` names, ``Shape``-driven
causal masks and positions):

* :func:`prefix_decoder` — T5-style, re-run on the whole prefix at every step (no KV cache), with
  cross-attention to encoder states, learned absolute positions (``Range`` over the prefix length)
  and an in-graph causal mask. Inputs ``input_ids [batch, decoder_sequence_length]`` (int64) and
  ``encoder_hidden_states [batch, encoder_sequence_length, 16]``; output ``logits [batch,
  decoder_sequence_length, 32]``. With ``causal=False`` the self-attention is bidirectional (no mask):
  padding the prefix then changes the answer.
* :func:`kv_decoder` — GPT-style with a KV cache: ``input_ids [batch, sequence_length]``,
  ``attention_mask [batch, total_sequence_length]`` (past + current, 1 = attend), ``position_ids
  [batch, sequence_length]``, ``past_key``/``past_value [batch, 2, past_sequence_length, 8]``;
  outputs ``logits``, ``present_key``/``present_value [batch, 2, total_sequence_length, 8]``.
  ``positions`` = ``"rotary"`` (rotary embeddings looked up by ``position_ids``), ``"learned"``
  (a learned table looked up by ``position_ids``) or ``"past_length"`` (positions computed from the
  past's length in the graph, no ``position_ids`` input: left padding then shifts them).

:func:`greedy_prefix`, :func:`greedy_kv` and :func:`beam_prefix` are the apps' decoding loops
(greedy, and a beam search whose batch goes from 1 to ``beams``), returning the tokens and the logits
of every step.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

D, HEADS, HEAD_DIM, VOCAB, MAX_POS = 16, 2, 8, 32, 128
_NEG = -1.0e4  # additive mask value (as BERT/GPT-2 exports): exp() of it is exactly 0 in fp32 and FP16


class _Graph:
    """A small helper collecting nodes and initializers with unique names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, value, hint: str = "c") -> str:
        name = self.name(hint)
        self.inits.append(onnx.numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape, scale: float = 1.0) -> str:
        fan_in = shape[0] if len(shape) > 1 else 1
        return self.const((self.rng.standard_normal(shape) * scale / np.sqrt(fan_in)).astype(np.float32), "w")

    def op(self, op_type: str, inputs, n_out: int = 1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def dim(self, tensor: str, axis: int) -> str:
        """``Shape(tensor)[axis]`` as a 1-element int64 tensor."""
        return self.op("Shape", [tensor], start=axis, end=axis + 1)

    def heads(self, x: str) -> str:
        """``[b, s, 16]`` → ``[b, 2, s, 8]``."""
        r = self.op("Reshape", [x, self.const(np.array([0, 0, HEADS, HEAD_DIM], np.int64))])
        return self.op("Transpose", [r], perm=[0, 2, 1, 3])

    def merge(self, x: str) -> str:
        """``[b, 2, s, 8]`` → ``[b, s, 16]``."""
        t = self.op("Transpose", [x], perm=[0, 2, 1, 3])
        return self.op("Reshape", [t, self.const(np.array([0, 0, D], np.int64))])

    def attend(self, q: str, k: str, v: str, bias: str | None) -> str:
        kt = self.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = self.op("Mul", [self.op("MatMul", [q, kt]), self.const(np.float32(1 / np.sqrt(HEAD_DIM)))])
        if bias is not None:
            scores = self.op("Add", [scores, bias])
        return self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])

    def ffn_norm(self, x: str) -> str:
        h = self.op("MatMul", [self.op("Relu", [self.op("MatMul", [x, self.weight(D, 32)])]), self.weight(32, D)])
        x = self.op("Add", [x, h])
        return self.op("LayerNormalization", [x, self.const(np.ones(D, np.float32)),
                                              self.const(np.zeros(D, np.float32))], axis=-1)

    def model(self, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "decoder", inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
        onnx.checker.check_model(model)
        return model


def _info(name: str, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


def prefix_decoder(*, causal: bool = True, seed: int = 0) -> onnx.ModelProto:
    """The T5-style decoder re-run on its prefix (module docstring)."""
    g = _Graph(seed)
    ids, enc = "input_ids", "encoder_hidden_states"
    x = g.op("Gather", [g.weight(VOCAB, D, scale=4.0), ids])
    length = g.op("Squeeze", [g.dim(ids, 1), g.const(np.array([0], np.int64))])
    pos = g.op("Range", [g.const(np.int64(0)), length, g.const(np.int64(1))])
    x = g.op("Add", [x, g.op("Gather", [g.weight(MAX_POS, D), pos])])
    bias = None
    if causal:
        square = g.op("Concat", [g.dim(ids, 1), g.dim(ids, 1)], axis=0)
        ones = g.op("ConstantOfShape", [square], value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]))
        lower = g.op("Trilu", [ones], upper=0)
        bias = g.op("Mul", [g.op("Sub", [g.const(np.float32(1.0)), lower]), g.const(np.float32(_NEG))])
    q, k, v = (g.heads(g.op("MatMul", [x, g.weight(D, D)])) for _ in range(3))
    x = g.op("Add", [x, g.op("MatMul", [g.merge(g.attend(q, k, v, bias)), g.weight(D, D)])])
    cq = g.heads(g.op("MatMul", [x, g.weight(D, D)]))
    ck, cv = (g.heads(g.op("MatMul", [enc, g.weight(D, D)])) for _ in range(2))
    x = g.op("Add", [x, g.op("MatMul", [g.merge(g.attend(cq, ck, cv, None)), g.weight(D, D)])])
    x = g.ffn_norm(x)
    g.nodes.append(helper.make_node("MatMul", [x, g.weight(D, VOCAB, scale=4.0)], ["logits"], name="lm_head"))
    return g.model([_info(ids, TensorProto.INT64, ["batch", "decoder_sequence_length"]),
                    _info(enc, TensorProto.FLOAT, ["batch", "encoder_sequence_length", D])],
                   [_info("logits", TensorProto.FLOAT, ["batch", "decoder_sequence_length", VOCAB])])


def _rotate(g: _Graph, x: str, cos: str, sin: str) -> str:
    """Rotary embedding of ``x [b, 2, s, 8]``: ``x·cos + rotate_half(x)·sin``."""
    a, b = g.op("Split", [x, g.const(np.array([HEAD_DIM // 2] * 2, np.int64))], n_out=2, axis=-1)
    half = g.op("Concat", [g.op("Neg", [b]), a], axis=-1)
    return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [half, sin])])


def kv_decoder(*, positions: str = "rotary", seed: int = 1) -> onnx.ModelProto:
    """The GPT-style decoder with a KV cache (module docstring)."""
    g = _Graph(seed)
    ids, mask, pos_ids, past_k, past_v = "input_ids", "attention_mask", "position_ids", "past_key", "past_value"
    x = g.op("Gather", [g.weight(VOCAB, D, scale=4.0), ids])
    seq = g.dim(ids, 1)
    if positions == "past_length":  # positions = past length + arange(seq), computed from shapes
        start = g.op("Squeeze", [g.dim(past_k, 2), g.const(np.array([0], np.int64))])
        stop = g.op("Add", [start, g.op("Squeeze", [seq, g.const(np.array([0], np.int64))])])
        position = g.op("Range", [start, stop, g.const(np.int64(1))])
    else:
        position = pos_ids
    if positions in ("learned", "past_length"):
        x = g.op("Add", [x, g.op("Gather", [g.weight(MAX_POS, D), position])])
    q, k, v = (g.heads(g.op("MatMul", [x, g.weight(D, D)])) for _ in range(3))
    if positions == "rotary":
        freq = 1.0 / (10000 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM))
        angles = np.outer(np.arange(MAX_POS), freq)
        table = np.concatenate([angles, angles], axis=-1)
        cos = g.op("Unsqueeze", [g.op("Gather", [g.const(np.cos(table).astype(np.float32)), position]),
                                 g.const(np.array([1], np.int64))])
        sin = g.op("Unsqueeze", [g.op("Gather", [g.const(np.sin(table).astype(np.float32)), position]),
                                 g.const(np.array([1], np.int64))])
        q, k = _rotate(g, q, cos, sin), _rotate(g, k, cos, sin)
    keys = g.op("Concat", [past_k, k], axis=2)
    values = g.op("Concat", [past_v, v], axis=2)
    g.nodes.append(helper.make_node("Identity", [keys], ["present_key"], name="present_key_out"))
    g.nodes.append(helper.make_node("Identity", [values], ["present_value"], name="present_value_out"))
    # attention mask [b, T] → additive bias [b, 1, 1, T]; causal over the new tokens: key j ≤ past + i
    pad = g.op("Mul", [g.op("Sub", [g.const(np.float32(1.0)), g.op("Cast", [mask], to=TensorProto.FLOAT)]),
                       g.const(np.float32(_NEG))])
    pad = g.op("Unsqueeze", [pad, g.const(np.array([1, 2], np.int64))])
    total = g.op("Squeeze", [g.dim(keys, 2), g.const(np.array([0], np.int64))])
    new = g.op("Squeeze", [seq, g.const(np.array([0], np.int64))])
    key_index = g.op("Range", [g.const(np.int64(0)), total, g.const(np.int64(1))])
    query_index = g.op("Add", [g.op("Range", [g.const(np.int64(0)), new, g.const(np.int64(1))]),
                               g.op("Sub", [total, new])])
    later = g.op("Greater", [g.op("Unsqueeze", [key_index, g.const(np.array([0], np.int64))]),
                             g.op("Unsqueeze", [query_index, g.const(np.array([1], np.int64))])])
    causal = g.op("Where", [later, g.const(np.float32(_NEG)), g.const(np.float32(0.0))])
    bias = g.op("Add", [pad, causal])
    x = g.op("Add", [x, g.op("MatMul", [g.merge(g.attend(q, keys, values, bias)), g.weight(D, D)])])
    x = g.ffn_norm(x)
    g.nodes.append(helper.make_node("MatMul", [x, g.weight(D, VOCAB, scale=4.0)], ["logits"], name="lm_head"))
    inputs = [_info(ids, TensorProto.INT64, ["batch", "sequence_length"]),
              _info(mask, TensorProto.INT64, ["batch", "total_sequence_length"])]
    if positions != "past_length":
        inputs.append(_info(pos_ids, TensorProto.INT64, ["batch", "sequence_length"]))
    kv = ["batch", HEADS, "past_sequence_length", HEAD_DIM]
    inputs += [_info(past_k, TensorProto.FLOAT, kv), _info(past_v, TensorProto.FLOAT, kv)]
    present = ["batch", HEADS, "total_sequence_length", HEAD_DIM]
    return g.model(inputs, [_info("logits", TensorProto.FLOAT, ["batch", "sequence_length", VOCAB]),
                            _info("present_key", TensorProto.FLOAT, present),
                            _info("present_value", TensorProto.FLOAT, present)])


def encoder_states(batch: int = 1, length: int = 6, seed: int = 7) -> np.ndarray:
    """Encoder hidden states ``[batch, length, 16]`` (float32) for :func:`prefix_decoder`."""
    return np.random.default_rng(seed).standard_normal((batch, length, D)).astype(np.float32)


def greedy_prefix(session, steps: int, enc: np.ndarray | None = None, start: int = 1):
    """Greedy decoding with :func:`prefix_decoder`'s ``session`` (an ``InferenceSession``): each step
    re-runs the whole prefix ``[1, step]``. Returns ``(tokens, [logits of the last position per step])``."""
    enc = encoder_states() if enc is None else enc
    tokens = [start]
    logits = []
    for _ in range(steps):
        out = session.run(["logits"], {"input_ids": np.array([tokens], np.int64), "encoder_hidden_states": enc})[0]
        logits.append(out[0, -1])
        tokens.append(int(out[0, -1].argmax()))
    return tokens, logits


def beam_prefix(session, steps: int, beams: int = 4, enc: np.ndarray | None = None, start: int = 1):
    """Beam search with :func:`prefix_decoder`'s ``session``: batch 1 at the first step, ``beams``
    hypotheses (batch ``beams``) afterwards, scored by summed log-softmax. Returns ``(best tokens,
    [logits of every hypothesis's last position per step])``."""
    enc = encoder_states() if enc is None else enc
    hyps, scores = [[start]], np.zeros(1)
    logits = []
    for _ in range(steps):
        out = session.run(["logits"], {"input_ids": np.array(hyps, np.int64),
                                       "encoder_hidden_states": np.repeat(enc, len(hyps), axis=0)})[0][:, -1]
        logits.append(out)
        logp = out - out.max(axis=-1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(axis=-1, keepdims=True))
        total = (scores[:, None] + logp).reshape(-1)
        best = np.argsort(-total, kind="stable")[:beams]
        hyps = [hyps[i // VOCAB] + [int(i % VOCAB)] for i in best]
        scores = total[best]
    return hyps[0], logits


def greedy_kv(session, steps: int, prompt=(1, 5, 9), positions: str = "rotary"):
    """Greedy decoding with :func:`kv_decoder`'s ``session``: one prefill call on the prompt (past of
    length 0), then one call per token with the cache fed back. Returns ``(tokens, [logits of the
    last position per step])``."""
    tokens = list(prompt)
    past = np.zeros((1, HEADS, 0, HEAD_DIM), np.float32)
    past_k, past_v = past, past
    new = list(prompt)
    logits = []
    for _ in range(steps):
        total = past_k.shape[2] + len(new)
        feed = {"input_ids": np.array([new], np.int64), "attention_mask": np.ones((1, total), np.int64),
                "past_key": past_k, "past_value": past_v}
        if positions != "past_length":
            feed["position_ids"] = np.arange(total - len(new), total, dtype=np.int64)[None]
        out, past_k, past_v = session.run(["logits", "present_key", "present_value"], feed)
        logits.append(out[0, -1])
        tokens.append(int(out[0, -1].argmax()))
        new = [tokens[-1]]
    return tokens, logits
