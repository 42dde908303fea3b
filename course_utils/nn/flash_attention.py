"""FlashAttention written out in PyTorch: tiled forward and tiled backward, exact gradients.

The forward pass is lesson 06's online softmax
(:func:`course_utils.nn.online_softmax.online_softmax_update`) over tiles of ``block_size``
queries × ``block_size`` keys. It keeps only two things per query row: the output O and the
logsumexp ``L = log Σ_j exp(s_j)`` of the row's scaled scores. The
backward pass never stores the ``(n_q, n_k)`` weights either: it recomputes each tile's weights
from L, ``P = exp(S - L)``, and with ``D = rowsum(dO ∘ O)``

    dV += Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP - D),   dQ += dS K / √d_k,   dK += dSᵀ Q / √d_k

tile by tile. The result is exact (the same numbers as naive attention, up to rounding), the
memory kept for backward grows like n, and the price is one more ``Q Kᵀ`` per tile.

Conventions. q, k, v are ``(batch, heads, seq_len, d_k)``: q ``(batch, heads, n_q, d_k)``,
k ``(batch, heads, n_k, d_k)``, v ``(batch, heads, n_k, d_v)``. Query i sits at key position
``n_k - n_q + i`` (the queries are the last n_q positions, as in
:func:`course_utils.nn.masks.causal_mask`). ``causal=True``: query i sees the keys at or before its
position; ``window=w``: only keys within w positions of it (lesson 06's band). Tiles that no
query of the block may see are never computed, in either pass. A query with no key to see gets a
zero output (and zero gradients).

``sink``: an optional learned logit per head, ``(heads,)`` (gpt-oss's attention sink). It is an
extra "key" with no value: it enters only the softmax's denominator, so
``L = log(Σ_j exp(s_j) + exp(sink))`` and the weights of a row sum to less than 1.
"""

from __future__ import annotations

import math

import torch

from course_utils.checks import (
    require_bool,
    require_positive_int,
    require_same_device,
    require_same_dtype,
    require_tensor,
)
from course_utils.language import _
from course_utils.nn.online_softmax import online_softmax_update

DEFAULT_BLOCK_SIZE = 64


def _require_inputs(q, k, v, causal, block_size, window, sink):
    """Check every argument of the functions below, in one place."""
    q = require_tensor("q", q, "(batch, heads, n_q, d_k)")
    k = require_tensor("k", k, "(batch, heads, n_k, d_k)")
    v = require_tensor("v", v, "(batch, heads, n_k, d_v)")
    require_bool("causal", causal)
    require_positive_int("block_size", block_size)
    if window is not None and (not isinstance(window, int) or isinstance(window, bool)
                               or window < 0):
        raise ValueError(_(
            "window should be None or an int >= 0, got {window!r}"
        ).format(window=window))
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or q.shape[:2] != k.shape[:2] \
            or k.shape[:2] != v.shape[:2] or q.shape[-1] != k.shape[-1] \
            or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            _(
                "expected q (batch, heads, n_q, d_k), k (batch, heads, n_k, d_k) and v (batch, "
                "heads, n_k, d_v) with the same batch and heads, got shapes {q_shape}, {k_shape} "
                "and {v_shape}"
            ).format(q_shape=tuple(q.shape), k_shape=tuple(k.shape), v_shape=tuple(v.shape))
        )
    if sink is not None:
        sink = require_tensor("sink", sink, "(heads)")
        if sink.shape != q.shape[1:2]:
            raise ValueError(_(
                "sink should have shape (heads,) = ({q_shape},), one logit per head, got shape "
                "{sink_shape}"
            ).format(q_shape=q.shape[1], sink_shape=tuple(sink.shape)))
    require_same_dtype(q=q, k=k, v=v, sink=sink)
    require_same_device(q=q, k=k, v=v, sink=sink)
    n_q, n_k = q.shape[-2], k.shape[-2]
    if (causal or window is not None) and n_k < n_q:
        raise ValueError(
            _(
                "a causal mask or a window places the queries at the last n_q key positions, so "
                "it needs n_k >= n_q, got n_q={n_q} and n_k={n_k}"
            ).format(n_q=n_q, n_k=n_k)
        )


