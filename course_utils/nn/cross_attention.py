"""Cross-attention: the decoder's queries read the encoder's keys and values.

In an encoder-decoder, every character the decoder writes asks a question (a query, from the
decoder's own stream) of the whole source (keys and values, from the encoder's output, the
*memory*). Two masks are at work in a decoder block, of two different shapes:

- its self-attention is causal: ``(n_tgt, n_tgt)``, a character reads only the characters
  before it and itself;
- its cross-attention is not causal at all: every character may read every real source
  token; only the source's padding is hidden, with ``(batch, 1, 1, n_src)``, one row per
  sentence shared by every head and every query.

The keys and values of the memory do not change while the decoder writes, so a decoder that
generates computes them once per sentence (:func:`memory_keys_values`).

Shapes: q ``(batch, heads, n_tgt, d_k)``, k and v ``(batch, heads, n_src, d_k)``, weights
``(batch, heads, n_tgt, n_src)``. Masks are bool, True = may attend.
"""

from __future__ import annotations

import torch

from course_utils.checks import require_instance, require_positive_int, require_tensor
from course_utils.language import _
from course_utils.nn.attention import MultiHeadAttention, scaled_dot_product_attention, split_heads
from course_utils.nn.masks import causal_mask


def _require_padding(src_padding_mask, batch: int | None = None) -> torch.Tensor:
    if not isinstance(src_padding_mask, torch.Tensor) or src_padding_mask.dtype != torch.bool:
        got = (_("{dtype} tensor").format(dtype=src_padding_mask.dtype)
               if isinstance(src_padding_mask, torch.Tensor) else type(src_padding_mask).__name__)
        raise TypeError(_(
            "src_padding_mask should be a bool tensor (batch, n_src), True at real source "
            "tokens, got {got}"
        ).format(got=got))
    if src_padding_mask.dim() != 2 or (batch is not None and src_padding_mask.shape[0] != batch):
        message = (_("src_padding_mask should be (batch, n_src), got shape {shape}")
                   if batch is None else
                   _("src_padding_mask should be (batch, n_src) with batch={batch}, got shape "
                     "{shape}"))
        raise ValueError(message.format(batch=batch, shape=tuple(src_padding_mask.shape)))
    if not src_padding_mask.any(dim=1).all():
        raise ValueError(_(
            "src_padding_mask should mark at least one real source token per sentence (True = "
            "real token), got a row of all False"
        ))
    return src_padding_mask


def decoder_masks(src_padding_mask, n_tgt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two masks of a decoder block: ``(self_mask, cross_mask)``.

    ``self_mask`` ``(n_tgt, n_tgt)``: causal, character i reads characters 0..i.
    ``cross_mask`` ``(batch, 1, 1, n_src)``: from ``src_padding_mask`` ``(batch, n_src)``
    (True at real source tokens), shared by every head and every query: no causal part,
    since the whole source is known before the first character is written.

    Used in lesson 15.
    """
    src_padding_mask = _require_padding(src_padding_mask)
    n_tgt = require_positive_int("n_tgt", n_tgt)
    self_mask = causal_mask(n_tgt, device=src_padding_mask.device)  # (n_tgt, n_tgt)
    cross_mask = src_padding_mask[:, None, None, :]  # (batch, 1, 1, n_src)
    return self_mask, cross_mask


def cross_attention(q, k, v, src_padding_mask=None) -> tuple[torch.Tensor, torch.Tensor]:
    """One cross-attention step: the decoder's queries read the source's keys and values.

    q ``(batch, heads, n_tgt, d_k)`` from the decoder; k, v ``(batch, heads, n_src, d_k)``
    from the encoder's memory; ``src_padding_mask`` ``(batch, n_src)``, True at real source
    tokens (or None: no padding). Returns output ``(batch, heads, n_tgt, d_k)`` and weights
    ``(batch, heads, n_tgt, n_src)``: ``softmax(q kᵀ / sqrt(d_k))`` over the real source
    tokens, no causal mask.

    Used in lesson 15.
    """
    q = require_tensor("q", q, "(batch, heads, n_tgt, d_k)")
    k = require_tensor("k", k, "(batch, heads, n_src, d_k)")
    v = require_tensor("v", v, "(batch, heads, n_src, d_k)")
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape or q.shape[:2] != k.shape[:2] \
            or q.shape[3] != k.shape[3]:
        raise ValueError(_(
            "q should be (batch, heads, n_tgt, d_k) and k, v (batch, heads, n_src, d_k) with the "
            "same batch, heads and d_k, got q {q_shape}, k {k_shape}, v {v_shape}"
        ).format(q_shape=tuple(q.shape), k_shape=tuple(k.shape), v_shape=tuple(v.shape)))
    mask = None
    if src_padding_mask is not None:
        src_padding_mask = _require_padding(src_padding_mask, q.shape[0])
        if src_padding_mask.shape[1] != k.shape[2]:
            raise ValueError(_(
                "src_padding_mask should be (batch, n_src) with n_src={n_src}, got shape "
                "{src_padding_mask_shape}"
            ).format(n_src=k.shape[2], src_padding_mask_shape=tuple(src_padding_mask.shape)))
        mask = src_padding_mask[:, None, None, :]  # (batch, 1, 1, n_src)
    return scaled_dot_product_attention(q, k, v, mask=mask)


def memory_keys_values(attention: MultiHeadAttention, memory) -> tuple[torch.Tensor,
                                                                         torch.Tensor]:
    """The keys and values ``(batch, heads, n_src, d_k)`` that ``attention`` (a decoder
    block's ``cross_attn``) makes of the encoder's ``memory`` ``(batch, n_src, d_model)``:
    computed once per sentence, read by every character the decoder writes.

    Used in lesson 15.
    """
    require_instance("attention", attention, MultiHeadAttention,
                     _("a course_utils.nn.attention.MultiHeadAttention"))
    memory = require_tensor("memory", memory, "(batch, n_src, d_model)")
    if memory.dim() != 3 or memory.shape[-1] != attention.d_model:
        raise ValueError(_(
            "memory should be (batch, n_src, d_model) with d_model={d_model}, got shape "
            "{memory_shape}"
        ).format(d_model=attention.d_model, memory_shape=tuple(memory.shape)))
    k = split_heads(attention.w_k(memory), attention.num_heads)  # (batch, heads, n_src, d_k)
    v = split_heads(attention.w_v(memory), attention.num_heads)  # (batch, heads, n_src, d_k)
    return k, v
