"""Exercises of lesson 14, a modern LLM rebuilt (SmolLM2).

- ``rms_norm``: RMSNorm written from its formula, ``weight * x / sqrt(mean(x**2) + eps)``;
- ``expand_kv_heads``: grouped-query attention's head mapping, each key/value head handed to
  the ``num_heads / num_kv_heads`` neighbouring query heads that share it;
- ``rope_attention_weights``: one attention step of a Llama layer by hand (projections, RoPE
  on queries and keys, shared key/value heads, causal softmax), against the layer's own.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_shape,
    expect_stable,
    is_close,
    reject_low_precision,
)
from course_utils.language import N_, _
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.masks import causal_mask
from course_utils.nn.positions import apply_rope


def _as_tensor(result):
    """A list or NumPy array of numbers as a float64 tensor; anything else unchanged."""
    if isinstance(result, np.ndarray) and result.dtype.kind in "fiu":
        return torch.from_numpy(result.astype(np.float64))
    return result


def _name_the_mistake(result, expected, mistakes, what, atol=1e-5, rtol=1e-4):
    """Raise Incorrect with the message of the first known mistake ``result`` equals.

    ``mistakes`` holds ``(wrong answer or None, message)``; a wrong answer that is the right
    one on this case (None, or equal to ``expected``) is skipped, so no right answer is blamed.
    """
    if is_close(result, expected, atol=atol, rtol=rtol):
        return
    if atol:  # exact answers (positions) have no rounding to blame
        reject_low_precision(result, expected, what)
    for wrong, message in mistakes:
        if (wrong is not None and not is_close(wrong, expected, atol=atol, rtol=rtol)
                and is_close(result, wrong, atol=atol, rtol=rtol)):
            raise Incorrect(message.format(what=what))


# ------------------------------------------------------------------ RMSNorm
def _reference_rms_norm(x, weight, eps):
    mean_square = x.square().mean(dim=-1, keepdim=True)  # (..., 1): over the features
    return weight * x / torch.sqrt(mean_square + eps)  # (..., d_model)


def _rms_cases():
    """(x, weight, eps): non-square shapes, and rows so small that eps matters."""
    generator = torch.Generator().manual_seed(14)
    x = torch.randn(2, 5, 8, dtype=torch.float64, generator=generator) * 3 + 1
    weight = torch.rand(8, dtype=torch.float64, generator=generator) + 0.5
    tiny = torch.randn(4, 6, dtype=torch.float64, generator=generator) * 1e-3
    tiny_weight = torch.rand(6, dtype=torch.float64, generator=generator) + 0.5
    # Then other widths and batches: three sequences of 32 features in the thousands, and one
    # vector alone.
    wide = torch.randn(3, 7, 32, dtype=torch.float64, generator=generator) * 2000
    wide_weight = torch.rand(32, dtype=torch.float64, generator=generator) + 0.5
    vector = torch.randn(5, dtype=torch.float64, generator=generator)
    vector_weight = torch.rand(5, dtype=torch.float64, generator=generator) + 0.5
    return ((x, weight, 1e-5), (tiny, tiny_weight, 1e-5), (x[0], weight, 0.1),
            (wide, wide_weight, 1e-6), (vector, vector_weight, 1e-5))


def _rms_mistakes(x, weight, eps):
    mean_square = x.square().mean(-1, keepdim=True)
    return (
        ((x - x.mean(-1, keepdim=True)) * weight
         / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps), N_(
            "{what}: you subtracted the mean first: that is LayerNorm; RMSNorm divides x itself "
            "by its root mean square and subtracts nothing")),
        (weight * x / (x.std(-1, keepdim=True) + eps), N_(
            "{what}: you divided by the standard deviation; RMSNorm divides by the root mean "
            "square sqrt(mean(x²) + eps), which does not subtract the mean")),
        (weight * x / (torch.sqrt(mean_square) + eps), N_(
            "{what}: eps belongs inside the square root: sqrt(mean(x²) + eps)")),
        (weight * x / torch.sqrt(mean_square), N_(
            "{what}: you left out eps; add it to the mean square, inside the square root")),
        (weight * x / torch.sqrt(x.square().mean(0, keepdim=True) + eps), N_(
            "{what}: you took the mean over the wrong axis; average over the features, the "
            "last dim (dim=-1, keepdim=True)")),
        (weight * x / torch.sqrt(x.square().mean() + eps), N_(
            "{what}: you averaged over the whole tensor; each position is normalised on its "
            "own, over its features (dim=-1)")),
        (x / torch.sqrt(mean_square + eps), N_(
            "{what}: you forgot the learned weight: multiply the normalised x by weight")),
        (weight * x / (mean_square + eps), N_(
            "{what}: you divided by the mean square; take its square root")),
        (weight * x / torch.sqrt(x.square().sum(-1, keepdim=True) + eps), N_(
            "{what}: you divided by the length (a sum of squares); RMSNorm takes the mean of the "
            "squares, so that the result does not grow with d_model")),
    )


def _check_rms_norm(answer):
    for x, weight, eps in _rms_cases():
        what = _("rms_norm(x {shape}, weight, eps={eps})").format(shape=tuple(x.shape), eps=eps)
        result = _as_tensor(attempt(answer, x, weight, eps))
        expected = _reference_rms_norm(x, weight, eps)
        expect_shape(result, expected.shape, what)
        _name_the_mistake(result, expected, _rms_mistakes(x, weight, eps), what)
        expect_close(result, expected, what)


rms_norm = Exercise(
    title=N_("RMSNorm from its formula"),
    checker=_check_rms_norm,
    reference=_reference_rms_norm,
    hints=(
        N_("The mean square of each position's features: x.square().mean(dim=-1, keepdim=True)."),
        N_("Divide x by sqrt(mean square + eps), then multiply by weight. Nothing is subtracted."),
    ),
)


# ------------------------------------------------------------------ the GQA head mapping
def _reference_expand_kv_heads(k, num_heads):
    group = num_heads // k.shape[1]  # query heads per key/value head
    return k.repeat_interleave(group, dim=1)  # (batch, num_heads, seq_len, d_k)


EXPAND_CASES = ((2, 3, 5, 4, 9), (1, 2, 3, 6, 8), (3, 4, 2, 2, 4), (2, 1, 4, 3, 4),
                (2, 8, 3, 2, 32), (1, 5, 2, 3, 15), (3, 6, 1, 1, 12))
# batch, num_kv_heads, seq_len, d_k, num_heads: then group sizes and head counts of other kinds
# (4 of 8, 3 of 5, 2 of 6), so that no special case for the first ones passes


def _expand_mistakes(k, num_heads):
    num_kv_heads = k.shape[1]
    group = num_heads // num_kv_heads
    return (
        (k.repeat(1, group, 1, 1), N_(
            "{what}: your heads are tiled (kv head 0, 1, 2, 0, 1, 2, ...): query head h then "
            "reads key/value head h % num_kv_heads; the heads that share a key/value head are "
            "neighbours, so query head h reads head h // (num_heads / num_kv_heads) "
            "(repeat_interleave, not repeat)")),
        (k.repeat_interleave(group, dim=1).flip(1), N_(
            "{what}: your heads come in reverse order; query head 0 reads key/value head 0")),
        (k.mean(1, keepdim=True).expand(-1, num_heads, -1, -1), N_(
            "{what}: you averaged the key/value heads; each query head reads one of them, "
            "unchanged")),
        (k[:, :1].expand(-1, num_heads, -1, -1), N_(
            "{what}: every query head reads key/value head 0; query head h reads head "
            "h // (num_heads / num_kv_heads)")),
    )


def _check_expand_kv_heads(answer):
    generator = torch.Generator().manual_seed(4)
    for batch, num_kv_heads, seq_len, d_k, num_heads in EXPAND_CASES:
        k = torch.randn(batch, num_kv_heads, seq_len, d_k, generator=generator)
        what = _("expand_kv_heads(k {shape}, num_heads={num_heads})").format(
            shape=tuple(k.shape), num_heads=num_heads)
        result = _as_tensor(attempt(answer, k, num_heads))
        expected = _reference_expand_kv_heads(k, num_heads)
        if isinstance(result, torch.Tensor) and result.dim() == 4 and tuple(result.shape) in (
                (batch, num_kv_heads * num_heads, seq_len, d_k),
                (batch, num_kv_heads, seq_len * num_heads // num_kv_heads, d_k),
                (batch, num_kv_heads, seq_len, d_k * num_heads // num_kv_heads)) \
                and tuple(result.shape) != tuple(expected.shape):
            raise Incorrect(_(
                "{what}: your result has shape {got}; it should be {shape}: each of the "
                "num_kv_heads heads repeated num_heads / num_kv_heads times along the heads "
                "axis (dim 1)").format(what=what, got=tuple(result.shape),
                                       shape=tuple(expected.shape)))
        expect_shape(result, expected.shape, what)
        _name_the_mistake(result, expected, _expand_mistakes(k, num_heads), what, atol=0, rtol=0)
        expect_close(result, expected, what, atol=0, rtol=0)


expand_kv_heads = Exercise(
    title=N_("the GQA head mapping"),
    checker=_check_expand_kv_heads,
    reference=_reference_expand_kv_heads,
    hints=(
        N_("Each key/value head serves group = num_heads // num_kv_heads query heads, and the "
           "heads of a group are neighbours: query head h reads key/value head h // group."),
        N_("k.repeat_interleave(group, dim=1) repeats every head group times in place; "
           "k.repeat(...) would tile them instead."),
    ),
)


# ------------------------------------------------------------------ one RoPE'd attention step
def _reference_rope_attention_weights(x, attn):
    batch, seq_len = x.shape[:2]
    d_k, group = attn.d_k, attn.num_heads // attn.num_kv_heads
    q = attn.w_q(x).view(batch, seq_len, attn.num_heads, d_k).transpose(1, 2)
    k = attn.w_k(x).view(batch, seq_len, attn.num_kv_heads, d_k).transpose(1, 2)
    positions = torch.arange(seq_len)  # token t sits at position t
    q, k = apply_rope(q, positions, attn.rope_base), apply_rope(k, positions, attn.rope_base)
    k = k.repeat_interleave(group, dim=1)  # (batch, num_heads, seq_len, d_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (batch, num_heads, n_q, n_k)
    scores = scores.masked_fill(~causal_mask(seq_len), float("-inf"))
    return scores.softmax(dim=-1)


ATTENTION_CASES = ((2, 7, 24, 6, 2, 100000.0, 0.3), (1, 5, 32, 4, 1, 10000.0, 0.3),
                   (2, 6, 16, 4, 4, 500.0, 0.3), (3, 40, 32, 8, 2, 10000.0, 0.3),
                   (2, 9, 24, 6, 3, 10000.0, 8.0))
# batch, seq_len, d_model, num_heads, num_kv_heads, rope_base, the scale of x: then 40
# positions (angles far from small), and x large enough that the scores are in the thousands


def _attention_layer(d_model, num_heads, num_kv_heads, rope_base, generator):
    layer = MultiHeadAttention(d_model, num_heads, bias=False, num_kv_heads=num_kv_heads,
                               rope_base=rope_base).double().requires_grad_(False)
    for linear in (layer.w_q, layer.w_k, layer.w_v, layer.w_o):
        linear.weight.copy_(torch.randn(linear.weight.shape, dtype=torch.float64,
                                        generator=generator))
    return layer


def _weights_of(x, attn, rope=(True, True), base=None, tiled=False, scale=None, masked=True,
                softmax_dim=-1, mask_after_softmax=False):
    """The layer's weights computed with one step changed (each keyword is one mistake)."""
    batch, seq_len = x.shape[:2]
    d_k, group = attn.d_k, attn.num_heads // attn.num_kv_heads
    base = attn.rope_base if base is None else base
    q = attn.w_q(x).view(batch, seq_len, attn.num_heads, d_k).transpose(1, 2)
    k = attn.w_k(x).view(batch, seq_len, attn.num_kv_heads, d_k).transpose(1, 2)
    positions = torch.arange(seq_len)
    if rope[0]:
        q = apply_rope(q, positions, base)
    if rope[1]:
        k = apply_rope(k, positions, base)
    k = k.repeat(1, group, 1, 1) if tiled else k.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d_k) if scale is None else scale)
    mask = causal_mask(seq_len)
    if masked and not mask_after_softmax:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=softmax_dim)
    return weights.masked_fill(~mask, 0.0) if mask_after_softmax else weights


