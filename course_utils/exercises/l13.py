"""Exercises of lesson 13, induction heads.

- ``induction_score``: each head's induction score from its attention weights;
- ``previous_token_score``: each head's previous-token score;
- ``induction_targets``: where an ideal induction head looks in any sequence of tokens.
"""

from __future__ import annotations

import numpy as np
import torch

from course_utils.exercises import Exercise, Incorrect, attempt, expect_close
from course_utils.experiments.l13_induction import induction_scores, previous_token_scores
from course_utils.language import N_, _
from course_utils.nn.masks import causal_mask

# batch, layers, heads, seq_len, period: layers != heads so a swapped axis shows in the shape
# then one sequence alone, and more layers, heads and positions
SCORE_CASES = ((3, 2, 5, 14, 5), (2, 3, 4, 11, 7), (4, 1, 2, 9, 3), (1, 4, 6, 30, 12))


def _causal_weights(batch, layers, heads, seq_len, generator, dtype=torch.float32):
    """Random causal attention weights ``(batch, layers, heads, seq_len, seq_len)``, rows
    summing to 1, sharp enough that every offset gets a different share."""
    scores = 3 * torch.randn(batch, layers, heads, seq_len, seq_len, generator=generator,
                             dtype=torch.float64)
    return scores.masked_fill(~causal_mask(seq_len), float("-inf")).softmax(-1).to(dtype)


def _offset_mean(weights, back, first, reduce="mean"):
    """Mean (or sum) over batch and queries ``t >= first`` of the weight on ``t - back``
    (keys before 0 wrap around, as negative indexing would)."""
    n = weights.shape[-1]
    queries = torch.arange(first, n)
    picked = weights[..., queries, queries - back]  # (batch, layers, heads, queries)
    return picked.sum(dim=(0, 3)) if reduce == "sum" else picked.mean(dim=(0, 3))


def _score_mistakes(weights, period):
    """(wrong scores, message) for each classic mistake of an induction score."""
    return (
        (_offset_mean(weights, period, period), N_(
            "{what}: you scored the weight on t - period, the earlier copy of the same token; "
            "an induction head looks one further, at t - period + 1, the token that came next")),
        (_offset_mean(weights, period - 2, period), N_(
            "{what}: your offset is off by one: the token after the previous occurrence is at "
            "t - period + 1, not t - period + 2")),
        (_offset_mean(weights, period - 1, period - 1), N_(
            "{what}: you also scored query t = period - 1, whose token has not occurred before; "
            "start at t = period, the first token of the repeat")),
        (_offset_mean(weights, period - 1, 0), N_(
            "{what}: you scored queries of the first block too; only t >= period has a previous "
            "occurrence to look after")),
        (_offset_mean(weights, 1, 1), N_(
            "{what}: that is the previous-token score (the weight on t - 1); the induction score "
            "is the weight on t - period + 1")),
        (_offset_mean(weights.transpose(-1, -2), period - 1, period), N_(
            "{what}: you read weights[..., key, query]; the last two axes are (query, key): row t "
            "is what query t gives each key")),
        (_offset_mean(weights, period - 1, period, reduce="sum"), N_(
            "{what}: you summed the weights; the score is their mean over the batch and the "
            "query positions, a number between 0 and 1")),
    )


def _shape_mistake(result, batch, layers, heads, what):
    """Incorrect for the shapes of the classic wrong reductions, else nothing."""
    if not isinstance(result, torch.Tensor):
        return
    shape = tuple(result.shape)
    if shape == (heads, layers) and heads != layers:
        raise Incorrect(_(
            "{what}: your scores are (heads, layers); return (layers, heads), one row per "
            "layer").format(what=what))
    if shape == (batch, layers, heads):
        raise Incorrect(_(
            "{what}: you kept the batch axis; average over the batch too, shape (layers, "
            "heads)").format(what=what))
    if shape == (batch, layers):
        raise Incorrect(_(
            "{what}: you averaged over the heads; keep one score per head and average over the "
            "batch, shape (layers, heads)").format(what=what))
    if shape in ((layers,), (heads,), ()):
        raise Incorrect(_(
            "{what}: you averaged over more than the batch and the positions; keep one score "
            "per head, shape (layers, heads)").format(what=what))


