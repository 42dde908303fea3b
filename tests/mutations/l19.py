"""Lesson 19's exercises: mutation tables (walked by tests/test_exercises.py) and references."""

from __future__ import annotations

import math

import torch

from course_utils.exercises.l19 import chunk_boundary, delta_update, recurrent_step
from course_utils.nn.linear_attention import (
    delta_rule_step,
    linear_attention_step,
)
from tests.support.exercise_checks import Mutations

# --- Exercise 1: one recurrent step ------------------------------------------------------------

def _outer(k, v):
    return k.unsqueeze(-1) * v.unsqueeze(-2)


def _step_read_first(state, q, k, v):
    return (q.unsqueeze(-2) @ state).squeeze(-2), state + _outer(k, v)


def _step_transposed(state, q, k, v):
    return (q.unsqueeze(-2) @ state).squeeze(-2), state.transpose(-2, -1) + _outer(v, k)


def _step_replacing(state, q, k, v):
    new = _outer(k, v)
    return (q.unsqueeze(-2) @ new).squeeze(-2), new


def _step_scaled(state, q, k, v):
    out, new = recurrent_step.reference(state, q, k, v)
    return out / math.sqrt(q.shape[-1]), new


def _step_read_with_key(state, q, k, v):
    new = state + _outer(k, v)
    return (k.unsqueeze(-2) @ new).squeeze(-2), new


def _step_in_place(state, q, k, v):
    state += _outer(k, v)
    return (q.unsqueeze(-2) @ state).squeeze(-2), state


def _step_einsum(state, q, k, v):
    new = state + torch.einsum("bhk,bhv->bhkv", k, v)
    return torch.einsum("bhk,bhkv->bhv", q, new), new


def _step_split(state, q, k, v):
    # q S_t = q S_{t-1} + (q·k) v
    new = state + _outer(k, v)
    return (q.unsqueeze(-2) @ state).squeeze(-2) + (q * k).sum(-1, keepdim=True) * v, new


def _step_loops(state, q, k, v):
    new = state.clone()
    out = torch.zeros(*q.shape[:-1], v.shape[-1])
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            new[b, h] = new[b, h] + torch.outer(k[b, h], v[b, h])
            out[b, h] = q[b, h] @ new[b, h]
    return out, new


STEP_WRONG = [
    ("read before writing", _step_read_first, "before writing the current token"),
    ("state transposed", _step_transposed, "(batch, heads, d_v, d_k)"),
    ("state replaced", _step_replacing, "forgot the old one"),
    ("scaled by sqrt(d_k)", _step_scaled, "no 1/sqrt(d_k)"),
    ("read with the key", _step_read_with_key, "read it with the query"),
    ("state unchanged", lambda s, q, k, v: ((q.unsqueeze(-2) @ s).squeeze(-2), s),
     "did not change"),
    ("in place", _step_in_place, "in place"),
    ("swapped order", lambda s, q, k, v: recurrent_step.reference(s, q, k, v)[::-1],
     "in that order"),
    ("only the output", lambda s, q, k, v: recurrent_step.reference(s, q, k, v)[0],
     "return a pair"),
    ("float16", lambda s, q, k, v: tuple(t.half() for t in recurrent_step.reference(s, q, k, v)),
     "only about 3 significant digits"),
]

STEP_RIGHT = [
    ("einsum", _step_einsum),
    ("old read plus (q·k) v", _step_split),
    ("loops over batch and heads", _step_loops),
    ("float64 and a list", lambda s, q, k, v: list(recurrent_step.reference(
        s.double(), q.double(), k.double(), v.double()))),
    ("the package's step", linear_attention_step),
]


# --- Exercise 2: the chunk boundary term -------------------------------------------------------

def _mask(c, diagonal=0, upper=False):
    ones = torch.ones(c, c)
    return ones.triu(diagonal) if upper else ones.tril(diagonal)


def _chunk(state, q, k, v, boundary=True, mask=None, carry=True):
    c = q.shape[-2]
    scores = q @ k.transpose(-2, -1) * (_mask(c) if mask is None else mask(c))
    out = scores @ v + (q @ state if boundary else 0)
    new = (state if carry else 0) + k.transpose(-2, -1) @ v
    return out, new


def _chunk_recurrent(state, q, k, v):
    outs = []
    for t in range(q.shape[-2]):
        out, state = linear_attention_step(state, q[..., t, :], k[..., t, :], v[..., t, :])
        outs.append(out)
    return torch.stack(outs, -2), state


def _chunk_cumsum(state, q, k, v):
    states = state.unsqueeze(-3) + torch.cumsum(k.unsqueeze(-1) * v.unsqueeze(-2), dim=-3)
    return (q.unsqueeze(-2) @ states).squeeze(-2), states[..., -1, :, :]