def _attention_mistakes(x, attn):
    d_model = attn.d_model
    return (
        (_weights_of(x, attn, rope=(False, False)), N_(
            "{what}: you left out RoPE: rotate the queries and the keys by their positions "
            "(apply_rope(q, positions, attn.rope_base), the same for k) before the scores")),
        (_weights_of(x, attn, rope=(True, False)), N_(
            "{what}: you rotated the queries only; rotate the keys too, so that each score "
            "depends on the offset of query and key")),
        (_weights_of(x, attn, rope=(False, True)), N_(
            "{what}: you rotated the keys only; rotate the queries too")),
        (_weights_of(x, attn, base=10000.0), N_(
            "{what}: you used RoPE's default base 10000; this layer has its own, "
            "attn.rope_base")),
        (_weights_of(x, attn, tiled=True), N_(
            "{what}: your key heads are tiled (repeat); query head h reads key/value head "
            "h // (num_heads / num_kv_heads): use repeat_interleave")),
        (_weights_of(x, attn, scale=math.sqrt(d_model)), N_(
            "{what}: you scaled by sqrt(d_model); each head compares vectors of d_k numbers, so "
            "divide by sqrt(d_k)")),
        (_weights_of(x, attn, scale=1.0), N_(
            "{what}: you did not scale the scores; divide them by sqrt(d_k)")),
        (_weights_of(x, attn, masked=False), N_(
            "{what}: you forgot the causal mask: token t may attend to positions 0..t only")),
        (_weights_of(x, attn, mask_after_softmax=True), N_(
            "{what}: you masked after the softmax, so the rows no longer sum to 1; fill the "
            "future scores with -inf before the softmax")),
        (_weights_of(x, attn, softmax_dim=-2), N_(
            "{what}: your softmax runs over the queries; it runs over the keys (dim=-1), so "
            "that each query's weights sum to 1")),
    )


