"""Lesson 17's package code: band and chunked masks, the ring-buffer KV cache of a windowed
layer, GPT(window=...), the real models' layouts and the lesson's experiments."""

from __future__ import annotations

import pytest
import torch

from course_utils.data.model_configs import (
    GEMMA_3_27B,
    GPT_OSS_120B,
    LLAMA_3_8B,
    cache_bytes_per_token,
    cache_bytes_per_token_at,
)
from course_utils.experiments.l17_long_context import (
    LOOKUP_VALUES,
    fact_lookup_batch,
    lookup_accuracy_by_distance,
    lookup_vocab_size,
    masked_nll,
    measured_reach,
    train_fact_lookup,
)
from course_utils.models.gpt import GPT
from course_utils.nn.attention import (
    MultiHeadAttention,
    merge_heads,
    softmax_with_sink,
    split_heads,
)
from course_utils.nn.generation import generate
from course_utils.nn.kv_cache import KVCache
from course_utils.nn.masks import band_mask, causal_mask, chunked_mask


def _band_by_loops(n_q, n_k, window, sinks=0):
    mask = torch.zeros(n_q, n_k, dtype=torch.bool)
    for i in range(n_q):
        position = n_k - n_q + i
        for j in range(n_k):
            mask[i, j] = j <= position and (position - j < window or j < sinks)
    return mask


@pytest.mark.parametrize("n_q, n_k, window, sinks",
                         [(6, 6, 3, 0), (2, 9, 4, 0), (1, 5, 1, 0), (7, 7, 2, 2), (3, 10, 20, 0),
                          (4, 12, 3, 4)])
def test_band_mask_is_the_window_written_out(n_q, n_k, window, sinks):
    assert torch.equal(band_mask(n_q, n_k, window=window, sinks=sinks),
                       _band_by_loops(n_q, n_k, window, sinks))


def test_band_mask_with_a_wide_window_is_causal():
    assert torch.equal(band_mask(5, 9, window=9), causal_mask(5, 9))


def test_chunked_mask():
    mask = chunked_mask(2, 8, chunk=3)  # queries at positions 6 and 7: chunk 6..8
    assert mask.int().tolist() == [[0, 0, 0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0, 1, 1]]
    assert torch.equal(chunked_mask(6, chunk=6), causal_mask(6))


@pytest.mark.parametrize("window", [4, [3, None, 5], [None, 2, None], None])
@pytest.mark.parametrize("sink, gate", [(False, False), (True, False), (False, True)])
def test_windowed_gpt_generates_the_same_tokens_with_and_without_the_cache(window, sink, gate):
    torch.manual_seed(0)
    num_layers = len(window) if isinstance(window, list) else 2
    model = GPT(30, 48, 16, 2, num_layers, window=window, sink=sink, gate=gate).eval()
    with torch.no_grad():  # larger weights make every position's logits differ
        for parameter in model.parameters():
            parameter.mul_(8)
    prompt = torch.randint(30, (2, 5))
    cached = generate(model, prompt, 30, use_cache=True)
    assert torch.equal(cached, generate(model, prompt, 30, use_cache=False))


@pytest.mark.parametrize("chunks", [(1,) * 30, (7, 1, 5, 3, 2, 9, 3)])
@pytest.mark.parametrize("sink, gate", [(False, False), (True, False), (False, True),
                                        (True, True)])
def test_cached_logits_equal_the_band_masked_pass(chunks, sink, gate):
    torch.manual_seed(1)
    model = GPT(30, 48, 16, 2, 3, window=[4, None, 6], sink=sink, gate=gate).eval()
    if sink:  # sink logits away from 0, different per head
        with torch.no_grad():
            for block in model.blocks:
                block.self_attn.sink_logit.normal_(0.0, 2.0)
    tokens = torch.randint(30, (2, sum(chunks)))
    cache, outputs, start = KVCache(), [], 0
    with torch.no_grad():
        whole = model(tokens)
        for size in chunks:
            outputs.append(model(tokens[:, start:start + size], cache=cache))
            start += size
    assert torch.allclose(torch.cat(outputs, dim=1), whole, atol=1e-5)
    assert cache.seq_len == sum(chunks)
    assert [cache.layer_held(layer) for layer in range(3)] == [4, sum(chunks), 6]


