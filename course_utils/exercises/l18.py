"""Lesson 18 exercises: the absorbed query, a model's cache bytes, and GQA -> MLA parameters."""

from __future__ import annotations

import math

import torch

from course_utils.data.model_configs import (
    DEEPSEEK_V3,
    LLAMA_3_8B,
    SMOLLM2_135M,
    ModelConfig,
)
from course_utils.exercises import (
    Exercise,
    Incorrect,
    as_number,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
    is_close,
    reject_half_precision,
)
from course_utils.language import N_, _
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.latent_attention import MultiHeadLatentAttention

# --- Exercise 1: the absorbed query ------------------------------------------------------------

# (batch, heads, n_q, d_k, kv_latent_dim): kv_latent_dim != d_k everywhere, one query (a decode
# step) in the second, the latent narrower than a head in the second too.
_ABSORB_SIZES = ((2, 3, 4, 8, 10), (1, 4, 1, 6, 5), (3, 2, 5, 4, 12))


def _absorbed_query_reference(q, w_uk):
    """q (batch, heads, n_q, d_k), w_uk (heads·d_k, kv_latent_dim) -> (.., kv_latent_dim)."""
    heads, d_k = q.shape[1], q.shape[-1]
    per_head = w_uk.view(heads, d_k, w_uk.shape[-1])  # head h owns rows h·d_k .. (h+1)·d_k - 1
    return q @ per_head  # (batch, heads, n_q, kv_latent_dim)


def _check_absorbed_query(answer):
    generator = torch.Generator().manual_seed(18)
    for batch, heads, n_q, d_k, latent_dim in _ABSORB_SIZES:
        q = 20 * torch.randn(batch, heads, n_q, d_k, generator=generator)  # scores in hundreds
        w_uk = torch.randn(heads * d_k, latent_dim, generator=generator)
        latent = torch.randn(batch, 7, latent_dim, generator=generator)  # 7 cached tokens
        got = attempt(answer, q, w_uk)
        want = _absorbed_query_reference(q, w_uk)
        what = _("the absorbed query for heads={heads}, d_k={d_k}, kv_latent_dim={c}").format(
            heads=heads, d_k=d_k, c=latent_dim)
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (batch, n_q, latent_dim):
            raise Incorrect(_(
                "{what} lost the heads axis: each head folds its own block of w_uk, so the "
                "result is (batch, heads, n_q, kv_latent_dim)").format(what=what))
        expect_shape(got, want.shape, what)
        if not got.is_floating_point():
            raise Incorrect(_("{what} should be floating-point, got {dtype}").format(
                what=what, dtype=got.dtype))
        expect_finite(got, what)
        reject_half_precision(got, want, what)
        blocks = w_uk.view(heads, d_k, latent_dim)
        if is_close(got, want / math.sqrt(d_k)):
            raise Incorrect(_(
                "{what} is divided by sqrt(d_k): leave the scale to the scores, the absorbed "
                "query only replaces the key map").format(what=what))
        if heads > 1 and is_close(got, q @ w_uk.view(d_k, heads, latent_dim).transpose(0, 1)):
            raise Incorrect(_(
                "{what} takes every heads-th row of w_uk for a head: its rows come head by head, "
                "head h owns rows h·d_k .. (h+1)·d_k - 1, so w_uk.view(heads, d_k, "
                "kv_latent_dim)").format(what=what))
        if heads > 1 and is_close(got, q @ blocks[0]):
            raise Incorrect(_(
                "{what} folds head 0's block into every head: each head has its own W_UK "
                "block").format(what=what))
        if heads > 1 and is_close(got, (q @ blocks).sum(dim=1, keepdim=True).expand_as(want)):
            raise Incorrect(_(
                "{what} adds the heads together: each head keeps its own absorbed "
                "query").format(what=what))
        # What the fold is for: the absorbed query read against the latent gives the scores
        # of the query against the rebuilt keys.
        keys = (latent @ w_uk.T).view(batch, 7, heads, d_k).transpose(1, 2)  # (b, h, 7, d_k)
        scores = q @ keys.transpose(-2, -1)  # (batch, heads, n_q, 7)
        expect_close(got.double() @ latent[:, None].double().transpose(-2, -1), scores,
                     _("your absorbed query · the latent (against q · the rebuilt keys)"),
                     atol=1e-3)
        expect_close(got, want, what, atol=1e-4)


