"""Lesson 05's exercises: mutation tables (walked by tests/test_exercises.py) and references."""

from __future__ import annotations

import torch

from course_utils.exercises.l05 import build_combined_mask, safe_weights
from course_utils.nn.attention import scaled_dot_product_attention
from course_utils.nn.masks import (
    additive_mask,
    causal_mask,
    combine_masks,
    expand_padding_mask,
    padding_mask,
)
from tests.support.exercise_checks import Mutations


def _keys(lengths, seq_len):
    """(batch, 1, 1, seq_len): the real keys, for scores with a heads axis."""
    return padding_mask(lengths, max_len=seq_len)[:, None]


def _combined_by_index(lengths, seq_len):
    i = torch.arange(seq_len)[:, None]  # query positions (seq_len, 1)
    j = torch.arange(seq_len)[None, :]  # key positions (1, seq_len)
    real = j < torch.tensor(lengths)[:, None, None]  # (batch, 1, seq_len)
    return ((j <= i) & real)[:, None]  # (batch, 1, seq_len, seq_len)


def _combined_in_place(lengths, seq_len):
    mask = torch.ones(len(lengths), 1, seq_len, seq_len, dtype=torch.bool).tril()
    mask &= expand_padding_mask(padding_mask(lengths, max_len=seq_len))
    return mask


def _combined_by_loops(lengths, seq_len):
    mask = torch.zeros(len(lengths), 1, seq_len, seq_len, dtype=torch.bool)
    for b, length in enumerate(lengths):
        for i in range(seq_len):
            mask[b, 0, i, : min(i + 1, length)] = True
    return mask


def _combined_for_three_sentences(lengths, seq_len):
    mask = torch.zeros(len(lengths), 1, seq_len, seq_len, dtype=torch.bool)
    for b in range(3):  # the first batch's size written in
        mask[b, 0] = causal_mask(seq_len) & (torch.arange(seq_len) < lengths[b])
    return mask


MASK_WRONG = [
    ("float mask", lambda lengths, n: (causal_mask(n) & _keys(lengths, n)).float(),
     "bool tensor"),
    ("no heads axis", lambda lengths, n: causal_mask(n) & padding_mask(lengths, max_len=n),
     "add the heads axis"),
    ("flipped convention", lambda lengths, n: ~(causal_mask(n) & _keys(lengths, n)),
     "exactly flipped"),
    ("or instead of and", lambda lengths, n: causal_mask(n) | _keys(lengths, n), "later key"),
    ("triu instead of tril", lambda lengths, n: torch.ones(n, n, dtype=torch.bool).triu()
     & _keys(lengths, n), "later key"),
    ("padding only", lambda lengths, n: _keys(lengths, n).expand(-1, 1, n, n), "later key"),
    ("causal only", lambda lengths, n: causal_mask(n).expand(len(lengths), 1, n, n),
     "padded key"),
    ("max_len ignored", lambda lengths, n: causal_mask(n) & padding_mask(lengths)[:, None],
     "max_len=seq_len"),
    ("queries masked too", lambda lengths, n: causal_mask(n)
     & padding_mask(lengths, max_len=n).transpose(-2, -1)[:, None] & _keys(lengths, n),
     "masked the padded *queries*"),
    ("queries masked instead of keys", lambda lengths, n: causal_mask(n)
     & padding_mask(lengths, max_len=n).transpose(-2, -1)[:, None],
     "masked the padded *queries*"),
    ("diagonal blocked", lambda lengths, n: torch.ones(n, n, dtype=torch.bool).tril(diagonal=-1)
     & _keys(lengths, n), "keep the diagonal"),
    ("padding on the left", lambda lengths, n: causal_mask(n)
     & padding_mask(lengths, max_len=n).flip(-1)[:, None], "a padded key is allowed"),
    ("the first sentence's length for all", lambda lengths, n: causal_mask(n)
     & _keys([lengths[0]] * len(lengths), n), "a padded key is allowed (sentence 1"),
    ("a loop over three sentences", _combined_for_three_sentences,
     "your code raised IndexError"),
    ("seq_len capped at the first call's 5", lambda lengths, n: causal_mask(min(n, 5))
     & _keys(lengths, min(n, 5)), "your code raised ValueError"),
]