def _check_scores(answer, reference, mistakes, name, uses_period):
    generator = torch.Generator().manual_seed(0)
    for index, (batch, layers, heads, seq_len, period) in enumerate(SCORE_CASES):
        dtype = torch.float64 if index == 1 else torch.float32
        weights = _causal_weights(batch, layers, heads, seq_len, generator, dtype)
        args = (weights, period) if uses_period else (weights,)
        what = (_("{name}(weights {shape}, period={period})") if uses_period else
                _("{name}(weights {shape})")).format(name=name, shape=tuple(weights.shape),
                                                     period=period)
        result = attempt(answer, *args)
        if isinstance(result, np.ndarray):
            result = torch.from_numpy(result)
        expected = reference(*args)
        _shape_mistake(result, batch, layers, heads, what)
        if (isinstance(result, torch.Tensor) and result.shape == expected.shape
                and result.is_floating_point()):
            got = result.detach().double()
            if not torch.allclose(got, expected.double(), atol=1e-5):
                for wrong, message in mistakes(weights.double(), period):
                    if torch.allclose(got, wrong, atol=1e-5):
                        raise Incorrect(message.format(what=what))
        expect_close(result, expected, what, atol=1e-5, rtol=1e-4)


def _check_induction_scores(answer):
    _check_scores(answer, induction_scores, _score_mistakes, "induction_scores", True)


def _reference_induction_scores(weights, period):
    queries = torch.arange(period, weights.shape[-1])  # the repeat: tokens seen before
    picked = weights[..., queries, queries - period + 1]  # (batch, layers, heads, queries)
    return picked.mean(dim=(0, 3))  # (layers, heads)


induction_score = Exercise(
    title=N_("the induction score"),
    checker=_check_induction_scores,
    reference=_reference_induction_scores,
    hints=(
        N_("At query t of the repeat the token also stood at t - period; the token after it, "
           "the one to copy, is at t - period + 1."),
        N_("queries = torch.arange(period, seq_len); weights[..., queries, queries - period + 1] "
           "picks one weight per query: (batch, layers, heads, queries)."),
        N_("Average over the batch (dim 0) and the queries (the last dim): .mean(dim=(0, 3))."),
    ),
)


# ------------------------------------------------------------------ the previous-token score
def _previous_mistakes(weights, period):
    n = weights.shape[-1]
    return (
        (_offset_mean(weights, 0, 0), N_(
            "{what}: you scored the weight each token gives itself (the diagonal); the previous "
            "token is at t - 1")),
        (_offset_mean(weights, 2, 2), N_(
            "{what}: you scored the weight on t - 2; the previous token is at t - 1")),
        (_offset_mean(weights, 1, 1) * (n - 1) / n, N_(
            "{what}: you averaged over seq_len queries, position 0 included; position 0 has no "
            "previous token (its t - 1 = -1 wraps around to the last key), so average over the "
            "seq_len - 1 positions t >= 1")),
        (_offset_mean(weights.transpose(-1, -2), 1, 1), N_(
            "{what}: you read weights[..., key, query]; the last two axes are (query, key): row t "
            "is what query t gives each key")),
        (_offset_mean(weights, 1, 1, reduce="sum"), N_(
            "{what}: you summed the weights; the score is their mean over the batch and the "
            "query positions, a number between 0 and 1")),
    )


def _check_previous_token_scores(answer):
    _check_scores(answer, previous_token_scores, _previous_mistakes, "previous_token_scores",
                  False)


def _reference_previous_token_scores(weights):
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)  # (..., seq_len - 1): t -> t - 1
    return below.mean(dim=(0, 3))  # (layers, heads)


previous_token_score = Exercise(
    title=N_("the previous-token score"),
    checker=_check_previous_token_scores,
    reference=_reference_previous_token_scores,
    hints=(
        N_("The weight from query t to key t - 1 sits just below the diagonal of each (seq_len, "
           "seq_len) pattern."),
        N_("torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1) gives those weights, "
           "(batch, layers, heads, seq_len - 1)."),
        N_("Average over the batch and the positions: .mean(dim=(0, 3))."),
    ),
)


# ------------------------------------------------------------------ where to look
def _reference_induction_targets(tokens):
    targets = torch.full_like(tokens, -1)
    last_seen = {}  # token id -> the position it was last seen at
    for t, token in enumerate(tokens.tolist()):
        if token in last_seen:
            targets[t] = last_seen[token] + 1  # the token that came after it
        last_seen[token] = t
    return targets