def attention_tiles(n_q: int, n_k: int, block_size: int, causal: bool = False,
                    window: int | None = None) -> list[tuple[int, int, int, int]]:
    """The tiles ``(q_start, q_end, k_start, k_end)`` that some query of the tile may see.

    Queries and keys are cut into blocks of ``block_size``; a tile is one query block against
    one key block. Without a mask that is every pair; a causal mask leaves out the tiles wholly
    above the diagonal (about half), a window those wholly outside the band.

    Used in lesson 16.
    """
    for name, value in (("n_q", n_q), ("n_k", n_k), ("block_size", block_size)):
        require_positive_int(name, value)
    require_bool("causal", causal)
    if window is not None and (not isinstance(window, int) or isinstance(window, bool)
                               or window < 0):
        raise ValueError(_(
            "window should be None or an int >= 0, got {window!r}"
        ).format(window=window))
    if (causal or window is not None) and n_k < n_q:
        raise ValueError(_(
            "a causal mask or a window needs n_k >= n_q, got n_q={n_q} and n_k={n_k}"
        ).format(n_q=n_q, n_k=n_k))
    shift = n_k - n_q  # query i sits at key position i + shift
    tiles = []
    for q_start in range(0, n_q, block_size):
        q_end = min(q_start + block_size, n_q)
        first, last = 0, n_k  # the key positions this query block may see: [first, last)
        if window is not None:
            first = max(0, q_start + shift - window)
            last = min(n_k, q_end + shift + window)
        if causal:
            last = min(last, q_end + shift)
        for k_start in range(first // block_size * block_size, last, block_size):
            tiles.append((q_start, q_end, k_start, min(k_start + block_size, n_k)))
    return tiles


def _hidden(tile, shift, causal, window, device):
    """Bool ``(block_q, block_k)``, True where a query may NOT see a key; None if all may."""
    q_start, q_end, k_start, k_end = tile
    offset = (torch.arange(q_start + shift, q_end + shift, device=device)[:, None]
              - torch.arange(k_start, k_end, device=device))  # query position - key position
    hidden = torch.zeros_like(offset, dtype=torch.bool)
    if causal:
        hidden |= offset < 0
    if window is not None:
        hidden |= offset.abs() > window
    return hidden if hidden.any() else None


def _scores(q_tile, k_tile, hidden, scale):
    """The tile's scaled scores ``(batch, heads, block_q, block_k)``, -inf where hidden."""
    scores = q_tile @ k_tile.transpose(-2, -1) * scale
    return scores if hidden is None else scores.masked_fill(hidden, float("-inf"))


def flash_forward(q, k, v, causal: bool = False, block_size: int = DEFAULT_BLOCK_SIZE,
                  window: int | None = None, sink=None):
    """The tiled forward pass: ``(output, logsumexp)``, nothing of size n_q × n_k.

    output is ``(batch, heads, n_q, d_v)``; logsumexp ``(batch, heads, n_q, 1)`` is
    ``log(Σ_j exp(s_j) (+ exp(sink)))`` over each query's visible scaled scores, ``-inf`` for a
    query that sees no key (and has no sink).

    Used in lesson 16.
    """
    _require_inputs(q, k, v, causal, block_size, window, sink)
    batch, heads, n_q, d_k = q.shape
    n_k, d_v = k.shape[-2], v.shape[-1]
    scale, shift = 1.0 / math.sqrt(d_k), n_k - n_q
    running_max = q.new_full((batch, heads, n_q, 1), float("-inf"))
    running_sum = q.new_zeros((batch, heads, n_q, 1))
    running_out = q.new_zeros((batch, heads, n_q, d_v))
    for tile in attention_tiles(n_q, n_k, block_size, causal, window):
        q_start, q_end, k_start, k_end = tile
        rows = slice(q_start, q_end)
        scores = _scores(q[..., rows, :], k[..., k_start:k_end, :],
                         _hidden(tile, shift, causal, window, q.device), scale)
        # Lesson 06's update: (batch, heads, block_q, 1), (..., 1) and (..., d_v).
        running_max[..., rows, :], running_sum[..., rows, :], running_out[..., rows, :] = (
            online_softmax_update(running_max[..., rows, :], running_sum[..., rows, :],
                                  running_out[..., rows, :], scores, v[..., k_start:k_end, :]))
    logsumexp = running_max + torch.log(running_sum)  # (batch, heads, n_q, 1)
    if sink is not None:
        logsumexp = torch.logaddexp(logsumexp, sink.view(1, heads, 1, 1))
    # out = running_out · exp(m - L) = running_out / (sum (+ exp(sink - m))); a row with no key
    # (m = L = -inf) subtracts 0 instead, so its zero running_out stays 0.
    finite = logsumexp.masked_fill(torch.isinf(logsumexp), 0.0)
    return running_out * torch.exp(running_max - finite), logsumexp


def flash_backward(q, k, v, output, logsumexp, d_output, causal: bool = False,
                   block_size: int = DEFAULT_BLOCK_SIZE, window: int | None = None, sink=None):
    """The tiled backward pass: ``(grad_q, grad_k, grad_v, grad_sink)`` from O, L and dO, by tiles.

    Each tile's weights are recomputed from the saved logsumexp, ``P = exp(S - L)``, and
    dropped after use; ``D = rowsum(dO ∘ O)`` stands in for the row sums of ``P ∘ dP``.
    ``grad_sink`` is ``(heads,)``, or None without a sink.

    Used in lesson 16.
    """
    _require_inputs(q, k, v, causal, block_size, window, sink)
    output = require_tensor("output", output, "(batch, heads, n_q, d_v)")
    logsumexp = require_tensor("logsumexp", logsumexp, "(batch, heads, n_q, 1)")
    d_output = require_tensor("d_output", d_output, "(batch, heads, n_q, d_v)")
    n_q, d_k = q.shape[-2], q.shape[-1]
    expected = (*q.shape[:-1], v.shape[-1])
    if output.shape != expected or d_output.shape != expected \
            or logsumexp.shape != (*q.shape[:-1], 1):
        raise ValueError(
            _(
                "expected output and d_output (batch, heads, n_q, d_v) = {expected} and "
                "logsumexp (batch, heads, n_q, 1), got shapes {output_shape}, {d_output_shape} "
                "and {logsumexp_shape}"
            ).format(expected=expected, output_shape=tuple(output.shape),
                     d_output_shape=tuple(d_output.shape), logsumexp_shape=tuple(logsumexp.shape)))
    scale, shift = 1.0 / math.sqrt(d_k), k.shape[-2] - n_q
    delta = (d_output * output).sum(dim=-1, keepdim=True)  # D: (batch, heads, n_q, 1)
    # A row with no visible key has L = -inf and scores -inf: subtract 0 there, exp gives 0.
    finite = logsumexp.masked_fill(torch.isinf(logsumexp), 0.0)
    grad_q, grad_k, grad_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for tile in attention_tiles(n_q, k.shape[-2], block_size, causal, window):
        q_start, q_end, k_start, k_end = tile
        rows, cols = slice(q_start, q_end), slice(k_start, k_end)
        scores = _scores(q[..., rows, :], k[..., cols, :],
                         _hidden(tile, shift, causal, window, q.device), scale)
        p = torch.exp(scores - finite[..., rows, :])  # (batch, heads, block_q, block_k)
        grad_v[..., cols, :] += p.transpose(-2, -1) @ d_output[..., rows, :]
        d_p = d_output[..., rows, :] @ v[..., cols, :].transpose(-2, -1)
        d_s = p * (d_p - delta[..., rows, :])  # the softmax's backward, with D from O
        grad_q[..., rows, :] += d_s @ k[..., cols, :] * scale
        grad_k[..., cols, :] += d_s.transpose(-2, -1) @ q[..., rows, :] * scale
    grad_sink = None
    if sink is not None:
        # The sink's weight in each row is exp(sink - L); its gradient is -Σ weight · D.
        sink_weight = torch.exp(sink.view(1, -1, 1, 1) - logsumexp)  # (batch, heads, n_q, 1)
        grad_sink = -(sink_weight * delta).sum(dim=(0, 2, 3))  # (heads,)
    return grad_q, grad_k, grad_v, grad_sink


class _FlashAttention(torch.autograd.Function):
    """The autograd wrapper: saves q, k, v, O and L (all O(n)), and runs the tiled backward."""

    @staticmethod
    def forward(ctx, q, k, v, sink, causal, block_size, window):
        output, logsumexp = flash_forward(q, k, v, causal, block_size, window, sink)
        ctx.save_for_backward(q, k, v, output, logsumexp, sink)
        ctx.settings = causal, block_size, window
        return output

    @staticmethod
    def backward(ctx, d_output):
        q, k, v, output, logsumexp, sink = ctx.saved_tensors
        grads = flash_backward(q, k, v, output, logsumexp, d_output.contiguous(), *ctx.settings,
                               sink=sink)
        return (*grads, None, None, None)  # causal, block_size and window have none


def flash_attention(q, k, v, causal: bool = False, block_size: int = DEFAULT_BLOCK_SIZE,
                    window: int | None = None, sink=None):
    """softmax(q kᵀ / √d_k) v, forward and backward by tiles: ``(batch, heads, n_q, d_v)``.

    Equal to naive attention in value and in every gradient (q, k, v and ``sink``), but what it
    keeps for the backward pass is q, k, v, the output and one logsumexp per query: O(n), not the
    ``(batch, heads, n_q, n_k)`` weights. ``causal``, ``window`` and ``sink`` as in the module's
    docstring.

    Used in lesson 16.
    """
    _require_inputs(q, k, v, causal, block_size, window, sink)
    return _FlashAttention.apply(q, k, v, sink, causal, block_size, window)
