"""course_utils.nn.masks against torch's own attention functions and their mask conventions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from course_utils.nn.attention import scaled_dot_product_attention
from course_utils.nn.masks import (
    additive_mask,
    causal_mask,
    combine_masks,
    expand_padding_mask,
    masked_softmax,
    padding_mask,
    to_mha_convention,
)


def _identity_mha(d_model: int) -> nn.MultiheadAttention:
    """One-head nn.MultiheadAttention whose projections do nothing, so it computes plain SDPA."""
    mha = nn.MultiheadAttention(d_model, num_heads=1, bias=False, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.eye(d_model).repeat(3, 1))
        mha.out_proj.weight.copy_(torch.eye(d_model))
    return mha


# --- the existing helpers, checked against torch -------------------------------------------

def test_causal_mask_is_what_torch_is_causal_uses():
    q, k, v = (torch.randn(2, 3, 6, 4) for _ in range(3))
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(6)),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


@pytest.mark.parametrize(("n_q", "n_k"), [(1, 1), (1, 6), (3, 7), (5, 5), (4, 9)])
def test_non_square_causal_mask_is_torchs_lower_right_causal_bias(n_q, n_k):
    assert torch.equal(causal_mask(n_q, n_k), causal_lower_right(n_q, n_k)._materialize())
    if n_q != n_k:  # is_causal=True aligns to the top-left: another mask
        assert not torch.equal(causal_mask(n_q, n_k), causal_upper_left(n_q, n_k)._materialize())


def test_decoding_with_a_cache_and_the_non_square_mask_equals_full_causal_attention():
    q, k, v = (torch.randn(2, 3, 9, 4) for _ in range(3))  # (batch, num_heads, seq_len, d_k)
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    new = F.scaled_dot_product_attention(q[..., 6:, :], k, v, attn_mask=causal_mask(3, 9))
    torch.testing.assert_close(new, full[..., 6:, :])
    top_left = F.scaled_dot_product_attention(q[..., 6:, :], k, v, is_causal=True)
    assert not torch.allclose(top_left, full[..., 6:, :])


def test_padding_mask_broadcasts_over_queries_and_blocks_the_keys_mha_blocks():
    x = torch.randn(3, 5, 8)
    real = padding_mask([5, 2, 4])  # (batch, 1, n_k)
    assert real.shape == (3, 1, 5)
    ours, _ = scaled_dot_product_attention(x, x, x, mask=real)
    theirs, _ = _identity_mha(8)(x, x, x, key_padding_mask=to_mha_convention(real,
                                                                            key_padding=True))
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(x, x, x, attn_mask=real))


def test_a_padding_mask_cannot_be_read_as_query_by_key_when_batch_equals_n_q():
    # batch == n_q == n_k == 3: a (batch, n_k) mask would broadcast as (n_q, n_k) unnoticed.
    x = torch.randn(3, 3, 4)
    lengths = [3, 1, 2]
    ours, _ = scaled_dot_product_attention(x, x, x, mask=padding_mask(lengths))
    for b, length in enumerate(lengths):
        alone, _ = scaled_dot_product_attention(x[b, :, :][None], x[b, :length][None],
                                                x[b, :length][None])
        torch.testing.assert_close(ours[b], alone[0])


@pytest.mark.parametrize("with_heads", [True, False])
def test_expand_padding_mask_takes_the_new_and_the_old_shape(with_heads):
    new, old = padding_mask([2, 3]), padding_mask([2, 3])[:, 0]  # (2, 1, 3) and (2, 3)
    expected = (2, 1, 1, 3) if with_heads else (2, 1, 3)
    assert expand_padding_mask(new, with_heads).shape == expected
    assert torch.equal(expand_padding_mask(new, with_heads), expand_padding_mask(old, with_heads))
    assert torch.equal(expand_padding_mask(new), new[:, None])


def test_masks_are_made_on_the_inputs_device():
    assert causal_mask(3, 5, device="meta").device.type == "meta"
    assert padding_mask([2, 3], device="meta").shape == (2, 1, 3)
    assert padding_mask([2, 3], device="meta").device.type == "meta"
    assert padding_mask(torch.tensor([1, 2], device="meta"), max_len=4).device.type == "meta"
    meta = causal_mask(4, device="meta")
    assert additive_mask(meta).device.type == "meta"
    assert combine_masks(meta, padding_mask([4, 1], device="meta")).device.type == "meta"


_scores = torch.randn(2, 3, 3)  # (batch, n_q, n_k)

BAD_INPUTS = [
    pytest.param(padding_mask, (None,), {}, TypeError, ("lengths", "list", "NoneType"),
                 id="padding_mask: None"),
    pytest.param(padding_mask, ("3 4",), {}, TypeError, ("lengths", "got str"),
                 id="padding_mask: a string"),
    pytest.param(padding_mask, ([2.5, 1.0],), {}, ValueError, ("lengths", "integer", "float32"),
                 id="padding_mask: float lengths"),
    pytest.param(padding_mask, ([[2, 1]],), {}, ValueError, ("lengths", "1-D", "(1, 2)"),
                 id="padding_mask: 2-D lengths"),
    pytest.param(padding_mask, ([2, -1],), {}, ValueError, ("lengths", "non-negative", "-1"),
                 id="padding_mask: negative length"),
    pytest.param(padding_mask, ([0, 0],), {}, ValueError, ("max_len", "every length is 0"),
                 id="padding_mask: all empty"),
    pytest.param(padding_mask, ([2, 3],), {"max_len": 3.5}, TypeError,
                 ("max_len", "positive int", "float 3.5"), id="padding_mask: float max_len"),
    pytest.param(padding_mask, ([2, 3],), {"max_len": "4"}, TypeError,
                 ("max_len", "positive int", "str"), id="padding_mask: str max_len"),
    pytest.param(padding_mask, ([2, 5],), {"max_len": 3}, ValueError,
                 ("max_len=3", "shorter", "5"), id="padding_mask: max_len too short"),
    pytest.param(padding_mask, (torch.tensor([1, 2], device="meta"),), {}, ValueError,
                 ("pass max_len", "meta"), id="padding_mask: meta lengths, no max_len"),
    pytest.param(causal_mask, (0,), {}, ValueError, ("n_q", "positive int", "got 0"),
                 id="causal_mask: zero"),
    pytest.param(causal_mask, (3.0,), {}, TypeError, ("n_q", "positive int", "float"),
                 id="causal_mask: float"),
    pytest.param(causal_mask, (4, 2), {}, ValueError, ("n_k >= n_q", "n_q=4", "n_k=2"),
                 id="causal_mask: fewer keys than queries"),
    pytest.param(causal_mask, (2, "5"), {}, TypeError, ("n_k", "positive int", "str"),
                 id="causal_mask: str n_k"),
    pytest.param(expand_padding_mask, (torch.ones(2, 3),), {}, TypeError,
                 ("mask", "bool", "float32"), id="expand_padding_mask: float mask"),
    pytest.param(expand_padding_mask, (torch.ones(2, 2, 3, dtype=torch.bool),), {}, ValueError,
                 ("(batch, 1, n_k)", "(2, 2, 3)"), id="expand_padding_mask: query axis not 1"),
    pytest.param(expand_padding_mask, ([[True]],), {}, TypeError, ("mask", "list"),
                 id="expand_padding_mask: a list"),
    pytest.param(expand_padding_mask, (padding_mask([2, 3]),), {"with_heads": "yes"}, TypeError,
                 ("with_heads", "True or False", "str"), id="expand_padding_mask: with_heads"),
    pytest.param(combine_masks, (), {}, ValueError, ("at least one",), id="combine_masks: none"),
    pytest.param(combine_masks, (causal_mask(3), torch.ones(3, 3)), {}, TypeError,
                 ("mask", "bool", "float32"), id="combine_masks: a float mask"),
    pytest.param(combine_masks, (causal_mask(3), padding_mask([3, 2, 1, 3])[:, 0]), {},
                 ValueError, ("(3, 3)", "(4, 3)", "do not broadcast", "(batch, 1, n_k)"),
                 id="combine_masks: shapes do not broadcast"),
    pytest.param(combine_masks, (causal_mask(3), causal_mask(3, device="meta")), {}, ValueError,
                 ("one device", "mask 0 on cpu", "mask 1 on meta"),
                 id="combine_masks: two devices"),
    pytest.param(to_mha_convention, (torch.ones(2, 3),), {}, TypeError, ("mask", "bool"),
                 id="to_mha_convention: float"),
    pytest.param(to_mha_convention, (torch.ones(2, 2, 3, dtype=torch.bool),),
                 {"key_padding": True}, ValueError, ("(batch, 1, n_k)", "(2, 2, 3)"),
                 id="to_mha_convention: not a key padding mask"),
    pytest.param(to_mha_convention, (causal_mask(3),), {"key_padding": 1}, TypeError,
                 ("key_padding", "True or False"), id="to_mha_convention: key_padding an int"),
    pytest.param(additive_mask, (torch.ones(3, 3),), {}, TypeError, ("mask", "bool", "float32"),
                 id="additive_mask: float mask"),
    pytest.param(additive_mask, (causal_mask(3),), {"dtype": torch.int64}, TypeError,
                 ("dtype", "floating-point", "int64"), id="additive_mask: int dtype"),
    pytest.param(additive_mask, (causal_mask(3),), {"fill": 1e9}, ValueError,
                 ("fill", "negative", "1000000000.0"), id="additive_mask: positive fill"),
    pytest.param(additive_mask, (causal_mask(3),), {"fill": "-inf"}, TypeError,
                 ("fill", "number", "str"), id="additive_mask: str fill"),
    pytest.param(additive_mask, (causal_mask(3),), {"dtype": torch.float16, "fill": -1e9},
                 ValueError, ("fill=-1e+09", "overflows to -inf in torch.float16", "-65504"),
                 id="additive_mask: fill overflows"),
    pytest.param(masked_softmax, (_scores, torch.ones(3, 3)), {}, TypeError,
                 ("mask", "bool", "float32"), id="masked_softmax: float mask"),
    pytest.param(masked_softmax, (_scores, padding_mask([3, 2])[:, 0]), {}, ValueError,
                 ("(2, 3)", "(2, 3, 3)", "does not broadcast"),
                 id="masked_softmax: (batch, n_k) mask"),
    pytest.param(masked_softmax, (_scores.long(), causal_mask(3)), {}, TypeError,
                 ("scores", "floating-point", "int64"), id="masked_softmax: int scores"),
    pytest.param(masked_softmax, (_scores, causal_mask(3, device="meta")), {}, ValueError,
                 ("scores on cpu", "mask on meta"), id="masked_softmax: two devices"),
    pytest.param(masked_softmax, (_scores.half(), causal_mask(3)), {"fill": -1e9}, ValueError,
                 ("overflows",), id="masked_softmax: fill overflows"),
]


# --- combine_masks ----------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(0, 2))
def test_combined_mask_is_the_and_of_causal_and_key_padding(lengths, extra):
    n = max(lengths) + extra
    pad = padding_mask(lengths, max_len=n)  # (batch, 1, n_k)
    combined = combine_masks(causal_mask(n), pad[:, None])
    assert combined.shape == (len(lengths), 1, n, n)
    for b, length in enumerate(lengths):
        for i in range(n):
            for j in range(n):
                assert bool(combined[b, 0, i, j]) == (j <= i and j < length)


def test_combined_mask_gives_torch_sdpa_and_mha_the_same_result():
    x = torch.randn(2, 5, 8)
    pad = padding_mask([5, 3])  # (batch, 1, n_k)
    combined = combine_masks(causal_mask(5), pad)
    reference = F.scaled_dot_product_attention(x, x, x, attn_mask=combined)
    ours, _ = scaled_dot_product_attention(x, x, x, mask=combined)
    mha, _ = _identity_mha(8)(x, x, x, attn_mask=to_mha_convention(causal_mask(5)),
                              key_padding_mask=to_mha_convention(pad, key_padding=True))
    torch.testing.assert_close(ours, reference)
    torch.testing.assert_close(mha, reference)


# --- to_mha_convention --------------------------------------------------------------------------

def test_mha_convention_is_the_opposite_and_flips_back():
    mask = combine_masks(causal_mask(4), padding_mask([4, 2])[:, None])
    assert torch.equal(to_mha_convention(mask), ~mask)
    assert torch.equal(to_mha_convention(to_mha_convention(mask)), mask)
    assert to_mha_convention(padding_mask([4, 2]), key_padding=True).shape == (2, 4)
    with pytest.raises(TypeError, match="should be bool"):
        to_mha_convention(mask.int())


def test_passing_our_mask_to_mha_unflipped_is_wrong():
    # The point of the converter: the same tensor means the opposite to nn.MultiheadAttention.
    x = torch.randn(1, 4, 8)
    right, _ = _identity_mha(8)(x, x, x, attn_mask=to_mha_convention(causal_mask(4)))
    wrong, _ = _identity_mha(8)(x, x, x, attn_mask=causal_mask(4))
    torch.testing.assert_close(right, F.scaled_dot_product_attention(x, x, x, is_causal=True))
    assert not torch.allclose(wrong, right, equal_nan=True)


# --- additive_mask ----------------------------------------------------------------------------

@pytest.mark.parametrize("fill", [float("-inf"), -1e9, torch.finfo(torch.float32).min])
def test_additive_mask_matches_the_bool_mask_in_torch_sdpa(fill):
    q, k, v = (torch.randn(2, 2, 5, 4) for _ in range(3))
    mask = combine_masks(causal_mask(5), padding_mask([5, 3])[:, None])
    float_mask = additive_mask(mask, fill=fill)
    assert float_mask.dtype == torch.float32 and float_mask.shape == mask.shape
    assert torch.all(float_mask[mask] == 0) and torch.all(float_mask[~mask] == fill)
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask),
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    )


def test_additive_mask_refuses_a_fill_that_overflows_in_float16():
    mask = causal_mask(3)
    assert torch.tensor(-1e9).to(torch.float16).isinf()  # the reason for the check
    with pytest.raises(ValueError, match=r"overflows to -inf in torch.float16.*-65504"):
        additive_mask(mask, dtype=torch.float16, fill=-1e9)
    smallest = torch.finfo(torch.float16).min
    assert torch.all(additive_mask(mask, torch.float16, fill=smallest)[~mask] == smallest)
    assert additive_mask(mask, torch.bfloat16, fill=-1e9).isfinite().all()


# --- masked_softmax -------------------------------------------------------------------------------

def test_masked_softmax_gives_the_weights_torch_sdpa_uses():
    # Weights times the identity as values are the weights themselves.
    q, k = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    mask = combine_masks(causal_mask(5), padding_mask([5, 2]))
    weights = masked_softmax(q @ k.transpose(-2, -1) / 2.0, mask)
    torch.testing.assert_close(
        weights, F.scaled_dot_product_attention(q, k, torch.eye(5).expand(2, 5, 5),
                                                attn_mask=mask))


def test_masked_softmax_is_naive_on_fully_masked_rows():
    scores = torch.randn(2, 4)
    mask = torch.tensor([[True, True, False, False], [False] * 4])
    assert masked_softmax(scores, mask)[1].isnan().all()
    torch.testing.assert_close(masked_softmax(scores, mask, fill=-1e9)[1], torch.full((4,), 0.25))
    # partly masked rows do not depend on the fill
    torch.testing.assert_close(masked_softmax(scores, mask)[0],
                               masked_softmax(scores, mask, fill=-1e9)[0])
