"""Scaled dot-product attention and the modules built on it.

Notation: q ``(..., n_q, d_k)``, k ``(..., n_k, d_k)``, v ``(..., n_k, d_v)``,
weights ``(..., n_q, n_k)``. Masks are bool with **True = may attend**, the convention
of ``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course_utils.checks import require_bool_mask, require_tensor


def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    """softmax(q kᵀ · scale) v, returning ``(output, weights)``.

    Args:
        q: ``(..., n_q, d_k)`` queries.
        k: ``(..., n_k, d_k)`` keys.
        v: ``(..., n_k, d_v)`` values. Leading batch/head dims of q, k, v broadcast.
        mask: optional bool, broadcastable to ``(..., n_q, n_k)``; True = may attend.
        scale: factor applied to the scores; ``None`` means ``1/sqrt(d_k)``,
            ``1.0`` turns scaling off.

    Returns:
        output ``(..., n_q, d_v)`` and weights ``(..., n_q, n_k)``.

    A query row whose keys are all masked gets all-zero weights and a zero output,
    never NaN (a plain softmax over a row of -inf gives 0/0 = NaN).
    """
    q = require_tensor("q", q, "(..., n_q, d_k)")
    k = require_tensor("k", k, "(..., n_k, d_k)")
    v = require_tensor("v", v, "(..., n_k, d_v)")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(
            f"q, k and v should share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q is (..., n_q, d_k) with d_k={q.shape[-1]} but k is (..., n_k, d_k) with "
            f"d_k={k.shape[-1]}: queries and keys must have the same width to be compared"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k is (..., n_k, d_k) with n_k={k.shape[-2]} but v is (..., n_k, d_v) with "
            f"n_k={v.shape[-2]}: every key needs exactly one value"
        )
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch, heads) dims of q {tuple(q.shape[:-2])}, "
            f"k {tuple(k.shape[:-2])} and v {tuple(v.shape[:-2])} do not broadcast"
        ) from None
    scores_shape = torch.Size((*batch, q.shape[-2], k.shape[-2]))
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])

    scores = (q @ k.transpose(-2, -1)) * scale  # (..., n_q, n_k)
    if mask is not None:
        mask = require_bool_mask(mask, scores_shape, "(..., n_q, n_k)")
        # A row with no allowed key would be softmax(-inf, ..., -inf) = NaN. Give such
        # rows finite scores for the softmax, then zero their weights afterwards.
        row_has_key = mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~row_has_key, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~row_has_key, 0.0)
    return weights @ v, weights  # (..., n_q, d_v), (..., n_q, n_k)


class SelfAttention(nn.Module):
    """One attention head with separate learned maps W_q, W_k, W_v.

    ``forward(x, mask=None)`` takes x ``(batch, seq_len, d_model)`` and returns
    ``(output, weights)`` of shapes ``(batch, seq_len, d_v)`` and
    ``(batch, seq_len, seq_len)``.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int):
        super().__init__()
        self.d_model = d_model
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = nn.Linear(d_model, d_k)
        self.w_v = nn.Linear(d_model, d_v)

    def forward(self, x, mask=None):
        x = require_tensor("x", x, "(batch, seq_len, d_model)")
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"x should be (batch, seq_len, d_model) with d_model={self.d_model}, "
                f"got shape {tuple(x.shape)}"
            )
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)  # (batch, seq_len, d_k or d_v)
        return scaled_dot_product_attention(q, k, v, mask=mask)