def test_a_windowed_layer_stops_growing_at_its_window():
    torch.manual_seed(2)
    model = GPT(30, 64, 16, 2, 2, window=5).eval()
    cache = KVCache()
    sizes = []
    with torch.no_grad():
        model(torch.randint(30, (1, 3)), cache=cache)
        for _ in range(20):
            model(torch.randint(30, (1, 1)), cache=cache)
            sizes.append(cache.nbytes)
    assert cache.seq_len == 23
    assert sizes[0] < sizes[2] == sizes[-1]  # grows to 5 positions, then stays
    assert cache.layer_held(0) == cache.layer_held(1) == 5


def test_ring_buffer_slots():
    cache = KVCache()
    for position in range(7):
        value = torch.full((1, 1, 1, 1), float(position))
        keys, _ = cache.append(0, value, value, window=3)
        # what the attention gets: the held positions oldest first, then the new one
        assert keys.flatten().tolist() == [float(p) for p in range(max(0, position - 3),
                                                                   position + 1)]
    # positions 4, 5, 6 sit in slots 4 % 3 = 1, 5 % 3 = 2, 6 % 3 = 0
    assert cache.keys[0].flatten().tolist() == [6.0, 4.0, 5.0]


def test_the_cache_refuses_a_change_of_window():
    cache = KVCache()
    k = torch.zeros(1, 1, 2, 4)
    cache.append(0, k, k, window=4)
    with pytest.raises(ValueError, match="window should stay 4"):
        cache.append(0, k, k)


def test_gpt_without_window_is_unchanged():
    torch.manual_seed(3)
    plain = GPT(20, 16, 16, 2, 2)
    torch.manual_seed(3)
    explicit = GPT(20, 16, 16, 2, 2, window=[None, None])
    tokens = torch.randint(20, (2, 16))
    assert torch.equal(plain(tokens), explicit(tokens))
    assert plain.windows == (None, None)


def test_measured_reach_is_layers_times_window_minus_one():
    torch.manual_seed(4)
    for window, layers, expected in ((4, 3, 9), (6, 2, 10), ([3, None], 2, 39)):
        model = GPT(30, 40, 16, 2, layers, window=window)
        assert measured_reach(model, 40, torch.Generator().manual_seed(0)) == expected


def test_cache_bytes_per_token_at_counts_what_each_layer_keeps():
    dense = 2 * 32 * 8 * 128 * 2  # keys and values, 32 layers, 8 heads of 128, bfloat16
    for context in (8192, 131072):
        assert cache_bytes_per_token_at(LLAMA_3_8B, context) == dense
    assert cache_bytes_per_token(LLAMA_3_8B) == dense
    # gpt-oss-120b: 18 full layers, 18 windows of 128
    at_128k = 2 * 8 * 64 * 2 * (18 * 131072 + 18 * 128) / 131072
    assert cache_bytes_per_token_at(GPT_OSS_120B, 131072) == pytest.approx(at_128k)
    # Shorter than every window, a windowed model keeps what full attention keeps.
    assert cache_bytes_per_token_at(GEMMA_3_27B, 1000) == cache_bytes_per_token(GEMMA_3_27B)
    assert sum(window is None for window in GEMMA_3_27B.layer_windows) == 10


def test_fact_lookup_batch_puts_the_asked_fact_where_it_says():
    tokens, answers, distances = fact_lookup_batch(64, 20, torch.Generator().manual_seed(0))
    assert tokens.shape == (64, 21)
    assert tokens.max() < lookup_vocab_size() and answers.max() < LOOKUP_VALUES
    fact = tokens[torch.arange(64), 20 - distances]
    assert torch.equal(fact % LOOKUP_VALUES, answers)


def test_training_runs_and_scores_by_distance():
    generator = torch.Generator().manual_seed(0)
    model = train_fact_lookup([3, None], 12, 2, generator)
    accuracy = lookup_accuracy_by_distance(model, 12, [1, 4, 13], generator, batch_size=50)
    assert len(accuracy) == 2


def test_masked_nll_with_the_causal_mask_is_the_model_loss():
    from course_utils.models.llama import Llama
    torch.manual_seed(5)
    model = Llama(40, 32, 16, 4, 2, 32, num_kv_heads=2)
    tokens = torch.randint(40, (12,))
    logits = model(tokens[None])[0]
    expected = torch.nn.functional.cross_entropy(logits[:-1], tokens[1:]).item()
    assert masked_nll(model, tokens, causal_mask(12)) == pytest.approx(expected, abs=1e-5)