def _chunk_where(state, q, k, v):
    c = q.shape[-2]
    scores = q @ k.transpose(-2, -1)
    causal = torch.arange(c)[:, None] >= torch.arange(c)[None, :]
    return torch.where(causal, scores, 0.0) @ v + q @ state, state + k.mT @ v


def _chunk_read_after(state, q, k, v):
    _, new = _chunk(state, q, k, v)
    return q @ new + (q @ k.transpose(-2, -1) * _mask(q.shape[-2])) @ v, new


CHUNK_WRONG = [
    ("no boundary term", lambda s, q, k, v: _chunk(s, q, k, v, boundary=False),
     "miss the boundary term"),
    ("no mask", lambda s, q, k, v: _chunk(s, q, k, v, mask=lambda c: torch.ones(c, c)),
     "every position reads every key"),
    ("diagonal left out", lambda s, q, k, v: _chunk(s, q, k, v, mask=lambda c: _mask(c, -1)),
     "leaves out the diagonal"),
    ("upper triangle", lambda s, q, k, v: _chunk(s, q, k, v, mask=lambda c: _mask(c, upper=True)),
     "keeps the upper triangle"),
    ("state not carried", lambda s, q, k, v: (_chunk(s, q, k, v)[0], s), "carry the state"),
    ("state restarted", lambda s, q, k, v: _chunk(s, q, k, v, carry=False),
     "forgot the earlier chunks"),
    ("read the state after the chunk, plus the chunk", _chunk_read_after,
     "added the chunk again"),
    ("output only", lambda s, q, k, v: _chunk(s, q, k, v)[0], "return a pair"),
]

CHUNK_RIGHT = [
    ("step by step", _chunk_recurrent),
    ("cumulative states", _chunk_cumsum),
    ("torch.where and .mT", _chunk_where),
    ("in float64", lambda s, q, k, v: chunk_boundary.reference(s.double(), q.double(),
                                                               k.double(), v.double())),
]


# --- Exercise 3: the delta update ---------------------------------------------------------------

def _delta(state, k, v, beta, change):
    recalled = (k.unsqueeze(-2) @ state).squeeze(-2)
    return state + k.unsqueeze(-1) * change(recalled, v, beta.unsqueeze(-1)).unsqueeze(-2)


def _delta_projector(state, k, v, beta):
    eye = torch.eye(k.shape[-1])
    b = beta[..., None, None]
    return (eye - b * k.unsqueeze(-1) * k.unsqueeze(-2)) @ state + b * _outer(k, v)


def _delta_einsum(state, k, v, beta):
    recalled = torch.einsum("bhk,bhkv->bhv", k, state)
    return state + torch.einsum("bh,bhk,bhv->bhkv", beta, k, v - recalled)


def _delta_in_place(state, k, v, beta):
    recalled = (k.unsqueeze(-2) @ state).squeeze(-2)
    state += beta[..., None, None] * _outer(k, v - recalled)
    return state


DELTA_WRONG = [
    ("no erase", lambda s, k, v, b: _delta(s, k, v, b, lambda r, v, b: b * v), "linear attention"),
    ("beta ignored", lambda s, k, v, b: _delta(s, k, v, b, lambda r, v, b: v - r),
     "ignores beta"),
    ("beta on v only", lambda s, k, v, b: _delta(s, k, v, b, lambda r, v, b: b * v - r),
     "not v_t alone"),
    ("wrong sign", lambda s, k, v, b: _delta(s, k, v, b, lambda r, v, b: b * (r - v)),
     "wrong way"),
    ("beta on the erase only", lambda s, k, v, b: _delta(s, k, v, b, lambda r, v, b: v - b * r),
     "erased part alone"),
    ("in place", _delta_in_place, "in place"),
    ("float16", lambda s, k, v, b: delta_update.reference(s, k, v, b).half(),
     "only about 3 significant digits"),
    ("replaced", lambda s, k, v, b: b[..., None, None] * _outer(k, v), "off by up to"),
]

DELTA_RIGHT = [
    ("(I − β k kᵀ) S + β kᵀ v", _delta_projector),
    ("einsum", _delta_einsum),
    ("the package's step", lambda s, k, v, b: delta_rule_step(s, k, k, v, b)[1]),
    ("in float64", lambda s, k, v, b: delta_update.reference(s.double(), k.double(), v.double(),
                                                             b.double())),
]


MUTATIONS = {
    recurrent_step: Mutations(wrong=STEP_WRONG, right=STEP_RIGHT),
    chunk_boundary: Mutations(wrong=CHUNK_WRONG, right=CHUNK_RIGHT),
    delta_update: Mutations(wrong=DELTA_WRONG, right=DELTA_RIGHT),
}
