"""Lesson 10 exercises: one head's attention from a layer's raw weights; find the
previous-token head in a stack of attention maps. Messages, titles and hints follow the
course language (``course_utils.language``)."""

from __future__ import annotations

import copy
import math

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
    expect_stable,
    reject_half_precision,
)
from course_utils.language import N_, _
from course_utils.nn.attention import MultiHeadAttention

# ---------------------------------------------------------------------------------------
# Exercise 1: one head's attention weights from w_q, w_k and the padding mask
# ---------------------------------------------------------------------------------------


def _one_head_weights_reference(x, attention_mask, attn, head):
    """Head ``head``'s weights (batch, seq_len, seq_len) of ``attn`` on x (batch, seq_len, d_model).

    attention_mask (batch, seq_len) bool: True = real token; padded keys get weight 0.
    """
    d_k = attn.d_k
    columns = slice(head * d_k, (head + 1) * d_k)  # head h owns one block of d_k features
    q = x @ attn.w_q.weight[columns].T + attn.w_q.bias[columns]  # (batch, seq_len, d_k)
    k = x @ attn.w_k.weight[columns].T + attn.w_k.bias[columns]  # (batch, seq_len, d_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (batch, n_q, n_k)
    scores = scores.masked_fill(~attention_mask[:, None, :], float("-inf"))  # padded keys
    return torch.softmax(scores, dim=-1)  # (batch, n_q, n_k), each row sums to 1


def _variant(x, attention_mask, attn, head, *, scale=None, columns=None, bias=True,
             transpose_weights=False, mask="keys"):
    """The reference with one classic slip switched on, to name a wrong answer's mistake."""
    d_k = attn.d_k
    columns = slice(head * d_k, (head + 1) * d_k) if columns is None else columns

    def project(linear):
        weight = linear.weight.T if transpose_weights else linear.weight
        out = x @ weight[columns].T
        return out + linear.bias[columns] if bias else out

    scale = 1 / math.sqrt(d_k) if scale is None else scale
    scores = project(attn.w_q) @ project(attn.w_k).transpose(-2, -1) * scale
    keys = attention_mask[:, None, :]  # (batch, 1, n_k)
    if mask == "keys":
        scores = scores.masked_fill(~keys, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask == "after softmax":
        weights = weights.masked_fill(~keys, 0.0)
    return weights


_SLIPS = [
    (dict(scale=1.0), N_("you did not scale the scores: divide q kᵀ by sqrt(d_k)")),
    ("sqrt_d_model", N_(
        "you scaled by 1/sqrt(d_model); each head compares vectors of width d_k, so divide by "
        "sqrt(d_k) = sqrt(d_model / num_heads)")),
    ("d_k", N_("you divided by d_k; the scale is 1/sqrt(d_k), not 1/d_k")),
    (dict(bias=False), N_(
        "the projections lack their bias: nn.Linear computes x Wᵀ + b (use attn.w_q(x) or add "
        "attn.w_q.bias)")),
    (dict(transpose_weights=True), N_(
        "the weight matrices are transposed: nn.Linear stores W as (out_features, in_features) "
        "and computes x @ W.T + b")),
    ("strided", N_("head h got every num_heads-th feature: it owns one block, features "
                   "h*d_k .. (h+1)*d_k - 1")),
    (dict(mask="after softmax"), N_(
        "rows do not sum to 1: the padding was zeroed after the softmax. Fill the padded keys' "
        "scores with -inf before it")),
]
_OVER_QUERIES = N_(
    "the softmax runs over the queries (dim=-2), so columns sum to 1 instead of rows: it belongs "
    "on the keys, dim=-1")


def _named_slip(result, x, attention_mask, attn, head):
    """The message of the first classic slip ``result`` reproduces, or None."""
    for change, message in _SLIPS:
        if change == "sqrt_d_model":
            change = dict(scale=1 / math.sqrt(attn.d_model))
        elif change == "d_k":
            change = dict(scale=1 / attn.d_k)
        elif change == "strided":
            change = dict(columns=slice(head, None, attn.num_heads))
        with torch.no_grad():
            slip = _variant(x, attention_mask, attn, head, **change)
        if torch.allclose(result, slip.double(), atol=1e-5, rtol=1e-4):
            return str(message)
    return None


def _random_attention(d_model, num_heads, seed):
    """A MultiHeadAttention whose scores are of order 1, like a trained model's."""
    generator = torch.Generator().manual_seed(seed)
    attn = MultiHeadAttention(d_model, num_heads)
    with torch.no_grad():
        for linear in (attn.w_q, attn.w_k, attn.w_v, attn.w_o):
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator)
                                * 2 / math.sqrt(d_model))
            linear.bias.copy_(torch.randn(linear.bias.shape, generator=generator))
    return attn