def test_softmax_with_sink_is_the_formula():
    torch.manual_seed(3)
    scores, sink = torch.randn(2, 3, 4, 5), torch.randn(3)
    scores[0, 1, 2, 3] = float("-inf")  # a masked key
    expected = torch.empty_like(scores)
    for b in range(2):
        for h in range(3):
            for i in range(4):
                row = scores[b, h, i].exp()
                expected[b, h, i] = row / (row.sum() + sink[h].exp())
    weights = softmax_with_sink(scores, sink)
    assert torch.allclose(weights, expected, atol=1e-6)
    assert (weights.sum(-1) < 1).all() and weights[0, 1, 2, 3] == 0
    # a very negative sink is the plain softmax
    assert torch.allclose(softmax_with_sink(scores, torch.full((3,), -1e4)),
                          torch.softmax(scores, dim=-1), atol=1e-6)


def test_sink_attention_equals_gpt_oss_in_transformers():
    """The package's sink logit is gpt-oss's: transformers' eager attention of that model, with
    its additive mask and its learned ``sinks``, gives the same weights and outputs."""
    from types import SimpleNamespace

    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    torch.manual_seed(6)
    attention = MultiHeadAttention(8, 2, sink=True)
    x, mask = torch.randn(2, 5, 8), causal_mask(5)
    with torch.no_grad():
        attention.sink_logit.copy_(torch.tensor([0.7, -1.2]))
        output, weights = attention(x, mask=mask)
        q, k, v = (split_heads(w(x), 2) for w in (attention.w_q, attention.w_k, attention.w_v))
        gpt_oss = SimpleNamespace(sinks=attention.sink_logit, num_key_value_groups=1,
                                  training=False)
        additive = torch.zeros(5, 5).masked_fill(~mask, float("-inf"))[None, None]
        heads, expected_weights = eager_attention_forward(gpt_oss, q, k, v, additive,
                                                          scaling=4 ** -0.5)
        expected = attention.w_o(heads.reshape(2, 5, 8))  # heads (batch, n_q, heads, d_k)
    assert torch.allclose(weights, expected_weights, atol=1e-6)
    assert torch.allclose(output, expected, atol=1e-6)


def test_sink_and_gate_attention_is_the_formula():
    torch.manual_seed(4)
    x, mask = torch.randn(2, 6, 8), causal_mask(6)
    attention = MultiHeadAttention(8, 2, sink=True, gate=True)
    with torch.no_grad():
        attention.sink_logit.copy_(torch.tensor([1.5, -0.5]))
        output, weights = attention(x, mask=mask)
        q, k, v = (split_heads(w(x), 2) for w in (attention.w_q, attention.w_k, attention.w_v))
        scores = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~mask, float("-inf"))
        joined = torch.cat([scores, attention.sink_logit.view(1, 2, 1, 1).expand(2, 2, 6, 1)], -1)
        expected_weights = torch.softmax(joined, dim=-1)[..., :-1]
        gate = torch.sigmoid(split_heads(attention.w_gate(x), 2))
        expected = attention.w_o(merge_heads((expected_weights @ v) * gate))
        fused, _ = attention(x, mask=mask, need_weights=False)
    assert torch.allclose(weights, expected_weights, atol=1e-6)
    assert torch.allclose(output, expected, atol=1e-6)
    assert torch.allclose(fused, expected, atol=1e-6)


def test_gate_alone_keeps_the_fused_path_equal():
    torch.manual_seed(5)
    attention, x = MultiHeadAttention(8, 2, gate=True), torch.randn(2, 5, 8)
    with torch.no_grad():
        explicit, _ = attention(x, mask=causal_mask(5))
        fused, none = attention(x, mask=causal_mask(5), need_weights=False)
    assert none is None and torch.allclose(explicit, fused, atol=1e-6)


