"""Lesson 16's exercises: mutation tables (walked by tests/test_exercises.py) and references."""

from __future__ import annotations

import math

import pytest
import torch

from course_utils.exercises.l16 import add_sink, merge_results, tile_backward
from course_utils.language import set_language
from course_utils.nn.flash_attention import flash_backward, flash_forward
from tests.exercise_checks import Mutations
from tests.test_exercises_masks import exercise_cells, run_alone


@pytest.mark.parametrize("source", exercise_cells("16_flash_attention.ipynb"))
def test_every_exercise_cell_of_lesson_16_works_on_its_own(source):
    assert run_alone(source).startswith("… Not attempted")


@pytest.mark.parametrize("source", exercise_cells("zh-CN/16_flash_attention.ipynb"))
def test_every_exercise_cell_of_the_chinese_lesson_16_works_on_its_own_in_chinese(source):
    set_language("zh-CN")
    try:
        assert run_alone(source).startswith("… 尚未作答")
    finally:
        set_language("en")


def test_the_tile_reference_summed_over_tiles_is_the_packages_backward():
    q, k, v = (torch.randn(1, 2, 6, 4, dtype=torch.float64) for _ in range(3))
    d_output = torch.randn(1, 2, 6, 4, dtype=torch.float64)
    output, logsumexp = flash_forward(q, k, v, block_size=3)
    d_q, d_k, d_v, _ = flash_backward(q, k, v, output, logsumexp, d_output, block_size=3)
    parts = [tile_backward.reference(q, k[..., s:s + 3, :], v[..., s:s + 3, :], output, d_output,
                                     logsumexp) for s in (0, 3)]
    torch.testing.assert_close(parts[0][0] + parts[1][0], d_q)
    torch.testing.assert_close(torch.cat([parts[0][1], parts[1][1]], dim=-2), d_k)
    torch.testing.assert_close(torch.cat([parts[0][2], parts[1][2]], dim=-2), d_v)


def test_the_sink_reference_is_the_packages_forward_with_a_sink():
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(3))
    sink = torch.randn(3, dtype=torch.float64)
    plain = flash_forward(q, k, v, block_size=2)
    for mine, package in zip(add_sink.reference(*plain, sink),
                             flash_forward(q, k, v, block_size=2, sink=sink), strict=True):
        torch.testing.assert_close(mine, package)


def test_merging_the_halves_gives_the_whole():
    q, k, v = (torch.randn(2, 1, 4, 3, dtype=torch.float64) for _ in range(3))
    halves = [flash_forward(q, k[..., s, :], v[..., s, :]) for s in (slice(0, 2), slice(2, 4))]
    for mine, whole in zip(merge_results.reference(*halves), flash_forward(q, k, v),
                           strict=True):
        torch.testing.assert_close(mine, whole)


# --- Exercise 1: the backward pass of one tile ------------------------------------------------

def _parts(q, k, v, output, d_output, logsumexp):
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale
    return scale, scores, (d_output * output).sum(-1, keepdim=True), d_output @ v.transpose(-2, -1)


def _tile_local_softmax(q, k, v, output, d_output, logsumexp):
    scale, scores, delta, d_p = _parts(q, k, v, output, d_output, logsumexp)
    p = torch.softmax(scores, dim=-1)
    d_s = p * (d_p - delta)
    return d_s @ k * scale, d_s.mT @ q * scale, p.mT @ d_output


def _tile_without_delta(q, k, v, output, d_output, logsumexp):
    scale, scores, _, d_p = _parts(q, k, v, output, d_output, logsumexp)
    p = torch.exp(scores - logsumexp)
    d_s = p * d_p
    return d_s @ k * scale, d_s.mT @ q * scale, p.mT @ d_output


def _tile_delta_of_the_tile(q, k, v, output, d_output, logsumexp):
    scale, scores, _, d_p = _parts(q, k, v, output, d_output, logsumexp)
    p = torch.exp(scores - logsumexp)
    d_s = p * (d_p - (p * d_p).sum(-1, keepdim=True))
    return d_s @ k * scale, d_s.mT @ q * scale, p.mT @ d_output


