"""The attention a generating decoder uses (grouped-query heads, RoPE, a KV cache), checked
against torch's F.scaled_dot_product_attention(enable_gqa=True); KVCache against the cost
formula."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import require_kv_heads
from course_utils.experiments.l06_cost import kv_cache_bytes
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.kv_cache import KVCache, require_next_tokens
from course_utils.nn.masks import causal_mask
from course_utils.nn.positions import apply_rope

ATOL = 1e-5
D_MODEL, NUM_HEADS, NUM_KV_HEADS = 24, 6, 2  # d_k = 4, three query heads per key/value head
BATCH, PAST, N_NEW = 3, 5, 3  # n_q = 3 new queries read n_k = 8 keys


def _attention(num_kv_heads=NUM_KV_HEADS, rope_base=100000.0, bias=True, seed=0):
    torch.manual_seed(seed)
    attention = MultiHeadAttention(D_MODEL, NUM_HEADS, bias=bias, num_kv_heads=num_kv_heads,
                                   rope_base=rope_base)
    if bias:  # nn.Linear's biases are small; larger ones make their handling matter
        with torch.no_grad():
            for linear in (attention.w_q, attention.w_k, attention.w_v, attention.w_o):
                linear.bias.normal_()
    return attention


def _torch_reference(attention, x, past, rope_base):
    """The last n_q = x.shape[1] - past positions attending to all of x, written with
    F.scaled_dot_product_attention: output (batch, n_q, d_model) and weights."""
    batch, seq_len, _ = x.shape
    d_k = D_MODEL // NUM_HEADS

    def heads(linear, inputs, count):  # (batch, count, len, d_k)
        return linear(inputs).view(batch, inputs.shape[1], count, d_k).transpose(1, 2)

    q = heads(attention.w_q, x[:, past:], NUM_HEADS)
    k = heads(attention.w_k, x, attention.num_kv_heads)
    v = heads(attention.w_v, x, attention.num_kv_heads)
    if rope_base is not None:
        q = apply_rope(q, torch.arange(past, seq_len), rope_base)
        k = apply_rope(k, torch.arange(seq_len), rope_base)
    # torch's causal flag aligns to the top-left corner, so the bottom-right mask is explicit
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()[past:]  # (n_q, n_k)
    gqa = attention.num_kv_heads != NUM_HEADS
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=gqa)
    # Values = the identity turn the output into the weights themselves: weights @ I.
    identity = torch.eye(seq_len).expand(batch, attention.num_kv_heads, seq_len, seq_len)
    weights = F.scaled_dot_product_attention(q, k, identity, attn_mask=allowed, enable_gqa=gqa)
    output = output.transpose(1, 2).reshape(batch, seq_len - past, D_MODEL)
    return attention.w_o(output), weights


def _cached_call(attention, x, past):
    """Feed the first ``past`` positions, then the rest, through one cache."""
    cache = KVCache()
    attention(x[:, :past], mask=causal_mask(past), cache=cache)
    new = x[:, past:]
    return attention(new, mask=causal_mask(new.shape[1], x.shape[1]), cache=cache), cache


@pytest.mark.parametrize("num_kv_heads", [NUM_HEADS, NUM_KV_HEADS, 1])
@pytest.mark.parametrize("rope_base", [None, 100000.0])
@pytest.mark.parametrize("bias", [True, False])
def test_cached_attention_matches_torch(num_kv_heads, rope_base, bias):
    attention = _attention(num_kv_heads, rope_base, bias)
    x = torch.randn(BATCH, PAST + N_NEW, D_MODEL)
    expected, expected_weights = _torch_reference(attention, x, PAST, rope_base)
    (output, weights), cache = _cached_call(attention, x, PAST)
    assert output.shape == (BATCH, N_NEW, D_MODEL)
    assert weights.shape == (BATCH, NUM_HEADS, N_NEW, PAST + N_NEW)
    torch.testing.assert_close(output, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=0)
    d_k = D_MODEL // NUM_HEADS
    assert cache.keys[0].shape == (BATCH, num_kv_heads, PAST + N_NEW, d_k)
    assert cache.seq_len == PAST + N_NEW


def test_one_pass_equals_the_cached_passes():
    attention = _attention()
    x = torch.randn(BATCH, PAST + N_NEW, D_MODEL)
    whole, whole_weights = attention(x, mask=causal_mask(PAST + N_NEW))
    (cached, cached_weights), _ = _cached_call(attention, x, PAST)
    torch.testing.assert_close(cached, whole[:, PAST:], atol=ATOL, rtol=0)
    torch.testing.assert_close(cached_weights, whole_weights[:, :, PAST:], atol=ATOL, rtol=0)


def test_default_attention_keeps_its_shapes_and_torch_copy():
    torch.manual_seed(0)
    reference = nn.MultiheadAttention(D_MODEL, NUM_HEADS, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(reference)
    assert ours.num_kv_heads == NUM_HEADS and ours.rope_base is None
    assert ours.w_k.weight.shape == (D_MODEL, D_MODEL)
    x = torch.randn(2, 4, D_MODEL)
    torch.testing.assert_close(ours(x)[0], reference(x, x, x)[0], atol=ATOL, rtol=0)


def test_lesson_14_sizes_build():
    attention = MultiHeadAttention(576, 9, bias=False, num_kv_heads=3, rope_base=100000.0)
    assert attention.w_k.weight.shape == (3 * 64, 576)
    assert all(linear.bias is None for linear in (attention.w_q, attention.w_o))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("num_kv_heads", [NUM_HEADS, NUM_KV_HEADS, 1])
def test_nbytes_is_the_cost_formula(dtype, num_kv_heads):
    num_layers, seq_len = 3, 7
    torch.manual_seed(0)
    layers = [MultiHeadAttention(D_MODEL, NUM_HEADS, num_kv_heads=num_kv_heads).to(dtype)
              for _ in range(num_layers)]
    cache = KVCache()
    x = torch.randn(BATCH, 4, D_MODEL, dtype=dtype)
    for step in (x, x[:, :2], x[:, :1]):  # 4 + 2 + 1 = 7 positions in three calls
        n_k = cache.seq_len + step.shape[1]
        for layer, attention in enumerate(layers):
            attention(step, mask=causal_mask(step.shape[1], n_k), cache=cache, layer=layer)
    assert cache.seq_len == seq_len and cache.num_layers == num_layers
    assert cache.nbytes == kv_cache_bytes(seq_len, D_MODEL, NUM_HEADS, batch_size=BATCH,
                                          num_layers=num_layers, num_kv_heads=num_kv_heads,
                                          dtype=dtype)


def test_empty_cache():
    cache = KVCache()
    assert (cache.seq_len, cache.nbytes, cache.num_layers, cache.layer_seq_len(3)) == (0, 0, 0, 0)


_K = torch.zeros(1, 2, 3, 4)
_HELD = KVCache()
_HELD.append(0, _K, _K)
_ATTENTION = MultiHeadAttention(D_MODEL, NUM_HEADS, num_kv_heads=NUM_KV_HEADS)
_ROPE = MultiHeadAttention(D_MODEL, NUM_HEADS, rope_base=10000.0)
_X = torch.randn(2, 3, D_MODEL)

BAD_INPUTS = [
    pytest.param(require_next_tokens, (torch.zeros(1, 5, dtype=torch.long), None, 10, 4), {},
                 ValueError, ("max_len=4", "position 4", "crop the context"),
                 id="require_next_tokens: past max_len"),
    pytest.param(require_next_tokens, (torch.zeros(1, 0, dtype=torch.long), None, 10, 4), {},
                 ValueError, ("tokens", "at least one token", "(1, 0)"),
                 id="require_next_tokens: no token"),
    pytest.param(require_kv_heads, (6, 4), {}, ValueError,
                 ("num_heads=6", "not divisible", "num_kv_heads=4"), id="require_kv_heads: 6/4"),
    pytest.param(require_kv_heads, (6, 0), {}, ValueError, ("num_kv_heads", "positive int", "0"),
                 id="require_kv_heads: zero"),
    pytest.param(MultiHeadAttention, (D_MODEL, NUM_HEADS), {"num_kv_heads": 4}, ValueError,
                 ("num_heads=6", "num_kv_heads=4"),
                 id="MultiHeadAttention: kv heads do not divide"),
    pytest.param(MultiHeadAttention, (D_MODEL, NUM_HEADS), {"num_kv_heads": 2.0}, TypeError,
                 ("num_kv_heads", "positive int", "float"),
                 id="MultiHeadAttention: float kv heads"),
    pytest.param(MultiHeadAttention, (D_MODEL, NUM_HEADS), {"rope_base": 0}, ValueError,
                 ("rope_base", "positive number", "0"), id="MultiHeadAttention: rope_base 0"),
    pytest.param(MultiHeadAttention, (D_MODEL, NUM_HEADS), {"rope_base": "1e4"}, TypeError,
                 ("rope_base", "positive number", "str"), id="MultiHeadAttention: str rope_base"),
    pytest.param(MultiHeadAttention, (9, 3), {"rope_base": 1e4}, ValueError,
                 ("rope_base", "even d_k", "3"), id="MultiHeadAttention: odd d_k with RoPE"),
    pytest.param(_ATTENTION, (_X, _X), {"cache": KVCache()}, ValueError,
                 ("key and value should be None", "cache"),
                 id="MultiHeadAttention: cross-attention with a cache"),
    pytest.param(_ROPE, (_X, _X), {}, ValueError, ("key and value should be None", "rope_base"),
                 id="MultiHeadAttention: cross-attention with RoPE"),
    pytest.param(_ATTENTION, (_X,), {"cache": {}}, TypeError,
                 ("cache", "KVCache", "dict"), id="MultiHeadAttention: a dict as cache"),
    pytest.param(_ATTENTION, (_X,), {"cache": KVCache(), "layer": 1}, ValueError,
                 ("layer", "0..0", "1"), id="MultiHeadAttention: layer skipped"),
    pytest.param(_ATTENTION, (_X,), {"mask": causal_mask(3, 5), "cache": KVCache()}, ValueError,
                 ("mask", "(3, 5)", "(2, 6, 3, 3)"),
                 id="MultiHeadAttention: mask for more keys than cached"),
    pytest.param(KVCache().layer_seq_len, (-1,), {}, ValueError, ("layer", ">= 0", "-1"),
                 id="KVCache.layer_seq_len: negative layer"),
    pytest.param(KVCache().append, (1, _K, _K), {}, ValueError, ("layer", "0..0", "1"),
                 id="KVCache.append: a layer skipped"),
    pytest.param(KVCache().append, (0, _K.long(), _K), {}, TypeError,
                 ("k", "floating-point", "torch.int64"), id="KVCache.append: integer keys"),
    pytest.param(KVCache().append, (0, _K, _K[:, :, :2]), {}, ValueError,
                 ("k and v", "(1, 2, 3, 4)", "(1, 2, 2, 4)"),
                 id="KVCache.append: v for other tokens"),
    pytest.param(_HELD.append, (0, _K, _K[..., :2]), {}, ValueError,
                 ("layer 0 holds values", "d_v=4", "(1, 2, 3, 2)"),
                 id="KVCache.append: d_v changed"),
    pytest.param(KVCache().append, (0, _K[0], _K[0]), {}, ValueError,
                 ("(batch, num_kv_heads, n_new, d_k)", "(2, 3, 4)"), id="KVCache.append: 3-D"),
    pytest.param(_HELD.append, (0, _K[..., :2], _K[..., :2]), {}, ValueError,
                 ("layer 0 holds keys", "(1, 2, 3, 4)", "(1, 2, 3, 2)"),
                 id="KVCache.append: d_k changed"),
    pytest.param(_HELD.append, (0, _K.double(), _K.double()), {}, ValueError,
                 ("layer 0 holds keys", "torch.float32", "torch.float64"),
                 id="KVCache.append: dtype changed"),
    pytest.param(KVCache().append, (0, _K, _K.to("meta")), {}, ValueError,
                 ("k, v", "one device", "v on meta"), id="KVCache.append: v on another device"),
    pytest.param(KVCache().append, (0, _K.half(), _K), {}, ValueError,
                 ("k and v", "torch.float16", "torch.float32"),
                 id="KVCache.append: k and v of two dtypes"),
]
