"""Lesson 02 exercises: the three projections, and attention from q, k, v."""

from __future__ import annotations

import math

import torch

from course_utils.attention import scaled_dot_product_attention
from course_utils.exercises import Exercise, Incorrect, attempt, expect_close, expect_shape


def _example(n=3, d_model=4, d_k=2, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_model, generator=generator)
    w_q, w_k, w_v = (torch.randn(d_model, d_k, generator=generator) for _ in range(3))
    return x, w_q, w_k, w_v


def _project_qkv_reference(x, w_q, w_k, w_v):
    """x (n, d_model), each w (d_model, d_k) -> q, k, v, each (n, d_k)."""
    return x @ w_q, x @ w_k, x @ w_v


def _check_project_qkv(answer):
    x, w_q, w_k, w_v = _example()
    result = attempt(answer, x, w_q, w_k, w_v)
    if not isinstance(result, tuple) or len(result) != 3:
        raise Incorrect("return the three tensors as a tuple: return q, k, v")
    expected = _project_qkv_reference(x, w_q, w_k, w_v)
    for name, got, want in zip("qkv", result, expected, strict=True):
        expect_shape(got, want.shape, name)
    q, k, v = result
    if torch.allclose(k, expected[0]) or torch.allclose(v, expected[0]):
        raise Incorrect("k or v equals q: each projection needs its own matrix (W_k, W_v)")
    for name, got, want in zip("qkv", result, expected, strict=True):
        expect_close(got, want, name)


project_qkv = Exercise(
    title="project X into queries, keys and values",
    checker=_check_project_qkv,
    reference=_project_qkv_reference,
    hints=(
        "Each of q, k, v is X times its own matrix; X is (n, d_model), W is (d_model, d_k).",
        "Matrix product in torch: x @ w_q. Return all three: return q, k, v.",
    ),
)


def _attention_reference(q, k, v):
    """q (n_q, d_k), k (n_k, d_k), v (n_k, d_v) -> output (n_q, d_v), weights (n_q, n_k)."""
    scores = q @ k.T / math.sqrt(q.shape[-1])  # (n_q, n_k)
    weights = torch.softmax(scores, dim=-1)  # each row sums to 1
    return weights @ v, weights


def _check_attention(answer):
    generator = torch.Generator().manual_seed(1)
    # Wide enough (d_k=16) that a missing 1/sqrt(d_k) visibly changes the weights.
    q, k, v = (torch.randn(4, 16, generator=generator) * 2 for _ in range(3))
    result = attempt(answer, q, k, v)
    if not isinstance(result, tuple) or len(result) != 2:
        raise Incorrect("return two tensors: return output, weights")
    output, weights = result
    expect_shape(weights, (4, 4), "weights (n_q, n_k)")
    expect_shape(output, (4, 16), "output (n_q, d_v)")
    row_sums = weights.sum(dim=-1)
    if not torch.allclose(row_sums, torch.ones(4), atol=1e-4):
        columns = weights.sum(dim=0)
        guess = (" softmax over the wrong dim? Use dim=-1 (over the keys)."
                 if torch.allclose(columns, torch.ones(4), atol=1e-4) else "")
        raise Incorrect(f"rows of your weights sum to {row_sums[0].item():.3g}, not 1.{guess}")
    expected_output, expected_weights = scaled_dot_product_attention(q, k, v)
    _, unscaled_weights = scaled_dot_product_attention(q, k, v, scale=1.0)
    if torch.allclose(weights, unscaled_weights, atol=1e-5):
        raise Incorrect("your weights are those of unscaled scores: divide q @ k.T by sqrt(d_k)")
    expect_close(weights, expected_weights, "weights")
    if torch.allclose(output, weights.T @ v, atol=1e-5) and not torch.allclose(
        output, expected_output, atol=1e-5
    ):
        raise Incorrect("output mixes values with the transposed weights: use weights @ v")
    expect_close(output, expected_output, "output")


attention_from_qkv = Exercise(
    title="scaled dot-product attention from q, k, v",
    checker=_check_attention,
    reference=_attention_reference,
    hints=(
        "Scores are q @ k.T, divided by sqrt(d_k) where d_k = q.shape[-1].",
        "Softmax over the keys, the last dim: torch.softmax(scores, dim=-1).",
        "The output is the weighted average of the values: weights @ v.",
    ),
)
