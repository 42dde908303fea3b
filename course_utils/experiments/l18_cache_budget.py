"""Lesson 18's experiment: lesson 12's GPT with three attentions, compared at a cache budget.

The same small GPT (lesson 12's ``course_utils.models.gpt.GPT``: learned positions, pre-LN blocks,
tied readout) is built three times, each block's self-attention swapped for one of
:data:`VARIANTS`, all rotating queries and keys with RoPE:

- ``"MHA"``: multi-head attention, ``2 · num_heads · d_k`` numbers per token and layer;
- ``"GQA"``: grouped-query attention with ``num_kv_heads`` key/value heads;
- ``"MLA"``: multi-head latent attention whose ``kv_latent_dim + rope_dim`` equals GQA's
  ``2 · num_kv_heads · d_k``: the same cache budget.

Each is trained on the same character stream with the same batches (one generator seed per
seed of the run) and scored on held-out windows. :func:`train_at_budget` returns the
validation losses; the lesson reads them, whatever they say.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_utils.checks import (
    require_instance,
    require_int_tensor,
    require_one_of,
    require_positive_int,
    require_seed,
)
from course_utils.language import _
from course_utils.models.gpt import GPT, train_on_text
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.latent_attention import MultiHeadLatentAttention

VARIANTS = ("MHA", "GQA", "MLA")
# The sizes of the experiment: lesson 12's GPT at half its depth of training.
D_MODEL, NUM_HEADS, NUM_LAYERS, MAX_LEN = 64, 4, 2, 32
NUM_KV_HEADS, ROPE_DIM = 2, 8
ROPE_BASE = 10000.0


def budget_attention(variant: str, d_model: int = D_MODEL, num_heads: int = NUM_HEADS,
                     num_kv_heads: int = NUM_KV_HEADS, rope_dim: int = ROPE_DIM):
    """One attention layer of ``variant`` ("MHA", "GQA" or "MLA"), all with RoPE and no biases.

    GQA has ``num_kv_heads`` key/value heads; MLA keeps a latent of ``2 · num_kv_heads · d_k -
    rope_dim`` numbers plus its ``rope_dim`` RoPE key, GQA's cache budget exactly.

    Used in lesson 18.
    """
    require_one_of("variant", variant, VARIANTS)
    require_positive_int("num_kv_heads", num_kv_heads)
    require_positive_int("rope_dim", rope_dim)
    d_k = d_model // require_positive_int("num_heads", num_heads)
    if variant == "MHA":
        return MultiHeadAttention(d_model, num_heads, bias=False, rope_base=ROPE_BASE)
    if variant == "GQA":
        return MultiHeadAttention(d_model, num_heads, bias=False, num_kv_heads=num_kv_heads,
                                  rope_base=ROPE_BASE)
    budget = 2 * num_kv_heads * d_k
    if budget <= rope_dim:
        raise ValueError(_(
            "GQA's budget 2 · num_kv_heads · d_k = {budget} leaves no room for a latent next to "
            "rope_dim={rope_dim}"
        ).format(budget=budget, rope_dim=rope_dim))
    return MultiHeadLatentAttention(d_model, num_heads, budget - rope_dim, rope_dim,
                                    rope_base=ROPE_BASE)


def budget_gpt(variant: str, vocab_size: int, seed: int) -> GPT:
    """Lesson 12's GPT with its attention swapped for ``variant``'s, initialised from ``seed``.

    Used in lesson 18.
    """
    require_seed("seed", seed)
    torch.manual_seed(seed)
    model = GPT(vocab_size, max_len=MAX_LEN, d_model=D_MODEL, num_heads=NUM_HEADS,
                num_layers=NUM_LAYERS)
    for block in model.blocks:
        block.self_attn = budget_attention(variant)
    return model


def validation_loss(model: GPT, tokens) -> float:
    """Mean next-token cross-entropy over every non-overlapping window of ``tokens``.

    Used in lesson 18.
    """
    require_instance("model", model, GPT, "a course_utils.models.gpt.GPT")
    tokens = require_int_tensor("tokens", tokens, "(num_tokens,)", "token ids")
    windows = (len(tokens) - 1) // model.max_len
    if windows < 1:
        raise ValueError(_(
            "{name} (num_tokens,) = {shape} is shorter than one window of max_len + 1 = "
            "{needed} tokens"
        ).format(name="tokens", shape=tuple(tokens.shape), needed=model.max_len + 1))
    inputs = tokens[:windows * model.max_len].view(windows, model.max_len)
    targets = tokens[1:windows * model.max_len + 1].view(windows, model.max_len)
    with torch.no_grad():
        logits = model(inputs)  # (windows, max_len, vocab_size)
    return F.cross_entropy(logits.reshape(-1, model.vocab_size), targets.reshape(-1)).item()


def train_at_budget(train_tokens, validation_tokens, vocab_size: int, run_seeds, steps: int,
                    batch_size: int = 32, lr: float = 5e-3) -> dict[str, list[float]]:
    """Train every variant once per seed of ``run_seeds``; return their validation losses.

    Seed ``s`` gives every variant the same batches (a generator seeded with ``s``) and its
    own initial weights (``torch.manual_seed(s)``), so the variants differ only in their
    attention. Returns ``{variant: [loss for each seed]}``.

    Used in lesson 18.
    """
    run_seeds = tuple(require_seed(_("a seed of run_seeds"), seed) for seed in run_seeds)
    if not run_seeds:
        raise ValueError(_("run_seeds should hold at least one seed, got none"))
    require_positive_int("steps", steps)
    losses = {variant: [] for variant in VARIANTS}
    for seed in run_seeds:
        for variant in VARIANTS:
            model = budget_gpt(variant, vocab_size, seed)
            train_on_text(model, train_tokens, steps, torch.Generator().manual_seed(seed),
                          batch_size=batch_size, lr=lr)
            losses[variant].append(validation_loss(model, validation_tokens))
    return losses
