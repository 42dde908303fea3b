"""course_utils.masks against torch's own attention functions and their mask conventions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from course_utils.attention import scaled_dot_product_attention
from course_utils.masks import (
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


def test_padding_mask_blocks_the_keys_mha_blocks_with_key_padding_mask():
    x = torch.randn(3, 5, 8)
    pad = padding_mask([5, 2, 4])
    ours, _ = scaled_dot_product_attention(x, x, x, mask=expand_padding_mask(pad, False))
    theirs, _ = _identity_mha(8)(x, x, x, key_padding_mask=~pad)
    torch.testing.assert_close(ours, theirs)


# --- combine_masks ----------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(0, 2))
def test_combined_mask_is_the_and_of_causal_and_key_padding(lengths, extra):
    n = max(lengths) + extra
    pad = padding_mask(lengths, max_len=n)
    combined = combine_masks(causal_mask(n), expand_padding_mask(pad))
    assert combined.shape == (len(lengths), 1, n, n)
    for b, length in enumerate(lengths):
        for i in range(n):
            for j in range(n):
                assert bool(combined[b, 0, i, j]) == (j <= i and j < length)


def test_combined_mask_gives_torch_sdpa_and_mha_the_same_result():
    x = torch.randn(2, 5, 8)
    pad = padding_mask([5, 3])
    combined = combine_masks(causal_mask(5), expand_padding_mask(pad, with_heads=False))
    reference = F.scaled_dot_product_attention(x, x, x, attn_mask=combined)
    ours, _ = scaled_dot_product_attention(x, x, x, mask=combined)
    mha, _ = _identity_mha(8)(x, x, x, attn_mask=to_mha_convention(causal_mask(5)),
                              key_padding_mask=to_mha_convention(pad))
    torch.testing.assert_close(ours, reference)
    torch.testing.assert_close(mha, reference)


def test_combine_masks_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        combine_masks()
    with pytest.raises(TypeError, match="mask 1 should be a bool"):
        combine_masks(causal_mask(3), torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"expand_padding_mask"):
        combine_masks(causal_mask(3), padding_mask([3, 2, 1, 3]))


# --- to_mha_convention --------------------------------------------------------------------------

def test_mha_convention_is_the_opposite_and_flips_back():
    mask = combine_masks(causal_mask(4), expand_padding_mask(padding_mask([4, 2])))
    assert torch.equal(to_mha_convention(mask), ~mask)
    assert torch.equal(to_mha_convention(to_mha_convention(mask)), mask)
    with pytest.raises(TypeError, match="bool mask"):
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
    mask = combine_masks(causal_mask(5), expand_padding_mask(padding_mask([5, 3])))
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


def test_additive_mask_rejects_bad_input():
    with pytest.raises(TypeError, match="should be bool"):
        additive_mask(torch.ones(3, 3))
    with pytest.raises(TypeError, match="floating-point"):
        additive_mask(causal_mask(3), dtype=torch.int64)
    with pytest.raises(ValueError, match="negative"):
        additive_mask(causal_mask(3), fill=1e9)
    with pytest.raises(TypeError, match="number"):
        additive_mask(causal_mask(3), fill="-inf")


# --- masked_softmax -------------------------------------------------------------------------------

def test_masked_softmax_gives_the_weights_torch_sdpa_uses():
    # Weights times the identity as values are the weights themselves.
    q, k = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    mask = combine_masks(causal_mask(5), expand_padding_mask(padding_mask([5, 2]), False))
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


def test_masked_softmax_rejects_bad_input():
    with pytest.raises(TypeError, match="should be bool"):
        masked_softmax(torch.randn(3, 3), torch.ones(3, 3))
    with pytest.raises(ValueError, match="does not broadcast"):
        masked_softmax(torch.randn(3, 3), padding_mask([3, 2]))
    with pytest.raises(ValueError, match="overflows"):
        masked_softmax(torch.randn(3, 3, dtype=torch.float16), causal_mask(3), fill=-1e9)
