"""Lesson 04 exercises: split the features into heads, and merge the heads back."""

from __future__ import annotations

import torch

from course_utils.exercises import Exercise, Incorrect, attempt, expect_close, expect_shape


def _split_heads_reference(x, num_heads):
    """x (batch, seq_len, d_model) -> (batch, heads, seq_len, d_k), d_k = d_model / heads."""
    batch, seq_len, d_model = x.shape
    d_k = d_model // num_heads
    x = x.view(batch, seq_len, num_heads, d_k)  # cut each token's features into heads
    return x.transpose(1, 2)  # (batch, heads, seq_len, d_k)


def _merge_heads_reference(x):
    """x (batch, heads, seq_len, d_k) -> (batch, seq_len, d_model), heads side by side."""
    batch, heads, seq_len, d_k = x.shape
    x = x.transpose(1, 2)  # (batch, seq_len, heads, d_k)
    return x.reshape(batch, seq_len, heads * d_k)  # reshape copies: x is not contiguous now


def _interleaved_heads(x, num_heads):
    """The classic slip: head h gets every num_heads-th feature instead of one block."""
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, d_model // num_heads, num_heads).permute(0, 3, 1, 2)


def _check_split_heads(answer):
    # batch, seq_len, heads and d_k all differ, so a swapped axis shows up in the shape.
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(4))
    for num_heads in (3, 4):
        d_k = 12 // num_heads
        result = attempt(answer, x.clone(), num_heads)
        if isinstance(result, torch.Tensor) and tuple(result.shape) == (2, 5, num_heads, d_k):
            raise Incorrect(
                f"shape {tuple(result.shape)} is (batch, seq_len, heads, d_k): now swap "
                "seq_len and heads with .transpose(1, 2)"
            )
        expected = _split_heads_reference(x, num_heads)
        expect_shape(result, expected.shape, f"split_heads(x, {num_heads})")
        if torch.equal(result, x.reshape(2, num_heads, 5, d_k)):
            raise Incorrect(
                "you reshaped straight into (batch, heads, seq_len, d_k), which deals whole "
                "tokens out to the heads. View as (batch, seq_len, heads, d_k) first, so each "
                "token's features are cut into heads, then transpose"
            )
        if torch.equal(result, _interleaved_heads(x, num_heads)):
            raise Incorrect(
                f"head 0 got features 0, {num_heads}, {2 * num_heads}, ... (a stride of "
                f"{num_heads}); it should get one block, features 0..{d_k - 1}: view as "
                "(batch, seq_len, heads, d_k), not (batch, seq_len, d_k, heads)"
            )
        expect_close(result, expected, f"split_heads(x, {num_heads})")


def _check_merge_heads(answer):
    heads = torch.randn(2, 3, 5, 4, generator=torch.Generator().manual_seed(5))
    try:
        result = attempt(answer, heads.clone())
    except RuntimeError as error:
        if "view" in str(error):
            raise Incorrect(
                "view() failed because after transpose the tensor is no longer contiguous "
                "in memory: use .reshape(...) (or .contiguous().view(...))"
            ) from None
        raise
    expected = _merge_heads_reference(heads)
    if isinstance(result, torch.Tensor) and tuple(result.shape) == (2, 5, 3, 4):
        raise Incorrect(
            "shape (2, 5, 3, 4) is (batch, seq_len, heads, d_k): the heads still need to be "
            "concatenated into one feature axis of size heads * d_k"
        )
    expect_shape(result, expected.shape, "merge_heads(x) for x (2, 3, 5, 4)")
    if torch.equal(result, heads.reshape(2, 5, 12)):
        raise Incorrect(
            "you reshaped (batch, heads, seq_len, d_k) directly, which mixes tokens together. "
            "Move heads next to d_k first: .transpose(1, 2), then reshape"
        )
    if torch.equal(result, heads.permute(0, 2, 3, 1).reshape(2, 5, 12)):
        raise Incorrect(
            "the heads are interleaved feature by feature; concatenate them instead, so that "
            "columns 0..d_k-1 are head 0, the next d_k columns head 1, and so on"
        )
    expect_close(result, expected, "merge_heads(x)")
    if not torch.equal(_split_heads_reference(result, 3), heads):
        raise Incorrect("split_heads(merge_heads(x), heads) should give x back")


split_heads = Exercise(
    title="split the features into heads",
    checker=_check_split_heads,
    reference=_split_heads_reference,
    hints=(
        "With d_k = d_model // num_heads, each token's d_model features become "
        "num_heads blocks of d_k: x.view(batch, seq_len, num_heads, d_k).",
        "That is (batch, seq_len, heads, d_k); attention wants heads next to batch: "
        ".transpose(1, 2) gives (batch, heads, seq_len, d_k).",
    ),
)

merge_heads = Exercise(
    title="concatenate the heads",
    checker=_check_merge_heads,
    reference=_merge_heads_reference,
    hints=(
        "Undo split_heads in reverse order: first .transpose(1, 2) to get "
        "(batch, seq_len, heads, d_k).",
        "Then glue the last two axes: .reshape(batch, seq_len, heads * d_k). "
        "view() fails here because transpose left the memory non-contiguous.",
    ),
)