def _far_attention(d_model, num_heads, seed):
    """The same in float64, with scores in the thousands, positive and negative: in each head,
    feature 0 of every key is 50 and feature 0 of each query is large (a row's softmax still
    depends on the other features)."""
    attn = _random_attention(d_model, num_heads, seed).double()
    first = torch.arange(num_heads) * attn.d_k
    with torch.no_grad():
        attn.w_k.weight[first], attn.w_k.bias[first] = 0.0, 50.0
        attn.w_q.weight[first] *= 100
        attn.w_q.bias[first] = 0.0
    return attn


def _check_one_head_weights(answer):
    # Non-square everywhere: batch, seq_len, d_model, num_heads and d_k all differ; the
    # second sentence of each batch is padded.
    # Then 6 heads and the last of them, one head, and scores in the thousands (float64).
    for d_model, num_heads, seq_len, lengths, head, seed, far in (
        (20, 4, 7, [7, 4], 2, 1, False),
        (24, 3, 6, [3, 6, 5], 0, 2, False),
        (18, 6, 9, [5, 9, 2, 8], 5, 3, False),
        (10, 1, 5, [4, 5], 0, 4, False),
        (16, 2, 8, [8, 6, 3], 1, 5, True),
    ):
        attn = (_far_attention if far else _random_attention)(d_model, num_heads, seed)
        x = torch.randn(len(lengths), seq_len, d_model,
                        generator=torch.Generator().manual_seed(seed + 10))
        x = x.double() if far else x
        attention_mask = torch.arange(seq_len) < torch.tensor(lengths)[:, None]  # (batch, n)
        with torch.no_grad():
            expected = _one_head_weights_reference(x, attention_mask, attn, head)
        # The learner gets a copy of the module: changing its weights changes nothing here.
        result = attempt(answer, x, attention_mask, copy.deepcopy(attn), head)
        batch = len(lengths)
        if isinstance(result, torch.Tensor) and tuple(result.shape) == (
                batch, num_heads, seq_len, seq_len):
            shape = tuple(result.shape)
            raise Incorrect(_(
                "shape {shape} holds every head (batch, num_heads, n_q, n_k): return only head "
                "{head}, (batch, seq_len, seq_len)").format(shape=shape, head=head))
        expect_shape(result, expected.shape,
                     N_("the weights (batch, seq_len, seq_len)"))
        if not result.is_floating_point():
            raise Incorrect(_(
                "the weights should be a floating-point tensor, got {dtype}").format(
                dtype=result.dtype))
        reject_half_precision(result, expected, _("the weights (batch, seq_len, seq_len)"))
        result = result.detach().double()
        padded_keys = ~attention_mask[:, None, :].expand_as(expected)  # (batch, n_q, n_k)
        padded_queries = ~attention_mask[:, :, None].expand_as(expected)
        if torch.equal(result.isnan(), padded_keys):
            raise Incorrect(str(_OVER_QUERIES) + _(
                " (a padded key's column is all -inf, hence NaN)"))
        if torch.equal(result.isnan(), padded_queries):
            raise Incorrect(_(
                "the padded *queries'* rows are NaN: you masked the rows (queries). Mask the "
                "keys, the last axis: attention_mask[:, None, :]"))
        (expect_stable if far else expect_finite)(result, N_("the weights"))
        if torch.allclose(result, expected.double(), atol=1e-5, rtol=1e-4):
            continue
        real_rows = attention_mask[:, :, None].expand_as(expected)  # rows of real queries
        if (torch.allclose(result[real_rows], expected.double()[real_rows], atol=1e-5, rtol=1e-4)
                and (result[~real_rows] == 0).all()):
            raise Incorrect(_(
                "the padded queries' rows are all 0: only keys are masked, and a padded query "
                "still attends to the real keys as the model computes it; give those rows the "
                "same softmax as any other"))
        if torch.allclose(result.transpose(-2, -1), expected.double(), atol=1e-5, rtol=1e-4):
            raise Incorrect(_(
                "the result is transposed: row i should be query i's weights over the keys, "
                "(batch, n_q, n_k)"))
        column_sums = result.sum(dim=-2)  # (batch, n_k)
        if torch.allclose(column_sums, torch.ones_like(column_sums), atol=1e-4):
            raise Incorrect(str(_OVER_QUERIES))
        if (result[padded_keys].abs() > 1e-6).any():
            raise Incorrect(_(
                "padded keys get weight: the mask must remove the padded *keys* (the last axis, "
                "attention_mask[:, None, :]) by filling their scores with -inf before the softmax"))
        with torch.no_grad():
            for other in range(num_heads):
                theirs = _one_head_weights_reference(x, attention_mask, attn, other).double()
                if other != head and torch.allclose(result, theirs, atol=1e-5, rtol=1e-4):
                    raise Incorrect(_(
                        "these are the weights of head {other}, not head {head}: head h owns "
                        "features h*d_k .. (h+1)*d_k - 1 of q and k").format(
                        other=other, head=head))
        message = _named_slip(result, x, attention_mask, attn, head)
        if message is not None:
            raise Incorrect(message)
        row_sums = result.sum(dim=-1)
        if not torch.allclose(row_sums, torch.ones_like(row_sums), atol=1e-4):
            low, high = row_sums.min().item(), row_sums.max().item()
            raise Incorrect(_(
                "rows sum to between {low:.2f} and {high:.2f}, not 1: are these the scores before "
                "the softmax?").format(low=low, high=high))
        expect_close(result, expected, _(
            "head {head}'s weights (d_model={d_model}, {num_heads} heads)").format(
            head=head, d_model=d_model, num_heads=num_heads))


