"""Multi-head latent attention (MLA): keep a small latent per token, not its keys and values.

Multi-head attention caches ``2 · num_heads · d_k`` numbers per token and layer; grouped-query
attention shares each key/value head among several query heads (lessons 04 and 14). MLA
(DeepSeek-V2, 2024) keeps one vector instead, the **latent** ``c = RMSNorm(x W_DKV)``
``(batch, seq_len, kv_latent_dim)``, and rebuilds every head's keys and values from it::

    k_content = c W_UK    (batch, heads, seq_len, d_k)      one up-projection per head
    v         = c W_UV    (batch, heads, seq_len, d_k)

Positions come from a second, small key ``k_rope = RoPE(x W_KR)`` ``(batch, 1, seq_len,
rope_dim)``, **shared by every head**, and the query is split to match: ``q = [q_content ;
RoPE(q_rope)]``, so each score is ``q_content · k_content + q_rope · k_rope``, scaled by
``1 / sqrt(d_k + rope_dim)``. Per token and layer the cache keeps ``kv_latent_dim +
rope_dim`` numbers.

**Absorption.** Head ``h``'s key is ``c @ W_UK[h]ᵀ`` (``W_UK[h]`` ``(d_k, kv_latent_dim)``),
so its content score is ``q · (c @ W_UK[h]ᵀ) = (q @ W_UK[h]) · c``: the key map folds into the
query, ``q_absorbed = q @ W_UK[h]`` ``(batch, heads, n_q, kv_latent_dim)``, which is compared
with the latent itself. Likewise ``W_UV`` folds into the output map, so decoding never
rebuilds a key or a value. It works because nothing between ``W_UK`` and the query depends
on the key's position; RoPE applied to ``c @ W_UK[h]ᵀ`` would put a rotation by the key's
position between them, which is why the rotated part is a separate key.

Biases are left out (DeepSeek's projections have none, and a bias would not fold); so is
DeepSeek's low-rank query, which changes neither the cache nor the absorption. The RMSNorm
on the latent is DeepSeek's too: it keeps the latent's scale, and so the scores', where two
chained maps would otherwise shrink it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course_utils.checks import (
    require_bool,
    require_bool_mask,
    require_divisible,
    require_instance,
    require_matches_module,
    require_positive_int,
    require_positive_number,
    require_same_device,
    require_tensor,
)
from course_utils.language import _
from course_utils.nn.attention import merge_heads, scaled_dot_product_attention, split_heads
from course_utils.nn.kv_cache import KVCache
from course_utils.nn.positions import apply_rope


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention with a decoupled, shared RoPE key (DeepSeek-V2/V3's MLA).

    Args:
        d_model: the width of the tokens; ``num_heads`` heads of ``d_k = d_model / num_heads``.
        kv_latent_dim: the width of the latent each token keeps (DeepSeek-V3: 512).
        rope_dim: the width of the shared RoPE key and of each head's RoPE query (even;
            DeepSeek-V3: 64).
        rope_base: RoPE's base (:func:`course_utils.nn.positions.apply_rope`).

    Parameters (no biases): ``w_q`` ``d_model -> num_heads·d_k`` (content queries), ``w_qr``
    ``d_model -> num_heads·rope_dim`` (RoPE queries), ``w_dkv`` ``d_model -> kv_latent_dim``
    and ``latent_norm`` (an RMSNorm: the latent), ``w_uk`` and ``w_uv`` ``kv_latent_dim ->
    num_heads·d_k`` (keys and values rebuilt), ``w_kr`` ``d_model -> rope_dim`` (the shared
    RoPE key), ``w_o`` ``num_heads·d_k -> d_model``.

    ``forward(x, mask=None, cache=None, layer=0, need_weights=True, window=None)``, the call of
    :class:`course_utils.nn.attention.MultiHeadAttention` (self-attention only), so it drops
    into lesson 07's block: x ``(batch, n_q, d_model)``, ``mask`` bool, True = may attend,
    broadcastable to ``(batch, heads, n_q, n_k)``. Returns output ``(batch, n_q, d_model)`` and
    weights ``(batch, heads, n_q, n_k)``, even when ``need_weights`` is False (this layer has no
    fused path). ``window`` is the sliding window the cache keeps for this layer (lesson 17).

    - Without a cache the keys and values are rebuilt from the latent (the plain form).
    - With a :class:`course_utils.nn.kv_cache.KVCache` the tokens continue the cached sequence
      (positions ``past ..``, ``mask`` ``(n_q, past + n_q)``) and the layer appends per token
      only the shared RoPE key to ``cache.keys[layer]`` ``(batch, 1, seq_len, rope_dim)`` and
      the latent to ``cache.values[layer]`` ``(batch, 1, seq_len, kv_latent_dim)``; the new
      queries then read them with absorbed weights and no key or value is rebuilt.

    Used in lesson 18.
    """

    def __init__(self, d_model: int, num_heads: int, kv_latent_dim: int, rope_dim: int,
                 rope_base: float = 10000.0):
        super().__init__()
        self.d_k = require_divisible(d_model, num_heads)
        require_positive_int("kv_latent_dim", kv_latent_dim)
        if require_positive_int("rope_dim", rope_dim) % 2:
            raise ValueError(_(
                "rope_dim should be even (RoPE turns pairs of dims), got {rope_dim}"
            ).format(rope_dim=rope_dim))
        require_positive_number("rope_base", rope_base)
        self.d_model, self.num_heads = d_model, num_heads
        self.kv_latent_dim, self.rope_dim, self.rope_base = kv_latent_dim, rope_dim, rope_base
        width = num_heads * self.d_k  # = d_model
        self.w_q = nn.Linear(d_model, width, bias=False)
        self.w_qr = nn.Linear(d_model, num_heads * rope_dim, bias=False)
        self.w_dkv = nn.Linear(d_model, kv_latent_dim, bias=False)
        self.latent_norm = nn.RMSNorm(kv_latent_dim)
        self.w_uk = nn.Linear(kv_latent_dim, width, bias=False)
        self.w_uv = nn.Linear(kv_latent_dim, width, bias=False)
        self.w_kr = nn.Linear(d_model, rope_dim, bias=False)
        self.w_o = nn.Linear(width, d_model, bias=False)

    @property
    def numbers_per_token(self) -> int:
        """What the cache keeps per token in this layer: ``kv_latent_dim + rope_dim``."""
        return self.kv_latent_dim + self.rope_dim

    def _queries(self, x, positions):
        """Content and rotated queries, ``(batch, heads, n_q, d_k)`` and ``(.., rope_dim)``."""
        q = split_heads(self.w_q(x), self.num_heads)  # (batch, heads, n_q, d_k)
        q_rope = split_heads(self.w_qr(x), self.num_heads)  # (batch, heads, n_q, rope_dim)
        return q, apply_rope(q_rope, positions, self.rope_base)

    def forward(self, x, mask=None, cache=None, layer: int = 0, need_weights: bool = True,
                window: int | None = None):
        x = require_tensor("x", x, "(batch, n_q, d_model)")
        require_bool("need_weights", need_weights)
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(_(
                "x should have shape (batch, n_q, d_model) with d_model={d_model}, got shape "
                "{shape}"
            ).format(d_model=self.d_model, shape=tuple(x.shape)))
        require_matches_module("x", x, self)
        past = held = 0
        if cache is not None:
            require_instance("cache", cache, KVCache, _("a course_utils.nn.kv_cache.KVCache"))
            past = cache.layer_seq_len(layer)
            held = cache.layer_held(layer)
        batch, n_q, _d_model = x.shape
        if mask is not None:
            require_same_device(x=x, mask=mask)
            require_bool_mask(mask, torch.Size((batch, self.num_heads, n_q, held + n_q)),
                              "(batch, heads, n_q, n_k)")

        positions = torch.arange(past, past + n_q, device=x.device)
        q, q_rope = self._queries(x, positions)  # (batch, heads, n_q, d_k / rope_dim)
        latent = self.latent_norm(self.w_dkv(x))  # (batch, n_q, kv_latent_dim): what it keeps
        k_rope = apply_rope(self.w_kr(x)[:, None], positions, self.rope_base)
        # k_rope (batch, 1, n_q, rope_dim): one RoPE key, shared by every head
        scale = 1.0 / math.sqrt(self.d_k + self.rope_dim)
        if cache is None:
            return self._rebuilt(q, q_rope, latent, k_rope, mask, scale)
        k_rope, latent = cache.append(layer, k_rope, latent[:, None], window=window)
        # k_rope (batch, 1, n_k, rope_dim), latent (batch, 1, n_k, kv_latent_dim)
        return self._absorbed(q, q_rope, latent, k_rope, mask, scale)

    def _rebuilt(self, q, q_rope, latent, k_rope, mask, scale):
        """The plain form: every head's keys and values rebuilt from the latent."""
        k = split_heads(self.w_uk(latent), self.num_heads)  # (batch, heads, n_k, d_k)
        v = split_heads(self.w_uv(latent), self.num_heads)  # (batch, heads, n_k, d_k)
        k_rope = k_rope.expand(-1, self.num_heads, -1, -1)  # (batch, heads, n_k, rope_dim)
        heads, weights = scaled_dot_product_attention(
            torch.cat((q, q_rope), dim=-1), torch.cat((k, k_rope), dim=-1), v, mask=mask,
            scale=scale)  # heads (batch, heads, n_q, d_k)
        return self.w_o(merge_heads(heads)), weights

    def _absorbed(self, q, q_rope, latent, k_rope, mask, scale):
        """The absorbed form: W_UK folded into the queries, W_UV into the output map."""
        w_uk = self.w_uk.weight.view(self.num_heads, self.d_k, self.kv_latent_dim)
        w_uv = self.w_uv.weight.view(self.num_heads, self.d_k, self.kv_latent_dim)
        q_absorbed = q @ w_uk  # (batch, heads, n_q, kv_latent_dim): compared with the latent
        # One key of width kv_latent_dim + rope_dim for every head, the latent as the value:
        # the scores are q_absorbed · latent + q_rope · k_rope.
        latent_heads, weights = scaled_dot_product_attention(
            torch.cat((q_absorbed, q_rope), dim=-1), torch.cat((latent, k_rope), dim=-1),
            latent, mask=mask, scale=scale)  # (batch, heads, n_q, kv_latent_dim)
        heads = latent_heads @ w_uv.transpose(-2, -1)  # (batch, heads, n_q, d_k)
        return self.w_o(merge_heads(heads)), weights
