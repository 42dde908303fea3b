"""A gallery of broken attention implementations, each one bug away from ``correct_attention``.

Every function has the signature of the course's attention functions: q ``(..., n_q, d_k)``,
k ``(..., n_k, d_k)``, v ``(..., n_k, d_v)``, ``mask`` bool broadcastable to
``(..., n_q, n_k)`` with True = may attend; it returns output ``(..., n_q, d_v)`` and
weights ``(..., n_q, n_k)``. Lesson 08 prints their source: read them next to
``correct_attention`` and spot the one line that differs. ``BUGS`` lists each with the probe
of :func:`course_utils.diagnostics.diagnose` that catches it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from course_utils import diagnostics as probes
from course_utils.language import N_, Message


def correct_attention(q, k, v, mask=None):
    """Correct: softmax(q kᵀ / sqrt(d_k)) v, the mask filling blocked scores with -inf.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., n_q, n_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # before the softmax
    weights = torch.softmax(scores, dim=-1)  # each query's row sums to 1 over the keys
    return weights @ v, weights  # (..., n_q, d_v), (..., n_q, n_k)


def torch_attention(q, k, v, mask=None):
    """torch's own ``F.scaled_dot_product_attention``, made to return the weights too.

    torch returns only ``weights @ v``; with v = the identity matrix ``(n_k, n_k)`` the same
    call returns ``weights @ I = weights``.

    Used in lesson 08.
    """
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    n_k = k.shape[-2]
    identity = torch.eye(n_k, dtype=q.dtype, device=q.device).expand(*k.shape[:-1], n_k)
    weights = F.scaled_dot_product_attention(q, k, identity, attn_mask=mask)
    return output, weights


def softmax_over_wrong_dim(q, k, v, mask=None):
    """Bug: the softmax runs over dim=-2 (the queries), so columns, not rows, sum to 1.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-2)  # BUG: should be dim=-1, over the keys
    return weights @ v, weights


def mask_after_softmax(q, k, v, mask=None):
    """Bug: the mask zeroes weights after the softmax.

    The rows no longer sum to 1, and the blocked keys were already in the softmax's
    denominator, so the future still leaks into the output through it.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # BUG: too late, mask the scores instead
    return weights @ v, weights


def missing_scale(q, k, v, mask=None):
    """Bug: no division by sqrt(d_k): score variance grows like d_k, softmax saturates.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1)  # BUG: missing / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


class SharedWeightSelfAttention(nn.Module):
    """Bug: one nn.Linear makes Q, K and V, so the scores are symmetric (lesson 02).

    ``forward(x, mask=None)``: x ``(batch, seq_len, d_model)`` ->
    output ``(batch, seq_len, d_k)``, weights ``(batch, seq_len, seq_len)``.

    Used in lesson 08.
    """

    def __init__(self, d_model: int, d_k: int):
        super().__init__()
        self.d_model = d_model
        self.w = nn.Linear(d_model, d_k)  # BUG: needs three: w_q, w_k, w_v

    def forward(self, x, mask=None):
        q = k = v = self.w(x)  # (batch, seq_len, d_k), three names for one tensor
        return correct_attention(q, k, v, mask=mask)


def mask_on_wrong_axis(q, k, v, mask=None):
    """Bug: the mask is broadcast over the wrong axis: it blocks queries, not keys.

    ``mask.transpose(-2, -1)`` turns a key padding mask ``(batch, 1, n_k)`` into
    ``(batch, n_k, 1)``, exactly what ``pad[:, :, None]`` instead of ``pad[:, None, :]`` does.
    In self-attention n_q == n_k, so it still broadcasts and nothing crashes: padded queries
    are blocked while every real query keeps reading the padding.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        mask = mask.transpose(-2, -1)  # BUG: the keys' axis is the last one; leave it there
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def k_transposed_on_wrong_dims(q, k, v, mask=None):
    """Bug: ``k.transpose(1, 2)`` counts axes from the front.

    For (batch, seq_len, d_k) that happens to be right; for (batch, heads, seq_len, d_k)
    it swaps heads and seq_len. ``k.transpose(-2, -1)`` is right for any number of axes.

    Used in lesson 08.
    """
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])  # BUG: should be (-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def inverted_padding_mask(q, k, v, mask=None):
    """Bug: the mask is read as True = blocked, the opposite of the course's convention.

    ``masked_fill(mask, ...)`` fills where the mask is True, i.e. at the keys that *may* be
    attended; torch's ``nn.MultiheadAttention`` masks use True = blocked, F.sdpa and this
    course use True = may attend.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))  # BUG: should be ~mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def float16_fill_overflow(q, k, v, mask=None):
    """Bug: blocked scores are filled with -1e9, which float16 cannot hold (max 65504).

    Fine in float32, but in float16 (mixed precision) ``masked_fill`` refuses the value.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)  # BUG: use float("-inf")
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def hand_written_softmax(q, k, v, mask=None):
    """Bug: exp(s) / sum(exp(s)) without subtracting the row maximum overflows to inf/inf.

    torch.softmax subtracts each row's maximum first, which changes nothing mathematically
    and keeps exp() in range.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    exps = scores.exp()  # BUG: exp(89) is already inf in float32
    weights = exps / exps.sum(dim=-1, keepdim=True)
    return weights @ v, weights


def dropout_at_eval(q, k, v, mask=None):
    """Bug: ``F.dropout`` on the weights without ``training=``: it drops at evaluation too.

    ``F.dropout``'s ``training`` argument defaults to True, so every call zeroes a random
    tenth of the weights and scales the rest by 1/0.9, also after ``model.eval()``: the same
    input gives another output each time. ``nn.Dropout`` follows ``model.eval()``.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.dropout(torch.softmax(scores, dim=-1), p=0.1)  # BUG: training=self.training
    return weights @ v, weights


