"""Scaled dot-product attention and the modules built on it.

Notation: q ``(..., n_q, d_k)``, k ``(..., n_k, d_k)``, v ``(..., n_k, d_v)``,
weights ``(..., n_q, n_k)``. Masks are bool with **True = may attend**, the convention
of ``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import (
    require_bool,
    require_bool_mask,
    require_divisible,
    require_instance,
    require_kv_heads,
    require_matches_module,
    require_positive_int,
    require_positive_number,
    require_same_device,
    require_same_dtype,
    require_tensor,
)
from course_utils.language import _
from course_utils.nn.kv_cache import KVCache
from course_utils.nn.positions import apply_rope_from


def _require_attention_inputs(q, k, v, mask, scale):
    """The arguments of :func:`scaled_dot_product_attention`, checked: ``(q, k, v, mask,
    scale)`` with ``scale`` made a number (``None`` -> ``1/sqrt(d_k)``)."""
    q = require_tensor("q", q, "(..., n_q, d_k)")
    k = require_tensor("k", k, "(..., n_k, d_k)")
    v = require_tensor("v", v, "(..., n_k, d_v)")
    require_same_dtype(q=q, k=k, v=v)
    require_same_device(q=q, k=k, v=v, mask=mask)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(_(
            "q is (..., n_q, d_k) with d_k={q_width} but k is (..., n_k, d_k) with "
            "d_k={k_width}: queries and keys must have the same width to be compared"
        ).format(q_width=q.shape[-1], k_width=k.shape[-1]))
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(_(
            "k is (..., n_k, d_k) with n_k={keys} but v is (..., n_k, d_v) with "
            "n_k={values}: every key needs exactly one value"
        ).format(keys=k.shape[-2], values=v.shape[-2]))
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(_(
            "the leading (batch, heads) dims of q {q_dims}, k {k_dims} and v {v_dims} do not "
            "broadcast"
        ).format(q_dims=tuple(q.shape[:-2]), k_dims=tuple(k.shape[:-2]),
                 v_dims=tuple(v.shape[:-2]))) from None
    scores_shape = torch.Size((*batch, q.shape[-2], k.shape[-2]))
    if mask is not None:
        mask = require_bool_mask(mask, scores_shape, "(..., n_q, n_k)")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    elif isinstance(scale, torch.Tensor) and scale.dim() == 0 and scale.is_floating_point():
        require_same_device(q=q, scale=scale)  # e.g. a learned temperature
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(_("scale should be a real number (or None for 1/sqrt(d_k)), got {type}")
                        .format(type=type(scale).__name__))
    elif not math.isfinite(scale):
        raise ValueError(_("scale should be a finite number, got {scale}").format(scale=scale))

    return q, k, v, mask, scale


def softmax_with_sink(scores, sink):
    """A softmax over each row of ``scores`` with one more logit, ``sink``, that owns no key.

    ``scores`` ``(batch, heads, n_q, n_k)``, ``sink`` ``(heads,)``: head ``h``'s logit joins
    every row of that head, the softmax runs over the ``n_k + 1`` logits, and the sink's
    column is dropped, so a row's weights sum to less than 1 (gpt-oss's attention sink):

        weights_ij = exp(s_ij) / (Σ_j' exp(s_ij') + exp(sink_h))

    A ``-inf`` score (a masked key) gets weight 0. Returns weights ``(batch, heads, n_q, n_k)``.

    Used in lesson 17.
    """
    scores = require_tensor("scores", scores, "(batch, heads, n_q, n_k)")
    sink = require_tensor("sink", sink, "(heads)")
    if scores.dim() != 4 or sink.shape != scores.shape[1:2]:
        raise ValueError(_("scores should be (batch, heads, n_q, n_k) and sink (heads,), one "
                           "logit per head, got shapes {scores_shape} and {sink_shape}")
                         .format(scores_shape=tuple(scores.shape), sink_shape=tuple(sink.shape)))
    require_same_dtype(scores=scores, sink=sink)
    require_same_device(scores=scores, sink=sink)
    sink_column = sink.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)  # (batch, heads, n_q, 1)
    joined = torch.cat([scores, sink_column], dim=-1)  # (batch, heads, n_q, n_k + 1)
    return torch.softmax(joined, dim=-1)[..., :-1]  # the sink's column dropped


def scaled_dot_product_attention(q, k, v, mask=None, scale=None, sink=None):
    """softmax(q kᵀ · scale) v, returning ``(output, weights)``.

    Args:
        q: ``(..., n_q, d_k)`` queries.
        k: ``(..., n_k, d_k)`` keys.
        v: ``(..., n_k, d_v)`` values. Leading batch/head dims of q, k, v broadcast.
        mask: optional bool, True = may attend: ``(n_q, n_k)`` shared by the batch, or
            one axis per axis of the scores ``(..., n_q, n_k)`` (size 1 where shared), e.g.
            ``(batch, 1, n_k)`` for a padding mask; see ``checks.require_bool_mask``.
        scale: a finite real factor (or a 0-dim float tensor) applied to the scores;
            ``None`` means ``1/sqrt(d_k)``, ``1.0`` turns scaling off.
        sink: optional ``(heads,)`` logit per head for q ``(batch, heads, n_q, d_k)``:
            the softmax is :func:`softmax_with_sink`, so a row may give weight to no key.

    Returns:
        output ``(..., n_q, d_v)`` and weights ``(..., n_q, n_k)``.

    A query row whose keys are all masked gets all-zero weights and a zero output,
    never NaN (a plain softmax over a row of -inf gives 0/0 = NaN).

    Used in lessons 02, 04, 05, 06, 08 and 17.
    """
    q, k, v, mask, scale = _require_attention_inputs(q, k, v, mask, scale)
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., n_q, n_k)
    if mask is not None:
        # A row with no allowed key would be softmax(-inf, ..., -inf) = NaN. Give such
        # rows finite scores for the softmax, then zero their weights afterwards.
        row_has_key = mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~row_has_key, 0.0)
    if sink is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        weights = softmax_with_sink(scores, sink)
    if mask is not None:
        weights = weights.masked_fill(~row_has_key, 0.0)
    return weights @ v, weights  # (..., n_q, d_v), (..., n_q, n_k)


class SelfAttention(nn.Module):
    """One attention head with separate learned maps W_q, W_k, W_v.

    ``forward(x, mask=None)`` takes x ``(batch, seq_len, d_model)`` and returns
    ``(output, weights)`` of shapes ``(batch, seq_len, d_v)`` and
    ``(batch, seq_len, seq_len)``.

    Used in lessons 01, 02, 05 and 08.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int):
        super().__init__()
        self.d_model = require_positive_int("d_model", d_model)
        require_positive_int("d_k", d_k)
        require_positive_int("d_v", d_v)
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = nn.Linear(d_model, d_k)
        self.w_v = nn.Linear(d_model, d_v)

    def forward(self, x, mask=None):
        x = require_tensor("x", x, "(batch, seq_len, d_model)")
        if x.shape[-1] != self.d_model:
            raise ValueError(_(
                "x should be (batch, seq_len, d_model) with d_model={d_model}, got shape {shape}"
            ).format(d_model=self.d_model, shape=tuple(x.shape)))
        require_matches_module("x", x, self)
        require_same_device(x=x, mask=mask)
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)  # (batch, seq_len, d_k or d_v)
        return scaled_dot_product_attention(q, k, v, mask=mask)


