"""Lesson 08's exercises: typical wrong fixes rejected with the mistake named, right ones in
other words accepted. ``tests/test_exercises.py`` runs the ``MUTATIONS`` table."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils.exercises.l08 import (
    buggy_encoder_attention,
    buggy_half_precision_attention,
    fix_encoder_attention,
    fix_half_precision_attention,
)
from tests.support.exercise_checks import Mutations

NEG_INF = float("-inf")


def attention(transpose=(-2, -1), scale_of=lambda q: q.shape[-1], fill=NEG_INF,
              masked_where=lambda mask: ~mask, dim=-1, after=None, output_factor=1.0,
              upcast=False):
    """The reference with one piece replaced: each wrong answer below is one bug away."""
    def answer(q, k, v, mask=None):
        scores = q @ k.transpose(*transpose) / math.sqrt(scale_of(q))
        if upcast:
            scores = scores.float()
        if mask is not None and after is None:
            scores = scores.masked_fill(masked_where(mask), fill)
        weights = torch.softmax(scores, dim=dim)
        if mask is not None and after is not None:
            weights = weights.masked_fill(~mask, after)
        return output_factor * (weights @ v.to(weights.dtype)), weights
    return answer


def in_float16(q, k, v, mask=None):  # the fix, its results returned in float16
    return tuple(t.half() for t in attention()(q, k, v, mask=mask))


def no_mask(q, k, v, mask=None):
    weights = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v, weights


def output_only(q, k, v, mask=None):
    return fix_encoder_attention.reference(q, k, v, mask=mask)[0]


def weights_transposed(q, k, v, mask=None):
    output, weights = fix_encoder_attention.reference(q, k, v, mask=mask)
    return weights.transpose(-2, -1) @ v, weights


def additive_float_mask(q, k, v, mask=None):
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + (~mask) * -1e9  # a float32 tensor: float16 scores get upcast
    weights = torch.softmax(scores, dim=-1)
    return weights @ v.to(weights.dtype), weights


# -- right answers, written differently from the references ----------------------------
def einsum_manual_softmax(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / q.size(-1) ** 0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, NEG_INF))
    exps = (scores - scores.amax(dim=-1, keepdim=True)).exp()
    weights = exps / exps.sum(dim=-1, keepdim=True)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights


def in_float64(q, k, v, mask=None):
    dtype = q.dtype
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.mT * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), NEG_INF)
    weights = scores.softmax(-1)
    return (weights @ v).to(dtype), weights.to(dtype)


def finfo_min_fill(q, k, v, mask=None):
    scores = q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = F.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights


def in_place(q, k, v, mask=None):
    scores = q @ k.mT
    scores.div_(math.sqrt(q.shape[-1]))  # in place on its own tensors only: allowed
    if mask is not None:
        scores.masked_fill_(~mask, NEG_INF)
    weights = scores.softmax(dim=scores.dim() - 1)
    return weights @ v, weights


# -- wrong answers that only a probe of the call itself catches --------------------------
def scales_callers_q(q, k, v, mask=None):
    q.mul_(1 / math.sqrt(q.shape[-1]))  # edits the caller's q: a second call differs
    scores = q @ k.mT
    if mask is not None:
        scores.masked_fill_(~mask, NEG_INF)
    weights = scores.softmax(dim=scores.dim() - 1)
    return weights @ v, weights


def via_torch_sdpa(q, k, v, mask=None):
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    n_k = k.shape[-2]
    identity = torch.eye(n_k, dtype=q.dtype, device=q.device).expand(*k.shape[:-1], n_k)
    return output, F.scaled_dot_product_attention(q, k, identity, attn_mask=mask)


def additive_inf_mask(q, k, v, mask=None):
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + torch.zeros_like(scores).masked_fill(~mask, NEG_INF)
    weights = torch.softmax(scores, -1)
    return weights @ v, weights


def exp_without_the_max(q, k, v, mask=None):
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    exps = scores.exp()  # overflows once a score is in the hundreds
    weights = exps / exps.sum(dim=-1, keepdim=True)
    return weights @ v, weights


def log_softmax_exp(q, k, v, mask=None):
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, NEG_INF)
    weights = scores.log_softmax(dim=-1).exp()
    return weights @ v, weights


RIGHT = [("einsum, manual softmax, torch.where", einsum_manual_softmax),
         ("computed in float64, cast back", in_float64),
         ("finfo(dtype).min fill, transpose(-1, -2)", finfo_min_fill),
         ("in-place ops on its own tensors", in_place),
         ("torch's F.scaled_dot_product_attention", via_torch_sdpa),
         ("additive -inf mask", additive_inf_mask),
         ("log_softmax, then exp", log_softmax_exp)]

MUTATIONS = {
    fix_encoder_attention: Mutations(
        wrong=[
            ("the fix, returned in float16",
             in_float16,
             "only about 3 significant digits"),
            ("the buggy code as given", buggy_encoder_attention,
             "columns of the weights sum to 1"),
            ("softmax fixed, mask still inverted", attention(masked_where=lambda m: m),
             "read the other way round"),
            ("mask fixed, softmax still dim=1", attention(dim=1),
             "columns of the weights sum to 1"),
            ("softmax over dim=2", attention(dim=2), "but with a heads axis"),
            ("scaled by q.shape[2]", attention(scale_of=lambda q: q.shape[2]),
             "divided by sqrt(n_q)"),
            ("mask after the softmax", attention(after=0.0), "zeroed after the softmax"),
            ("scale forgotten", attention(scale_of=lambda q: 1.0), "not divided by sqrt(d_k)"),
            ("scaled by sqrt(d_v)", attention(scale_of=lambda q: {8: 12, 64: 40}[q.shape[-1]]),
             "divided by sqrt(d_v)"),
            ("output divided by sqrt(d_k) again",
             attention(output_factor=1 / math.sqrt(8)), "times 0.354"),
            ("mask ignored", no_mask, "never reaches the scores"),
            ("output only", output_only, "returned one tensor of shape"),
            ("weights transposed before @ v", weights_transposed, "it raised RuntimeError"),
            ("the caller's q scaled in place", scales_callers_q, "changed its argument q in place"),
            ("a finite fill of -1e4", attention(fill=-1e4), "filled with a finite"),
            ("a finite fill of -30", attention(fill=-30.0), "[fill below every score]"),
            ("exp without subtracting the max", exp_without_the_max, "exp() overflowed"),
        ],
        right=RIGHT,
    ),
    fix_half_precision_attention: Mutations(
        wrong=[
            ("the fix, returned in float16",
             in_float16,
             "only about 3 significant digits"),
            ("the buggy code as given", buggy_half_precision_attention,
             "does not fit in float16"),
            ("transpose fixed, -1e9 kept", attention(fill=-1e9), "does not fit in float16"),
            ("fill fixed, transpose(1, 2) kept", attention(transpose=(1, 2)),
             "k.transpose(-2, -1)"),
            ("float32's min as the fill", attention(fill=torch.finfo(torch.float32).min),
             "does not fit in float16"),
            ("transpose(2, 3): heads only", attention(transpose=(2, 3)),
             "works with a heads axis, but"),
            ("scores upcast to float32", attention(upcast=True), "something upcasts"),
            ("additive -1e9 float mask", additive_float_mask, "something upcasts"),
            ("softmax over dim=2", attention(dim=2), "but with a heads axis"),
            ("scaled by q.shape[2]", attention(scale_of=lambda q: q.shape[2]),
             "divided by sqrt(n_q)"),
            # float16's own minimum, hard-coded: right in float16 only; in float32 real scores
            # can fall below it, the same mistake as -1e9 the other way round.
            ("float16's min -65504 hard-coded", attention(fill=-65504.0),
             "filled with a finite"),
            ("the caller's q scaled in place", scales_callers_q, "changed its argument q in place"),
            ("a finite fill of -30", attention(fill=-30.0), "[fill below every score]"),
            ("exp without subtracting the max", exp_without_the_max, "exp() overflowed"),
        ],
        right=RIGHT,
    ),
}


