"""Lesson 10's exercises: references, the real model, and the mutation tables."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils.exercises.l10 import one_head_weights, previous_token_head
from course_utils.nn.attention import split_heads
from tests.support.exercise_checks import Mutations

# --- one head's weights ------------------------------------------------------------------


def _qk(x, attn, head, bias=True):
    d_k = attn.d_k
    rows = slice(head * d_k, (head + 1) * d_k)
    q = x @ attn.w_q.weight[rows].T + (attn.w_q.bias[rows] if bias else 0)
    k = x @ attn.w_k.weight[rows].T + (attn.w_k.bias[rows] if bias else 0)
    return q, k, d_k


def _wrong_head(offset=0, scale=None, bias=True, softmax_dim=-1, mask="keys",
                fill=float("-inf")):
    def answer(x, attention_mask, attn, head):
        q, k, d_k = _qk(x, attn, (head + offset) % attn.num_heads, bias)
        scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(d_k) if scale is None else scale(attn))
        if mask == "keys":
            scores = scores.masked_fill(~attention_mask[:, None, :], fill)
        elif mask == "queries":
            scores = scores.masked_fill(~attention_mask[:, :, None], fill)
        weights = torch.softmax(scores, dim=softmax_dim)
        if mask == "after":
            weights = weights * attention_mask[:, None, :]
        return weights
    return answer


def _transposed_weights(x, attention_mask, attn, head):
    rows = slice(head * attn.d_k, (head + 1) * attn.d_k)
    q = (x @ attn.w_q.weight)[..., rows] + attn.w_q.bias[rows]  # W where W.T belongs
    k = (x @ attn.w_k.weight)[..., rows] + attn.w_k.bias[rows]
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.d_k)
    return torch.softmax(scores.masked_fill(~attention_mask[:, None, :], -math.inf), dim=-1)


def _strided_head(x, attention_mask, attn, head):
    q = attn.w_q(x)[..., head::attn.num_heads]  # every num_heads-th feature, not one block
    k = attn.w_k(x)[..., head::attn.num_heads]
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.d_k)
    return torch.softmax(scores.masked_fill(~attention_mask[:, None, :], -math.inf), dim=-1)


def _all_heads(x, attention_mask, attn, head):
    return attn(x, mask=attention_mask[:, None, None, :])[1]


def _transposed_result(x, attention_mask, attn, head):
    return _wrong_head()(x, attention_mask, attn, head).transpose(-2, -1)


def _scores_only(x, attention_mask, attn, head):
    q, k, d_k = _qk(x, attn, head)
    return (q @ k.transpose(-2, -1) / math.sqrt(d_k)).masked_fill(~attention_mask[:, None, :], 0)


def _zeroed_padded_queries(x, attention_mask, attn, head):
    return _wrong_head()(x, attention_mask, attn, head) * attention_mask[:, :, None]


def _int_weights(x, attention_mask, attn, head):
    return (_wrong_head()(x, attention_mask, attn, head) * 100).long()


def _first_sequence_only(x, attention_mask, attn, head):
    weights = _wrong_head()(x[:1], attention_mask[:1], attn, head)  # the first sentence's map
    return weights.expand(x.shape[0], -1, -1)


def _exp_without_the_max(x, attention_mask, attn, head):
    q, k, d_k = _qk(x, attn, head)
    exp = torch.exp(q @ k.mT / math.sqrt(d_k)) * attention_mask[:, None, :]  # overflows
    return exp / exp.sum(dim=-1, keepdim=True)


def _four_heads_written_in(x, attention_mask, attn, head):
    d_k = attn.d_model // 4  # the first case's num_heads
    rows = slice(head * d_k, (head + 1) * d_k)
    q, k = attn.w_q(x)[..., rows], attn.w_k(x)[..., rows]
    scores = (q @ k.mT / math.sqrt(d_k)).masked_fill(~attention_mask[:, None, :], -math.inf)
    return scores.softmax(-1)


ONE_HEAD_WRONG = [
    ("float16 weights", lambda x, m, attn, head: one_head_weights.reference(x, m, attn, head)
     .half(), "only about 3 significant digits"),
    ("no scale", _wrong_head(scale=lambda attn: 1.0), "did not scale"),
    ("sqrt(d_model)", _wrong_head(scale=lambda attn: 1 / math.sqrt(attn.d_model)),
     "1/sqrt(d_model)"),
    ("divided by d_k", _wrong_head(scale=lambda attn: 1 / attn.d_k), "not 1/d_k"),
    ("no bias", _wrong_head(bias=False), "lack their bias"),
    ("W instead of W.T", _transposed_weights, "weight matrices are transposed"),
    ("strided head features", _strided_head, "every num_heads-th feature"),
    ("next head (off by one)", _wrong_head(offset=1), "weights of head"),
    ("softmax over queries", _wrong_head(softmax_dim=-2), "over the queries (dim=-2)"),
    ("softmax over queries, no mask", _wrong_head(softmax_dim=-2, mask=None),
     "over the queries (dim=-2)"),
    ("mask after softmax", _wrong_head(mask="after"), "after the softmax"),
    ("masked the queries", _wrong_head(mask="queries"), "masked the rows (queries)"),
    ("no mask", _wrong_head(mask=None), "padded keys get weight"),
    ("filled with 0 instead of -inf", _wrong_head(fill=0.0), "padded keys get weight"),
    ("every head returned", _all_heads, "holds every head"),
    ("result transposed", _transposed_result, "the result is transposed"),
    ("padded queries zeroed too", _zeroed_padded_queries, "padded queries' rows are all 0"),
    ("scores, no softmax", _scores_only, "not 1: are these the scores"),
    ("integer tensor", _int_weights, "floating-point tensor"),
    ("NaN", lambda x, m, attn, head: torch.full((x.shape[0], x.shape[1], x.shape[1]), math.nan),
     "contains NaN"),
    ("the first sentence only", _first_sequence_only, "padded keys get weight"),
    ("exp without subtracting the max", _exp_without_the_max,
     "when the scores are in the thousands"),
    ("4 heads written in", _four_heads_written_in, "head 0's weights (d_model=24, 3 heads)"),
    ("a finite fill of -30", _wrong_head(fill=-30.0), "padded keys get weight"),
]


def _einsum(x, attention_mask, attn, head):
    q = split_heads(attn.w_q(x), attn.num_heads)[:, head]  # (batch, seq_len, d_k)
    k = split_heads(attn.w_k(x), attn.num_heads)[:, head]
    scores = torch.einsum("bqd,bkd->bqk", q, k) / attn.d_k ** 0.5
    scores = scores.masked_fill(~attention_mask.unsqueeze(1), torch.finfo(scores.dtype).min)
    return F.softmax(scores, dim=-1)


def _float64_manual_softmax(x, attention_mask, attn, head):
    rows = slice(head * attn.d_k, (head + 1) * attn.d_k)
    x = x.double()
    q = F.linear(x, attn.w_q.weight[rows].double(), attn.w_q.bias[rows].double())
    k = F.linear(x, attn.w_k.weight[rows].double(), attn.w_k.bias[rows].double())
    scores = q @ k.mT / math.sqrt(attn.d_k)
    exp = torch.exp(scores - scores.amax(dim=-1, keepdim=True)) * attention_mask[:, None, :]
    return exp / exp.sum(dim=-1, keepdim=True)  # float64 result


def _the_module_itself(x, attention_mask, attn, head):
    _, weights = attn(x, mask=attention_mask[:, None, None, :])  # (batch, heads, n_q, n_k)
    return weights[:, head]


def _in_place(x, attention_mask, attn, head):
    x.mul_(1.0)
    q, k, d_k = _qk(x, attn, head)
    q.div_(math.sqrt(d_k))
    scores = q @ k.transpose(-2, -1)
    scores.masked_fill_(~attention_mask[:, None, :], -1e9)
    with torch.no_grad():
        attn.w_q.weight.zero_()  # the learner's own copy: the checker is not affected
    return scores.softmax(-1)


def _log_softmax(x, attention_mask, attn, head):
    q, k, d_k = _qk(x, attn, head)
    scores = (q @ k.mT / math.sqrt(d_k)).masked_fill(~attention_mask[:, None, :], -math.inf)
    return scores.log_softmax(dim=-1).exp()


ONE_HEAD_RIGHT = [
    ("einsum + split_heads + finfo.min", _einsum),
    ("float64 + manual softmax", _float64_manual_softmax),
    ("the module's own weights", _the_module_itself),
    ("in-place ops, -1e9", _in_place),
    ("log_softmax, then exp", _log_softmax),
]


# --- previous-token head -----------------------------------------------------------------


def _by_offset(offset, reduce="mean"):
    def answer(weights):
        diagonal = weights.diagonal(offset=offset, dim1=-2, dim2=-1)
        score = diagonal.mean(-1) if reduce == "mean" else diagonal.amax(-1)
        return divmod(int(score.argmax()), weights.shape[1])
    return answer


def _rolled(weights):
    seq_len = weights.shape[-1]
    previous = torch.roll(torch.eye(seq_len), shifts=-1, dims=1)  # row i: key (i-1) mod n
    score = (weights * previous).sum(-1).mean(-1)
    return divmod(int(score.argmax()), weights.shape[1])


def _wrong_divmod(weights):
    score = weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)
    return divmod(int(score.argmax()), weights.shape[0])  # num_layers where num_heads belongs


def _swapped(weights):
    layer, head = previous_token_head.reference(weights)
    return head, layer


def _argmin(weights):
    score = weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)
    return divmod(int(score.argmin()), weights.shape[1])


PREVIOUS_WRONG = [
    ("median instead of mean", lambda weights: divmod(int(weights.diagonal(
        offset=-1, dim1=-2, dim2=-1).median(-1).values.argmax()), weights.shape[1]),
     "not the median"),
    ("3 heads per layer written in", lambda weights: divmod(int(weights.diagonal(
        offset=-1, dim1=-2, dim2=-1).mean(-1).argmax()), 3), "divmod(index, num_heads)"),
    ("next token (offset=+1)", _by_offset(+1), "*next* token"),
    ("itself (offset=0)", _by_offset(0), "the token itself"),
    ("max instead of mean", _by_offset(-1, reduce="max"), "do not take the max"),
    ("roll wraps query 0 around", _rolled, "query 0 has no previous token"),
    ("divmod by num_layers", _wrong_divmod, "divmod(index, num_heads)"),
    ("(head, layer)", _swapped, "is (head, layer)"),
    ("argmin", _argmin, "argmax, not argmin"),
    ("hard-coded answer of the real model", lambda weights: (0, 2), "not the median"),
    ("the scores", lambda weights: weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1),
     "return two ints"),
    ("floats", lambda weights: tuple(float(i) for i in previous_token_head.reference(weights)),
     "should be an int, got float"),
]


def _loops(weights):
    num_layers, num_heads, seq_len, _ = weights.shape
    best, best_score = None, -1.0
    for layer in range(num_layers):
        for head in range(num_heads):
            score = sum(weights[layer, head, i, i - 1].item() for i in range(1, seq_len))
            if score > best_score:
                best, best_score = (layer, head), score
    return best


def _shifted_slices(weights):
    score = weights[..., 1:, :-1].diagonal(dim1=-2, dim2=-1).sum(-1)  # sum: same argmax
    flat = (score == score.max()).flatten().nonzero()[0, 0]
    return [flat // weights.shape[1], flat % weights.shape[1]]  # a list of 0-d tensors


def _eye_below(weights):
    seq_len = weights.shape[-1]
    below = torch.diag(torch.ones(seq_len - 1), diagonal=-1).bool()  # key = query - 1
    score = torch.einsum("lhqk,qk->lh", weights.double(), below.double())
    index = torch.nonzero(score == score.max())[0]
    return tuple(int(i) for i in index)


def _numpy(weights):
    import numpy as np

    score = np.diagonal(weights.numpy(), offset=-1, axis1=-2, axis2=-1).mean(-1)
    return np.unravel_index(score.argmax(), score.shape)  # numpy ints


def _layer_by_layer(weights):  # the best head of each layer, then the best of those
    score = weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)  # (layers, heads)
    best_heads = score.argmax(dim=1)  # (layers,)
    layer = int(score.gather(1, best_heads[:, None]).argmax())
    return layer, int(best_heads[layer])


PREVIOUS_RIGHT = [
    ("python loops", _loops),
    ("shifted slices, list of tensors", _shifted_slices),
    ("eye below the diagonal + einsum", _eye_below),
    ("numpy unravel_index", _numpy),
    ("the best head of each layer, then the best layer", _layer_by_layer),
]

MUTATIONS = {
    one_head_weights: Mutations(wrong=ONE_HEAD_WRONG, right=ONE_HEAD_RIGHT),
    previous_token_head: Mutations(wrong=PREVIOUS_WRONG, right=PREVIOUS_RIGHT),
}
