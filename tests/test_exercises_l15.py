"""Lesson 15's exercises: mutation tables (walked by tests/test_exercises.py) and references."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils.data.number_words import alignment
from course_utils.exercises.l15 import alignment_score, cross_attention_step, decoder_masks
from course_utils.experiments.l15_translation import score_alignment
from course_utils.language import set_language
from course_utils.masks import causal_mask
from course_utils.nn.cross_attention import cross_attention
from course_utils.nn.cross_attention import decoder_masks as package_decoder_masks
from tests.exercise_checks import Mutations
from tests.test_exercises_masks import exercise_cells, run_alone


@pytest.mark.parametrize("source", exercise_cells("15_cross_attention.ipynb"))
def test_every_exercise_cell_of_lesson_15_works_on_its_own(source):
    assert run_alone(source).startswith("… Not attempted")


@pytest.mark.parametrize("source", exercise_cells("zh-CN/15_cross_attention.ipynb"))
def test_every_exercise_cell_of_the_chinese_lesson_15_works_on_its_own_in_chinese(source):
    set_language("zh-CN")
    try:
        assert run_alone(source).startswith("… 尚未作答")
    finally:
        set_language("en")


def test_references_equal_the_package():
    padding = torch.tensor([[True, True, False], [True, True, True]])
    for mine, theirs in zip(decoder_masks.reference(padding, 4),
                            package_decoder_masks(padding, 4), strict=True):
        assert torch.equal(mine, theirs)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 3, 8), torch.randn(2, 3, 3, 8)
    for mine, theirs in zip(cross_attention_step.reference(q, k, v, padding),
                            cross_attention(q, k, v, padding), strict=True):
        torch.testing.assert_close(mine, theirs)
    weights = torch.softmax(torch.randn(7, 7), -1)
    links = alignment(101010)
    assert alignment_score.reference(weights, links) == score_alignment(weights, links)


# --- Exercise 1: the two masks of a decoder block ---------------------------------------------

def _masks_with(self_change=None, cross_change=None):
    def answer(padding, n_tgt):
        self_mask, cross_mask = decoder_masks.reference(padding, n_tgt)
        return ((self_change or (lambda m, p, n: m))(self_mask, padding, n_tgt),
                (cross_change or (lambda m, p, n: m))(cross_mask, padding, n_tgt))
    return answer


MASKS_WRONG = [
    ("upper triangle", _masks_with(lambda m, p, n: torch.ones(n, n, dtype=torch.bool).triu()),
     "read a later one"),
    ("diagonal left out", _masks_with(lambda m, p, n: causal_mask(n) & ~torch.eye(n).bool()),
     "diagonal included"),
    ("self mask flipped", _masks_with(lambda m, p, n: ~m), "self_mask is flipped"),
    ("cross mask causal", _masks_with(None, lambda m, p, n: m & torch.ones(
        n, p.shape[1], dtype=torch.bool).tril()), "cross_mask is causal"),
    ("cross mask (batch, n_src)", _masks_with(None, lambda m, p, n: p), "(batch, 1, 1, n_src)"),
    ("cross mask flipped", _masks_with(None, lambda m, p, n: ~m), "cross_mask is flipped"),
    ("cross mask on the query axis", _masks_with(None, lambda m, p, n: p[:, None, :, None]),
     "does not broadcast"),
    ("padding not masked", _masks_with(None, lambda m, p, n: torch.ones_like(m)),
     "read padding"),
    ("float masks", _masks_with(lambda m, p, n: m.float()), "bool tensor"),
    ("one mask only", lambda p, n: decoder_masks.reference(p, n)[0], "two masks"),
]

MASKS_RIGHT = [
    ("tril of ones and unsqueeze", lambda p, n: (torch.tril(torch.ones(n, n)).bool(),
                                                 p.unsqueeze(1).unsqueeze(2))),
    ("arange comparison", lambda p, n: (torch.arange(n)[:, None] >= torch.arange(n)[None, :],
                                        p[:, None, None])),
    ("4-D self mask, expanded cross mask", lambda p, n: (
        causal_mask(n)[None, None], p[:, None, None, :].expand(-1, 1, n, -1))),
    ("a list", lambda p, n: list(package_decoder_masks(p, n))),
]


# --- Exercise 2: the cross-attention step -----------------------------------------------------

def _attend(q, k, v, padding, scale=None, causal=False, dim=-1, after=False):
    scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    keep = padding[:, None, None, :].expand_as(scores)
    if causal:
        keep = keep & torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
    if after:
        weights = torch.softmax(scores, dim) * keep
    else:
        weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim)
    return weights @ v, weights


def _with_f_sdpa(q, k, v, padding):
    mask = padding[:, None, None, :]
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = (q @ k.mT) / q.shape[-1] ** 0.5
    return output, scores.masked_fill(~mask, -1e9).softmax(-1)


def _with_einsum(q, k, v, padding):
    scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(q.shape[-1])
    scores = scores + torch.where(padding, 0.0, float("-inf"))[:, None, None, :]
    weights = scores.softmax(dim=-1)
    return torch.einsum("bhts,bhsd->bhtd", weights, v), weights


def _in_float64(q, k, v, padding):
    out, w = cross_attention_step.reference(q.double(), k.double(), v.double(), padding)
    return out, w


CROSS_WRONG = [
    ("no scaling", lambda q, k, v, p: _attend(q, k, v, p, scale=1.0), "not divided by sqrt(d_k)"),
    ("padding ignored", lambda q, k, v, p: _attend(q, k, v, torch.ones_like(p)),
     "padded source words get weight"),
    ("causal mask", lambda q, k, v, p: _attend(q, k, v, p, causal=True), "causal mask"),
    ("padding flipped", lambda q, k, v, p: _attend(q, k, v, ~p), "flipped"),
    ("softmax over characters", lambda q, k, v, p: _attend(q, k, v, p, dim=-2),
     "softmax runs over the characters"),
    ("masked after softmax", lambda q, k, v, p: _attend(q, k, v, p, after=True),
     "zeroed after the softmax"),
    ("sqrt(d_model)", lambda q, k, v, p: _attend(q, k, v, p,
                                                 scale=1 / math.sqrt(q.shape[-1] * q.shape[1])),
     "sqrt(d_model)"),
    ("weights transposed", lambda q, k, v, p: (lambda o, w: (o, w.transpose(-2, -1)))(
        *cross_attention_step.reference(q, k, v, p)), "(batch, heads, n_tgt, n_src)"),
    ("float16", lambda q, k, v, p: tuple(t.half() for t in cross_attention_step.reference(
        q, k, v, p)), "3 significant digits"),
    ("weights only", lambda q, k, v, p: cross_attention_step.reference(q, k, v, p)[1],
     "(output, weights)"),
]

CROSS_RIGHT = [
    ("F.scaled_dot_product_attention and -1e9", _with_f_sdpa),
    ("einsum and an additive mask", _with_einsum),
    ("in float64", _in_float64),
    ("the package's", lambda q, k, v, p: cross_attention(q, k, v, p)),
]


# --- Exercise 3: the alignment score ----------------------------------------------------------

def _score_vectorised(weights, links):
    known = torch.tensor([w is not None for w in links])
    target = torch.tensor([-1 if w is None else w for w in links])
    return (weights.argmax(-1) == target)[known].float().mean()


def _score_with_max(weights, links):
    peaks = weights.max(dim=1).indices
    pairs = [(int(peaks[t]), w) for t, w in enumerate(links) if w is not None]
    return sum(a == b for a, b in pairs) / len(pairs)


def _score_numpy(weights, links):
    import numpy as np
    rows = np.asarray(weights)
    kept = [t for t, w in enumerate(links) if w is not None]
    return np.mean([rows[t].argmax() == links[t] for t in kept])


def _score_count(weights, links):
    scored = [(t, w) for t, w in enumerate(links) if w is not None]
    return sum(int(weights[t].argmax()) == w for t, w in scored)


def _score_over_all(weights, links):
    scored = [(t, w) for t, w in enumerate(links) if w is not None]
    return sum(int(weights[t].argmax()) == w for t, w in scored) / len(links)


def _score_mean_weight(weights, links):
    scored = [(t, w) for t, w in enumerate(links) if w is not None]
    return sum(float(weights[t, w]) for t, w in scored) / len(scored)


def _score_argmin(weights, links):
    scored = [(t, w) for t, w in enumerate(links) if w is not None]
    return sum(int(weights[t].argmin()) == w for t, w in scored) / len(scored)


def _score_columns(weights, links):
    peaks = weights.argmax(0)  # one per word, not per character
    scored = [(t, w) for t, w in enumerate(links) if w is not None]
    return sum(int(peaks[t]) == w for t, w in scored) / len(scored)


def _score_none_as_zero(weights, links):
    return sum(int(weights[t].argmax()) == (w or 0) for t, w in enumerate(links)) / len(links)


SCORE_WRONG = [
    ("a count", _score_count, "return the share"),
    ("zero counted", _score_over_all, "零 included"),
    ("mean weight", _score_mean_weight, "strongest word"),
    ("argmin", _score_argmin, "not argmin"),
    ("argmax over characters", _score_columns, "dim=-1"),
    ("None read as word 0", _score_none_as_zero, "left out of the score"),
    ("a string", lambda w, links: "high", "should be a number"),
]

SCORE_RIGHT = [
    ("vectorised, a 0-d tensor", _score_vectorised),
    ("max(dim=1).indices", _score_with_max),
    ("numpy", _score_numpy),
    ("the package's", score_alignment),
]


MUTATIONS = {
    decoder_masks: Mutations(wrong=MASKS_WRONG, right=MASKS_RIGHT),
    cross_attention_step: Mutations(wrong=CROSS_WRONG, right=CROSS_RIGHT),
    alignment_score: Mutations(wrong=SCORE_WRONG, right=SCORE_RIGHT),
}
