"""Lesson 18's exercises: mutation tables (walked by tests/test_exercises.py) and references."""

from __future__ import annotations

import numpy as np
import torch

from course_utils.data.model_configs import cache_bytes_per_token
from course_utils.exercises.l18 import absorbed_query, attention_parameters, cache_bytes
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.latent_attention import MultiHeadLatentAttention
from tests.support.exercise_checks import Mutations

# --- Exercise 1: fold W_UK into the query ------------------------------------------------------

def _blocks(q, w_uk):
    return w_uk.view(q.shape[1], q.shape[-1], w_uk.shape[-1])


def _loop_over_heads(q, w_uk):
    d_k = q.shape[-1]
    return torch.stack([q[:, h] @ w_uk[h * d_k:(h + 1) * d_k] for h in range(q.shape[1])], dim=1)


def _einsum(q, w_uk):
    return torch.einsum("bhqd,hdc->bhqc", q, _blocks(q, w_uk))


def _through_the_transpose(q, w_uk):  # (W_UKᵀ per head) transposed back
    per_head = w_uk.T.reshape(w_uk.shape[-1], q.shape[1], q.shape[-1]).permute(1, 2, 0)
    return q @ per_head


ABSORB_WRONG = [
    ("divided by sqrt(d_k)", lambda q, w: absorbed_query.reference(q, w) / q.shape[-1] ** 0.5,
     "divided by sqrt(d_k)"),
    ("rows split the wrong way", lambda q, w: q @ w.view(q.shape[-1], q.shape[1], -1)
     .transpose(0, 1), "every heads-th row"),
    ("head 0's block for all", lambda q, w: q @ _blocks(q, w)[0], "head 0's block"),
    ("heads added", lambda q, w: (q @ _blocks(q, w)).sum(1, keepdim=True).expand(
        *q.shape[:-1], w.shape[-1]), "adds the heads together"),
    ("heads merged", lambda q, w: q.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1) @ w,
     "lost the heads axis"),
    ("the content query returned", lambda q, w: q, "should have shape"),
    ("in float16", lambda q, w: absorbed_query.reference(q, w).half(),
     "only about 3 significant digits"),
    ("heads reversed", lambda q, w: q @ _blocks(q, w).flip(0), "your absorbed query · the latent"),
    ("NaN", lambda q, w: absorbed_query.reference(q, w) * float("nan"), "contains NaN"),
    ("in place", lambda q, w: q.mul_(2.0) @ _blocks(q, w) / 2, "in place"),
]

ABSORB_RIGHT = [
    ("a loop over heads", _loop_over_heads),
    ("einsum", _einsum),
    ("through the transpose", _through_the_transpose),
    ("in float64", lambda q, w: absorbed_query.reference(q.double(), w.double())),
    ("matmul with unsqueeze", lambda q, w: torch.matmul(q, _blocks(q, w).unsqueeze(0))),
]


# --- Exercise 2: a model's cache bytes per token ---------------------------------------------

def _per_layer_then_total(config, size):
    if config.uses_latent:
        return sum(config.kv_latent_dim + config.rope_dim for _ in range(config.num_layers)) * size
    return sum(2 * config.num_kv_heads * config.head_dim for _ in config.layer_windows) * size


def _as_keys_and_values(config, size):
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * size


def _numbers_then_bytes(config, size):
    latent = config.kv_latent_dim
    numbers = (latent + config.rope_dim) if latent else 2 * config.num_kv_heads * config.head_dim
    return float(numbers * config.num_layers * size)