absorbed_query = Exercise(
    title=N_("fold W_UK into the query"),
    checker=_check_absorbed_query,
    reference=_absorbed_query_reference,
    hints=(
        N_("Head h's key is latent @ W_UK[h]ᵀ with W_UK[h] (d_k, kv_latent_dim), so q · key = "
           "(q @ W_UK[h]) · latent."),
        N_("w_uk is nn.Linear's weight (heads·d_k, kv_latent_dim): w_uk.view(heads, d_k, "
           "kv_latent_dim) gives each head its block, and q @ that block broadcasts over "
           "the batch."),
    ),
)


# --- Exercise 2: the cache bytes of a configuration -----------------------------------------

_TOY_MLA = ModelConfig(name="a small MLA", num_layers=5, d_model=96, num_heads=6,
                       num_kv_heads=6, head_dim=16, max_context=64, layer_windows=(None,) * 5,
                       sources={"made up": "for the exercise"}, kv_latent_dim=40, rope_dim=8)
_TOY_MQA = ModelConfig(name="a small MQA", num_layers=3, d_model=64, num_heads=4,
                       num_kv_heads=1, head_dim=16, max_context=64, layer_windows=(None,) * 3,
                       sources={"made up": "for the exercise"})
_BYTES_CASES = ((LLAMA_3_8B, 4), (_TOY_MLA, 2), (SMOLLM2_135M, 1), (_TOY_MQA, 2),
                (DEEPSEEK_V3, 2))


def _cache_bytes_reference(config, bytes_per_number):
    """Bytes one token adds to the cache of every layer (full attention)."""
    if config.kv_latent_dim is not None:  # latent attention: a latent and a RoPE key
        per_layer = config.kv_latent_dim + config.rope_dim
    else:  # a key and a value per key/value head
        per_layer = 2 * config.num_kv_heads * config.head_dim
    return config.num_layers * per_layer * bytes_per_number


def _check_cache_bytes(answer):
    for config, size in _BYTES_CASES:
        got = as_number(attempt(answer, config, size), _("the bytes per token"))
        want = _cache_bytes_reference(config, size)
        if got == want:
            continue
        where = _("for {name} at {size} bytes per number").format(name=config.name, size=size)
        layers, latent = config.num_layers, config.uses_latent
        per_kv_head = config.head_dim * layers * size
        if got == want * 8:
            raise Incorrect(_("{where} you count bits: a byte is 8 bits, and bytes_per_number "
                              "is already in bytes").format(where=where))
        if size > 1 and got == want / size:
            raise Incorrect(_("{where} you count numbers: multiply by "
                              "bytes_per_number").format(where=where))
        if layers > 1 and got == want / layers:
            raise Incorrect(_("{where} you count one layer: every layer keeps its "
                              "own").format(where=where))
        if not latent and got == want / 2:
            raise Incorrect(_("{where} you count the keys only: each key/value head keeps a key "
                              "and a value").format(where=where))
        if not latent and got == 2 * config.num_heads * per_kv_head:
            raise Incorrect(_("{where} you count every query head: only the num_kv_heads "
                              "key/value heads are cached").format(where=where))
        if latent and got == 2 * want:
            raise Incorrect(_("{where} you count the latent twice: it is stored once, and keys "
                              "and values are both rebuilt from it").format(where=where))
        if latent and got == layers * config.kv_latent_dim * size:
            raise Incorrect(_("{where} the shared RoPE key is missing: each token keeps "
                              "kv_latent_dim + rope_dim numbers per layer").format(where=where))
        if latent and got == want * config.num_heads:
            raise Incorrect(_("{where} you keep a latent per head: one latent and one RoPE key "
                              "serve every head").format(where=where))
        if latent and got == 2 * config.num_kv_heads * per_kv_head:
            raise Incorrect(_("{where} you count keys and values as if {name} cached them: it "
                              "caches a latent and a RoPE key instead").format(
                                  where=where, name=config.name))
        raise Incorrect(_("{where} you count {got:.0f} bytes; the cache keeps "
                          "{want}").format(where=where, got=got, want=want))


cache_bytes = Exercise(
    title=N_("count a model's cache bytes per token"),
    checker=_check_cache_bytes,
    reference=_cache_bytes_reference,
    hints=(
        N_("Without a latent: every layer keeps a key and a value of head_dim numbers per "
           "key/value head."),
        N_("With a latent (config.kv_latent_dim is not None): every layer keeps kv_latent_dim + "
           "rope_dim numbers. Then multiply by num_layers and bytes_per_number."),
    ),
)


