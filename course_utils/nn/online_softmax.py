"""Attention computed block by block with an online softmax: the idea behind FlashAttention.

Only ``(..., block, block)`` scores exist at any moment, never ``(..., n_q, n_k)``: the running
maximum, the running sum of exponentials and the running weighted sum of values are rescaled
each time a larger score arrives (Milakov & Gimelshein 2018).
"""

from __future__ import annotations

import math

import torch

from course_utils.checks import (
    require_bool,
    require_positive_int,
    require_same_device,
    require_tensor,
)
from course_utils.language import _


def online_softmax_update(running_max, running_sum, running_out, scores, values):
    """Fold one block of keys into a running softmax-weighted sum of values.

    Args:
        running_max: ``(..., n_q, 1)`` largest score seen so far in each query row
            (``-inf`` before the first block).
        running_sum: ``(..., n_q, 1)`` sum of exp(score - running_max) so far.
        running_out: ``(..., n_q, d_v)`` sum of exp(score - running_max) · value so far.
        scores: ``(..., n_q, block)`` scaled scores of this block (``-inf`` = masked).
        values: ``(..., block, d_v)`` this block's values.

    Returns the updated ``(running_max, running_sum, running_out)``; after the last block,
    ``running_out / running_sum`` is softmax(scores) @ values over all the blocks.

    Used in lessons 06 and 16.
    """
    running_max = require_tensor("running_max", running_max, "(..., n_q, 1)")
    running_sum = require_tensor("running_sum", running_sum, "(..., n_q, 1)")
    running_out = require_tensor("running_out", running_out, "(..., n_q, d_v)")
    scores = require_tensor("scores", scores, "(..., n_q, block)")
    values = require_tensor("values", values, "(..., block, d_v)")
    n_q, block, d_v = scores.shape[-2], scores.shape[-1], values.shape[-1]
    if (running_max.shape[-2:] != (n_q, 1) or running_sum.shape[-2:] != (n_q, 1)
            or running_out.shape[-2:] != (n_q, d_v) or values.shape[-2] != block):
        raise ValueError(
            _(
                "expected running_max and running_sum (..., n_q, 1), running_out (..., n_q, "
                "d_v), scores (..., n_q, block) and values (..., block, d_v), got shapes "
                "{running_max_shape}, {running_sum_shape}, {running_out_shape}, {scores_shape} "
                "and {values_shape}"
            ).format(running_max_shape=tuple(running_max.shape),
                     running_sum_shape=tuple(running_sum.shape),
                     running_out_shape=tuple(running_out.shape), scores_shape=tuple(scores.shape),
                     values_shape=tuple(values.shape))
        )
    require_same_device(running_max=running_max, running_sum=running_sum,
                        running_out=running_out, scores=scores, values=values)
    new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
    # A row with no key seen yet has max -inf; subtract 0 there instead of -inf (-inf - -inf
    # is NaN) so that its exp terms come out as exactly 0.
    shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
    # What was summed relative to the old max is rescaled to the new one: exp(m_old - m_new).
    correction = torch.exp(running_max - shift)  # (..., n_q, 1)
    p = torch.exp(scores - shift)  # (..., n_q, block)
    return (
        new_max,
        running_sum * correction + p.sum(dim=-1, keepdim=True),
        running_out * correction + p @ values,
    )


def chunked_attention(q, k, v, block_size: int = 128, window: int | None = None,
                      causal: bool = False):
    """softmax(q kᵀ / sqrt(d_k)) v computed block by block, with an online softmax.

    q ``(..., n_q, d_k)``, k ``(..., n_k, d_k)``, v ``(..., n_k, d_v)`` -> ``(..., n_q, d_v)``.

    Queries are taken ``block_size`` at a time and, for each query block, keys are folded in
    ``block_size`` at a time with :func:`online_softmax_update`: only ``(..., block, block)``
    scores exist at any moment, never ``(..., n_q, n_k)``, so the extra memory grows linearly
    in n (the output itself is ``(..., n_q, d_v)``).

    Query i sits at position ``n_k - n_q + i`` (the queries are the last n_q positions, as
    in :func:`course_utils.nn.masks.causal_mask`). ``causal=True``: query i attends only to keys
    at or before its position. ``window``: only to keys within ``window`` positions of it.
    Key blocks wholly outside what a query block may see are never computed: a causal mask
    skips about half the blocks, a window makes the work grow like ``n · window``, not n².
    A query with no key to attend to (or ``n_k == 0``) gets a zero output, as in
    ``F.scaled_dot_product_attention``.

    Used in lesson 06.
    """
    q = require_tensor("q", q, "(..., n_q, d_k)")
    k = require_tensor("k", k, "(..., n_k, d_k)")
    v = require_tensor("v", v, "(..., n_k, d_v)")
    require_positive_int("block_size", block_size)
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            _(
                "expected q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v), got shapes "
                "{q_shape}, {k_shape} and {v_shape}"
            ).format(q_shape=tuple(q.shape), k_shape=tuple(k.shape), v_shape=tuple(v.shape))
        )
    if window is not None and (not isinstance(window, int) or isinstance(window, bool)
                               or window < 0):
        raise ValueError(_(
            "window should be None or an int >= 0, got {window!r}"
        ).format(window=window))
    require_bool("causal", causal)
    require_same_device(q=q, k=k, v=v)
    n_q, n_k = q.shape[-2], k.shape[-2]
    if (window is not None or causal) and n_k < n_q:
        raise ValueError(
            _(
                "a window or causal mask places the queries at the last n_q key positions, so it "
                "needs n_k >= n_q, got n_q={n_q} and n_k={n_k}"
            ).format(n_q=n_q, n_k=n_k)
        )
    shift = n_k - n_q  # query i sits at key position i + shift
    scale = 1.0 / math.sqrt(q.shape[-1])
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = q.new_empty((*batch, n_q, v.shape[-1]))
    for q_start in range(0, n_q, block_size):
        q_end = min(q_start + block_size, n_q)
        q_block = q[..., q_start:q_end, :] * scale  # (..., block, d_k)
        running_max = q.new_full((*batch, q_end - q_start, 1), float("-inf"))
        running_sum = q.new_zeros((*batch, q_end - q_start, 1))
        running_out = q.new_zeros((*batch, q_end - q_start, v.shape[-1]))
        # The key positions this query block may see at all: [first, last).
        first, last = 0, n_k
        if window is not None:
            first = max(0, q_start + shift - window)
            last = min(n_k, q_end + shift + window)
        if causal:
            last = min(last, q_end + shift)
        query_positions = torch.arange(q_start + shift, q_end + shift, device=q.device)
        for k_start in range(first // block_size * block_size, last, block_size):
            k_end = min(k_start + block_size, n_k)
            scores = q_block @ k[..., k_start:k_end, :].transpose(-2, -1)  # (..., block, block)
            offset = query_positions[:, None] - torch.arange(k_start, k_end, device=q.device)
            blocked = torch.zeros_like(offset, dtype=torch.bool)  # (block, block)
            if window is not None:
                blocked |= offset.abs() > window
            if causal:
                blocked |= offset < 0
            scores = scores.masked_fill(blocked, float("-inf"))
            running_max, running_sum, running_out = online_softmax_update(
                running_max, running_sum, running_out, scores, v[..., k_start:k_end, :]
            )
        # A row that saw no key has sum 0 and out 0: divide by 1 there, so it stays 0.
        out[..., q_start:q_end, :] = running_out / running_sum.masked_fill(running_sum == 0, 1)
    return out