def scale_in_place(q, k, v, mask=None):
    """Bug: ``q.div_`` scales the caller's own q, in place.

    The result is right, but the caller's tensor is now divided by sqrt(d_k): a second call
    on the same q divides again, and whatever else uses q sees the change.

    Used in lesson 08.
    """
    scores = q.div_(math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)  # BUG: q / math.sqrt(...)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def finite_fill(q, k, v, mask=None):
    """Bug: blocked scores are filled with -1e4, a number real scores can fall below.

    With ordinary scores exp(-1e4) is 0 and nothing shows; when every real score of a row is
    below -1e4 (large, negative scores), the blocked keys get the most weight.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e4)  # BUG: use float("-inf")
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def statistic_across_positions(q, k, v, mask=None):
    """Bug: the queries are centred with a mean over the positions (dim=-2), not the features.

    The mean mixes every token's query, the future's and the padding's included, into every
    score, before any mask can act: the weights look right and the future still leaks in.

    Used in lesson 08.
    """
    q = q - q.mean(dim=-2, keepdim=True)  # BUG: a statistic over the sequence axis
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def multiplicative_mask(q, k, v, mask=None):
    """Bug: the mask is multiplied into the scores, so a blocked score becomes 0, not -inf.

    A score of 0 is an ordinary score: the blocked keys keep a weight of about exp(0) / Z.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores * mask  # BUG: use scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def additive_mask_nan_to_num(q, k, v, mask=None):
    """Bug in the backward pass only: -inf added as a mask, NaN rows hidden by nan_to_num.

    A row with no allowed key (a padded query under a query-and-key mask) is all -inf, so
    its softmax is NaN; ``nan_to_num`` turns the weights into 0 and the forward pass looks
    fine. The softmax's backward still multiplies by those NaN, and an *added* mask passes
    that gradient straight back to q and k (``masked_fill`` would have zeroed it): one
    optimiser step makes W_Q and W_K NaN. diagnose() probes the forward pass and passes it;
    ``torch.autograd.detect_anomaly()`` finds it. Not in ``BUGS`` for that reason.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        blocked = torch.zeros_like(scores).masked_fill(~mask, float("-inf"))
        scores = scores + blocked  # BUG (with the next line): -inf rows give NaN gradients
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # hides the NaN, forward only
    return weights @ v, weights


def log_softmax_weights(q, k, v, mask=None):
    """Bug: the weights are ``log_softmax``, log-probabilities, not probabilities.

    Every entry is at most 0 and exp(weights) sums to 1 over each row: the values are mixed
    with negative numbers. ``log_softmax`` belongs in a loss (cross-entropy), not here.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.log_softmax(scores, dim=-1)  # BUG: torch.softmax
    return weights @ v, weights


def float16_softmax(q, k, v, mask=None):
    """Bug: the softmax runs in float16 "to save memory" and is cast back.

    float16 keeps about 3 significant digits (eps ≈ 0.001), so every weight is rounded and
    the rows sum to 1 only to about 0.001, whatever the inputs' dtype.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.half(), dim=-1).to(q.dtype)  # BUG: keep q's dtype
    return weights @ v, weights


def batch_centred_queries(q, k, v, mask=None):
    """Bug: the queries are centred with a mean over the batch (dim=0), not the features.

    Every sequence's queries now depend on the other sequences of the batch: the same
    sentence gets another output next to other sentences.

    Used in lesson 08.
    """
    q = q - q.mean(dim=0, keepdim=True)  # BUG: a statistic over the batch axis
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def mask_times_minus_inf(q, k, v, mask=None):
    """Bug: the mask is made by multiplying with -inf, and 0 × (-inf) is NaN.

    ``(~mask) * float("-inf")`` is -inf at the blocked keys, as meant, and NaN at every key
    that may be attended, so every row of weights is NaN.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + (~mask) * float("-inf")  # BUG: 0 * -inf is NaN; use masked_fill
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