def split_heads(x, num_heads: int):
    """Split the features into heads.

    ``(batch, seq_len, d_model)`` -> ``(batch, heads, seq_len, d_k)``.

    Head ``i`` gets features ``i*d_k .. (i+1)*d_k - 1``, with ``d_k = d_model // num_heads``.

    Used in lessons 06, 10, 12, 15 and 18.
    """
    x = require_tensor("x", x, "(batch, seq_len, d_model)")
    if x.dim() != 3:
        raise ValueError(_(
            "x should have shape (batch, seq_len, d_model), got shape {shape}"
        ).format(shape=tuple(x.shape)))
    batch, seq_len, d_model = x.shape
    d_k = require_divisible(d_model, num_heads)
    # view keeps the feature order (head-major), transpose puts heads next to batch
    # so that one batched matmul attends in every head at once.
    return x.view(batch, seq_len, num_heads, d_k).transpose(1, 2)


def merge_heads(x):
    """Concatenate the heads: ``(batch, heads, seq_len, d_k)`` -> ``(batch, seq_len, d_model)``.

    Used in lessons 06, 12, 15 and 18.
    """
    x = require_tensor("x", x, "(batch, heads, seq_len, d_k)")
    if x.dim() != 4:
        raise ValueError(_(
            "x should have shape (batch, heads, seq_len, d_k), got shape {shape}"
        ).format(shape=tuple(x.shape)))
    batch, heads, seq_len, d_k = x.shape
    # After the transpose the memory is no longer contiguous, so reshape (not view).
    return x.transpose(1, 2).reshape(batch, seq_len, heads * d_k)