def _check_rope_attention_weights(answer):
    generator = torch.Generator().manual_seed(11)
    for batch, seq_len, d_model, num_heads, num_kv_heads, rope_base, size in ATTENTION_CASES:
        attn = _attention_layer(d_model, num_heads, num_kv_heads, rope_base, generator)
        x = torch.randn(batch, seq_len, d_model, dtype=torch.float64, generator=generator) * size
        what = _("rope_attention_weights(x {shape}, attn with {num_heads} query heads, "
                 "{num_kv_heads} key/value heads, rope_base={base:g})").format(
            shape=tuple(x.shape), num_heads=num_heads, num_kv_heads=num_kv_heads,
            base=rope_base)
        result = _as_tensor(attempt(answer, x, attn))
        with torch.no_grad():
            expected = attn(x, mask=causal_mask(seq_len))[1]  # the layer's own weights
            mistakes = _attention_mistakes(x, attn)
        expect_shape(result, expected.shape, what)
        expect_stable(result, what)
        _name_the_mistake(result, expected, mistakes, what)
        expect_close(result, expected, what)


rope_attention_weights = Exercise(
    title=N_("one RoPE'd attention step"),
    checker=_check_rope_attention_weights,
    reference=_reference_rope_attention_weights,
    hints=(
        N_("q = attn.w_q(x) and k = attn.w_k(x), split into heads: (batch, heads, seq_len, d_k) "
           "with .view(batch, seq_len, heads, attn.d_k).transpose(1, 2); k has "
           "attn.num_kv_heads heads."),
        N_("Rotate both with apply_rope(..., torch.arange(seq_len), attn.rope_base), then give "
           "each query head its key head: k.repeat_interleave(num_heads // num_kv_heads, dim=1)."),
        N_("Scores q @ kᵀ / sqrt(d_k), -inf above the diagonal (causal_mask(seq_len) is True "
           "where a query may attend), softmax over the keys."),
    ),
)
