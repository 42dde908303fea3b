"""Lesson 06 exercises: count a layer's FLOPs, and merge two partial softmax results."""

from __future__ import annotations

import math

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    as_number,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
    expect_stable,
    far_from_zero,
    is_close,
    reject_half_precision,
)
from course_utils.experiments.l06_cost import counted_flops
from course_utils.language import N_, _
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.online_softmax import online_softmax_update

# (seq_len, d_model, num_heads, batch_size): batch_size > 1 first, so a forgotten batch shows
# at once; seq_len != d_model everywhere, so swapping them shows too.
# Then one head, an odd head count and a batch of 5: no table of the first ones passes.
_CONFIGS = ((24, 32, 4, 3), (40, 48, 6, 2), (96, 16, 2, 1), (50, 60, 1, 5), (33, 40, 5, 2))


def _layer_flops_reference(seq_len, d_model, num_heads, batch_size):
    """Matrix-product FLOPs of one multi-head self-attention forward pass."""
    d_k = d_model // num_heads
    projections = 4 * 2 * batch_size * seq_len * d_model * d_model  # W_Q, W_K, W_V and W_O
    scores = 2 * batch_size * num_heads * seq_len * seq_len * d_k  # q kᵀ in every head
    weighted_sum = 2 * batch_size * num_heads * seq_len * seq_len * d_k  # weights @ v
    return projections + scores + weighted_sum


def _measured_flops(seq_len, d_model, num_heads, batch_size) -> int:
    """What FlopCounterMode counts on a real forward pass of the course's layer."""
    layer = MultiHeadAttention(d_model, num_heads)  # the FLOPs do not depend on the weights
    x = torch.zeros(batch_size, seq_len, d_model)
    with torch.no_grad():
        return sum(counted_flops(layer, x).values())


