"""Lesson 19 exercises: one recurrent step, the chunk boundary term, the delta update."""

from __future__ import annotations

import math

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_shape,
    is_close,
    reject_half_precision,
)
from course_utils.language import N_, _

# (batch, heads, d_k, d_v, chunk): d_k != d_v everywhere, so a transposed state shows in its
# shape; batch and heads > 1 first, so an answer written for one sequence shows too.
_SIZES = ((2, 3, 5, 7, 6), (1, 2, 8, 3, 5), (3, 1, 4, 6, 3))


def _draw(batch, heads, d_k, d_v, chunk, seed):
    g = torch.Generator().manual_seed(seed)
    state = torch.randn(batch, heads, d_k, d_v, generator=g)  # what earlier tokens wrote
    q = torch.randn(batch, heads, chunk, d_k, generator=g)
    k = torch.randn(batch, heads, chunk, d_k, generator=g)
    v = torch.randn(batch, heads, chunk, d_v, generator=g)
    beta = torch.rand(batch, heads, generator=g) * 0.8 + 0.1  # a write strength per head
    return state, q, k, v, beta


def _first_match(got, candidates) -> None:
    """Raise Incorrect with the message of the first known mistake ``got`` matches."""
    for expected, message in candidates:
        if expected is not None and is_close(got, expected):
            raise Incorrect(message)


def _as_pair(result):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise Incorrect(_("return a pair (output, new_state), got {kind}").format(
            kind=type(result).__name__))
    return result


# --- Exercise 1: one recurrent step -----------------------------------------------------------

def _recurrent_step_reference(state, q_t, k_t, v_t):
    """One step of linear attention: write k_tᵀ v_t into the state, then read it with q_t.

    state (batch, heads, d_k, d_v); q_t, k_t (batch, heads, d_k); v_t (batch, heads, d_v).
    """
    new_state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)  # (batch, heads, d_k, d_v)
    output = (q_t.unsqueeze(-2) @ new_state).squeeze(-2)  # (batch, heads, d_v)
    return output, new_state


def _check_recurrent_step(answer):
    for seed, (batch, heads, d_k, d_v, _chunk) in enumerate(_SIZES):
        state, q, k, v, _beta = _draw(batch, heads, d_k, d_v, 1, seed)
        q_t, k_t, v_t = q[..., 0, :], k[..., 0, :], v[..., 0, :]
        output, new_state = _as_pair(attempt(answer, state, q_t, k_t, v_t))
        want_out, want_state = _recurrent_step_reference(state, q_t, k_t, v_t)
        if isinstance(new_state, torch.Tensor) and new_state.shape == (batch, heads, d_v, d_k):
            raise Incorrect(_(
                "your state has shape (batch, heads, d_v, d_k): write k_tᵀ v_t (k on the rows), "
                "so that q_t S gives a (d_v,) output"))
        if isinstance(output, torch.Tensor) and output.shape == want_state.shape:
            raise Incorrect(_("return (output, new_state) in that order"))
        expect_shape(new_state, want_state.shape, _("the new state"))
        expect_shape(output, want_out.shape, _("the output"))
        reject_half_precision(output, want_out, _("the output"))
        read_old = (q_t.unsqueeze(-2) @ state).squeeze(-2)
        _first_match(new_state, [
            (k_t.unsqueeze(-1) * v_t.unsqueeze(-2), _(
                "your new state forgot the old one: add k_tᵀ v_t to the state, do not replace "
                "it")),
            (state, _("your state did not change: add the outer product k_tᵀ v_t")),
        ])
        expect_close(new_state, want_state, _("the new state"))
        _first_match(output, [
            (read_old, _(
                "you read the state before writing the current token: o_t = q_t S_t, with "
                "k_tᵀ v_t already added (position t sees itself, as in causal attention)")),
            (want_out / math.sqrt(d_k), _(
                "there is no 1/sqrt(d_k) in this lesson's linear attention: o_t = q_t S_t")),
            ((k_t.unsqueeze(-2) @ want_state).squeeze(-2), _(
                "you read the state with k_t; read it with the query q_t")),
        ])
        expect_close(output, want_out, _("the output"))


recurrent_step = Exercise(
    title=N_("one recurrent step of linear attention"),
    checker=_check_recurrent_step,
    reference=_recurrent_step_reference,
    hints=(
        N_("First write: S_t = S_{t-1} + k_tᵀ v_t, an outer product of shape (d_k, d_v) per "
           "head. k_t.unsqueeze(-1) * v_t.unsqueeze(-2) makes it for every batch and head."),
        N_("Then read: o_t = q_t S_t, i.e. (q_t.unsqueeze(-2) @ S_t).squeeze(-2). Return "
           "(o_t, S_t)."),
    ),
)


# --- Exercise 2: the chunk boundary term ------------------------------------------------------

def _chunk_reference(state, q_c, k_c, v_c):
    """Outputs of one chunk of C positions from the state at its start, and the state after it.

    state (batch, heads, d_k, d_v); q_c, k_c (batch, heads, C, d_k); v_c (batch, heads, C, d_v).
    """
    c = q_c.shape[-2]
    causal = torch.ones(c, c, dtype=torch.bool).tril()  # (C, C): key i <= query t
    inside = (q_c @ k_c.transpose(-2, -1)).masked_fill(~causal, 0)  # (..., C, C)
    output = q_c @ state + inside @ v_c  # earlier chunks (the boundary term) + this chunk
    return output, state + k_c.transpose(-2, -1) @ v_c


