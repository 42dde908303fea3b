"""Lesson 05's exercises against their reference solutions and typical wrong answers."""

from __future__ import annotations

import math

import pytest
import torch

from course_utils.exercises import CORRECT, NOT_ATTEMPTED
from course_utils.exercises.masks import build_combined_mask, fix_the_mask_bug
from course_utils.masks import causal_mask, padding_mask
from tests.exercise_checks import assert_incorrect


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("exercise", [build_combined_mask, fix_the_mask_bug],
                         ids=lambda e: e.title)
def test_reference_is_correct_and_stub_is_not_attempted(exercise):
    assert exercise.evaluate(exercise.reference).status == CORRECT
    assert exercise.evaluate(stub).status == NOT_ATTEMPTED


def test_combined_mask_reference_matches_torch_is_causal_on_full_sentences():
    # With no padding, the combined mask must be exactly what SDPA's is_causal uses.
    q = torch.randn(2, 1, 4, 8)
    mask = build_combined_mask.reference([4, 4], 4)
    torch.testing.assert_close(
        torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask),
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True),
    )


def _keys(lengths, seq_len):
    return padding_mask(lengths, max_len=seq_len)


COMBINED_WRONG = {
    "float mask": (
        lambda lengths, n: (causal_mask(n) & _keys(lengths, n)[:, None, None, :]).float(),
        "bool tensor",
    ),
    "no heads axis": (
        lambda lengths, n: causal_mask(n) & _keys(lengths, n)[:, None, :],
        "add the heads axis",
    ),
    "flipped convention": (
        lambda lengths, n: ~(causal_mask(n) & _keys(lengths, n)[:, None, None, :]),
        "exactly flipped",
    ),
    "or instead of and": (
        lambda lengths, n: causal_mask(n) | _keys(lengths, n)[:, None, None, :],
        "later key",
    ),
    "triu instead of tril": (
        lambda lengths, n: torch.ones(n, n, dtype=torch.bool).triu() & _keys(lengths, n)[
            :, None, None, :],
        "later key",
    ),
    "padding only": (
        lambda lengths, n: _keys(lengths, n)[:, None, None, :].expand(-1, 1, n, n),
        "later key",
    ),
    "causal only": (
        lambda lengths, n: causal_mask(n).expand(len(lengths), 1, n, n),
        "padded key",
    ),
    "max_len ignored": (
        lambda lengths, n: causal_mask(n) & padding_mask(lengths)[:, None, None, :],
        "max_len=seq_len",
    ),
    "queries masked too": (
        lambda lengths, n: causal_mask(n) & _keys(lengths, n)[:, None, :, None]
        & _keys(lengths, n)[:, None, None, :],
        "masked the padded *queries*",
    ),
    "queries masked instead of keys": (
        lambda lengths, n: causal_mask(n) & _keys(lengths, n)[:, None, :, None],
        "masked the padded *queries*",
    ),
    "diagonal blocked": (
        lambda lengths, n: torch.ones(n, n, dtype=torch.bool).tril(diagonal=-1)
        & _keys(lengths, n)[:, None, None, :],
        "keep the diagonal",
    ),
}


@pytest.mark.parametrize("name", COMBINED_WRONG)
def test_combined_mask_wrong_answers_get_their_message(name):
    answer, words = COMBINED_WRONG[name]
    assert_incorrect(build_combined_mask, answer, words)


def _causal_attention(q, k, v, *, diagonal=1, after_softmax=False, scale=True, flip=False):
    """A causal attention with one of the typical mistakes switched on."""
    n = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
    blocked = torch.ones(n, n, dtype=torch.bool).triu(diagonal=diagonal)
    if flip:
        blocked = ~blocked
    if after_softmax:
        weights = torch.softmax(scores, dim=-1).masked_fill(blocked, 0.0)
    else:
        weights = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
    return weights @ v, weights


CAUSAL_WRONG = {
    "mask after the softmax (the bug in the lesson)": (
        lambda q, k, v: _causal_attention(q, k, v, after_softmax=True), "after the softmax"),
    "diagonal blocked": (
        lambda q, k, v: _causal_attention(q, k, v, diagonal=0), "diagonal=1"),
    "past blocked instead of future": (
        lambda q, k, v: _causal_attention(q, k, v, flip=True, diagonal=1), "mask is flipped"),
    "past and future swapped, diagonal kept": (
        lambda q, k, v: _causal_attention(q, k, v, flip=True, diagonal=0), "future leaks"),
    "no mask at all": (
        lambda q, k, v: (lambda w: (w @ v, w))(
            torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)),
        "future leaks"),
    "scale forgotten": (
        lambda q, k, v: _causal_attention(q, k, v, scale=False), "1/sqrt(d_k)"),
    "output from the wrong side": (
        lambda q, k, v: (lambda out, w: (w.transpose(-2, -1) @ v, w))(
            *_causal_attention(q, k, v)), "weights @ v"),
    "single tensor returned": (
        lambda q, k, v: _causal_attention(q, k, v)[0], "return two tensors"),
}


@pytest.mark.parametrize("name", CAUSAL_WRONG)
def test_causal_attention_wrong_answers_get_their_message(name):
    answer, words = CAUSAL_WRONG[name]
    assert_incorrect(fix_the_mask_bug, answer, words)


def test_causal_attention_reference_matches_torch():
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    output, weights = fix_the_mask_bug.reference(q, k, v)
    torch.testing.assert_close(
        output, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert torch.all(weights.triu(diagonal=1) == 0)