MASK_RIGHT = [
    ("combine_masks with expand_padding_mask", lambda lengths, n: combine_masks(
        causal_mask(n), expand_padding_mask(padding_mask(lengths, max_len=n)))),
    ("index comparisons", _combined_by_index),
    ("in-place &=", _combined_in_place),
    ("loops", _combined_by_loops),
    ("lengths as a tensor, broadcast", lambda lengths, n: (
        torch.arange(n) <= torch.arange(n)[:, None])
     & (torch.arange(n) < torch.as_tensor(lengths)[:, None, None, None])),
    ("not contiguous", lambda lengths, n: (causal_mask(n).T.T & _keys(lengths, n)).expand(
        len(lengths), 1, n, n)),
]


# --- Exercise 2: attention weights without NaN ------------------------------------------------

def _naive(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def _finite_fill(fill):
    return lambda scores, mask: torch.softmax(scores.masked_fill(~mask, fill), dim=-1)


def _after_softmax(scores, mask):
    return torch.softmax(scores, dim=-1) * mask


def _flipped(scores, mask):
    return safe_weights.reference(scores, ~mask)


def _wrong_axis(scores, mask):
    row_has_key = mask.any(dim=-2, keepdim=True)
    filled = scores.masked_fill(~mask, float("-inf")).masked_fill(~row_has_key, 0.0)
    return torch.softmax(filled, dim=-2).masked_fill(~row_has_key, 0.0)


def _manual_without_max(scores, mask):
    e = torch.exp(scores) * mask
    total = e.sum(dim=-1, keepdim=True)
    return e / total.masked_fill(total == 0, 1.0)


def _additive_then_nan_to_num(scores, mask):
    return torch.softmax(scores + additive_mask(mask), dim=-1).nan_to_num(0.0)


def _finite_fill_then_zero_rows(scores, mask):
    smallest = torch.finfo(scores.dtype).min
    return torch.softmax(scores.masked_fill(~mask, smallest), dim=-1) * mask


def _manual_with_max(scores, mask):
    masked = scores.masked_fill(~mask, float("-inf"))
    row_max = masked.amax(dim=-1, keepdim=True)
    row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)  # empty rows: subtract 0
    e = torch.exp(masked - row_max)  # exp(-inf) = 0 at blocked keys
    total = e.sum(dim=-1, keepdim=True)
    return e / total.masked_fill(total == 0, 1.0)  # empty rows: 0 / 1 = 0


def _float64_where(scores, mask):
    row_has_key = mask.any(dim=-1, keepdim=True)
    weights = torch.softmax(scores.double().masked_fill(~mask, float("-inf")), dim=-1)
    return torch.where(row_has_key, weights, torch.zeros((), dtype=torch.float64))


def _in_place(scores, mask):
    row_has_key = mask.any(dim=-1, keepdim=True)
    scores.masked_fill_(~mask, float("-inf")).masked_fill_(~row_has_key, 0.0)
    return scores.softmax(dim=-1) * row_has_key


def _in_place_on_the_softmax(scores, mask):
    weights = safe_weights.reference(scores, mask) + 0.0
    return weights.masked_fill_(~mask.any(dim=-1, keepdim=True), 0.0)


def _softmax_output_changed_in_place(scores, mask):
    row_has_key = mask.any(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return weights.masked_fill_(~row_has_key, 0.0)


def _max_over_every_key(scores, mask):
    """exp(scores − max over all keys, blocked ones too) · mask, normalised where it can be."""
    kept = torch.exp(scores - scores.amax(dim=-1, keepdim=True)) * mask
    total = kept.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, kept / total.clamp_min(1e-30), torch.zeros_like(kept))


def _max_over_every_key_divided(scores, mask):
    kept = torch.exp(scores - scores.amax(dim=-1, keepdim=True)) * mask
    total = kept.sum(dim=-1, keepdim=True)
    return torch.where(mask.any(dim=-1, keepdim=True), kept / total, 0.0)  # 0 / 0 in some rows


def _float16_weights(scores, mask):
    return _manual_with_max(scores.half(), mask)


def _clamped_before_exp(scores, mask):
    e = torch.exp(scores.clamp(-80, 80)) * mask  # no overflow, but the shape of the row is lost
    total = e.sum(dim=-1, keepdim=True)
    return e / total.masked_fill(total == 0, 1.0)