def _check_chunk(answer):
    for seed, (batch, heads, d_k, d_v, chunk) in enumerate(_SIZES):
        state, q, k, v, _beta = _draw(batch, heads, d_k, d_v, chunk, 10 + seed)
        output, new_state = _as_pair(attempt(answer, state, q, k, v))
        want_out, want_state = _chunk_reference(state, q, k, v)
        expect_shape(output, want_out.shape, _("the chunk's output"))
        expect_shape(new_state, want_state.shape, _("the state after the chunk"))
        reject_half_precision(output, want_out, _("the chunk's output"))
        scores = q @ k.transpose(-2, -1)  # (..., C, C)
        ones = torch.ones(chunk, chunk, dtype=torch.bool)
        inside = (scores * ones.tril()) @ v
        _first_match(output, [
            (inside, _(
                "your outputs miss the boundary term: the tokens before this chunk reach it "
                "only through the state, so add q_c @ state")),
            (q @ want_state + inside, _(
                "you read the state after the chunk and added the chunk again: use the state "
                "from the chunk's start for the boundary term")),
            (q @ state + (scores * ones.tril(-1)) @ v, _(
                "the mask inside the chunk leaves out the diagonal: each position reads its "
                "own key too (tril(), not tril(-1))")),
            (q @ state + scores @ v, _(
                "inside the chunk every position reads every key, also later ones (the same "
                "happens if you read the state after the chunk): keep only keys i <= t (a "
                "lower-triangular mask) and read the state from the chunk's start")),
            (q @ state + (scores * ones.triu()) @ v, _(
                "your mask keeps the upper triangle, the future: keep keys i <= t with tril()")),
        ])
        expect_close(output, want_out, _("the chunk's output"))
        _first_match(new_state, [
            (state, _("carry the state to the next chunk: state + k_cᵀ v_c")),
            (k.transpose(-2, -1) @ v, _(
                "the state after the chunk forgot the earlier chunks: add k_cᵀ v_c to the "
                "state")),
        ])
        expect_close(new_state, want_state, _("the state after the chunk"))


chunk_boundary = Exercise(
    title=N_("the chunk boundary term"),
    checker=_check_chunk,
    reference=_chunk_reference,
    hints=(
        N_("Inside the chunk it is the parallel form: (q_c k_cᵀ with the upper triangle set "
           "to 0) @ v_c."),
        N_("Everything before the chunk is in the state: add q_c @ state (the boundary term), "
           "and return the state plus k_cᵀ v_c for the next chunk."),
    ),
)


# --- Exercise 3: the delta update -------------------------------------------------------------

def _delta_reference(state, k_t, v_t, beta_t):
    """The delta rule's write: replace what the state returns for k_t by v_t, at strength β_t.

    state (batch, heads, d_k, d_v); k_t (batch, heads, d_k); v_t (batch, heads, d_v);
    beta_t (batch, heads).
    """
    recalled = (k_t.unsqueeze(-2) @ state).squeeze(-2)  # k_t S: (batch, heads, d_v)
    correction = beta_t.unsqueeze(-1) * (v_t - recalled)  # β_t (v_t − k_t S)
    return state + k_t.unsqueeze(-1) * correction.unsqueeze(-2)  # S + k_tᵀ correction


def _check_delta(answer):
    for seed, (batch, heads, d_k, d_v, _chunk) in enumerate(_SIZES):
        state, _q, k, v, beta = _draw(batch, heads, d_k, d_v, 1, 20 + seed)
        k_t, v_t = k[..., 0, :], v[..., 0, :]
        got = attempt(answer, state, k_t, v_t, beta)
        want = _delta_reference(state, k_t, v_t, beta)
        expect_shape(got, want.shape, _("the new state"))
        reject_half_precision(got, want, _("the new state"))
        recalled = (k_t.unsqueeze(-2) @ state).squeeze(-2)
        b = beta.unsqueeze(-1)

        def write(correction, state=state, k_t=k_t):
            return state + k_t.unsqueeze(-1) * correction.unsqueeze(-2)

        _first_match(got, [
            (write(b * v_t), _(
                "that is linear attention's write: the delta rule first removes what the "
                "state already returns for k_t, β_t kᵀ (v_t − k_t S)")),
            (write(v_t - recalled), _(
                "your update ignores beta: the correction is scaled by the write strength "
                "β_t")),
            (write(b * v_t - recalled), _(
                "β_t must scale the whole correction (v_t − k_t S), not v_t alone: otherwise "
                "the old value is always erased in full")),
            (write(b * (recalled - v_t)), _(
                "the correction points the wrong way: it is v_t − k_t S (new minus what is "
                "recalled)")),
            (write(v_t - b * recalled), _(
                "β_t must scale the whole correction (v_t − k_t S), not the erased part alone")),
        ])
        expect_close(got, want, _("the new state"))


delta_update = Exercise(
    title=N_("the delta update"),
    checker=_check_delta,
    reference=_delta_reference,
    hints=(
        N_("What the state returns for k_t is k_t S: (k_t.unsqueeze(-2) @ S).squeeze(-2), "
           "shape (batch, heads, d_v)."),
        N_("The new state is S + β_t k_tᵀ (v_t − k_t S): the outer product of k_t with the "
           "correction, beta_t.unsqueeze(-1) broadcasting over d_v."),
    ),
)
