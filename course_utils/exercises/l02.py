"""Lesson 02 exercises: the three projections, and attention from q, k, v.

Both checkers use non-square cases (d_v ≠ d_k, and n_q ≠ n_k for attention), so that a
transposed product, swapped roles or the wrong width in the scale show up as such.
Tolerance (stated in the lesson): values match within 1e-5 + 1e-4·|expected|, any float dtype.
"""

from __future__ import annotations

import math

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
    expect_stable,
    far_from_zero,
    is_close,
    reject_half_precision,
)
from course_utils.language import N_, _, pgettext
from course_utils.nn.attention import scaled_dot_product_attention


def _project_qkv_reference(x, w_q, w_k, w_v):
    """x (n, d_model); w_q, w_k (d_model, d_k); w_v (d_model, d_v) -> q, k (n, d_k), v (n, d_v)."""
    return x @ w_q, x @ w_k, x @ w_v


def _check_project_qkv(answer):
    generator = torch.Generator().manual_seed(0)
    # A second X and W, then other sizes: an answer hard-coded to the first one fails.
    # d_v ≠ d_k in each, so swapped roles show in the shapes.
    for n, d_model, d_k, d_v in ((3, 5, 2, 4), (3, 5, 2, 4), (7, 12, 5, 3), (11, 6, 9, 7)):
        _check_project_qkv_once(answer, generator, n, d_model, d_k, d_v)


def _check_project_qkv_once(answer, generator, n, d_model, d_k, d_v):
    x = torch.randn(n, d_model, generator=generator)
    w_q, w_k, w_v = (torch.randn(d_model, width, generator=generator)
                     for width in (d_k, d_k, d_v))
    result = attempt(answer, x, w_q, w_k, w_v)
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise Incorrect(_("return the three tensors as a tuple: return q, k, v"))
    q, k, v = result
    expected = _project_qkv_reference(x, w_q, w_k, w_v)
    shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in result]
    if shapes == [(d_k, n), (d_k, n), (d_v, n)]:
        raise Incorrect(_(
            "q, k, v have shapes {shapes}: transposed. Each should be one row per token, (n, d_k) "
            "or (n, d_v): x @ w_q, not w_q.T @ x.T").format(shapes=shapes))
    if shapes[1] == (n, d_v) and shapes[2] == (n, d_k):
        raise Incorrect(_("k and v are swapped: k = x @ w_k is (n, d_k), v = x @ w_v is (n, d_v)"))
    for name, got, want in zip("qkv", result, expected, strict=True):
        expect_shape(got, want.shape, f"{name} ({'n, d_v' if name == 'v' else 'n, d_k'})")
        if not got.is_floating_point():
            raise Incorrect(_(
                "{name} should be a floating-point tensor, got dtype {dtype}").format(
                name=name, dtype=got.dtype))
        expect_finite(got, name)
    if is_close(q, expected[1]) and is_close(k, expected[0]):
        raise Incorrect(_("q and k are swapped: q = x @ w_q, k = x @ w_k"))
    if is_close(q, k):
        raise Incorrect(_(
            "q and k are equal: each of q, k, v needs its own matrix (q = x @ w_q, k = x @ w_k, v "
            "= x @ w_v)"))
    for scale in (math.sqrt(d_k), d_k):
        if is_close(q, expected[0] / scale):
            raise Incorrect(_(
                "q is divided by a scale: the projection is only x @ w_q; the 1/sqrt(d_k) belongs "
                "to the scores q @ k.T"))
    for name, got, want in zip("qkv", result, expected, strict=True):
        expect_close(got, want, name)


project_qkv = Exercise(
    title=N_("project X into queries, keys and values"),
    checker=_check_project_qkv,
    reference=_project_qkv_reference,
    hints=(
        N_(
            "Each of q, k, v is X times its own matrix; X is (n, d_model), W_Q is (d_model, d_k), "
            "so x @ w_q is (n, d_k)."),
        N_("Matrix product in torch: x @ w_q. Return all three: return q, k, v."),
    ),
)


def _attention_reference(q, k, v):
    """q (n_q, d_k), k (n_k, d_k), v (n_k, d_v) -> output (n_q, d_v), weights (n_q, n_k)."""
    scores = q @ k.T / math.sqrt(q.shape[-1])  # (n_q, n_k)
    weights = torch.softmax(scores, dim=-1)  # each row sums to 1
    return weights @ v, weights