def _check_layer_flops(answer):
    for n, d, h, batch in _CONFIGS:
        got = as_number(attempt(answer, n, d, h, batch), _("the FLOP count"))
        expected = _measured_flops(n, d, h, batch)
        if math.isclose(got, expected, rel_tol=1e-9):
            continue
        quadratic = 2 * batch * h * n * n * (d // h)  # one of q kᵀ or weights @ v
        projection = 2 * batch * n * d * d  # one of the four projections
        where = _(
            "for seq_len={n}, d_model={d}, num_heads={h}, batch_size={batch}").format(
            n=n, d=d, h=h, batch=batch)
        if math.isclose(2 * got, expected):
            raise Incorrect(_(
                "{where} you count half of FlopCounterMode's {expected}: a multiply-add is 2 "
                "FLOPs, so (m, k) @ (k, p) costs 2·m·k·p").format(
                where=where, expected=expected))
        if math.isclose(batch * got, expected):
            raise Incorrect(_(
                "{where} your count is 1/batch of the real one: multiply by batch_size").format(
                where=where))
        if math.isclose(got + projection, expected):
            raise Incorrect(_(
                "{where} you are one projection short (2·batch·n·d_model²): there are four, W_Q, "
                "W_K, W_V and the output projection W_O").format(where=where))
        if math.isclose(got + quadratic, expected):
            raise Incorrect(_(
                "{where} you are missing 2·batch·num_heads·n²·d_k: weights @ V costs as much as Q "
                "Kᵀ").format(where=where))
        if math.isclose(got - 2 * (h - 1) * quadratic, expected):
            raise Incorrect(_(
                "{where} your Q Kᵀ and weights @ V are num_heads times too big: each head works "
                "in d_k = d_model / num_heads dimensions").format(where=where))
        if math.isclose(got, _layer_flops_reference(d, n, h, batch)):
            raise Incorrect(_(
                "{where} you swapped seq_len and d_model: the arguments come in the order "
                "(seq_len, d_model, num_heads, batch_size)").format(where=where))
        if got > expected and (got - expected) % (batch * h * n * n) == 0:
            raise Incorrect(_(
                "{where} you count {excess:.0f} more than FlopCounterMode, a multiple of "
                "batch·num_heads·n²: leave the softmax out, only matrix products are counted"
            ).format(where=where, excess=got - expected))
        raise Incorrect(_(
            "{where} you count {got:.0f} FLOPs; FlopCounterMode counts {expected}").format(
            where=where, got=got, expected=expected))


layer_flops = Exercise(
    title=N_("count the FLOPs of one attention layer"),
    checker=_check_layer_flops,
    reference=_layer_flops_reference,
    hints=(
        N_(
            "Count the four projections (each (n, d_model) @ (d_model, d_model)), then Q Kᵀ and "
            "weights @ V in every head (each (n, d_k) @ (d_k, n) or (n, n) @ (n, d_k))."),
        N_(
            "A product (m, k) @ (k, p) costs 2·m·k·p FLOPs; everything is done batch_size times; "
            "d_k = d_model // num_heads."),
    ),
)


def _merge_partials_reference(a, b):
    """Merge two partial softmax states (max, sum, out) taken over two sets of keys.

    max and sum are (..., n_q, 1), out is (..., n_q, d_v) and still unnormalised.
    """
    max_a, sum_a, out_a = a
    max_b, sum_b, out_b = b
    new_max = torch.maximum(max_a, max_b)
    # Each part was summed relative to its own max: bring both to the common one.
    scale_a = torch.exp(max_a - new_max)  # (..., n_q, 1), at most 1
    scale_b = torch.exp(max_b - new_max)
    return new_max, sum_a * scale_a + sum_b * scale_b, out_a * scale_a + out_b * scale_b


def _partial(scores, values):
    """The (max, sum, out) state of one set of keys, from the empty state."""
    n_q, d_v = scores.shape[-2], values.shape[-1]
    empty = (torch.full((*scores.shape[:-1], 1), float("-inf"), dtype=scores.dtype),
             torch.zeros((*scores.shape[:-1], 1), dtype=scores.dtype),
             torch.zeros((*scores.shape[:-2], n_q, d_v), dtype=scores.dtype))
    return online_softmax_update(*empty, scores, values)


# (leading axes, n_q, n_k, keys in part a, d_v, the part whose keys are larger, far):
# the maxes really differ, first the second part's larger, then the first part's (an answer that
# rescales only one side fails one of them); then heads and other sizes; then scores in the
# thousands, positive and negative (exp(max) alone overflows even float64).
_MERGE_CASES = (((2,), 5, 12, 7, 3, "b", False), ((2,), 5, 12, 7, 3, "a", False),
                ((3, 2), 4, 9, 3, 5, "b", False), ((2,), 5, 12, 7, 3, "a", True),
                ((1, 3), 6, 10, 6, 2, "b", True))


def _check_merge_partials(answer):
    generator = torch.Generator().manual_seed(6)
    for case in _MERGE_CASES:
        _check_merge_partials_once(answer, generator, *case)


def _check_merge_partials_once(answer, generator, lead, n_q, n_k, split, d_v, larger, far):
    q = torch.randn(*lead, n_q, 8, generator=generator, dtype=torch.float64)
    k = torch.randn(*lead, n_k, 8, generator=generator, dtype=torch.float64)
    v = torch.randn(*lead, n_k, d_v, generator=generator, dtype=torch.float64)
    k[..., slice(split, None) if larger == "b" else slice(None, split), :] *= 3
    if far:  # every score of a query shifted by the same thousands; float32 states, so
        # that exp() overflows in float32 and, once cast up, in float64 too
        (q, k), v = (t.float() for t in far_from_zero(q, k)), v.float()
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)  # (..., n_q, n_k)
    a = _partial(scores[..., :split], v[..., :split, :])
    b = _partial(scores[..., split:], v[..., split:, :])
    result = attempt(answer, a, b)
    if not isinstance(result, (tuple, list)) or len(result) != 3:  # a list reads the same
        raise Incorrect(_("return the merged state as a tuple of three tensors: (max, sum, out)"))
    want_max, want_sum, want_out = _merge_partials_reference(
        tuple(t.double() for t in a), tuple(t.double() for t in b))
    got_max, got_sum, got_out = result
    for name, got, want in (("max", got_max, want_max), ("sum", got_sum, want_sum),
                            ("out", got_out, want_out)):
        merged = _("the merged {name}").format(name=name)
        expect_shape(got, want.shape, merged)
        if not got.is_floating_point():
            raise Incorrect(_(
                "the merged {name} should be floating-point, got {dtype}").format(
                name=name, dtype=got.dtype))
        (expect_stable if far else expect_finite)(got, merged)
        reject_half_precision(got, want, merged)
    if not is_close(got_max, want_max):
        raise Incorrect(_(
            "the merged max should be the larger of the two, row by row: torch.maximum(max_a, "
            "max_b)"))
    if is_close(got_out, want_out / want_sum):
        raise Incorrect(_("out should stay unnormalised: divide by the sum once, at the very end"))
    for name, got, part_a, part_b in (("sum", got_sum, a[1], b[1]),
                                      ("out", got_out, a[2], b[2])):
        if is_close(got, {"sum": want_sum, "out": want_out}[name]):
            continue  # right (where one part's max is the larger in every row, a mistake is too)
        if is_close(got, part_a + part_b):
            raise Incorrect(_(
                "you added the two {name}s as they are, but each was taken relative to its own "
                "max: multiply {name}_a by exp(max_a - new_max), and b likewise, first").format(
                name=name))
        grown = part_a * torch.exp(want_max - a[0]) + part_b * torch.exp(want_max - b[0])
        if is_close(got, grown):
            raise Incorrect(_(
                "the rescaling of the {name}s runs the wrong way: the factor is exp(old max - new "
                "max), which is at most 1").format(name=name))
        if is_close(got, part_a * torch.exp(a[0] - b[0]) + part_b) or is_close(
                got, part_a + part_b * torch.exp(b[0] - a[0])):
            raise Incorrect(_(
                "you rescaled one part to the other's max, as if that one were always the larger; "
                "in some rows it is not. Rescale both parts to the new max: {name}_a · "
                "exp(max_a - new_max) + {name}_b · exp(max_b - new_max)").format(name=name))
    expect_close(got_sum, want_sum, _("the merged sum"))
    expect_close(got_out, want_out, _("the merged out"))
    expected = torch.softmax(scores.double(), dim=-1) @ v.double()  # (..., n_q, d_v): all keys
    expect_close(got_out.double() / got_sum.double(), expected,
                 _("out / sum after your merge"))


merge_partials = Exercise(
    title=N_("merge two partial softmax results"),
    checker=_check_merge_partials,
    reference=_merge_partials_reference,
    hints=(
        N_("The merged max is torch.maximum(max_a, max_b)."),
        N_(
            "Part a's sum and out were computed with exp(score - max_a). To express them with the "
            "new max, multiply both by exp(max_a - new_max); same for b; then add."),
    ),
)