one_head_weights = Exercise(
    title=N_("one head's attention from the raw weights"),
    checker=_check_one_head_weights,
    reference=_one_head_weights_reference,
    hints=(
        N_(
            "Head h owns features h*d_k .. (h+1)*d_k - 1 of q and k, with d_k = attn.d_k: slice "
            "those rows of attn.w_q.weight (out_features come first), or slice attn.w_q(x)."),
        N_("scores = q @ k.transpose(-2, -1) / sqrt(d_k) is (batch, n_q, n_k)."),
        N_(
            "Padded keys: scores.masked_fill(~attention_mask[:, None, :], float('-inf')), then "
            "softmax over the keys (dim=-1)."),
    ),
)

# ---------------------------------------------------------------------------------------
# Exercise 2: which head attends to the previous token?
# ---------------------------------------------------------------------------------------


def _previous_token_head_reference(weights):
    """weights (num_layers, num_heads, seq_len, seq_len) of one sentence -> (layer, head).

    The head whose queries 1..n-1 put, on average, the most weight on the key just before them.
    """
    to_previous = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (layers, heads, n-1): w[i, i-1]
    score = to_previous.mean(dim=-1)  # (num_layers, num_heads)
    layer, head = divmod(int(score.argmax()), weights.shape[1])
    return layer, head


def _stack(num_layers, num_heads, seq_len, generator):
    """Random attention rows (each sums to 1), sharpish like a trained model's."""
    scores = torch.randn(num_layers, num_heads, seq_len, seq_len, generator=generator) * 1.5
    return torch.softmax(scores, dim=-1)


def _plant(weights, layer, head, offset, strength, rows=None):
    """Make head (layer, head) put ``strength`` of query i's weight on key i + offset."""
    seq_len = weights.shape[-1]
    rows = range(seq_len) if rows is None else rows
    for i in rows:
        j = (i + offset) % seq_len
        row = weights[layer, head, i] * (1 - strength)
        row[j] += strength
        weights[layer, head, i] = row