def _finite_fill_then_rows_zeroed(fill):
    def answer(scores, mask):
        weights = torch.softmax(scores.masked_fill(~mask, fill), dim=-1)
        return weights * mask.any(dim=-1, keepdim=True)
    return answer


WEIGHTS_WRONG = [
    ("max over every key: zero rows", _max_over_every_key, "gets all-zero weights"),
    ("max over every key: 0 / 0", _max_over_every_key_divided, "taken over the allowed keys"),
    ("-20 fill", _finite_fill(-20.0), "sum to 1"),
    ("-20 fill, empty rows zeroed",
     lambda scores, mask: torch.softmax(scores.masked_fill(~mask, -20.0), dim=-1) * mask,
     "a finite fill such as -20"),
    ("computed in float16", _float16_weights, "only about 3 significant digits"),
    ("naive -inf softmax", _naive, "rows with no allowed key are NaN"),
    ("-1e9 fill", _finite_fill(-1e9), "sum to 1"),
    ("finfo.min fill", _finite_fill(torch.finfo(torch.float32).min), "sum to 1"),
    ("mask after the softmax", _after_softmax, "not the weights after it"),
    ("flipped mask", _flipped, "the mask is flipped"),
    ("flipped mask, naive", lambda s, m: _naive(s, ~m), "the mask is flipped"),
    ("softmax over the queries", _wrong_axis, "dim=-2"),
    ("manual softmax without the max", _manual_without_max, "subtract each row's maximum"),
    ("-inf added, NaN replaced after", _additive_then_nan_to_num, "gradient of the scores"),
    ("softmax output changed in place", _softmax_output_changed_in_place, "backward pass fails"),
    ("detached", lambda s, m: safe_weights.reference(s, m).detach(), "no gradient"),
    ("bool weights", lambda s, m: safe_weights.reference(s, m) > 0.1, "floating-point"),
    ("-1e4 fill, empty rows zeroed", lambda scores, mask: torch.softmax(
        scores.masked_fill(~mask, -1e4), dim=-1) * mask.any(dim=-1, keepdim=True),
     "a finite fill such as -20 or -1e4 is above all of them"),
    ("scores multiplied by the mask", lambda s, m: torch.softmax(s * m, dim=-1),
     "multiplied the scores by the mask"),
    ("scores multiplied by the mask, then the weights",
     lambda s, m: torch.softmax(s * m, dim=-1) * m, "multiplied the scores by the mask"),
    ("the caller's scores filled in place", _in_place, "changed its argument scores in place"),
    ("scores clamped to ±80 before exp", _clamped_before_exp, "weights has the right shape"),
    ("a fill of -1e4 below the first cases' scores", _finite_fill_then_rows_zeroed(-1e4),
     "a finite fill such as -20 or -1e4"),
]

def _through_logsumexp(scores, mask):
    # float64: a float32 logsumexp of scores near ±30 000 is rounded to 0.002
    masked = scores.double().masked_fill(~mask, float("-inf"))
    row_has_key = mask.any(dim=-1, keepdim=True).expand_as(masked)
    log_total = torch.where(row_has_key, masked, 0.0).logsumexp(dim=-1, keepdim=True)
    return torch.where(row_has_key, (masked - log_total).exp(), 0.0)


def _where_throughout(scores, mask):
    mask = mask.expand_as(scores)
    has_key = mask.any(dim=-1, keepdim=True)
    scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    scores = torch.where(has_key, scores, torch.zeros_like(scores))  # no row of only -inf
    return torch.where(has_key, torch.softmax(scores, dim=-1), torch.zeros_like(scores))


WEIGHTS_RIGHT = [
    ("torch.where throughout", _where_throughout),
    ("finfo.min fill, then times the mask", _finite_fill_then_zero_rows),
    ("manual softmax with the max", _manual_with_max),
    ("float64 and torch.where", _float64_where),
    ("course_utils attention with identity values", lambda s, m: scaled_dot_product_attention(
        s, torch.eye(s.shape[-1]), torch.eye(s.shape[-1]), mask=m, scale=1.0)[1]),
    ("in place on a copy of the weights", _in_place_on_the_softmax),
    ("through logsumexp, in float64", _through_logsumexp),
]


MUTATIONS = {
    build_combined_mask: Mutations(wrong=MASK_WRONG, right=MASK_RIGHT),
    safe_weights: Mutations(wrong=WEIGHTS_WRONG, right=WEIGHTS_RIGHT),
}