class MultiHeadAttention(nn.Module):
    """``num_heads`` attention heads of width ``d_k = d_model / num_heads``, run side by side.

    Project with ``w_q, w_k, w_v``, split into heads, attend in every head with
    :func:`scaled_dot_product_attention`, concatenate, project with ``w_o`` (``d_model ->
    d_model``).

    ``forward(query, key=None, value=None, mask=None, cache=None, layer=0)`` takes query
    ``(batch, n_q, d_model)`` and key/value ``(batch, n_k, d_model)``; ``key`` defaults to
    ``query`` (self-attention) and ``value`` to ``key``. ``mask`` is bool, True = may attend,
    broadcastable to ``(batch, heads, n_q, n_k)``. Returns output ``(batch, n_q, d_model)`` and
    the per-head weights ``(batch, heads, n_q, n_k)``. ``need_weights=False`` returns
    ``(output, None)`` from torch's fused ``F.scaled_dot_product_attention``: the same
    attention, faster, for a caller that does not read the weights (lesson 14 generating).

    What a decoder that generates needs, all off by default:

    - ``num_kv_heads``: grouped-query attention. ``w_k`` and ``w_v`` make only
      ``num_kv_heads`` heads (``d_model -> num_kv_heads * d_k``); query head ``h`` reads
      key/value head ``h // (num_heads / num_kv_heads)``. ``None`` (or ``num_heads``) is plain
      multi-head attention, ``1`` is multi-query attention.
    - ``rope_base``: rotate every query and key head by its position with
      :func:`course_utils.nn.positions.apply_rope` (``None``: no rotation; the positions then
      come from elsewhere, e.g. learned vectors added to the tokens).
    - ``cache``: a :class:`course_utils.nn.kv_cache.KVCache`. The query tokens are then the next
      positions after what the cache holds for ``layer``: query ``i`` of ``n_q`` sits at
      position ``past + i``, its key and value (rotated first, with RoPE) are appended, and
      the queries attend to all ``n_k = past + n_q`` cached keys, so ``mask`` is ``(n_q,
      past + n_q)``, e.g. ``causal_mask(n_q, past + n_q)``. Self-attention only.
    - ``window`` (with a cache): this layer sees a sliding window of ``window`` positions, so
      the cache keeps only its last ``window`` (``KVCache.append(..., window=)``); the keys are
      then the ``held + n_q`` latest positions and ``mask`` is ``(n_q, held + n_q)``, e.g.
      ``band_mask(n_q, held + n_q, window=window)`` (``held = cache.layer_held(layer)``).

    Two ways to let a head attend to nothing (lesson 17), off by default:

    - ``sink=True``: a learned logit per head, ``sink_logit`` ``(heads,)``, joins every row of
      the scores before the softmax and is dropped after it (:func:`softmax_with_sink`,
      gpt-oss's form), so a row's weights may sum to less than 1.
    - ``gate=True``: an elementwise sigmoid gate from the query input, ``w_gate`` (``d_model ->
      d_model``), multiplies every head's output before ``w_o`` (Qiu et al. 2025, Qwen3-Next):
      ``w_o(merge(heads ⊙ sigmoid(split(w_gate(query)))))``.

    Used in lessons 04, 06, 07, 12, 13, 15 and 17.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True,
                 num_kv_heads: int | None = None, rope_base: float | None = None,
                 sink: bool = False, gate: bool = False):
        super().__init__()
        self.d_k = require_divisible(d_model, num_heads)
        require_bool("bias", bias)
        require_bool("sink", sink)
        require_bool("gate", gate)
        num_kv_heads = require_kv_heads(num_heads, num_kv_heads)
        if rope_base is not None:
            require_positive_number("rope_base", rope_base)
            if self.d_k % 2:
                raise ValueError(_("rope_base needs an even d_k (RoPE turns pairs of dims), "
                                   "got d_k = d_model / num_heads = {d_k}").format(d_k=self.d_k))
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.rope_base = rope_base
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        # gpt-oss's sink logit starts at 0: as if one more key with score 0 sat in every row.
        self.sink_logit = nn.Parameter(torch.zeros(num_heads)) if sink else None
        self.w_gate = nn.Linear(d_model, d_model, bias=bias) if gate else None

    def _require_input(self, name: str, x, notation: str) -> torch.Tensor:
        x = require_tensor(name, x, notation)
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(_(
                "{name} should have shape {notation} with d_model={d_model}, got shape {shape}"
            ).format(name=name, notation=notation, d_model=self.d_model, shape=tuple(x.shape)))
        return require_matches_module(name, x, self)

    def _require_forward(self, query, key, value, mask, cache, layer, need_weights, window):
        """The arguments of :meth:`forward`, checked: ``(query, key, value, past)``: ``past``
        positions the cache has seen for ``layer`` (it may hold fewer, under a ``window``)."""
        require_bool("need_weights", need_weights)
        self_attention = key is None and value is None
        if not self_attention and (cache is not None or self.rope_base is not None):
            raise ValueError(_(
                "key and value should be None (self-attention) with a cache or with "
                "rope_base: both give the keys the positions of the queries"
            ))
        query = self._require_input("query", query, "(batch, n_q, d_model)")
        key = query if key is None else self._require_input("key", key, "(batch, n_k, d_model)")
        value = key if value is None else self._require_input("value", value,
                                                              "(batch, n_k, d_model)")
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(_(
                "query, key and value should share the batch size, got {queries}, {keys} and "
                "{values}"
            ).format(queries=query.shape[0], keys=key.shape[0], values=value.shape[0]))
        if key.shape[1] != value.shape[1]:
            raise ValueError(_(
                "key is (batch, n_k, d_model) with n_k={keys} but value has n_k={values}: "
                "every key needs exactly one value"
            ).format(keys=key.shape[1], values=value.shape[1]))
        past = held = 0
        if cache is not None:
            require_instance("cache", cache, KVCache, "a course_utils.nn.kv_cache.KVCache")
            past, held = cache.layer_seq_len(layer), cache.layer_held(layer)
        if window is not None:
            require_positive_int("window", window)
        if mask is not None:
            require_same_device(query=query, mask=mask)
            scores_shape = torch.Size(
                (query.shape[0], self.num_heads, query.shape[1], held + key.shape[1])
            )
            require_bool_mask(mask, scores_shape, "(batch, heads, n_q, n_k)")
        return query, key, value, past

    def forward(self, query, key=None, value=None, mask=None, cache=None, layer: int = 0,
                need_weights: bool = True, window: int | None = None):
        query, key, value, past = self._require_forward(query, key, value, mask, cache, layer,
                                                        need_weights, window)
        q = split_heads(self.w_q(query), self.num_heads)  # (batch, heads, n_q, d_k)
        k = split_heads(self.w_k(key), self.num_kv_heads)  # (batch, kv_heads, n_k, d_k)
        v = split_heads(self.w_v(value), self.num_kv_heads)  # (batch, kv_heads, n_k, d_k)
        if self.rope_base is not None:
            # query i and its key sit at position past + i
            q = apply_rope_from(q, past, self.rope_base)
            k = apply_rope_from(k, past, self.rope_base)
        if cache is not None:
            # The cache keeps the rotated keys: a key's position never changes later.
            k, v = cache.append(layer, k, v, window=window)  # (batch, kv_heads, held + n_q, d_k)
        if (not need_weights and self.sink_logit is None
                and (mask is None or mask.any(dim=-1).all())):
            # Nobody reads the weights: torch's fused kernel computes the same softmax without
            # keeping (batch, heads, n_q, n_k), and lets each key/value head serve its group.
            # (A query with no key to attend to stays on the explicit path, which gives it 0.)
            heads = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, enable_gqa=self.num_kv_heads != self.num_heads)
            return self.w_o(merge_heads(self._gated(heads, query))), None  # (batch, n_q, d_model)
        if self.num_kv_heads != self.num_heads:
            # Each key/value head serves `group` neighbouring query heads.
            group = self.num_heads // self.num_kv_heads
            k = k.repeat_interleave(group, dim=1)  # (batch, heads, n_k, d_k)
            v = v.repeat_interleave(group, dim=1)
        heads, weights = scaled_dot_product_attention(q, k, v, mask=mask, sink=self.sink_logit)
        # heads (batch, heads, n_q, d_k), weights (batch, heads, n_q, n_k)
        heads = self._gated(heads, query)
        return self.w_o(merge_heads(heads)), weights  # (batch, n_q, d_model)

    def _gated(self, heads, query):
        """``heads`` ``(batch, heads, n_q, d_k)`` times the sigmoid gate of ``query`` ``(batch,
        n_q, d_model)``, elementwise (unchanged without ``gate=True``)."""
        if self.w_gate is None:
            return heads
        return heads * torch.sigmoid(split_heads(self.w_gate(query), self.num_heads))

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of ``torch.nn.MultiheadAttention``'s weights in our module.

        torch keeps W_Q, W_K, W_V stacked in one ``in_proj_weight`` ``(3*d_model, d_model)``;
        we slice it into ``w_q, w_k, w_v``. Ours is always batch-first and has no dropout,
        so it matches ``module`` in eval mode (or with dropout=0).
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(_(
                "from_torch expects a torch.nn.MultiheadAttention, got {type}"
            ).format(type=type(module).__name__))
        if not module._qkv_same_embed_dim:
            raise ValueError(_(
                "from_torch supports kdim = vdim = embed_dim only, got embed_dim={embed_dim}, "
                "kdim={kdim}, vdim={vdim}"
            ).format(embed_dim=module.embed_dim, kdim=module.kdim, vdim=module.vdim))
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError(_(
                "from_torch does not support add_bias_kv=True or add_zero_attn=True: "
                "they add extra keys that MultiHeadAttention does not have"
            ))
        bias = module.in_proj_bias is not None
        ours = cls(module.embed_dim, module.num_heads, bias=bias)
        ours = ours.to(device=module.in_proj_weight.device, dtype=module.in_proj_weight.dtype)
        weight_q, weight_k, weight_v = module.in_proj_weight.detach().chunk(3)
        with torch.no_grad():
            ours.w_q.weight.copy_(weight_q)
            ours.w_k.weight.copy_(weight_k)
            ours.w_v.weight.copy_(weight_v)
            ours.w_o.weight.copy_(module.out_proj.weight)
            if bias:
                bias_q, bias_k, bias_v = module.in_proj_bias.detach().chunk(3)
                ours.w_q.bias.copy_(bias_q)
                ours.w_k.bias.copy_(bias_k)
                ours.w_v.bias.copy_(bias_v)
                ours.w_o.bias.copy_(module.out_proj.bias)
        return ours


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each row: ``(..., n_q, n_k)`` -> ``(..., n_q)``.

    0 for a one-hot row, ``log(n_k)`` for a uniform one; zero weights count as
    ``0 · log 0 = 0`` (a masked key contributes nothing, and no NaN appears).

    Used in lesson 03.
    """
    weights = require_tensor("weights", weights, "(..., n_q, n_k)")
    terms = weights * torch.log(weights.clamp_min(torch.finfo(weights.dtype).tiny))
    return -torch.where(weights > 0, terms, torch.zeros_like(terms)).sum(dim=-1)