def _target_cases():
    generator = torch.Generator().manual_seed(0)
    return (torch.tensor([5, 7, 5, 9, 5]),
            torch.randint(6, (24,), generator=generator),  # many tokens occur three times
            torch.tensor([3, 3, 3, 1, 3]),
            torch.arange(7),  # nothing repeats
            torch.randint(4, (15,), generator=generator),
            # ids of a real vocabulary (up to 50 000), and a long sequence: a lookup table sized
            # for the small ids above, or a list of positions per id, does not pass
            torch.tensor([31999, 50256, 7, 31999, 40000, 50256, 7, 50256, 1000]),
            torch.randint(30, (200,), generator=generator) * 1009)


def _target_mistakes(tokens):
    n = len(tokens)
    same = tokens[:, None] == tokens[None, :]  # (n, n): same token at query t and key s
    before = torch.ones(n, n, dtype=torch.bool).tril(-1)  # s < t
    positions = torch.arange(n).expand(n, n)
    earlier = torch.where(same & before, positions, -1)
    latest = earlier.max(dim=1).values  # the most recent earlier occurrence, or -1
    first = torch.where(same & before, positions, n).min(dim=1).values
    first = torch.where(first == n, -1, first)
    with_itself = torch.where(same & before.logical_or(torch.eye(n, dtype=torch.bool)),
                              positions, -1).max(dim=1).values
    return (
        (latest, N_(
            "{what}: you returned the earlier occurrence itself; the head looks one past it, at "
            "the token that came next (occurrence + 1)")),
        (torch.where(first >= 0, first + 1, -1), N_(
            "{what}: you used the first occurrence; when a token occurred several times, use "
            "the most recent one before t")),
        (with_itself + 1, N_(
            "{what}: you counted position t itself as an earlier occurrence; only positions "
            "before t count")),
        (torch.where(latest >= 0, latest + 1, 0), N_(
            "{what}: a token that has not occurred before t should get -1, not 0 (position 0 "
            "is a real position)")),
        (torch.where(latest >= 0, latest + 1, n), N_(
            "{what}: a token that has not occurred before t should get -1")),
        (torch.where(latest >= 0, latest + 2, -1), N_(
            "{what}: your positions are one too far: the target is the earlier occurrence + 1")),
    )


def _as_positions(result, what):
    if isinstance(result, (list, tuple, np.ndarray)):
        array = np.asarray(result)
        if array.dtype.kind not in "iub":
            raise Incorrect(_(
                "{what} should hold integer positions, got values of dtype {dtype}").format(
                what=what, dtype=array.dtype))
        result = torch.from_numpy(array.astype(np.int64))
    if isinstance(result, torch.Tensor) and result.is_floating_point():
        raise Incorrect(_(
            "{what} should hold integer positions (dtype torch.long), got {dtype}: a position "
            "indexes a sequence").format(what=what, dtype=result.dtype))
    return result


def _check_induction_targets(answer):
    for tokens in _target_cases():
        ids = tokens.tolist()
        shown = (str(ids) if len(ids) <= 24 else
                 "[" + ", ".join(map(str, ids[:8])) + f", … ({len(ids)} ids)]")
        what = _("induction_targets({tokens})").format(tokens=shown)
        result = _as_positions(attempt(answer, tokens), what)
        expected = _reference_induction_targets(tokens)
        if isinstance(result, torch.Tensor) and result.shape == expected.shape and not \
                torch.equal(result.long(), expected):
            for wrong, message in _target_mistakes(tokens):
                if torch.equal(result.long(), wrong):
                    raise Incorrect(message.format(what=what))
        if isinstance(result, torch.Tensor) and result.dtype == torch.bool:
            raise Incorrect(_(
                "{what} should hold positions, got booleans").format(what=what))
        expect_close(result.long() if isinstance(result, torch.Tensor) else result,
                     expected, what, atol=0, rtol=0)


induction_targets = Exercise(
    title=N_("where an induction head should look"),
    checker=_check_induction_targets,
    reference=_reference_induction_targets,
    hints=(
        N_("Walk the sequence once, keeping in a dict the last position each token was seen at."),
        N_("At position t, look the token up before you store t for it: otherwise you find t "
           "itself."),
        N_("The target is the stored position + 1, or -1 when the token is not in the dict yet."),
    ),
)