def test_sink_and_gate_are_off_by_default():
    plain = GPT(20, 16, 16, 2, 2)
    assert all(block.self_attn.sink_logit is None and block.self_attn.w_gate is None
               for block in plain.blocks)
    with_both = GPT(20, 16, 16, 2, 2, sink=True, gate=True)
    extra = sum(p.numel() for p in with_both.parameters()) - sum(
        p.numel() for p in plain.parameters())
    assert extra == 2 * (2 + 16 * 16 + 16)  # per layer: a logit per head, w_gate and its bias


BAD_INPUTS = [
    pytest.param(band_mask, (4, 6), {"window": 0}, ValueError, ("window", "positive int", "0"),
                 id="band_mask: window 0"),
    pytest.param(band_mask, (4, 6), {"window": 2, "sinks": -1}, ValueError,
                 ("sinks", "int >= 0", "-1"), id="band_mask: negative sinks"),
    pytest.param(band_mask, (6, 4), {"window": 2}, ValueError, ("n_k >= n_q", "n_k=4"),
                 id="band_mask: fewer keys than queries"),
    pytest.param(chunked_mask, (4,), {"chunk": 2.0}, TypeError, ("chunk", "positive int", "float"),
                 id="chunked_mask: float chunk"),
    pytest.param(GPT, (20, 16, 16, 2, 2), {"window": [3]}, ValueError,
                 ("window", "num_layers=2", "got 1"), id="GPT: window list too short"),
    pytest.param(GPT, (20, 16, 16, 2, 2), {"window": "4"}, TypeError,
                 ("window", "positive int", "str"), id="GPT: window a string"),
    pytest.param(GPT, (20, 16, 16, 2, 2), {"window": [3, 0]}, ValueError,
                 ("window[1]", "positive int", "0"), id="GPT: window entry 0"),
    pytest.param(KVCache().append, (0, torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4)),
                 {"window": 0}, ValueError, ("window", "positive int", "0"),
                 id="KVCache.append: window 0"),
    pytest.param(softmax_with_sink, (torch.zeros(1, 2, 3, 3), torch.zeros(3)), {}, ValueError,
                 ("sink", "(heads,)", "(3,)"), id="softmax_with_sink: one logit too many"),
    pytest.param(GPT, (20, 16, 16, 2, 2), {"sink": 1}, TypeError,
                 ("sink", "True or False", "int 1"),
                 id="GPT: sink an int"),
    pytest.param(MultiHeadAttention, (8, 2), {"gate": "yes"}, TypeError,
                 ("gate", "True or False", "str"),
                 id="MultiHeadAttention: gate a string"),
    pytest.param(MultiHeadAttention(8, 2), (torch.zeros(1, 3, 8),), {"window": -2}, ValueError,
                 ("window", "positive int", "-2"), id="MultiHeadAttention: window -2"),
    pytest.param(cache_bytes_per_token_at, (LLAMA_3_8B, 0), {}, ValueError,
                 ("context", "positive int", "0"), id="cache_bytes_per_token_at: context 0"),
    pytest.param(cache_bytes_per_token_at, ("Llama 3 8B", 8192), {}, TypeError,
                 ("config", "ModelConfig", "str"), id="cache_bytes_per_token_at: a name"),
    pytest.param(measured_reach, ("model", 8, torch.Generator()), {}, TypeError,
                 ("model", "GPT", "str"), id="measured_reach: not a GPT"),
    pytest.param(fact_lookup_batch, (4, 0, torch.Generator()), {}, ValueError,
                 ("context", "int >= 1", "0"), id="fact_lookup_batch: context too short"),
    pytest.param(lookup_vocab_size, (3,), {}, TypeError, ("positional argument",),
                 id="lookup_vocab_size: takes nothing"),
    pytest.param(train_fact_lookup, ([3, None], 12, 0, torch.Generator()), {}, ValueError,
                 ("steps", "positive int", "0"), id="train_fact_lookup: zero steps"),
    pytest.param(lookup_accuracy_by_distance, (GPT(20, 8, 8, 2, 2), 7, [4, 2],
                                               torch.Generator()), {},
                 ValueError, ("edges", "ascending", "[4, 2]"),
                 id="lookup_accuracy_by_distance: edges not ascending"),
    pytest.param(masked_nll, (GPT(20, 8, 8, 2, 2), torch.zeros(4, dtype=torch.long),
                              causal_mask(4)), {},
                 TypeError, ("model", "Llama", "GPT"), id="masked_nll: not a Llama"),
]