def _previous_token_cases():
    """Stacks with a planted previous-token head and heads that catch the classic slips."""
    cases = []
    for seed, (num_layers, num_heads, seq_len), target, decoys in (
        (3, (3, 5, 8), (2, 1),
         dict(next=(1, 3), self=(0, 0), spike=(2, 4), wrap=(1, 0), sink=(0, 4), median=(0, 2))),
        (4, (4, 3, 7), (0, 2),
         dict(next=(3, 0), self=(1, 1), spike=(2, 2), wrap=(0, 0), sink=(3, 2), median=(2, 0))),
        (5, (2, 8, 12), (1, 6),
         dict(next=(0, 7), self=(1, 0), spike=(0, 1), wrap=(1, 3), sink=(0, 5), median=(1, 2))),
    ):
        weights = _stack(num_layers, num_heads, seq_len, torch.Generator().manual_seed(seed))
        _plant(weights, *target, offset=-1, strength=0.7, rows=range(1, seq_len))
        weights[target[0], target[1], 0] = 1.0 / seq_len  # query 0: no previous token
        _plant(weights, *decoys["next"], offset=+1, strength=0.9)  # attends to the next token
        _plant(weights, *decoys["self"], offset=0, strength=0.95)  # attends to itself
        # one query leans fully on its previous token, the rest ignore it: a max, not a mean
        _plant(weights, *decoys["spike"], offset=-1, strength=1.0, rows=[seq_len // 2])
        # 0.6 on the previous token, and query 0 fully on the last key: wins only if the
        # wrap-around from query 0 to key n-1 is (wrongly) counted as "previous"
        _plant(weights, *decoys["wrap"], offset=-1, strength=0.6, rows=range(1, seq_len))
        _plant(weights, *decoys["wrap"], offset=-1, strength=1.0, rows=[0])
        # 0.95 on the previous token for most queries, 0 for the others: the highest median,
        # not the highest mean
        most = range(1, seq_len // 2 + 2)
        _plant(weights, *decoys["median"], offset=-1, strength=0.95, rows=most)
        for i in range(seq_len // 2 + 2, seq_len):
            row = weights[decoys["median"]][i]
            row[i - 1] = 0.0
            weights[decoys["median"]][i] = row / row.sum()
        # every query on the last key: exactly 0 on the previous token, the least of all
        weights[decoys["sink"]] = 0.0
        weights[decoys["sink"]][:, -1] = 1.0
        cases.append((weights, target, decoys))
    return cases


def _as_index(value, what: str) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not (
            value.is_floating_point() or value.dtype == torch.bool):
        return int(value.item())
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        got = f"{type(value).__name__} {value!r}"
        raise Incorrect(_("{what} should be an int, got {got}").format(what=what, got=got))
    return int(value)


def _check_previous_token_head(answer):
    for weights, target, decoys in _previous_token_cases():
        num_layers, num_heads, seq_len = weights.shape[:3]
        result = attempt(answer, weights)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            got = (_("a tensor of shape {result_shape}").format(result_shape=tuple(result.shape))
                   if isinstance(result, torch.Tensor) else type(result).__name__)
            raise Incorrect(_("return two ints, (layer, head); got {got}").format(got=got))
        layer, head = (_as_index(v, w) for v, w in zip(result, ("layer", "head"), strict=True))
        if (layer, head) == target:
            continue
        if (head, layer) == target:
            raise Incorrect(_(
                "({layer}, {head}) is (head, layer): return (layer, head)").format(
                layer=layer, head=head))
        if not (0 <= layer < num_layers and 0 <= head < num_heads):
            raise Incorrect(_(
                "({layer}, {head}) is not a head of this stack of {num_layers} layers x "
                "{num_heads} heads: a flat index over (num_layers, num_heads) unravels as "
                "divmod(index, num_heads)").format(
                layer=layer, head=head, num_layers=num_layers, num_heads=num_heads))
        slips = {
            "next": _(
                "this head attends to the *next* token (w[i, i+1], diagonal offset=+1); the "
                "previous token is w[i, i-1], diagonal offset=-1"),
            "self": _(
                "this head attends to the token itself (the main diagonal); the previous token is "
                "one below it, diagonal offset=-1"),
            "spike": _(
                "this head puts all its weight on the previous token for one query only: average "
                "w[i, i-1] over the queries, do not take the max"),
            "wrap": _(
                "this head wins only because query 0's weight on the last key was counted: "
                "query 0 has no previous token (torch.roll wraps around), so average over "
                "queries 1..n-1"),
            "median": _(
                "this head puts most of its weight on the previous token for most queries and "
                "none for the others: the highest median, not the highest mean. Score each head "
                "by the mean of w[i, i-1], not the median"),
        }
        for name, message in slips.items():
            if (layer, head) == decoys[name]:
                raise Incorrect(message)
        score = weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)
        if score[layer, head] == score.min():
            raise Incorrect(_(
                "({layer}, {head}) is the head with the *least* weight on the previous token: "
                "argmax, not argmin").format(layer=layer, head=head))
        share = score[layer, head].item()
        raise Incorrect(_(
            "head ({layer}, {head}) puts on average {share:.2f} of a query's weight on the "
            "previous token; another head puts more. Score each head by the mean of w[i, i-1] "
            "over queries i = 1..n-1").format(layer=layer, head=head, share=share))


previous_token_head = Exercise(
    title=N_("find the previous-token head"),
    checker=_check_previous_token_head,
    reference=_previous_token_head_reference,
    hints=(
        N_(
            "w[i, i-1] for every query i >= 1 is one diagonal of the (n_q, n_k) map: "
            "weights.diagonal(offset=-1, dim1=-2, dim2=-1) gives (num_layers, num_heads, n-1)."),
        N_("Average it over the last axis to score each head, then take the argmax."),
        N_("A flat argmax over (num_layers, num_heads) unravels with divmod(index, num_heads)."),
    ),
)
