"""Lesson 06's exercises: mutation tables (walked by tests/test_exercises.py) and references."""

from __future__ import annotations

import numpy as np
import torch

from course_utils.exercises.l06 import layer_flops, merge_partials
from course_utils.experiments.l06_cost import attention_flops
from tests.support.exercise_checks import Mutations

# --- Exercise 1: count the FLOPs of one attention layer ---------------------------------------

def _with(change):
    """A wrong answer: the reference with one typical mistake."""
    return lambda n, d, h, b: change(layer_flops.reference(n, d, h, b), n, d, h, b)


def _flops_by_parts(seq_len, d_model, num_heads, batch_size):
    counts = attention_flops(seq_len, d_model, num_heads, batch_size=batch_size)
    return sum(counts.values()) - counts["softmax"]


def _flops_per_head(seq_len, d_model, num_heads, batch_size):
    d_k = d_model / num_heads  # a float on purpose
    total = 0.0
    for _ in range(num_heads):
        total += 2 * seq_len * d_k * seq_len + 2 * seq_len * seq_len * d_k
    return batch_size * (total + 4 * 2 * seq_len * d_model**2)


FLOPS_WRONG = [
    ("multiply-adds", _with(lambda total, n, d, h, b: total // 2), "multiply-add is 2 FLOPs"),
    ("batch forgotten", _with(lambda total, n, d, h, b: total // b), "multiply by batch"),
    ("W_O forgotten", _with(lambda total, n, d, h, b: total - 2 * b * n * d * d), "W_O"),
    ("weights @ V forgotten", _with(lambda total, n, d, h, b: total - 2 * b * n * n * d),
     "weights @ V costs as much"),
    ("d_model per head", _with(lambda total, n, d, h, b: total + 2 * (h - 1) * 2 * b * n * n * d),
     "num_heads times too big"),
    ("softmax counted", _with(lambda total, n, d, h, b: total + 5 * b * h * n * n),
     "leave the softmax out"),
    ("seq_len and d_model swapped", lambda n, d, h, b: layer_flops.reference(d, n, h, b),
     "swapped seq_len and d_model"),
    ("off by one", _with(lambda total, n, d, h, b: total + 1), "FlopCounterMode counts"),
    ("not a number", lambda n, d, h, b: "lots", "should be a number"),
    ("NaN", lambda n, d, h, b: float("nan"), "not a finite number"),
    ("d_k = 8 of the first configurations written in",
     lambda n, d, h, b: 8 * b * n * d * d + 4 * b * h * n * n * 8,
     "for seq_len=50, d_model=60, num_heads=1, batch_size=5"),
    ("a table of the configurations tried", lambda n, d, h, b: {
        24: 811008, 40: 2088960, 96: 786432}[n], "your code raised KeyError"),
]

FLOPS_RIGHT = [
    ("package count minus the softmax", _flops_by_parts),
    ("a loop over heads, in floats", _flops_per_head),
    ("a numpy integer", lambda n, d, h, b: np.int64(layer_flops.reference(n, d, h, b))),
    ("a one-element tensor", lambda n, d, h, b: torch.tensor(layer_flops.reference(n, d, h, b))),
    ("4·n·d² + 2·n²·d, factored", lambda n, d, h, b: 4 * b * n * d * (2 * d + n)),
    ("a list of the six products", lambda n, d, h, b: sum(
        2 * m * k * p for m, k, p in [(b * n, d, d)] * 4 + [(b * h * n, d // h, n)] * 2)),
]


# --- Exercise 2: merge two partial softmax results --------------------------------------------

def _merge_without_rescaling(a, b):
    return torch.maximum(a[0], b[0]), a[1] + b[1], a[2] + b[2]


def _merge_normalised(a, b):
    new_max, total, out = merge_partials.reference(a, b)
    return new_max, total, out / total


def _merge_rescaled_the_wrong_way(a, b):
    new_max = torch.maximum(a[0], b[0])
    grow_a, grow_b = torch.exp(new_max - a[0]), torch.exp(new_max - b[0])
    return new_max, a[1] * grow_a + b[1] * grow_b, a[2] * grow_a + b[2] * grow_b


def _merge_keeping_the_first_max(a, b):
    return a[0], a[1] + b[1], a[2] + b[2]


def _merge_only_the_sum_rescaled(a, b):
    new_max, total, _ = merge_partials.reference(a, b)
    return new_max, total, a[2] + b[2]


def _merge_sum_of_maxes(a, b):
    _, total, out = merge_partials.reference(a, b)
    return a[0] + b[0], total, out


def _merge_through_the_online_update(a, b):
    # Fold b into a as if b's keys were one block with scores b_max: exp(0) * b's sums.
    new_max = torch.maximum(a[0], b[0])
    scale_a, scale_b = (torch.exp(m - new_max) for m in (a[0], b[0]))
    return new_max, torch.addcmul(a[1] * scale_a, b[1], scale_b), a[2] * scale_a + b[2] * scale_b


def _merge_with_where(a, b):
    a_larger = a[0] >= b[0]
    new_max = torch.where(a_larger, a[0], b[0])
    small_max = torch.where(a_larger, b[0], a[0])
    factor = torch.exp(small_max - new_max)  # rescales the part with the smaller max
    scale_a = torch.where(a_larger, torch.ones_like(factor), factor)
    scale_b = torch.where(a_larger, factor, torch.ones_like(factor))
    return new_max, a[1] * scale_a + b[1] * scale_b, a[2] * scale_a + b[2] * scale_b


def _merge_in_place(a, b):
    new_max = torch.maximum(a[0], b[0])
    scale_a, scale_b = torch.exp(a[0] - new_max), torch.exp(b[0] - new_max)
    total = a[1].mul_(scale_a).add_(b[1] * scale_b)
    out = a[2].mul_(scale_a).add_(b[2].mul_(scale_b))
    return new_max, total, out


def _merge_in_float32(a, b):
    return merge_partials.reference(tuple(t.float() for t in a), tuple(t.float() for t in b))


def _merge_keeping_the_second_max(a, b):
    scale_a = torch.exp(a[0] - b[0])  # right only in the rows where b's max is the larger
    return b[0], a[1] * scale_a + b[1], a[2] * scale_a + b[2]


def _merge_assuming_b_larger(a, b):  # right max, but only a is rescaled, to b's max
    new_max = torch.maximum(a[0], b[0])
    scale_a = torch.exp(a[0] - b[0])
    return new_max, a[1] * scale_a + b[1], a[2] * scale_a + b[2]


def _merge_with_exp_of_the_maxes(a, b):
    new_max = torch.maximum(a[0], b[0])
    scale_a = torch.exp(a[0]) / torch.exp(new_max)  # inf / inf once a max is in the hundreds
    scale_b = torch.exp(b[0]) / torch.exp(new_max)
    return new_max, a[1] * scale_a + b[1] * scale_b, a[2] * scale_a + b[2] * scale_b


def _merge_to_one_max_for_the_batch(a, b):
    new_max = torch.maximum(a[0].max(), b[0].max())  # one max for every row
    scale_a, scale_b = torch.exp(a[0] - new_max), torch.exp(b[0] - new_max)
    return (new_max.expand_as(a[0]), a[1] * scale_a + b[1] * scale_b,
            a[2] * scale_a + b[2] * scale_b)


def _merge_for_one_query_row(a, b):  # the first case's (2, 5, 1) written in
    new_max = torch.maximum(a[0], b[0]).reshape(2, 5, 1)
    scale_a, scale_b = torch.exp(a[0] - new_max), torch.exp(b[0] - new_max)
    return new_max, a[1] * scale_a + b[1] * scale_b, a[2] * scale_a + b[2] * scale_b


def _merge_through_logaddexp(a, b):
    a, b = [tuple(t.double() for t in state) for state in (a, b)]  # log-sums near ±4000
    new_max = torch.maximum(a[0], b[0])
    log_sum = torch.logaddexp(a[1].log() + a[0], b[1].log() + b[0]) - new_max
    scale_a, scale_b = torch.exp(a[0] - new_max), torch.exp(b[0] - new_max)
    return new_max, log_sum.exp(), a[2] * scale_a + b[2] * scale_b


_REMEMBERED = {}


def _first_merge_remembered(a, b):  # right for the checker's first pair of states only
    return _REMEMBERED.setdefault("merge", merge_partials.reference(a, b))


MERGE_WRONG = [
    ("no rescaling", _merge_without_rescaling, "added the two sums as they are"),
    ("normalised", _merge_normalised, "out should stay unnormalised"),
    ("rescaled the wrong way", _merge_rescaled_the_wrong_way, "runs the wrong way"),
    ("first max kept", _merge_keeping_the_first_max, "larger of the two"),
    ("out not rescaled", _merge_only_the_sum_rescaled, "added the two outs as they are"),
    ("maxes added", _merge_sum_of_maxes, "larger of the two"),
    ("not a tuple", lambda a, b: a[0], "tuple of three tensors"),
    ("second max kept", _merge_keeping_the_second_max, "larger of the two"),
    ("in float16", lambda a, b: tuple(t.half() for t in merge_partials.reference(a, b)),
     "only about 3 significant digits"),
    ("NaN", lambda a, b: tuple(t * float("nan") for t in merge_partials.reference(a, b)),
     "contains NaN"),
    ("a's sum and out rescaled in place", _merge_in_place, "changed its argument a in place"),
    ("b assumed to hold the larger max", _merge_assuming_b_larger, "as if that one were always"),
    ("the first merge remembered", _first_merge_remembered, "the merged max should be the larger"),
    ("exp(max) / exp(new_max)", _merge_with_exp_of_the_maxes,
     "when the scores are in the thousands"),
    ("one max for the whole batch", _merge_to_one_max_for_the_batch, "row by row"),
    ("the first case's shape written in", _merge_for_one_query_row,
     "your code raised RuntimeError"),
]

MERGE_RIGHT = [
    ("addcmul", _merge_through_the_online_update),
    ("torch.where", _merge_with_where),
    ("in float32", _merge_in_float32),
    ("sums through logaddexp, in float64", _merge_through_logaddexp),
    ("a list, not a tuple", lambda a, b: list(merge_partials.reference(a, b))),
]


MUTATIONS = {
    layer_flops: Mutations(wrong=FLOPS_WRONG, right=FLOPS_RIGHT),
    merge_partials: Mutations(wrong=MERGE_WRONG, right=MERGE_RIGHT),
}

