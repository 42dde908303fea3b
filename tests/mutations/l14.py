"""Lesson 14's exercises: mutation tables of wrong and right answers (run by test_exercises.py)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from course_utils.exercises.l14 import expand_kv_heads, rms_norm, rope_attention_weights
from course_utils.nn.masks import causal_mask
from course_utils.nn.positions import apply_rope
from tests.support.exercise_checks import Mutations


# ------------------------------------------------------------------ RMSNorm
def _layer_norm(x, weight, eps):
    return F.layer_norm(x, x.shape[-1:], weight=weight, eps=eps)


def _std(x, weight, eps):
    return weight * x / (x.std(-1, keepdim=True) + eps)


def _eps_outside(x, weight, eps):
    return weight * x / (x.square().mean(-1, keepdim=True).sqrt() + eps)


def _no_eps(x, weight, eps):
    return weight * x / x.square().mean(-1, keepdim=True).sqrt()


def _first_axis(x, weight, eps):
    return weight * x / (x.square().mean(0, keepdim=True) + eps).sqrt()


def _whole_tensor(x, weight, eps):
    return weight * x / (x.square().mean() + eps).sqrt()


def _no_weight(x, weight, eps):
    return x / (x.square().mean(-1, keepdim=True) + eps).sqrt()


def _no_sqrt(x, weight, eps):
    return weight * x / (x.square().mean(-1, keepdim=True) + eps)


def _sum_of_squares(x, weight, eps):
    return weight * x / (x.square().sum(-1, keepdim=True) + eps).sqrt()


def _half_precision(x, weight, eps):
    return (weight * x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)).half()


def _rsqrt(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _torch_functional(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight=weight, eps=eps)


def _numpy(x, weight, eps):
    a = x.numpy()
    return weight.numpy() * a / np.sqrt((a**2).mean(axis=-1, keepdims=True) + eps)


def _float32_norm(x, weight, eps):
    root = torch.linalg.vector_norm(x.float(), dim=-1, keepdim=True) / math.sqrt(x.shape[-1])
    return weight.float() * x.float() / torch.sqrt(root**2 + eps)


# ------------------------------------------------------------------ the GQA head mapping
def _tiled(k, num_heads):
    return k.repeat(1, num_heads // k.shape[1], 1, 1)


def _reversed_heads(k, num_heads):
    return k.repeat_interleave(num_heads // k.shape[1], dim=1).flip(1)


def _averaged(k, num_heads):
    return k.mean(1, keepdim=True).expand(-1, num_heads, -1, -1)


def _head_zero(k, num_heads):
    return k[:, :1].expand(-1, num_heads, -1, -1)


def _too_many(k, num_heads):
    return k.repeat_interleave(num_heads, dim=1)


def _along_positions(k, num_heads):
    return k.repeat_interleave(num_heads // k.shape[1], dim=2)


def _along_features(k, num_heads):
    return k.repeat_interleave(num_heads // k.shape[1], dim=-1)


def _expand_reshape(k, num_heads):
    batch, num_kv_heads, seq_len, d_k = k.shape
    group = num_heads // num_kv_heads
    return k[:, :, None].expand(batch, num_kv_heads, group, seq_len, d_k).reshape(
        batch, num_heads, seq_len, d_k)


def _index_select(k, num_heads):
    group = num_heads // k.shape[1]
    return k.index_select(1, torch.arange(num_heads) // group)


def _loop(k, num_heads):
    group = num_heads // k.shape[1]
    return torch.stack([k[:, h // group] for h in range(num_heads)], dim=1)


def _numpy_repeat(k, num_heads):
    return np.repeat(k.numpy(), num_heads // k.shape[1], axis=1)


# ------------------------------------------------------------------ one RoPE'd attention step
def _step(x, attn, rope_q=True, rope_k=True, base=None, tiled=False, scale=None,
          mask="before", softmax_dim=-1, start=0):
    batch, seq_len = x.shape[:2]
    d_k, group = attn.d_k, attn.num_heads // attn.num_kv_heads
    q = attn.w_q(x).view(batch, seq_len, attn.num_heads, d_k).transpose(1, 2)
    k = attn.w_k(x).view(batch, seq_len, attn.num_kv_heads, d_k).transpose(1, 2)
    positions = torch.arange(start, start + seq_len)
    base = attn.rope_base if base is None else base
    q = apply_rope(q, positions, base) if rope_q else q
    k = apply_rope(k, positions, base) if rope_k else k
    k = k.repeat(1, group, 1, 1) if tiled else k.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d_k) if scale is None else scale)
    allowed = causal_mask(seq_len)
    if mask == "before":
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = scores.softmax(softmax_dim)
    return weights * allowed if mask == "after" else weights


def _no_rope(x, attn):
    return _step(x, attn, rope_q=False, rope_k=False)


def _queries_only(x, attn):
    return _step(x, attn, rope_k=False)


def _keys_only(x, attn):
    return _step(x, attn, rope_q=False)


def _default_base(x, attn):
    return _step(x, attn, base=10000.0)


def _from_one(x, attn):
    return _step(x, attn, start=1)


def _tiled_heads(x, attn):
    return _step(x, attn, tiled=True)


def _d_model_scale(x, attn):
    return _step(x, attn, scale=math.sqrt(attn.d_model))


def _unscaled(x, attn):
    return _step(x, attn, scale=1.0)


def _no_mask(x, attn):
    return _step(x, attn, mask=None)


def _mask_after(x, attn):
    return _step(x, attn, mask="after")


def _over_queries(x, attn):
    return _step(x, attn, softmax_dim=-2)


def _rope_by_hand(x, attn):  # the rotation written out, the rest with torch's functional pieces
    batch, seq_len = x.shape[:2]
    d_k = attn.d_k
    q = attn.w_q(x).unflatten(-1, (attn.num_heads, d_k)).transpose(1, 2)
    k = attn.w_k(x).unflatten(-1, (attn.num_kv_heads, d_k)).transpose(1, 2)
    theta = attn.rope_base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * theta  # (seq_len, d_k / 2)
    cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)

    def rotate(t):
        half = torch.cat([-t[..., d_k // 2:], t[..., :d_k // 2]], dim=-1)
        return t * cos + half * sin

    q, k = rotate(q), rotate(k).repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / d_k**0.5
    return F.softmax(scores + torch.full((seq_len, seq_len), float("-inf")).triu(1), dim=-1)


def _per_head_loop(x, attn):
    batch, seq_len = x.shape[:2]
    d_k, group = attn.d_k, attn.num_heads // attn.num_kv_heads
    positions = torch.arange(seq_len)
    rows = []
    for h in range(attn.num_heads):
        q = apply_rope(attn.w_q(x)[..., h * d_k:(h + 1) * d_k], positions, attn.rope_base)
        kv = h // group
        k = apply_rope(attn.w_k(x)[..., kv * d_k:(kv + 1) * d_k], positions, attn.rope_base)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
        rows.append(torch.where(causal_mask(seq_len), scores, -torch.inf).softmax(-1))
    return torch.stack(rows, dim=1)


def _float32(x, attn):
    return _step(x.float(), attn.float()).double()


def _numpy_result(x, attn):
    with torch.no_grad():
        return _step(x, attn).numpy()


def _rms_in_float16_cast_back(x, weight, eps):
    h = x.half()  # the right formula, in half precision
    return (weight.half() * h * torch.rsqrt(h.float().square().mean(-1, keepdim=True)
                                            .half() + eps)).to(x.dtype)


def _eight_features_written_in(x, weight, eps):
    return weight * x / torch.sqrt(x.square().sum(-1, keepdim=True) / 8 + eps)


def _rms_over_the_first_row(x, weight, eps):
    first = x.reshape(-1, x.shape[-1])[:1]  # the first position's mean square for all
    return weight * x / torch.sqrt(first.square().mean() + eps)


def _rms_by_einsum(x, weight, eps):
    mean_square = torch.einsum("...d,...d->...", x, x)[..., None] / x.shape[-1]
    return x * weight / (mean_square + eps).sqrt()


def _group_for_the_counts_tried(k, num_heads):
    group = {9: 3, 8: 4, 4: num_heads // k.shape[1]}[num_heads]
    return k.repeat_interleave(group, dim=1)


def _by_index_of_each_query_head(k, num_heads):
    heads = torch.arange(num_heads) * k.shape[1] // num_heads  # h // group
    return k[:, heads]


def _exp_without_the_max(x, attn):
    batch, seq_len = x.shape[:2]
    d_k, group = attn.d_k, attn.num_heads // attn.num_kv_heads
    positions = torch.arange(seq_len)
    q = apply_rope(attn.w_q(x).view(batch, seq_len, -1, d_k).transpose(1, 2), positions,
                   attn.rope_base)
    k = apply_rope(attn.w_k(x).view(batch, seq_len, -1, d_k).transpose(1, 2), positions,
                   attn.rope_base).repeat_interleave(group, dim=1)
    scores = (q @ k.mT / math.sqrt(d_k)).masked_fill(~causal_mask(seq_len), -math.inf)
    exps = scores.exp()  # overflows once a score is in the hundreds
    return exps / exps.sum(-1, keepdim=True)


def _rope_small_angles(x, attn):  # cos a ≈ 1, sin a ≈ a: fine for a few positions only
    batch, seq_len = x.shape[:2]
    d_k, group = attn.d_k, attn.num_heads // attn.num_kv_heads
    theta = attn.rope_base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * theta
    cos, sin = (1 - angles ** 2 / 2).repeat(1, 2), angles.repeat(1, 2)

    def rotate(t):
        return t * cos + torch.cat([-t[..., d_k // 2:], t[..., :d_k // 2]], dim=-1) * sin

    q = rotate(attn.w_q(x).view(batch, seq_len, -1, d_k).transpose(1, 2))
    k = rotate(attn.w_k(x).view(batch, seq_len, -1, d_k).transpose(1, 2))
    scores = q @ k.repeat_interleave(group, dim=1).mT / math.sqrt(d_k)
    return scores.masked_fill(~causal_mask(seq_len), -math.inf).softmax(-1)


def _finite_fill(x, attn):
    batch, seq_len = x.shape[:2]
    d_k, group = attn.d_k, attn.num_heads // attn.num_kv_heads
    positions = torch.arange(seq_len)
    q = apply_rope(attn.w_q(x).view(batch, seq_len, -1, d_k).transpose(1, 2), positions,
                   attn.rope_base)
    k = apply_rope(attn.w_k(x).view(batch, seq_len, -1, d_k).transpose(1, 2), positions,
                   attn.rope_base).repeat_interleave(group, dim=1)
    scores = (q @ k.mT / math.sqrt(d_k)).masked_fill(~causal_mask(seq_len), -30.0)
    return scores.softmax(-1)


MUTATIONS = {
    rms_norm: Mutations(
        wrong=[
            ("LayerNorm", _layer_norm, "LayerNorm"),
            ("standard deviation", _std, "standard deviation"),
            ("eps outside the root", _eps_outside, "inside the square root"),
            ("no eps", _no_eps, "left out eps"),
            ("first axis", _first_axis, "wrong axis"),
            ("whole tensor", _whole_tensor, "whole tensor"),
            ("no weight", _no_weight, "learned weight"),
            ("no square root", _no_sqrt, "square root"),
            ("sum of squares", _sum_of_squares, "sum of squares"),
            ("float16", _half_precision, "float16"),
            ("computed in float16, cast back", _rms_in_float16_cast_back,
             "right to about 3 significant digits only"),
            ("d_model = 8 written in", _eight_features_written_in, "rms_norm(x (4, 6)"),
            ("the first position's mean square for all", _rms_over_the_first_row,
             "values are off"),
        ],
        right=[
            ("rsqrt", _rsqrt),
            ("F.rms_norm", _torch_functional),
            ("numpy", _numpy),
            ("float32 via the norm", _float32_norm),
            ("einsum", _rms_by_einsum),
        ],
    ),
    expand_kv_heads: Mutations(
        wrong=[
            ("tiled", _tiled, "tiled"),
            ("reversed", _reversed_heads, "reverse order"),
            ("averaged", _averaged, "averaged"),
            ("head 0 for all", _head_zero, "key/value head 0"),
            ("repeated num_heads times", _too_many, "along the heads axis"),
            ("along the positions", _along_positions, "along the heads axis"),
            ("along the features", _along_features, "along the heads axis"),
            ("group sizes of the counts tried", _group_for_the_counts_tried,
             "your code raised KeyError"),
        ],
        right=[
            ("expand and reshape", _expand_reshape),
            ("index_select", _index_select),
            ("loop", _loop),
            ("numpy repeat", _numpy_repeat),
            ("an index per query head", _by_index_of_each_query_head),
        ],
    ),
    rope_attention_weights: Mutations(
        wrong=[
            ("no RoPE", _no_rope, "left out RoPE"),
            ("queries only", _queries_only, "queries only"),
            ("keys only", _keys_only, "keys only"),
            ("default base", _default_base, "attn.rope_base"),
            ("tiled key heads", _tiled_heads, "repeat_interleave"),
            ("sqrt(d_model)", _d_model_scale, "sqrt(d_model)"),
            ("unscaled", _unscaled, "did not scale"),
            ("no mask", _no_mask, "causal mask"),
            ("mask after softmax", _mask_after, "after the softmax"),
            ("softmax over queries", _over_queries, "over the queries"),
            ("exp without subtracting the max", _exp_without_the_max,
             "when the scores are in the thousands"),
            ("RoPE with small-angle cos and sin", _rope_small_angles, "values are off"),
            ("a finite fill of -30", _finite_fill, "values are off"),
        ],
        right=[
            ("RoPE by hand", _rope_by_hand),
            ("loop over heads", _per_head_loop),
            ("positions from 1: RoPE sees only offsets", _from_one),
            ("float32", _float32),
            ("numpy result", _numpy_result),
        ],
    ),
}