def _check_attention(answer):
    generator = torch.Generator().manual_seed(1)
    # A second q, k, v, other sizes, then scores in the thousands (positive and negative): an
    # answer hard-coded to the first case, or an exp() without the row's maximum, fails.
    for n_q, n_k, d_k, d_v, far in ((3, 5, 8, 6, False), (3, 5, 8, 6, False),
                                    (6, 9, 5, 4, False), (5, 7, 8, 3, True)):
        _check_attention_once(answer, generator, n_q, n_k, d_k, d_v, far)


def _check_attention_once(answer, generator, n_q, n_k, d_k, d_v, far):
    # non-square: transposes and the wrong width show
    q = torch.randn(n_q, d_k, generator=generator)
    k = torch.randn(n_k, d_k, generator=generator)
    v = torch.randn(n_k, d_v, generator=generator)
    if far:  # float64, scores q @ k.T / sqrt(d_k) in the thousands
        (q, k), v = far_from_zero(q, k), v.double()
    result = attempt(answer, q, k, v)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise Incorrect(_("return two tensors: return output, weights"))
    output, weights = result
    shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in result]
    if shapes == [(n_q, n_k), (n_q, d_v)]:
        raise Incorrect(_("output and weights are swapped: return output, weights (in that order)"))
    if shapes[1] == (n_k, n_q):
        raise Incorrect(_(
            "weights should be (n_q, n_k) = ({n_q}, {n_k}), got ({n_k}, {n_q}): one row per "
            "query, so scores = q @ k.T (not k @ q.T), and return the weights untransposed").format(
            n_q=n_q, n_k=n_k))
    expect_shape(weights, (n_q, n_k), _("weights (n_q, n_k)"))
    expect_shape(output, (n_q, d_v), _("output (n_q, d_v)"))
    for name, tensor in (("weights", weights), ("output", output)):
        if not tensor.is_floating_point():
            raise Incorrect(_(
                "{name} should be a floating-point tensor, got dtype {dtype}").format(
                name=name, dtype=tensor.dtype))
        (expect_stable if far else expect_finite)(tensor, name)
    expected_output, expected_weights = scaled_dot_product_attention(q, k, v)
    reject_half_precision(weights, expected_weights, pgettext("answer", "weights"))
    reject_half_precision(output, expected_output, pgettext("answer", "output"))
    weights64 = weights.detach().double()
    row_sums = weights64.sum(dim=-1)
    if not torch.allclose(row_sums, torch.ones_like(row_sums), atol=1e-4):
        column_sums = weights64.sum(dim=0)
        if torch.allclose(column_sums, torch.ones_like(column_sums), atol=1e-4):
            raise Incorrect(_(
                "the columns of your weights sum to 1, not the rows: softmax over the wrong dim? "
                "Use dim=-1 (over the keys)"))
        raise Incorrect(_(
            "the rows of your weights sum to {item:.3g}, not 1: apply torch.softmax(scores, "
            "dim=-1) to the scaled scores").format(item=row_sums[0].item()))
    wrong_scales = {
        1.0: _("your weights are those of unscaled scores: divide q @ k.T by sqrt(d_k)"),
        1 / math.sqrt(d_v): _(
            "you divided by sqrt(d_v) = sqrt(v.shape[-1]); the scale is sqrt(d_k) = "
            "sqrt(q.shape[-1]), the width of queries and keys"),
        1 / d_k: _("you divided by d_k; the scale is sqrt(d_k)"),
        1 / math.sqrt(n_k): _(
            "you divided by sqrt(n_k) = sqrt(k.shape[0]), the number of keys; the scale is "
            "sqrt(d_k) = sqrt(q.shape[-1]), the width of queries and keys"),
        math.sqrt(d_k): _("you multiplied by sqrt(d_k); divide by it"),
    }
    for scale, message in wrong_scales.items():
        if is_close(weights, scaled_dot_product_attention(q, k, v, scale=scale)[1]):
            raise Incorrect(message)
    expect_close(weights, expected_weights, pgettext("answer", "weights"))
    if is_close(output, expected_weights @ v / math.sqrt(d_k)):
        raise Incorrect(_(
            "output is divided by sqrt(d_k) again: the scale belongs to the scores only; output = "
            "weights @ v"))
    expect_close(output, expected_output, pgettext("answer", "output"))


attention_from_qkv = Exercise(
    title=N_("scaled dot-product attention from q, k, v"),
    checker=_check_attention,
    reference=_attention_reference,
    hints=(
        N_("Scores are q @ k.T, (n_q, n_k), divided by sqrt(d_k) where d_k = q.shape[-1]."),
        N_("Softmax over the keys, the last dim: torch.softmax(scores, dim=-1)."),
        N_("The output is the weighted average of the values: weights @ v, (n_q, d_v)."),
    ),
)
