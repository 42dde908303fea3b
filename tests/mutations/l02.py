"""Lesson 02's exercises: mutation tables (run by tests/test_exercises.py) of plausible wrong
answers, each named in its message, and right answers written differently from the reference."""

from __future__ import annotations

import math

import torch

from course_utils.exercises.l02 import attention_from_qkv, project_qkv
from tests.support.exercise_checks import Mutations


def _attention(q, k, v, scale=None, dim=-1):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    weights = torch.softmax(q @ k.T * scale, dim=dim)
    return weights @ v, weights


def _unnormalised(q, k, v):
    weights = q @ k.T / math.sqrt(q.shape[-1])  # softmax forgotten
    return weights @ v, weights


def _keys_times_queries(q, k, v):
    weights = torch.softmax(k @ q.T / math.sqrt(q.shape[-1]), dim=-1)  # (n_k, n_q)
    return weights.T @ v, weights


def _output_scaled_again(q, k, v):
    output, weights = _attention(q, k, v)
    return output / math.sqrt(q.shape[-1]), weights


def _manual_softmax(q, k, v):
    scores = q @ k.T / q.shape[-1] ** 0.5
    exp = (scores - scores.max(dim=-1, keepdim=True).values).exp()
    weights = exp / exp.sum(dim=-1, keepdim=True)
    return weights @ v, weights


def _in_place(q, k, v):
    q.div_(math.sqrt(q.shape[-1]))  # right numbers, but the caller's q is scaled too
    weights = (q @ k.T).softmax(-1)
    return weights @ v, weights


def _scaled_copy(q, k, v):
    q = q.clone()
    q /= math.sqrt(q.shape[-1])  # in place on its own copy: the caller's q is untouched
    weights = (q @ k.T).softmax(-1)
    return weights @ v, weights


_FIRST_CASE = {}


def _hard_coded(q, k, v):  # right for the first q, k, v the checker draws, then repeated
    return _FIRST_CASE.setdefault("result", _attention(q, k, v))


def _hard_coded_projection(x, w_q, w_k, w_v):
    return _FIRST_CASE.setdefault("projection", (x @ w_q, x @ w_k, x @ w_v))


def _float64(q, k, v):
    return _attention(q.double(), k.double(), v.double())


def _einsum(q, k, v):
    weights = torch.einsum("qd,kd->qk", q, k).div(math.sqrt(q.shape[-1])).softmax(dim=-1)
    return torch.einsum("qk,kv->qv", weights, v), weights


def _torch_output(q, k, v):
    weights = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1)
    output = torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None])[0]
    return output, weights


def _nan_weights(q, k, v):
    output, weights = _attention(q, k, v)
    weights[0, 0] = float("nan")
    return output, weights


def _exp_without_the_max(q, k, v):
    scores = q @ k.T / math.sqrt(q.shape[-1])
    weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)  # overflows far from 0
    return weights @ v, weights


def _d_k_8_written_in(q, k, v):
    return _attention(q, k, v, scale=1 / math.sqrt(8))  # the first case's d_k


def _in_float16(q, k, v):
    q, k, v = q.half(), k.half(), v.half()  # the right formula, in half precision
    weights = torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


def _logsumexp(q, k, v):
    scores = q @ k.T / math.sqrt(q.shape[-1])
    weights = (scores - scores.logsumexp(dim=-1, keepdim=True)).exp()
    return weights @ v, weights


def _projections_of_three_rows(x, w_q, w_k, w_v):
    x = x.reshape(3, -1)  # the first case's n = 3 written in
    return x @ w_q, x @ w_k, x @ w_v