class _Projections(nn.Module):
    """Q, K and V from their own nn.Linear (the correct part of the module bugs below)."""

    def __init__(self, d_model: int, d_k: int):
        super().__init__()
        self.d_model = d_model
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_k) for _ in range(3))

    def project(self, x):
        return self.w_q(x), self.w_k(x), self.w_v(x)  # each (batch, seq_len, d_k)


class ScoreDropoutSelfAttention(_Projections):
    """Bug: dropout on the scores, before the softmax, instead of on the weights after it.

    Invisible in ``eval()``, where dropout is off. In training a dropped score becomes 0, an
    ordinary score that still takes weight, and a dropped -inf becomes NaN (-inf × 0).

    Used in lesson 08.
    """

    def __init__(self, d_model: int, d_k: int, p: float = 0.1):
        super().__init__(d_model, d_k)
        self.dropout = nn.Dropout(p)

    def forward(self, x, mask=None):
        q, k, v = self.project(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(self.dropout(scores), dim=-1)  # BUG: dropout the weights
        return weights @ v, weights


class PaddedQueriesBlockedSelfAttention(_Projections):
    """Bug: a key padding mask ``(batch, 1, seq_len)`` is turned into one that blocks padded
    queries too, so a padded query sees no key at all and its row is NaN (0/0).

    Used in lesson 08.
    """

    def forward(self, x, mask=None):
        q, k, v = self.project(x)
        if mask is not None and mask.shape[-2] == 1:  # a key padding mask
            mask = mask & mask.transpose(-2, -1)  # BUG: padded queries now see nothing
        return correct_attention(q, k, v, mask=mask)


@dataclass(frozen=True)
class Bug:
    """One gallery entry: what goes wrong, the implementation, and the probe that catches it.

    ``name`` says what goes wrong in both languages; ``title`` reads it in the current one.

    ``implementation`` is a function, or for a module bug its class (build it with
    :meth:`build`).

    Used in lesson 08.
    """

    name: Message
    implementation: Callable
    caught_by: str

    @property
    def title(self) -> str:
        """What goes wrong, in the course language (the English one names the bug in tests)."""
        return str(self.name)

    def build(self, d_model: int = 16):
        """The thing to diagnose: the function itself, or a module instance."""
        if isinstance(self.implementation, type):
            return self.implementation(d_model, d_model)
        return self.implementation


BUGS = (
    Bug(N_("softmax over the wrong dim"),
        softmax_over_wrong_dim, probes.ROWS_SUM_TO_1),
    Bug(N_("mask applied after the softmax"),
        mask_after_softmax, probes.ROWS_SUM_TO_1),
    Bug(N_("missing 1/sqrt(d_k) scale"),
        missing_scale, probes.SCORE_SCALE),
    Bug(N_("one shared W for Q, K and V"),
        SharedWeightSelfAttention, probes.SHARED_QKV),
    Bug(N_("mask broadcast over the wrong axis"),
        mask_on_wrong_axis, probes.MASKED_WEIGHTS),
    Bug(N_("K transposed on the wrong dims"),
        k_transposed_on_wrong_dims, probes.SHAPES),
    Bug(N_("inverted padding mask"),
        inverted_padding_mask, probes.MASKED_WEIGHTS),
    Bug(N_("-1e9 fill in float16"),
        float16_fill_overflow, probes.FLOAT16_MASKING),
    Bug(N_("hand-written softmax"),
        hand_written_softmax, probes.NAN_INF),
    Bug(N_("dropout left on at evaluation"),
        dropout_at_eval, probes.DETERMINISM),
    Bug(N_("q scaled in place"),
        scale_in_place, probes.INPUTS_UNCHANGED),
    Bug(N_("a finite fill of -1e4"),
        finite_fill, probes.FINITE_FILL),
    Bug(N_("a statistic across positions"),
        statistic_across_positions, probes.CAUSAL_LEAK),
    Bug(N_("the mask multiplied into the scores"),
        multiplicative_mask, probes.MASKED_WEIGHTS),
    Bug(N_("log-probabilities as weights"),
        log_softmax_weights, probes.ROWS_SUM_TO_1),
    Bug(N_("a softmax in float16"),
        float16_softmax, probes.ROWS_SUM_TO_1),
    Bug(N_("queries centred over the batch"),
        batch_centred_queries, probes.BATCH_APART),
    Bug(N_("a mask made by multiplying with -inf"),
        mask_times_minus_inf, probes.MASKED_WEIGHTS),
    Bug(N_("padded queries that see no key"),
        PaddedQueriesBlockedSelfAttention, probes.MASKED_WEIGHTS),
    Bug(N_("dropout on the scores in training"),
        ScoreDropoutSelfAttention, probes.TRAINING_MODE),
)
