"""Lesson 04's exercises: mutation tables of wrong and right answers (run by test_exercises.py),
and the references against the package and torch."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from course_utils.exercises.l04 import (
    assemble_multi_head,
    count_attention_parameters,
    merge_heads,
    split_heads,
)
from course_utils.nn import attention
from course_utils.nn.attention import MultiHeadAttention
from tests.support.exercise_checks import Mutations


def _d_k(x, heads):
    return x.shape[-1] // heads


# ------------------------------------------------------------------ split / merge
SPLIT = Mutations(
    wrong=[
        ("no transpose", lambda x, h: x.view(x.shape[0], x.shape[1], h, _d_k(x, h)),
         "transpose(1, 2)"),
        ("reshape straight to heads",
         lambda x, h: x.reshape(x.shape[0], h, x.shape[1], _d_k(x, h)),
         "features of one token end up at several positions"),
        ("interleaved features",
         lambda x, h: x.view(x.shape[0], x.shape[1], _d_k(x, h), h).permute(0, 3, 1, 2),
         "a stride of 3"),
        ("hard-coded three heads", lambda x, h: x.view(x.shape[0], x.shape[1], 3, 4)
         .transpose(1, 2), "split_heads(x (2, 5, 12), 4) should have shape (2, 4, 5, 3)"),
        ("transposed the wrong axes",
         lambda x, h: x.view(x.shape[0], x.shape[1], h, _d_k(x, h)).transpose(2, 3),
         "should have shape (2, 3, 5, 4), got (2, 5, 4, 3)"),
        ("a list of heads", lambda x, h: list(x.chunk(h, dim=-1)), "torch.Tensor, got list"),
        ("d_k = 4 of the first call written in",
         lambda x, h: x.view(x.shape[0], x.shape[1], h, 4).transpose(1, 2),
         "your code raised RuntimeError"),
        ("int dtype", lambda x, h: attention.split_heads(x, h).long(), "floating-point"),
        ("batch 2 written in", lambda x, h: x.view(2, -1, h, _d_k(x, h)).transpose(1, 2),
         "your code raised RuntimeError"),
        ("d_k for the head counts tried", lambda x, h: x.view(
            x.shape[0], x.shape[1], h, {3: 4, 4: 3}[h]).transpose(1, 2),
         "your code raised KeyError"),
        ("the first sequence only", lambda x, h: attention.split_heads(x[:1], h),
         "should have shape (2, 3, 5, 4), got (1, 3, 5, 4)"),
    ],
    right=[
        ("stack of chunks", lambda x, h: torch.stack(x.chunk(h, dim=-1), dim=1)),
        ("unflatten", lambda x, h: x.unflatten(-1, (h, -1)).transpose(1, 2)),
        ("reshape + permute", lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1)
         .permute(0, 2, 1, 3)),
        ("float64", lambda x, h: x.double().view(x.shape[0], x.shape[1], h, -1).transpose(1, 2)),
        ("tensor_split", lambda x, h: torch.stack(torch.tensor_split(x, h, dim=-1), dim=1)),
        ("einsum-free contiguous copy",
         lambda x, h: x.view(x.shape[0], x.shape[1], h, -1).transpose(1, 2).contiguous()),
    ],
)

MERGE = Mutations(
    wrong=[
        ("view after transpose", lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1),
         "no longer contiguous"),
        ("reshape without transpose", lambda x: x.reshape(x.shape[0], x.shape[2], -1),
         "mixes tokens together"),
        ("interleaved heads", lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1),
         "interleaved"),
        ("transpose only", lambda x: x.transpose(1, 2), "concatenated into one feature axis"),
        ("averaged the heads", lambda x: x.mean(dim=1), "should have shape (2, 5, 12)"),
        ("flatten heads and positions", lambda x: x.flatten(1, 2), "should have shape (2, 5, 12)"),
        ("sizes of the first x hard-coded", lambda x: x.transpose(1, 2).reshape(2, 5, 12),
         "for x (3, 4, 2, 5) should have shape (3, 2, 20)"),
        ("d_k = 4 of the first x written in",
         lambda x: x.transpose(1, 2).reshape(x.shape[0], x.shape[2], x.shape[1] * 4),
         "your code raised RuntimeError"),
        ("the first sequence only", lambda x: x[:1].transpose(1, 2).reshape(
            1, x.shape[2], -1), "should have shape (2, 5, 12), got (1, 5, 12)"),
    ],
    right=[
        ("cat of the heads", lambda x: torch.cat(x.unbind(dim=1), dim=-1)),
        ("permute + flatten", lambda x: x.permute(0, 2, 1, 3).flatten(2)),
        ("contiguous + view",
         lambda x: x.transpose(1, 2).contiguous().view(x.shape[0], x.shape[2], -1)),
        ("float64", lambda x: x.double().transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)),
        ("movedim + flatten", lambda x: x.movedim(1, 2).flatten(-2)),
    ],
)


# ------------------------------------------------------------------ the whole module
def _mha(query, key, value, p, num_heads, *, scale="sqrt d_k", dim=-1, transpose=True,
         bias=True, values_from="value", split="view", merge="transpose", w_o=True,
         average=False):
    """A learner's multi-head attention written with einsum, with one switch per mistake."""
    batch_size, n_q, d_model = query.shape
    d_k = d_model // num_heads

    def project(x, name):
        weight = p[f"w_{name}"]
        y = torch.einsum("bnd,ed->bne", x, weight) if transpose else x @ weight
        return y + p[f"b_{name}"] if bias else y

    def heads(x):
        if split == "reshape":
            return x.reshape(batch_size, num_heads, x.shape[1], d_k)
        return x.reshape(batch_size, x.shape[1], num_heads, d_k).permute(0, 2, 1, 3)

    q, k = heads(project(query, "q")), heads(project(key, "k"))
    v = heads(project(key if values_from == "key" else value, "v"))
    divisor = {"sqrt d_k": math.sqrt(d_k), "none": 1.0, "sqrt d_model": math.sqrt(d_model),
               "d_k": d_k}[scale]
    weights = torch.softmax(torch.einsum("bhqd,bhkd->bhqk", q, k) / divisor, dim=dim)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, v)
    out = (out.reshape(batch_size, n_q, d_model) if merge == "reshape"
           else out.permute(0, 2, 1, 3).reshape(batch_size, n_q, d_model))
    out = project(out, "o") if w_o else out
    return out, weights.mean(dim=1) if average else weights