def _tile_unscaled_gradients(q, k, v, output, d_output, logsumexp):
    _, scores, delta, d_p = _parts(q, k, v, output, d_output, logsumexp)
    p = torch.exp(scores - logsumexp)
    d_s = p * (d_p - delta)
    return d_s @ k, d_s.mT @ q, p.mT @ d_output


def _tile_unscaled_scores(q, k, v, output, d_output, logsumexp):
    scale, _, delta, d_p = _parts(q, k, v, output, d_output, logsumexp)
    p = torch.exp(q @ k.mT - logsumexp)
    d_s = p * (d_p - delta)
    return d_s @ k * scale, d_s.mT @ q * scale, p.mT @ d_output


def _tile_exp_then_divide(q, k, v, output, d_output, logsumexp):
    scale, scores, delta, d_p = _parts(q, k, v, output, d_output, logsumexp)
    p = torch.exp(scores) / torch.exp(logsumexp)
    d_s = p * (d_p - delta)
    return d_s @ k * scale, d_s.mT @ q * scale, p.mT @ d_output


def _tile_swapped(q, k, v, output, d_output, logsumexp):
    d_q, d_k, d_v = tile_backward.reference(q, k, v, output, d_output, logsumexp)
    return d_k, d_q, d_v


def _tile_in_place(q, k, v, output, d_output, logsumexp):
    q.mul_(1.0)  # harmless value, but still a write
    d_output.mul_(2.0)
    return tile_backward.reference(q, k, v, output, d_output / 2.0, logsumexp)


def _tile_einsum(q, k, v, output, d_output, logsumexp):
    scale = q.shape[-1] ** -0.5
    p = torch.exp(torch.einsum("bhqd,bhkd->bhqk", q, k) * scale - logsumexp)
    d_p = torch.einsum("bhqe,bhke->bhqk", d_output, v)
    delta = torch.einsum("bhqe,bhqe->bhq", d_output, output)[..., None]
    d_s = p * (d_p - delta)
    return (torch.einsum("bhqk,bhkd->bhqd", d_s, k) * scale,
            torch.einsum("bhqk,bhqd->bhkd", d_s, q) * scale,
            torch.einsum("bhqk,bhqe->bhke", p, d_output))


def _tile_scaled_queries(q, k, v, output, d_output, logsumexp):
    scale = 1 / math.sqrt(q.shape[-1])
    q_scaled = q * scale
    p = torch.exp(q_scaled @ k.transpose(-1, -2) - logsumexp)
    d_p = d_output @ v.transpose(-1, -2)
    d_s = p * d_p - p * (output * d_output).sum(dim=-1, keepdim=True)
    return d_s @ (k * scale), d_s.transpose(-1, -2) @ q_scaled, p.transpose(-1, -2) @ d_output


def _tile_in_float32(q, k, v, output, d_output, logsumexp):
    return tile_backward.reference(*(t.float() for t in (q, k, v, output, d_output, logsumexp)))


def _tile_as_a_list_by_autograd(q, k, v, output, d_output, logsumexp):
    # The tile's share of the row: the weights exp(S - L) with L held fixed, D as a constant.
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    p = torch.exp(q @ k.mT / math.sqrt(q.shape[-1]) - logsumexp)
    delta = (d_output * output).sum(-1, keepdim=True)
    surrogate = ((p @ v) * d_output).sum() - (p * delta).sum()
    return list(torch.autograd.grad(surrogate, (q, k, v)))


TILE_WRONG = [
    ("softmax over the tile", _tile_local_softmax, "softmax over this tile's keys only"),
    ("dS without D", _tile_without_delta, "dS should be P ∘ (dP - D)"),
    ("D from the tile", _tile_delta_of_the_tile, "over this tile alone"),
    ("no 1/sqrt(d_k) in dQ, dK", _tile_unscaled_gradients, "off by the factor 1/sqrt(d_k)"),
    ("scores recomputed unscaled", _tile_unscaled_scores, "exactly as the forward pass"),
    ("exp(S) / exp(L)", _tile_exp_then_divide, "compute exp(S - L) in one go"),
    ("grad_q and grad_k swapped", _tile_swapped, "in the order (grad_q, grad_k, grad_v)"),
    ("not a tuple", lambda *args: tile_backward.reference(*args)[0], "tuple of 3 tensors"),
    ("in float16", lambda *args: tuple(t.half() for t in tile_backward.reference(*args)),
     "only about 3 significant digits"),
    ("d_output changed in place", _tile_in_place, "changed its argument d_output in place"),
]

