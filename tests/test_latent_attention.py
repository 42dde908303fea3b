"""Multi-head latent attention: the plain form against torch's attention, the absorbed cached
decode against the plain form, and what the cache keeps per token."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_utils.models.gpt import GPT
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.generation import generate
from course_utils.nn.kv_cache import KVCache
from course_utils.nn.latent_attention import MultiHeadLatentAttention
from course_utils.nn.masks import causal_mask
from course_utils.nn.positions import apply_rope

ATOL = 1e-5
D_MODEL, NUM_HEADS, LATENT, ROPE = 24, 3, 10, 4  # d_k = 8 != LATENT, so a mix-up shows


def _mla(seed=0, base=10000.0):
    torch.manual_seed(seed)
    mla = MultiHeadLatentAttention(D_MODEL, NUM_HEADS, LATENT, ROPE, rope_base=base)
    with torch.no_grad():
        mla.latent_norm.weight.uniform_(0.5, 1.5)  # a learned gain, not all ones
    return mla


def _reference(mla, x):
    """Causal MLA over x written with F.scaled_dot_product_attention, one head at a time."""
    batch, seq_len, _ = x.shape
    positions = torch.arange(seq_len)
    latent = F.rms_norm(x @ mla.w_dkv.weight.T, (LATENT,), mla.latent_norm.weight)
    k_rope = apply_rope(x @ mla.w_kr.weight.T, positions, mla.rope_base)  # (batch, seq_len, ROPE)
    outputs = []
    for h in range(NUM_HEADS):
        rows = slice(h * mla.d_k, (h + 1) * mla.d_k)
        q = x @ mla.w_q.weight[rows].T
        q_rope = apply_rope(x @ mla.w_qr.weight[h * ROPE:(h + 1) * ROPE].T, positions,
                            mla.rope_base)
        k = latent @ mla.w_uk.weight[rows].T
        v = latent @ mla.w_uv.weight[rows].T
        outputs.append(F.scaled_dot_product_attention(
            torch.cat((q, q_rope), -1), torch.cat((k, k_rope), -1), v, is_causal=True))
    return torch.cat(outputs, dim=-1) @ mla.w_o.weight.T


def test_the_plain_form_matches_torch_head_by_head():
    mla = _mla()
    x = torch.randn(2, 7, D_MODEL)
    output, weights = mla(x, mask=causal_mask(7))
    torch.testing.assert_close(output, _reference(mla, x), atol=ATOL, rtol=0)
    assert weights.shape == (2, NUM_HEADS, 7, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, NUM_HEADS, 7))


@pytest.mark.parametrize("chunks", [(1,) * 9, (4, 1, 1, 3), (9,), (2, 7)])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_absorbed_cached_decode_equals_the_full_forward(chunks, seed):
    mla = _mla(seed)
    x = torch.randn(3, 9, D_MODEL) * 3  # larger scores, so a wrong scale or fold shows
    expected, expected_weights = mla(x, mask=causal_mask(9))
    cache, start, outputs = KVCache(), 0, []
    for size in chunks:
        output, weights = mla(x[:, start:start + size],
                              mask=causal_mask(size, start + size), cache=cache)
        torch.testing.assert_close(weights, expected_weights[:, :, start:start + size,
                                                             :start + size], atol=ATOL, rtol=0)
        outputs.append(output)
        start += size
    torch.testing.assert_close(torch.cat(outputs, dim=1), expected, atol=ATOL, rtol=0)


def test_the_cache_keeps_the_latent_and_the_rope_key_only():
    mla = _mla()
    cache = KVCache()
    mla(torch.randn(2, 5, D_MODEL), mask=causal_mask(5), cache=cache)
    assert cache.keys[0].shape == (2, 1, 5, ROPE)
    assert cache.values[0].shape == (2, 1, 5, LATENT)
    assert cache.nbytes == 2 * 5 * (LATENT + ROPE) * 4
    assert mla.numbers_per_token == LATENT + ROPE


def test_a_fully_masked_row_gives_zeros_not_nan():
    mla = _mla()
    mask = causal_mask(4).clone()
    mask[2] = False
    for cache in (None, KVCache()):
        output, weights = mla(torch.randn(1, 4, D_MODEL), mask=mask, cache=cache)
        assert torch.isfinite(output).all() and (weights[:, :, 2] == 0).all()


def test_it_drops_into_a_gpt_and_generates_the_same_tokens_with_and_without_the_cache():
    torch.manual_seed(0)
    model = GPT(11, max_len=16, d_model=D_MODEL, num_heads=NUM_HEADS, num_layers=2)
    for block in model.blocks:
        block.self_attn = MultiHeadLatentAttention(D_MODEL, NUM_HEADS, LATENT, ROPE)
    prompt = torch.randint(0, 11, (2, 3), generator=torch.Generator().manual_seed(1))
    with_cache = generate(model, prompt, 10, use_cache=True)
    assert torch.equal(with_cache, generate(model, prompt, 10, use_cache=False))


def test_the_gradient_reaches_every_weight_in_both_forms():
    for cache in (None, KVCache()):
        mla = _mla()
        mla(torch.randn(2, 4, D_MODEL), mask=causal_mask(4), cache=cache)[0].sum().backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in mla.parameters())


_MLA = MultiHeadLatentAttention(D_MODEL, NUM_HEADS, LATENT, ROPE)
_X = torch.randn(2, 3, D_MODEL)
_MHA_CACHE = KVCache()
MultiHeadAttention(D_MODEL, NUM_HEADS)(_X, cache=_MHA_CACHE)

BAD_INPUTS = [
    pytest.param(MultiHeadLatentAttention, (D_MODEL, 5, LATENT, ROPE), {}, ValueError,
                 ("d_model=24", "num_heads=5"), id="heads do not divide d_model"),
    pytest.param(MultiHeadLatentAttention, (D_MODEL, NUM_HEADS, 0, ROPE), {}, ValueError,
                 ("kv_latent_dim", "positive int", "0"), id="no latent"),
    pytest.param(MultiHeadLatentAttention, (D_MODEL, NUM_HEADS, 8.0, ROPE), {}, TypeError,
                 ("kv_latent_dim", "positive int", "float"), id="float latent"),
    pytest.param(MultiHeadLatentAttention, (D_MODEL, NUM_HEADS, LATENT, 3), {}, ValueError,
                 ("rope_dim", "even", "3"), id="odd rope_dim"),
    pytest.param(MultiHeadLatentAttention, (D_MODEL, NUM_HEADS, LATENT, ROPE), {"rope_base": 0},
                 ValueError, ("rope_base", "positive number", "0"), id="rope_base 0"),
    pytest.param(_MLA, (_X[0],), {}, ValueError, ("x", "(batch, n_q, d_model)", "(3, 24)"),
                 id="forward: 2-D x"),
    pytest.param(_MLA, (_X[..., :8],), {}, ValueError, ("x", "d_model=24", "(2, 3, 8)"),
                 id="forward: x too narrow"),
    pytest.param(_MLA, (_X.double(),), {}, TypeError, ("x", "float64", "float32"),
                 id="forward: float64 x"),
    pytest.param(_MLA, (_X,), {"cache": []}, TypeError, ("cache", "KVCache", "list"),
                 id="forward: a list as cache"),
    pytest.param(_MLA, (_X,), {"mask": causal_mask(2)}, ValueError,
                 ("mask", "(2, 2)", "(2, 3, 3, 3)"), id="forward: mask for other sizes"),
    pytest.param(_MLA, (_X,), {"cache": _MHA_CACHE}, ValueError,
                 ("layer 0 holds keys", "(2, 3, 3, 8)"),
                 id="forward: a cache filled by multi-head attention"),
]