def _wrong(**mistake):
    return lambda query, key, value, p, num_heads: _mha(query, key, value, p, num_heads,
                                                       **mistake)


def _loop_over_heads(query, key, value, p, num_heads):
    d_k = query.shape[-1] // num_heads
    outputs, all_weights = [], []
    for head in range(num_heads):
        rows = slice(head * d_k, (head + 1) * d_k)
        q = query @ p["w_q"][rows].T + p["b_q"][rows]  # (batch, n_q, d_k)
        k = key @ p["w_k"][rows].T + p["b_k"][rows]
        v = value @ p["w_v"][rows].T + p["b_v"][rows]
        scores = q @ k.transpose(1, 2) / d_k ** 0.5
        weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)  # manual softmax
        outputs.append(weights @ v)
        all_weights.append(weights)
    output = torch.cat(outputs, dim=-1) @ p["w_o"].T + p["b_o"]
    return output, torch.stack(all_weights, dim=1)


def _loop_over_heads_stable(query, key, value, p, num_heads):
    d_k = query.shape[-1] // num_heads
    outputs, all_weights = [], []
    for head in range(num_heads):
        rows = slice(head * d_k, (head + 1) * d_k)
        q = query @ p["w_q"][rows].T + p["b_q"][rows]  # (batch, n_q, d_k)
        k = key @ p["w_k"][rows].T + p["b_k"][rows]
        v = value @ p["w_v"][rows].T + p["b_v"][rows]
        scores = q @ k.transpose(1, 2) / d_k ** 0.5
        exp = (scores - scores.amax(dim=-1, keepdim=True)).exp()  # the row's max first
        weights = exp / exp.sum(dim=-1, keepdim=True)
        outputs.append(weights @ v)
        all_weights.append(weights)
    output = torch.cat(outputs, dim=-1) @ p["w_o"].T + p["b_o"]
    return output, torch.stack(all_weights, dim=1)


