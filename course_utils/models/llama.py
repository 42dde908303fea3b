"""A Llama-style decoder (Touvron et al. 2023) built from the course's own parts.

What lesson 14 rebuilds SmolLM2 with (:func:`course_utils.models.smollm2.loading.load_smollm2`
fills it with the real weights). Next to lesson 12's :class:`course_utils.models.gpt.GPT` it
changes four things and
keeps the rest (token embedding, ``num_layers`` pre-norm blocks, a final norm, the readout
through the token embedding itself):

- positions: no learned vectors added to the tokens; every query and key head is rotated by
  its position (RoPE, lesson 11: ``MultiHeadAttention(rope_base=...)``);
- attention: grouped-query (lesson 04), ``num_kv_heads`` key/value heads each shared by
  ``num_heads / num_kv_heads`` query heads, so the KV cache is that many times smaller;
- norms: :class:`~course_utils.nn.llama_parts.RMSNorm` instead of LayerNorm;
- feed-forward: :class:`~course_utils.nn.llama_parts.SwiGLUFeedForward` instead of GELU's;

and no biases anywhere. The model follows the protocol of :mod:`course_utils.nn.kv_cache`:
``model(tokens, cache=None)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import (
    require_bool,
    require_positive_int,
    require_positive_number,
)
from course_utils.language import _
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.kv_cache import require_next_tokens
from course_utils.nn.llama_parts import RMSNorm, SwiGLUFeedForward
from course_utils.nn.masks import causal_mask


def _require_rope_base(rope_base) -> float:
    """A Llama's only positions are RoPE's: ``rope_base`` may not be None (which
    MultiHeadAttention takes as "no RoPE") and must be a positive number."""
    if rope_base is None:
        raise TypeError(_(
            "rope_base should be a positive number (RoPE is a Llama's only position information; "
            "None would build a model that cannot tell positions apart), got None"
        ))
    return require_positive_number("rope_base", rope_base)


class LlamaBlock(nn.Module):
    """One pre-norm decoder block: ``x + attention(norm1(x))``, then ``x + ffn(norm2(x))``.

    ``norm1``, ``norm2``: :class:`~course_utils.nn.llama_parts.RMSNorm` with ``eps``;
    ``self_attn``: :class:`~course_utils.nn.attention.MultiHeadAttention` without biases, with
    ``num_kv_heads`` key/value heads and RoPE of base ``rope_base``; ``ffn``:
    :class:`~course_utils.nn.llama_parts.SwiGLUFeedForward` of hidden width ``d_ff``.

    ``forward(x, mask=None, cache=None, layer=0, need_weights=True)``: x ``(batch, n_new,
    d_model)`` -> ``(x, weights)``, the same shape and the attention weights ``(batch,
    num_heads, n_new, n_k)`` (``None`` with ``need_weights=False``: the fused attention, as
    :class:`Llama` uses when asked for no weights); the arguments go to the attention.

    Used in lesson 14.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, num_kv_heads: int | None = None,
                 rope_base: float = 10000.0, eps: float = 1e-5):
        super().__init__()
        _require_rope_base(rope_base)
        self.norm1 = RMSNorm(d_model, eps=eps)
        self.self_attn = MultiHeadAttention(d_model, num_heads, bias=False,
                                            num_kv_heads=num_kv_heads, rope_base=rope_base)
        self.norm2 = RMSNorm(d_model, eps=eps)
        self.ffn = SwiGLUFeedForward(d_model, d_ff)

    def forward(self, x, mask=None, cache=None, layer: int = 0, need_weights: bool = True):
        attended, weights = self.self_attn(self.norm1(x), mask=mask, cache=cache, layer=layer,
                                           need_weights=need_weights)
        x = x + attended
        return x + self.ffn(self.norm2(x)), weights


class Llama(nn.Module):
    """A Llama decoder: token embedding, ``num_layers`` :class:`LlamaBlock`, RMSNorm, tied readout.

    Args:
        vocab_size: how many token ids there are.
        max_len: how many positions the model may see. RoPE has no table to run out of, but a
            model trained on ``max_len`` positions has never met a larger angle (SmolLM2: its
            context length, 8192).
        d_model, num_heads, num_layers, d_ff: the sizes (``d_k = d_model / num_heads``).
        num_kv_heads: key/value heads (grouped-query attention); ``None``: ``num_heads``.
        rope_base: RoPE's base (Llama 2: 10000; SmolLM2: 100000).
        eps: the RMSNorms' epsilon.

    ``forward(tokens, cache=None, return_weights=False)``: tokens ``(batch, n_new)`` ids give
    logits ``(batch, n_new, vocab_size)``. With a :class:`~course_utils.nn.kv_cache.KVCache` the
    tokens continue the cached sequence (positions ``cache.seq_len ..``) and every block
    appends its keys and values, ``(batch, num_kv_heads, n_new, d_k)`` each.
    ``return_weights=True`` returns ``(logits, weights)`` with every block's attention,
    ``(batch, num_layers, num_heads, n_new, n_k)`` (``n_k = cache.seq_len + n_new``, before
    the call).

    Used in lesson 14.
    """

    def __init__(self, vocab_size: int, max_len: int, d_model: int, num_heads: int,
                 num_layers: int, d_ff: int, num_kv_heads: int | None = None,
                 rope_base: float = 10000.0, eps: float = 1e-5):
        super().__init__()
        self.vocab_size = require_positive_int("vocab_size", vocab_size)
        self.max_len = require_positive_int("max_len", max_len)
        self.num_layers = require_positive_int("num_layers", num_layers)
        _require_rope_base(rope_base)
        self.token_embedding = nn.Embedding(vocab_size, require_positive_int("d_model", d_model))
        self.blocks = nn.ModuleList(
            LlamaBlock(d_model, num_heads, d_ff, num_kv_heads=num_kv_heads,
                       rope_base=rope_base, eps=eps)
            for _layer in range(num_layers)
        )
        self.final_norm = RMSNorm(d_model, eps=eps)

    def forward(self, tokens, cache=None, return_weights: bool = False):
        tokens, past = require_next_tokens(tokens, cache, self.vocab_size, self.max_len)
        require_bool("return_weights", return_weights)
        n_new = tokens.shape[1]
        x = self.token_embedding(tokens)  # (batch, n_new, d_model): no position added, RoPE
        # (n_new, n_k); one new token may read every cached one, so it needs no mask at all
        mask = causal_mask(n_new, past + n_new, device=tokens.device) if n_new > 1 else None
        all_weights = []
        for layer, block in enumerate(self.blocks):
            x, weights = block(x, mask=mask, cache=cache, layer=layer,
                               need_weights=return_weights)
            if return_weights:
                all_weights.append(weights)  # (batch, num_heads, n_new, n_k)
        # Tied readout: the token embedding (vocab_size, d_model) is the output matrix too.
        logits = F.linear(self.final_norm(x), self.token_embedding.weight)
        if return_weights:
            return logits, torch.stack(all_weights, dim=1)
        return logits  # (batch, n_new, vocab_size)