TILE_RIGHT = [
    ("einsum", _tile_einsum),
    ("q scaled first, D subtracted after", _tile_scaled_queries),
    ("in float32", _tile_in_float32),
    ("autograd on a surrogate, a list", _tile_as_a_list_by_autograd),
]


# --- Exercise 2: a sink in the logsumexp ------------------------------------------------------

def _sink_added(output, logsumexp, sink):
    return output * torch.exp(-sink.view(1, -1, 1, 1)), logsumexp + sink.view(1, -1, 1, 1)


def _sink_max(output, logsumexp, sink):
    new = torch.maximum(logsumexp, sink.view(1, -1, 1, 1))
    return output * torch.exp(logsumexp - new), new


def _sink_output_unchanged(output, logsumexp, sink):
    return output, add_sink.reference(output, logsumexp, sink)[1]


def _sink_rescaled_upwards(output, logsumexp, sink):
    new = torch.logaddexp(logsumexp, sink.view(1, -1, 1, 1))
    return output * torch.exp(new - logsumexp), new


def _sink_own_weight(output, logsumexp, sink):
    new = torch.logaddexp(logsumexp, sink.view(1, -1, 1, 1))
    return output * torch.exp(sink.view(1, -1, 1, 1) - new), new


def _sink_on_the_batch_axis(output, logsumexp, sink):
    new = torch.logaddexp(logsumexp, sink.view(-1, 1, 1, 1))
    return output * torch.exp(logsumexp - new), new


def _sink_outside_the_log(output, logsumexp, sink):
    new = torch.log(torch.exp(logsumexp) + torch.exp(sink.view(1, -1, 1, 1)))
    return output * torch.exp(logsumexp - new), new


def _sink_logsumexp_unchanged(output, logsumexp, sink):
    return add_sink.reference(output, logsumexp, sink)[0], logsumexp


def _sink_softplus(output, logsumexp, sink):
    sink = sink[None, :, None, None]
    gap = sink - logsumexp
    return output * torch.sigmoid(-gap), logsumexp + torch.nn.functional.softplus(gap)


def _sink_stacked(output, logsumexp, sink):
    column = sink.reshape(1, -1, 1, 1).expand_as(logsumexp)
    new = torch.logsumexp(torch.cat([logsumexp, column], dim=-1), dim=-1, keepdim=True)
    return output / torch.exp(new - logsumexp), new


def _sink_by_hand(output, logsumexp, sink):
    sink = sink.view(1, -1, 1, 1)
    top = torch.maximum(logsumexp, sink)
    new = top + torch.log(torch.exp(logsumexp - top) + torch.exp(sink - top))
    return output * torch.exp(logsumexp - new), new


SINK_WRONG = [
    ("sink added to L", _sink_added, "does not add sink to L"),
    ("max(L, sink)", _sink_max, "only the larger term"),
    ("output unchanged", _sink_output_unchanged, "the output must shrink too"),
    ("output rescaled upwards", _sink_rescaled_upwards,
     "rescaled the wrong way"),
    ("the sink's own weight", _sink_own_weight, "the sink's own weight"),
    ("sink on the batch axis", _sink_on_the_batch_axis, "lines up with axis 1"),
    ("exp outside the log", _sink_outside_the_log, "exp(logsumexp) overflows"),
    ("logsumexp unchanged", _sink_logsumexp_unchanged, "should grow by the sink's term"),
    ("in float16", lambda *args: tuple(t.half() for t in add_sink.reference(*args)),
     "only about 3 significant digits"),
    ("one tensor", lambda *args: add_sink.reference(*args)[0], "tuple of 2 tensors"),
]