MUTATIONS = {
    project_qkv: Mutations(
        wrong=[
            ("one shared W", lambda x, w_q, w_k, w_v: (x @ w_q, x @ w_q, x @ w_v), "own matrix"),
            ("k and v swapped", lambda x, w_q, w_k, w_v: (x @ w_q, x @ w_v, x @ w_k),
             "k and v are swapped"),
            ("q and k swapped", lambda x, w_q, w_k, w_v: (x @ w_k, x @ w_q, x @ w_v),
             "q and k are swapped"),
            ("transposed", lambda x, w_q, w_k, w_v: (w_q.T @ x.T, w_k.T @ x.T, w_v.T @ x.T),
             "transposed"),
            ("scaled too early",
             lambda x, w_q, w_k, w_v: (x @ w_q / math.sqrt(w_q.shape[1]), x @ w_k, x @ w_v),
             "1/sqrt(d_k) belongs to the scores"),
            ("one tensor", lambda x, w_q, w_k, w_v: x @ w_q, "as a tuple"),
            ("x itself as v", lambda x, w_q, w_k, w_v: (x @ w_q, x @ w_k, x),
             "v (n, d_v) should have shape (3, 4), got (3, 5)"),
            ("integer result", lambda x, w_q, w_k, w_v: (x @ w_q, x @ w_k, (x @ w_v).long()),
             "floating-point"),
            ("hard-coded to the first X", _hard_coded_projection, "values are off"),
            ("n = 3 written in", _projections_of_three_rows, "your code raised RuntimeError"),
            ("d_k = 2 written in", lambda x, w_q, w_k, w_v: (x @ w_q[:, :2], x @ w_k[:, :2],
                                                            x @ w_v),
             "q (n, d_k) should have shape (7, 5), got (7, 2)"),
        ],
        right=[
            ("einsum", lambda x, w_q, w_k, w_v: tuple(torch.einsum("nd,de->ne", x, w)
                                                      for w in (w_q, w_k, w_v))),
            ("torch.matmul, as a list", lambda x, w_q, w_k, w_v: [torch.matmul(x, w)
                                                                  for w in (w_q, w_k, w_v)]),
            ("nn.functional.linear", lambda x, w_q, w_k, w_v: tuple(
                torch.nn.functional.linear(x, w.T) for w in (w_q, w_k, w_v))),
            ("float64", lambda x, w_q, w_k, w_v: tuple(x.double() @ w.double()
                                                       for w in (w_q, w_k, w_v))),
        ],
    ),
    attention_from_qkv: Mutations(
        wrong=[
            ("softmax over the queries", lambda q, k, v: _attention(q, k, v, dim=0),
             "softmax over the wrong dim"),
            ("no scale", lambda q, k, v: _attention(q, k, v, scale=1.0),
             "divide q @ k.T by sqrt(d_k)"),
            ("scaled by sqrt(d_v)", lambda q, k, v: _attention(q, k, v, 1 / math.sqrt(v.shape[-1])),
             "you divided by sqrt(d_v)"),
            ("scaled by d_k", lambda q, k, v: _attention(q, k, v, 1 / q.shape[-1]),
             "you divided by d_k"),
            ("multiplied by sqrt(d_k)", lambda q, k, v: _attention(q, k, v, math.sqrt(q.shape[-1])),
             "you multiplied by sqrt(d_k)"),
            ("k @ q.T", _keys_times_queries, "not k @ q.T"),
            ("softmax forgotten", _unnormalised, "apply torch.softmax"),
            ("output scaled again", _output_scaled_again, "divided by sqrt(d_k) again"),
            ("returned in the wrong order", lambda q, k, v: _attention(q, k, v)[::-1],
             "output and weights are swapped"),
            ("output only", lambda q, k, v: _attention(q, k, v)[0], "return two tensors"),
            ("NaN in the weights", _nan_weights, "contains NaN"),
            ("weights and output in float16",
             lambda q, k, v: tuple(t.half() for t in attention_from_qkv.reference(q, k, v)),
             "only about 3 significant digits"),
            ("q scaled in place", _in_place, "changed its argument q in place"),
            ("scaled by sqrt(n_k)", lambda q, k, v: _attention(q, k, v, 1 / math.sqrt(k.shape[0])),
             "sqrt(n_k)"),
            ("hard-coded to the first q, k, v", _hard_coded, "values are off"),
            ("exp without subtracting the max", _exp_without_the_max,
             "when the scores are in the thousands"),
            ("d_k = 8 written in", _d_k_8_written_in, "values are off"),
            ("computed in float16", _in_float16, "only about 3 significant digits"),
        ],
        right=[
            ("manual softmax", _manual_softmax),
            ("scaled copy of q", _scaled_copy),
            ("float64", _float64),
            ("einsum", _einsum),
            ("torch's own attention for the output", _torch_output),
            ("softmax through logsumexp", _logsumexp),
        ],
    ),
}

