"""Lesson 05 exercises: build a causal + padding mask; fix a causal attention's mask bug."""

from __future__ import annotations

import math

import torch

from course_utils.attention import scaled_dot_product_attention
from course_utils.exercises import Exercise, Incorrect, attempt, expect_close, expect_shape
from course_utils.masks import causal_mask, combine_masks, expand_padding_mask, padding_mask


def _combined_mask_reference(lengths, seq_len):
    """lengths: real length of each sentence (batch,) -> bool (batch, 1, seq_len, seq_len).

    True = may attend: query i sees key j when j <= i and key j is a real token.
    """
    causal = causal_mask(seq_len)  # (seq_len, seq_len)
    keys = expand_padding_mask(padding_mask(lengths, max_len=seq_len))  # (batch, 1, 1, seq_len)
    return combine_masks(causal, keys)  # (batch, 1, seq_len, seq_len)


def _first_position(where: torch.Tensor) -> str:
    b, _, i, j = (int(index) for index in where.nonzero()[0])
    return f"sentence {b}, query {i}, key {j}"


def _check_combined_mask(answer):
    # seq_len longer than every sentence: the padding must come from seq_len, not max(lengths).
    for lengths, seq_len in (([4, 2, 3], 4), ([3, 1], 5)):
        try:
            result = attempt(answer, list(lengths), seq_len)
        except RuntimeError as error:  # typically a shape mismatch
            raise Incorrect(
                f"with lengths={lengths} and seq_len={seq_len} your code raised "
                f"RuntimeError: {error}. A batch can be padded beyond its longest sentence: "
                "build the padding mask with max_len=seq_len"
            ) from None
        expected = _combined_mask_reference(lengths, seq_len)
        if not isinstance(result, torch.Tensor) or result.dtype != torch.bool:
            got = result.dtype if isinstance(result, torch.Tensor) else type(result).__name__
            raise Incorrect(f"return a bool tensor (True = may attend), got {got}")
        if tuple(result.shape) == tuple(expected.shape[:1] + expected.shape[2:]):
            raise Incorrect(
                f"shape {tuple(result.shape)} is (batch, n_q, n_k): add the heads axis, "
                f"(batch, 1, seq_len, seq_len) = {tuple(expected.shape)}, so that it "
                "broadcasts over scores (batch, heads, n_q, n_k)"
            )
        expect_shape(result, expected.shape, "the mask (batch, 1, seq_len, seq_len)")
        if torch.equal(result, ~expected):
            raise Incorrect(
                "your mask is exactly flipped: True should mean 'may attend' (the convention "
                "of this course and of F.scaled_dot_product_attention), not 'blocked'"
            )
        future = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(diagonal=1)
        if (result & future).any():
            raise Incorrect(
                f"a query may see a later key ({_first_position(result & future)}): the causal "
                "part is missing, uses triu where tril belongs, or was combined with `|` "
                "instead of `&`"
            )
        padded_keys = ~padding_mask(lengths, max_len=seq_len)[:, None, None, :]
        if (result & padded_keys).any():
            raise Incorrect(
                f"a padded key is allowed ({_first_position(result & padded_keys)}): the padding "
                "mask must block keys, i.e. sit on the last axis, (batch, 1, 1, seq_len)"
            )
        empty_rows = ~result.any(dim=-1) & expected.any(dim=-1)  # (batch, 1, seq_len)
        real_queries = padding_mask(lengths, max_len=seq_len)[:, None, :]
        if (empty_rows & real_queries).any():
            b, _, i = (int(index) for index in (empty_rows & real_queries).nonzero()[0])
            raise Incorrect(
                f"query {i} of sentence {b} allows no key at all: a token must see itself, "
                "so keep the diagonal (tril(), not tril(diagonal=-1))"
            )
        if empty_rows.any():
            raise Incorrect(
                "the padded query rows allow no key at all: you masked the padded *queries*. "
                "A row with no allowed key gives NaN in a plain softmax; mask only the keys"
            )
        if not torch.equal(result, expected):
            raise Incorrect(
                f"your mask blocks a key it should allow ({_first_position(expected & ~result)}); "
                "a query sees itself and every earlier real token"
            )


build_combined_mask = Exercise(
    title="build a causal + padding mask",
    checker=_check_combined_mask,
    reference=_combined_mask_reference,
    hints=(
        "Two masks: causal_mask(seq_len) is (seq_len, seq_len); "
        "padding_mask(lengths, max_len=seq_len) is (batch, seq_len).",
        "The padding mask is about keys, so it belongs on the last axis: "
        "expand_padding_mask() makes it (batch, 1, 1, seq_len).",
        "A key is allowed only if both masks allow it: combine with & (or combine_masks).",
    ),
)


def _causal_attention_reference(q, k, v):
    """q, k, v (batch, heads, seq_len, d_k) -> output (..., seq_len, d_k), weights (..., n, n)."""
    n = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, heads, n_q, n_k)
    future = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))  # before the softmax
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _check_causal_attention(answer):
    generator = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=generator) for _ in range(3))
    result = attempt(answer, q, k, v)
    if not isinstance(result, tuple) or len(result) != 2:
        raise Incorrect("return two tensors: return output, weights")
    output, weights = result
    expect_shape(weights, (2, 3, 6, 6), "weights (batch, heads, n_q, n_k)")
    expect_shape(output, (2, 3, 6, 8), "output (batch, heads, seq_len, d_v)")
    nan_rows = weights.isnan().any(dim=-1)  # (batch, heads, n_q)
    if nan_rows[..., -1].any():
        raise Incorrect(
            "the last query, which may see every key, came out NaN (no allowed key): the mask "
            "is flipped, it blocks the past and allows the future. Block the upper triangle, "
            "triu(..., diagonal=1)"
        )
    if nan_rows.any():
        raise Incorrect(
            "the first query's weights are NaN: its row has no allowed key. Keep the diagonal: "
            "a token sees itself, so block with triu(..., diagonal=1), not diagonal=0"
        )
    future = torch.ones(6, 6, dtype=torch.bool).triu(diagonal=1)
    if (weights[..., future] != 0).any():
        raise Incorrect(
            "queries put weight on later keys, so the future leaks: the blocked part is the "
            "upper triangle above the diagonal, triu(..., diagonal=1)"
        )
    row_sums = weights.sum(dim=-1)
    if not torch.allclose(row_sums, torch.ones_like(row_sums), atol=1e-5):
        raise Incorrect(
            f"no future leaks, but rows sum to between {row_sums.min().item():.2f} and "
            f"{row_sums.max().item():.2f}, not 1: the mask is applied after the softmax. "
            "Fill the scores with -inf first, then take the softmax"
        )
    expected_output, expected_weights = scaled_dot_product_attention(
        q, k, v, mask=causal_mask(6)
    )
    expect_close(weights, expected_weights, "weights (check the 1/sqrt(d_k) scale)")
    expect_close(output, expected_output, "output = weights @ v")


fix_the_mask_bug = Exercise(
    title="fix the causal attention",
    checker=_check_causal_attention,
    reference=_causal_attention_reference,
    hints=(
        "Run the buggy version and look at weights.sum(-1): what should every row sum to?",
        "Zeroing weights after the softmax leaves the other weights as they were; a blocked "
        "key has to be gone before the softmax normalises the row.",
        "scores.masked_fill(future, float('-inf')), then torch.softmax(scores, dim=-1).",
    ),
)