BYTES_WRONG = [
    ("bits", lambda c, s: 8 * cache_bytes.reference(c, s), "you count bits"),
    ("numbers, not bytes", lambda c, s: cache_bytes.reference(c, 1), "you count numbers"),
    ("one layer", lambda c, s: cache_bytes.reference(c, s) // c.num_layers, "one layer"),
    ("keys only", lambda c, s: (cache_bytes.reference(c, s) if c.uses_latent
                                else cache_bytes.reference(c, s) // 2), "keys only"),
    ("query heads", lambda c, s: (cache_bytes.reference(c, s) if c.uses_latent
                                  else 2 * c.num_layers * c.num_heads * c.head_dim * s),
     "every query head"),
    ("latent twice", lambda c, s: cache_bytes.reference(c, s) * (2 if c.uses_latent else 1),
     "latent twice"),
    ("RoPE key forgotten", lambda c, s: (c.num_layers * c.kv_latent_dim * s if c.uses_latent
                                         else cache_bytes.reference(c, s)),
     "shared RoPE key is missing"),
    ("a latent per head", lambda c, s: cache_bytes.reference(c, s) * (
        c.num_heads if c.uses_latent else 1), "latent per head"),
    ("MLA counted as keys and values", _as_keys_and_values, "caches a latent and a RoPE key"),
    ("off by one", lambda c, s: cache_bytes.reference(c, s) + 1, "the cache keeps"),
    ("a string", lambda c, s: "128 KiB", "should be a number"),
]

BYTES_RIGHT = [
    ("the package's function", lambda c, s: cache_bytes_per_token(c, s)),
    ("layer by layer", _per_layer_then_total),
    ("numbers, then bytes, as a float", _numbers_then_bytes),
    ("a numpy integer", lambda c, s: np.int64(cache_bytes.reference(c, s))),
    ("a one-element tensor", lambda c, s: torch.tensor(cache_bytes.reference(c, s))),
]


# --- Exercise 3: parameters from GQA to MLA ----------------------------------------------------

def _ref(d, h, kv, c, r):
    return attention_parameters.reference(d, h, kv, c, r)


def _built(d, h, kv, c, r):
    count = [sum(p.numel() for p in m.parameters())
             for m in (MultiHeadAttention(d, h, bias=False, num_kv_heads=kv),
                       MultiHeadLatentAttention(d, h, c, r))]
    return tuple(count)


def _factored(d, h, kv, c, r):
    d_k = d // h
    return 2 * d * (d + kv * d_k), d * (2 * d + h * r + c + r) + c * (2 * d + 1)


PARAMS_WRONG = [
    ("swapped", lambda *a: _ref(*a)[::-1], "swapped"),
    ("GQA as MHA", lambda d, h, kv, c, r: (4 * d * d, _ref(d, h, kv, c, r)[1]),
     "multi-head attention's"),
    ("biases counted", lambda d, h, kv, c, r: (_ref(d, h, kv, c, r)[0] + 2 * d + 2 * kv * (d // h),
                                               _ref(d, h, kv, c, r)[1]), "biases"),
    ("no RMSNorm", lambda d, h, kv, c, r: (_ref(d, h, kv, c, r)[0], _ref(d, h, kv, c, r)[1] - c),
     "RMSNorm"),
    ("no W_QR", lambda d, h, kv, c, r: (_ref(d, h, kv, c, r)[0],
                                        _ref(d, h, kv, c, r)[1] - d * h * r), "W_QR is missing"),
    ("RoPE key per head", lambda d, h, kv, c, r: (_ref(d, h, kv, c, r)[0],
                                                  _ref(d, h, kv, c, r)[1] + d * (h - 1) * r),
     "its own RoPE key"),
    ("one up-projection", lambda d, h, kv, c, r: (_ref(d, h, kv, c, r)[0],
                                                  _ref(d, h, kv, c, r)[1] - c * d),
     "one up-projection"),
    ("no W_O", lambda d, h, kv, c, r: (_ref(d, h, kv, c, r)[0], _ref(d, h, kv, c, r)[1] - d * d),
     "W_Q and W_O"),
    ("one number", lambda *a: sum(_ref(*a)), "a pair of numbers"),
    ("off by one", lambda d, h, kv, c, r: (_ref(d, h, kv, c, r)[0], _ref(d, h, kv, c, r)[1] + 1),
     "MLA has"),
]

PARAMS_RIGHT = [
    ("built and counted", _built),
    ("factored", _factored),
    ("a list of floats", lambda *a: [float(n) for n in _ref(*a)]),
    ("numpy integers", lambda *a: tuple(np.int64(n) for n in _ref(*a))),
    ("tensors", lambda *a: tuple(torch.tensor(n) for n in _ref(*a))),
]


MUTATIONS = {
    absorbed_query: Mutations(wrong=ABSORB_WRONG, right=ABSORB_RIGHT),
    cache_bytes: Mutations(wrong=BYTES_WRONG, right=BYTES_RIGHT),
    attention_parameters: Mutations(wrong=PARAMS_WRONG, right=PARAMS_RIGHT),
}
