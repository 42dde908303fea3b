"""Lesson 16's measurements of FlashAttention: bytes kept, FLOPs spent, tiles skipped, training.

Every function compares :func:`course_utils.nn.flash_attention.flash_attention` with naive
attention, :func:`course_utils.nn.attention.scaled_dot_product_attention` (lesson 02), which
materialises the ``(batch, heads, n_q, n_k)`` weights and lets autograd keep them.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from course_utils.checks import (
    require_bool,
    require_callable,
    require_instance,
    require_positive_int,
    require_seed,
    require_token_ids,
)
from course_utils.data.corpus import sample_windows
from course_utils.experiments.l06_cost import counted_flops, saved_for_backward
from course_utils.language import _
from course_utils.models.gpt import GPT
from course_utils.nn.attention import merge_heads, scaled_dot_product_attention, split_heads
from course_utils.nn.flash_attention import DEFAULT_BLOCK_SIZE, attention_tiles, flash_attention
from course_utils.nn.masks import causal_mask
from course_utils.nn.training import fit


def naive_attention(q, k, v, causal: bool = False):
    """softmax(q kᵀ / √d_k) v with the weights materialised: ``(batch, heads, n_q, d_v)``.

    Lesson 02's attention under lesson 05's ``causal_mask(n_q, n_k)`` when ``causal``; autograd
    keeps its ``(batch, heads, n_q, n_k)`` weights for the backward pass.

    Used in lesson 16.
    """
    require_bool("causal", causal)
    mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device) if causal else None
    return scaled_dot_product_attention(q, k, v, mask=mask)[0]


def _random_qkv(seq_len, batch_size, num_heads, d_k, generator, requires_grad=True):
    """q, k, v ``(batch, heads, seq_len, d_k)``, three separate tensors (no shared storage)."""
    return [torch.randn(batch_size, num_heads, seq_len, d_k, generator=generator)
            .requires_grad_(requires_grad) for _tensor in range(3)]


def saved_bytes(lengths, *, batch_size: int = 1, num_heads: int = 2, d_k: int = 16,
                causal: bool = True, seed: int = 0) -> dict[str, list[int]]:
    """Bytes autograd keeps for the backward pass of one attention call, per ``seq_len``.

    Counted with autograd's saved-tensor hooks
    (:func:`course_utils.experiments.l06_cost.saved_for_backward`, each storage once) on
    random q, k, v ``(batch, heads, seq_len, d_k)``:
    ``{"naive": [...], "flash": [...]}``, one entry per length.

    Used in lesson 16.
    """
    lengths = [require_positive_int(_("every length"), n) for n in lengths]
    generator = torch.Generator().manual_seed(require_seed("seed", seed))
    result = {"naive": [], "flash": []}
    for n in lengths:
        q, k, v = _random_qkv(n, batch_size, num_heads, d_k, generator)
        for name, attention in (("naive", naive_attention), ("flash", flash_attention)):
            kept = saved_for_backward(attention, q, k, v, causal=causal)
            result[name].append(sum(nbytes for _name, nbytes in kept))
    return result


def training_flops(seq_len: int, *, batch_size: int = 1, num_heads: int = 2, d_k: int = 16,
                   causal: bool = False, window: int | None = None,
                   block_size: int = DEFAULT_BLOCK_SIZE,
                   seed: int = 0) -> dict[str, dict[str, int]]:
    """Matrix-product FLOPs of one forward and one backward pass, counted by FlopCounterMode.

    ``{"naive": {"forward": ..., "backward": ...}, "flash": {...}}``. Flash's backward
    recomputes every tile's ``Q Kᵀ``, which naive attention kept. ``window`` (flash only)
    skips the tiles outside the band; naive attention is always full (or causal), since a
    mask on materialised scores saves no arithmetic (lesson 06).

    Used in lesson 16.
    """
    require_positive_int("seq_len", seq_len)
    generator = torch.Generator().manual_seed(require_seed("seed", seed))
    q, k, v = _random_qkv(seq_len, batch_size, num_heads, d_k, generator)
    d_output = torch.randn(batch_size, num_heads, seq_len, d_k, generator=generator)
    calls = {"naive": lambda: naive_attention(q, k, v, causal=causal),
             "flash": lambda: flash_attention(q, k, v, causal=causal, block_size=block_size,
                                              window=window)}
    result = {}
    for name, call in calls.items():
        holder = {}

        def forward(call=call, holder=holder):
            holder["output"] = call()

        forward_flops = sum(counted_flops(forward).values())
        backward_flops = sum(counted_flops(holder["output"].backward, d_output).values())
        result[name] = {"forward": forward_flops, "backward": backward_flops}
    return result


def tile_share(seq_len: int, block_size: int = DEFAULT_BLOCK_SIZE, causal: bool = False,
               window: int | None = None) -> float:
    """The share of the ``(seq_len / block_size)²`` tiles that are computed at all.

    1.0 without a mask; about one half under a causal mask; about ``(window + block) / seq_len``
    (causal) under a window.

    Used in lesson 16.
    """
    blocks = -(-require_positive_int("seq_len", seq_len)
               // require_positive_int("block_size", block_size))
    return len(attention_tiles(seq_len, seq_len, block_size, causal, window)) / blocks**2


def gpt_logits(model: GPT, tokens, attention) -> torch.Tensor:
    """Lesson 12's GPT forward pass with its attention core replaced by ``attention``.

    ``attention(q, k, v)`` gets q, k, v ``(batch, heads, seq_len, d_k)`` and returns the causal
    attention output of the same shape; the projections, blocks and readout are the model's
    own. Returns logits ``(batch, seq_len, vocab_size)``.

    Used in lesson 16.
    """
    require_instance("model", model, GPT, _("a course_utils.models.gpt.GPT"))
    tokens = require_token_ids("tokens", tokens, model.vocab_size, "(batch, seq_len)")
    require_callable("attention", attention)
    positions = torch.arange(tokens.shape[1], device=tokens.device)
    x = model.token_embedding(tokens) + model.position_embedding(positions)
    for block in model.blocks:
        heads = block.self_attn.num_heads
        h = block.norm1(x)  # (batch, seq_len, d_model)
        q = split_heads(block.self_attn.w_q(h), heads)  # (batch, heads, seq_len, d_k)
        k = split_heads(block.self_attn.w_k(h), heads)
        v = split_heads(block.self_attn.w_v(h), heads)
        x = x + block.self_attn.w_o(merge_heads(attention(q, k, v)))
        x = x + block.ffn(block.norm2(x))
    return F.linear(model.final_norm(x), model.token_embedding.weight)


def train_with_attention(model: GPT, tokens, steps: int, seed: int, attention, *,
                         batch_size: int = 8, lr: float = 5e-3) -> list[float]:
    """Train a copy of ``model`` with its attention core replaced; the loss of every step.

    The copy starts from ``model``'s weights (``model`` itself is left untouched) and draws
    ``batch_size`` windows of ``tokens`` ``(num_tokens,)`` per step with a generator seeded
    with ``seed``: two calls with the same arguments but another ``attention`` (see
    :func:`gpt_logits`) see the same weights and the same batches.

    Used in lesson 16.
    """
    require_instance("model", model, GPT, _("a course_utils.models.gpt.GPT"))
    tokens = require_token_ids("tokens", tokens, model.vocab_size, "(num_tokens,)")
    require_positive_int("steps", steps)
    require_callable("attention", attention)
    twin = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(require_seed("seed", seed))

    def loss_at_step(step):
        window = sample_windows(tokens, batch_size, twin.max_len, generator)
        logits = gpt_logits(twin, window[:, :-1], attention)  # (batch, max_len, vocab_size)
        return F.cross_entropy(logits.reshape(-1, twin.vocab_size), window[:, 1:].reshape(-1))

    return fit(twin, loss_at_step, steps, lr=lr)
