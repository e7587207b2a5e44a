"""Shape buckets on the HTP simulator: generative decoders compile about log2(steps) sizes, give the CPU's
tokens and logits within the diff's FP16 tolerance, and fall back where padding is not exact.

The decoders and their loops are tests/decoder_models.py (onnx.helper, random weights)."""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import onnxruntime
import pytest

import onnxwrapper
from onnxwrapper.diff import snr_bar_db
from tests import decoder_models as dm
from tests.conftest import qnn_available

pytestmark = [pytest.mark.qnn, pytest.mark.skipif(not qnn_available(), reason="onnxruntime-qnn not installed")]

STEPS = 20
BOUND = math.ceil(math.log2(STEPS)) + 2


def _snr_db(ref, got) -> float:
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    noise = np.sum((ref - got) ** 2)
    return float("inf") if noise == 0 else 10 * math.log10(np.sum(ref ** 2) / noise)


def _compiles(session) -> int:
    return sum(a.origin == "compiled" for a in session.backend_session.artifacts)


def _sessions(model, cache, **options):
    data = model.SerializeToString()
    return (onnxruntime.InferenceSession(data),
            onnxwrapper.InferenceSession(data, backend="qnn", backend_options={"cache_dir": str(cache), **options}))


CASES = {
    "prefix (T5-style, cross-attention)": (dm.prefix_decoder, lambda s: dm.greedy_prefix(s, STEPS)),
    "beam search, batch 1 → 4": (dm.prefix_decoder, lambda s: dm.beam_prefix(s, STEPS)),
    "KV cache, rotary positions": (dm.kv_decoder, lambda s: dm.greedy_kv(s, STEPS)),
    "KV cache, learned positions": (lambda: dm.kv_decoder(positions="learned"),
                                    lambda s: dm.greedy_kv(s, STEPS, positions="learned")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_generative_loop_compiles_about_log2_sizes_and_keeps_the_cpus_tokens(tmp_path, case):
    make, loop = CASES[case]
    cpu, qnn = _sessions(make(), tmp_path)
    tokens, logits = loop(cpu)
    got_tokens, got_logits = loop(qnn)
    assert got_tokens == tokens
    assert min(_snr_db(a, b) for a, b in zip(logits, got_logits)) >= snr_bar_db("fp16")
    assert _compiles(qnn) <= BOUND
    summary = qnn.get_partition().summary()
    assert "shape buckets:" in summary and "compiles saved" in summary, summary
    assert qnn.get_partition().buckets[-1]["saved"] >= STEPS - BOUND - 1


def test_a_bidirectional_model_falls_back_with_the_reason_and_its_answer_unchanged(tmp_path, caplog):
    cpu, qnn = _sessions(dm.prefix_decoder(causal=False), tmp_path)
    with caplog.at_level(logging.INFO, logger="onnxwrapper.qnn"):
        tokens, logits = dm.greedy_prefix(cpu, 6)
        got_tokens, got_logits = dm.greedy_prefix(qnn, 6)
    assert got_tokens == tokens and min(_snr_db(a, b) for a, b in zip(logits, got_logits)) >= snr_bar_db("fp16")
    assert _compiles(qnn) == 6  # one specialization per length
    assert "no shape buckets for dim group 'decoder_sequence_length'" in caplog.text
    assert "moves by" in caplog.text and not qnn.get_partition().buckets


def test_rules_and_certificates_are_cached_with_the_compiled_sizes(tmp_path, monkeypatch):
    """A second session of the model finds the rule and the certificates in the compile cache: no CPU
    certification, the group is bucketed from its first call, and nothing is compiled."""
    from onnxwrapper.backends.qnn.session import _buckets

    model = dm.prefix_decoder()
    _cpu, first = _sessions(model, tmp_path)
    dm.greedy_prefix(first, 9)
    calls = []
    monkeypatch.setattr(_buckets, "discover_rule", lambda *a: calls.append("rule"))
    monkeypatch.setattr(_buckets, "certify", lambda *a: calls.append("certify"))
    _cpu, again = _sessions(model, tmp_path)
    dm.greedy_prefix(again, 9)
    assert calls == [] and _compiles(again) == 0
    assert {a.shapes["input_ids"][1] for a in again.backend_session.artifacts} == {1, 2, 4, 8, 16}


def test_strict_certifies_every_new_size(tmp_path, monkeypatch):
    from onnxwrapper.backends.qnn.session import _buckets

    seen = []
    real = _buckets.certify
    monkeypatch.setattr(_buckets, "certify", lambda run, names, feed, ref, padding: seen.append(
        feed["input_ids"].shape[1]) or real(run, names, feed, ref, padding))
    _cpu, qnn = _sessions(dm.prefix_decoder(), tmp_path, strict=True)
    dm.greedy_prefix(qnn, 7)  # lengths 1..7: 3, 5, 6, 7 are padded
    assert seen == [3, 5, 6, 7]


def test_a_batch_padded_into_its_bucket_gives_each_sample_its_own_answer(tmp_path):
    cpu, qnn = _sessions(dm.prefix_decoder(), tmp_path)
    feeds = [{"input_ids": np.arange(b * 3, dtype=np.int64).reshape(b, 3) % dm.VOCAB,
              "encoder_hidden_states": dm.encoder_states(b)} for b in (1, 4, 3)]
    for feed in feeds:
        np.testing.assert_allclose(qnn.run(None, feed)[0], cpu.run(None, feed)[0], atol=0.1, rtol=0.02)
    assert [a.shapes["input_ids"][0] for a in qnn.backend_session.artifacts] == [1, 4]  # batch 3 ran as 4


def test_ort_values_and_run_async_are_cut_back_too(tmp_path):
    cpu, qnn = _sessions(dm.prefix_decoder(), tmp_path)
    for length in (1, 2):
        qnn.run(None, {"input_ids": np.ones((1, length), np.int64), "encoder_hidden_states": dm.encoder_states()})
    feed = {"input_ids": np.ones((1, 3), np.int64), "encoder_hidden_states": dm.encoder_states()}
    ref = cpu.run(None, feed)[0]
    values = {k: onnxruntime.OrtValue.ortvalue_from_numpy(v) for k, v in feed.items()}
    got = qnn.run_with_ort_values(["logits"], values)[0].numpy()
    assert got.shape == ref.shape == (1, 3, dm.VOCAB)
    done = []
    qnn.run_async(None, feed, lambda outs, data, err: done.append((outs, err)), None)
    for _ in range(200):
        if done:
            break
        time.sleep(0.05)
    assert done and not done[0][1] and done[0][0][0].shape == ref.shape  # ORT's callback: error text '' when none
    assert any(a.shapes["input_ids"][1] == 4 for a in qnn.backend_session.artifacts)


_APP = """
import sys
import numpy as np
import onnxruntime as ort
session = ort.InferenceSession(sys.argv[1])
enc = np.random.default_rng(7).standard_normal((1, 6, 16)).astype(np.float32)
tokens = [1]
for _ in range(9):
    logits = session.run(None, {"input_ids": np.array([tokens], np.int64), "encoder_hidden_states": enc})[0]
    tokens.append(int(logits[0, -1].argmax()))
print("tokens", tokens)
"""


@pytest.mark.slow
def test_aipc_v_and_the_diff_report_say_which_buckets_served_the_calls(tmp_path):
    """Per model: the compiled sizes, the calls and shapes they served, the compiles saved — at the end
    of an ``aipc -v`` run and as a note of the ``aipc diff`` report, whose verdict is unchanged."""
    import os
    import subprocess
    import sys

    (tmp_path / "app.py").write_text(_APP)
    (tmp_path / "dec.onnx").write_bytes(dm.prefix_decoder().SerializeToString())
    env = dict(os.environ, ONNXWRAPPER_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-m", "aipc", "--backend", "qnn", "-v", "app.py", "dec.onnx"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "shape buckets: 9 shapes in 9 calls served by 5 compiled sizes (4 compiles saved)" in run.stderr
    diff = subprocess.run([sys.executable, "-m", "aipc", "diff", "--backends", "cpu,qnn", "--no-html", "--dir",
                           "d", "app.py", "dec.onnx"], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=600)
    assert diff.returncode == 0, diff.stdout + diff.stderr
    assert "note: qnn: session 1 (dec-" in diff.stdout and "served by 5 compiled sizes" in diff.stdout, diff.stdout