def _batch_of_two_written_in(query, key, value, p, num_heads):
    output, weights = _mha(query, key, value, p, num_heads)
    return output.reshape(2, *output.shape[1:]), weights


def _first_sequence_only(query, key, value, p, num_heads):
    output, weights = _mha(query[:1], key[:1], value[:1], p, num_heads)
    return (output.expand(query.shape[0], -1, -1),
            weights.expand(query.shape[0], -1, -1, -1))


def _in_float16(query, key, value, p, num_heads):
    p = {name: tensor.half() for name, tensor in p.items()}  # the right formula, in half
    return _mha(query.half(), key.half(), value.half(), p, num_heads)


def _float64_in_place(query, key, value, p, num_heads):
    p = {name: tensor.double() for name, tensor in p.items()}
    query, key, value = query.double(), key.double(), value.double()
    batch_size, n_q, d_model = query.shape
    q = attention.split_heads(nn.functional.linear(query, p["w_q"], p["b_q"]), num_heads)
    k = attention.split_heads(nn.functional.linear(key, p["w_k"], p["b_k"]), num_heads)
    v = attention.split_heads(nn.functional.linear(value, p["w_v"], p["b_v"]), num_heads)
    q.mul_(1 / math.sqrt(d_model // num_heads))  # in place, on the learner's own tensor
    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    output = nn.functional.linear(attention.merge_heads(weights @ v), p["w_o"], p["b_o"])
    return output, weights


def _package_module(query, key, value, p, num_heads):
    module = MultiHeadAttention(query.shape[-1], num_heads).to(query.dtype)
    with torch.no_grad():
        for name in "qkvo":
            getattr(module, f"w_{name}").weight.copy_(p[f"w_{name}"])
            getattr(module, f"w_{name}").bias.copy_(p[f"b_{name}"])
        return module(query, key, value)


def _torch_sdpa(query, key, value, p, num_heads):
    output, weights = _mha(query, key, value, p, num_heads)
    batch_size, n_q, d_model = query.shape

    def heads(x, name):
        y = nn.functional.linear(x, p[f"w_{name}"], p[f"b_{name}"])
        return y.view(batch_size, x.shape[1], num_heads, -1).transpose(1, 2)

    out = nn.functional.scaled_dot_product_attention(heads(query, "q"), heads(key, "k"),
                                                     heads(value, "v"))
    merged = out.transpose(1, 2).reshape(batch_size, n_q, d_model)
    return nn.functional.linear(merged, p["w_o"], p["b_o"]), weights


ASSEMBLE = Mutations(
    wrong=[
        ("no scale", _wrong(scale="none"), "divide q @ kᵀ by sqrt(d_k)"),
        ("scale by sqrt(d_model)", _wrong(scale="sqrt d_model"), "divided by sqrt(d_model)"),
        ("scale by d_k", _wrong(scale="d_k"), "you divided by d_k"),
        ("softmax dim=2 with heads", _wrong(dim=2), "dim=2 is the queries here"),
        ("softmax over heads", _wrong(dim=1), "softmax over the heads axis"),
        ("weights not transposed", _wrong(transpose=False), "x @ w.T + b"),
        ("no biases", _wrong(bias=False), "the biases are missing"),
        ("values from key", _wrong(values_from="key"), "project `value` with w_v"),
        ("reshape split", _wrong(split="reshape"), "view as (batch, seq_len, num_heads, d_k)"),
        ("reshape merge", _wrong(merge="reshape"), "merged without transposing back"),
        ("no W_O", _wrong(w_o=False), "finish with @ w_o.T + b_o"),
        ("averaged weights", _wrong(average=True), "not their average over the heads"),
        ("hard-coded 3 heads", lambda q, k, v, p, h: _mha(q, k, v, p, 3),
         "num_heads=5"),
        ("output only", lambda q, k, v, p, h: _mha(q, k, v, p, h)[0], "a tuple (output, weights)"),
        ("in float16", lambda q, k, v, p, h: tuple(t.half() for t in _mha(q, k, v, p, h)),
         "only about 3 significant digits"),
        ("loop over heads, exp without the max", _loop_over_heads,
         "when the scores are in the thousands"),
        ("head counts 3 and 5 special-cased",
         lambda q, k, v, p, h: _mha(q, k, v, p, h if h in (3, 5) else 3), "num_heads=8"),
        ("batch 2 written in", _batch_of_two_written_in, "your code raised RuntimeError"),
        ("the first sequence of the batch only", _first_sequence_only,
         "the weights of multi_head_attention(query, key, value, params, num_heads=3)"),
        ("computed in float16", _in_float16, "only about 3 significant digits"),
    ],
    right=[
        ("loop over heads, the row's max subtracted", _loop_over_heads_stable),
        ("float64, F.linear, in-place scale", _float64_in_place),
        ("the package module with copied weights", _package_module),
        ("F.scaled_dot_product_attention", _torch_sdpa),
        ("einsum", _mha),
        ("a list, not a tuple", lambda q, k, v, p, h: list(_mha(q, k, v, p, h))),
    ],
)


# ------------------------------------------------------------------ parameter counts
def _count_with_torch(d_model, num_heads, bias=True):
    with torch.device("meta"):
        module = nn.MultiheadAttention(d_model, num_heads, bias=bias)
    return sum(p.numel() for p in module.parameters())


def _count_with_d_k(d_model, num_heads, bias=True):
    d_k = d_model // num_heads
    per_head = 3 * d_model * d_k + (3 * d_k if bias else 0)  # this head's rows of W_Q, W_K, W_V
    return num_heads * per_head + d_model * d_model + (d_model if bias else 0)  # + W_O


COUNT = Mutations(
    wrong=[
        ("no W_O", lambda d, h, bias=True: 3 * d * d + 3 * d * bias, "add the output projection"),
        ("no biases", lambda d, h, bias=True: 4 * d * d, "the biases are missing"),
        ("bias ignored", lambda d, h, bias=True: 4 * d * d + 4 * d, "bias=False"),
        ("full matrices per head", lambda d, h, bias=True: h * (4 * d * d + 4 * d * bias),
         "does not depend on num_heads"),
        ("d_k × d_k per head", lambda d, h, bias=True: h * 4 * (d // h) ** 2 + 4 * d * bias,
         "not d_k × d_k"),
        ("one head only", lambda d, h, bias=True: 4 * d * (d // h) + 4 * (d // h) * bias,
         "one head's share"),
        ("one bias", lambda d, h, bias=True: 4 * d * d + d * bias, "its own bias"),
        ("W_O's bias forgotten", lambda d, h, bias=True: 4 * d * d + 3 * d * bias,
         "W_O has a bias too"),
        ("a string", lambda d, h, bias=True: "2362368", "should be a number"),
        ("NaN", lambda d, h, bias=True: float("nan"), "not a finite number"),
        ("a table of the layers tried", lambda d, h, bias=True: {
            768: 2362368, 1024: 4198400, 4096: 67108864, 10: 440, 12: 576}[d],
         "your code raised KeyError"),
        ("W_O counted for several heads only",
         lambda d, h, bias=True: (4 if h > 1 else 3) * d * (d + bias),
         "attention_parameters(96, 1, bias=True)"),
    ],
    right=[
        ("nn.MultiheadAttention on meta", _count_with_torch),
        ("per head with d_k", _count_with_d_k),
        ("float", lambda d, h, bias=True: 4.0 * d * (d + bias)),
        ("numpy int", lambda d, h, bias=True: np.int64(4 * d * d + 4 * d * int(bias))),
        ("0-dim tensor", lambda d, h, bias=True: torch.tensor(4 * d * d + (4 * d if bias else 0))),
    ],
)

MUTATIONS = {split_heads: SPLIT, merge_heads: MERGE, assemble_multi_head: ASSEMBLE,
             count_attention_parameters: COUNT}