# --- Exercise 3: parameters from GQA to MLA ----------------------------------------------------

# (d_model, num_heads, num_kv_heads, kv_latent_dim, rope_dim): distinct numbers throughout.
_PARAM_SIZES = ((64, 4, 2, 56, 8), (96, 6, 3, 40, 4), (48, 8, 1, 20, 6))


def _attention_parameters_reference(d_model, num_heads, num_kv_heads, kv_latent_dim,
                                    rope_dim):
    """(GQA's, MLA's) parameter counts for one layer, no biases."""
    d_k = d_model // num_heads
    gqa = 2 * d_model * d_model + 2 * d_model * num_kv_heads * d_k  # W_Q, W_O; W_K, W_V
    mla = (2 * d_model * d_model  # W_Q and W_O
           + d_model * num_heads * rope_dim  # W_QR: a RoPE query per head
           + d_model * kv_latent_dim + kv_latent_dim  # W_DKV and the latent's RMSNorm
           + 2 * kv_latent_dim * d_model  # W_UK and W_UV
           + d_model * rope_dim)  # W_KR: one RoPE key for every head
    return gqa, mla


def _counted(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _check_attention_parameters(answer):
    for d, h, kv, c, r in _PARAM_SIZES:
        result = attempt(answer, d, h, kv, c, r)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise Incorrect(_("return a pair of numbers: (GQA's count, MLA's count)"))
        gqa = as_number(result[0], _("GQA's count"))
        mla = as_number(result[1], _("MLA's count"))
        want_gqa = _counted(MultiHeadAttention(d, h, bias=False, num_kv_heads=kv))
        want_mla = _counted(MultiHeadLatentAttention(d, h, c, r))
        where = _("for d_model={d}, num_heads={h}, num_kv_heads={kv}, kv_latent_dim={c}, "
                  "rope_dim={r}").format(d=d, h=h, kv=kv, c=c, r=r)
        d_k = d // h
        if (gqa, mla) == (want_mla, want_gqa):
            raise Incorrect(_("{where} the pair is swapped: GQA's count first").format(
                where=where))
        if gqa != want_gqa:
            if gqa == 4 * d * d:
                raise Incorrect(_("{where} GQA's count is multi-head attention's: W_K and W_V "
                                  "make only num_kv_heads · d_k outputs").format(where=where))
            if gqa == want_gqa + 2 * d + 2 * kv * d_k:
                raise Incorrect(_("{where} you count biases: these layers have "
                                  "none").format(where=where))
            raise Incorrect(_("{where} GQA has {want} parameters, you count {got:.0f}").format(
                where=where, want=want_gqa, got=gqa))
        if mla == want_mla:
            continue
        if mla == want_mla - c:
            raise Incorrect(_("{where} the latent's RMSNorm is missing: it has kv_latent_dim "
                              "gains").format(where=where))
        if mla == want_mla - d * h * r:
            raise Incorrect(_("{where} W_QR is missing: every head has a RoPE query of "
                              "rope_dim").format(where=where))
        if mla == want_mla + d * (h - 1) * r:
            raise Incorrect(_("{where} you give every head its own RoPE key: one W_KR of "
                              "d_model · rope_dim serves them all").format(where=where))
        if mla == want_mla - c * d:
            raise Incorrect(_("{where} one up-projection is missing: W_UK rebuilds the keys "
                              "and W_UV the values").format(where=where))
        if mla == want_mla - d * d:
            raise Incorrect(_("{where} one d_model × d_model map is missing: MLA keeps W_Q and "
                              "W_O").format(where=where))
        raise Incorrect(_("{where} MLA has {want} parameters, you count {got:.0f}").format(
            where=where, want=want_mla, got=mla))


attention_parameters = Exercise(
    title=N_("count the parameters from GQA to MLA"),
    checker=_check_attention_parameters,
    reference=_attention_parameters_reference,
    hints=(
        N_("GQA: W_Q and W_O are d_model × d_model; W_K and W_V map d_model to "
           "num_kv_heads · d_k."),
        N_("MLA: W_Q and W_O as before, W_QR (d_model -> num_heads · rope_dim), W_DKV (d_model "
           "-> kv_latent_dim) and its RMSNorm (kv_latent_dim gains), W_UK and W_UV "
           "(kv_latent_dim -> d_model), W_KR (d_model -> rope_dim)."),
    ),
)