SINK_RIGHT = [
    ("softplus and sigmoid", _sink_softplus),
    ("logsumexp of a stacked column", _sink_stacked),
    ("by hand, max first", _sink_by_hand),
    ("in float32", lambda o, lse, s: add_sink.reference(o.float(), lse.float(), s.float())),
]


# --- Exercise 3: merge two partial results (O, L) ---------------------------------------------

def _merge_mean(a, b):
    return (a[0] + b[0]) / 2, torch.logaddexp(a[1], b[1])


def _merge_sum(a, b):
    return a[0] + b[0], torch.logaddexp(a[1], b[1])


def _merge_max(a, b):
    return merge_results.reference(a, b)[0], torch.maximum(a[1], b[1])


def _merge_added_logs(a, b):
    return merge_results.reference(a, b)[0], a[1] + b[1]


def _merge_overflowing(a, b):
    total = torch.exp(a[1]) + torch.exp(b[1])
    return (a[0] * torch.exp(a[1]) + b[0] * torch.exp(b[1])) / total, torch.log(total)


def _merge_log_mean(a, b):
    return merge_results.reference(a, b)[0], torch.logaddexp(a[1], b[1]) - math.log(2)


def _merge_as_in_lesson_06(a, b):
    top = torch.maximum(a[1], b[1])
    return (a[0] * torch.exp(a[1] - top) + b[0] * torch.exp(b[1] - top),
            torch.logaddexp(a[1], b[1]))


def _merge_weights_upside_down(a, b):
    lse = torch.logaddexp(a[1], b[1])
    return a[0] * torch.exp(lse - a[1]) + b[0] * torch.exp(lse - b[1]), lse


def _merge_sigmoid(a, b):
    share_a = torch.sigmoid(a[1] - b[1])  # exp(L_a) / (exp(L_a) + exp(L_b))
    return torch.lerp(b[0], a[0], share_a), torch.logaddexp(a[1], b[1])


def _merge_stacked(a, b):
    lse = torch.logsumexp(torch.stack([a[1], b[1]]), dim=0)
    weights = torch.exp(torch.stack([a[1], b[1]]) - lse)
    return (weights * torch.stack([a[0], b[0]])).sum(0), lse


def _merge_by_hand(a, b):
    top = torch.maximum(a[1], b[1])
    sum_a, sum_b = torch.exp(a[1] - top), torch.exp(b[1] - top)
    return (a[0] * sum_a + b[0] * sum_b) / (sum_a + sum_b), top + torch.log(sum_a + sum_b)


MERGE_WRONG = [
    ("mean of the outputs", _merge_mean, "not worth the same"),
    ("sum of the outputs", _merge_sum, "already normalised over its own keys"),
    ("max of the logsumexps", _merge_max, "only the larger part"),
    ("logsumexps added", _merge_added_logs, "adding two logs multiplies"),
    ("exp(L) overflows", _merge_overflowing, "exp(L) overflows"),
    ("log of the mean", _merge_log_mean, "log of the mean"),
    ("lesson 06's merge", _merge_as_in_lesson_06, "unnormalised sums"),
    ("weights upside down", _merge_weights_upside_down, "the weights run the wrong way"),
    ("in float16", lambda a, b: tuple(t.half() for t in merge_results.reference(a, b)),
     "only about 3 significant digits"),
    ("one tensor", lambda a, b: merge_results.reference(a, b)[0], "tuple of 2 tensors"),
]

MERGE_RIGHT = [
    ("sigmoid and lerp", _merge_sigmoid),
    ("stacked logsumexp", _merge_stacked),
    ("by hand, max first", _merge_by_hand),
    ("in float32", lambda a, b: merge_results.reference(tuple(t.float() for t in a),
                                                        tuple(t.float() for t in b))),
    ("a list", lambda a, b: list(merge_results.reference(a, b))),
]


MUTATIONS = {
    tile_backward: Mutations(wrong=TILE_WRONG, right=TILE_RIGHT),
    add_sink: Mutations(wrong=SINK_WRONG, right=SINK_RIGHT),
    merge_results: Mutations(wrong=MERGE_WRONG, right=MERGE_RIGHT),
}
