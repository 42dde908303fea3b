"""Lesson 05 exercises: build a causal + padding mask; attention weights without NaN."""

from __future__ import annotations

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
)
from course_utils.language import N_, _
from course_utils.nn.masks import causal_mask, combine_masks, padding_mask


def _combined_mask_reference(lengths, seq_len):
    """lengths: real length of each sentence (batch,) -> bool (batch, 1, seq_len, seq_len).

    True = may attend: query i sees key j when j <= i and key j is a real token.
    """
    causal = causal_mask(seq_len)  # (seq_len, seq_len)
    keys = padding_mask(lengths, max_len=seq_len)[:, None]  # (batch, 1, 1, seq_len)
    return combine_masks(causal, keys)  # (batch, 1, seq_len, seq_len)


def _first_position(where: torch.Tensor) -> str:
    b, _head, i, j = (int(index) for index in where.nonzero()[0])
    return _("sentence {b}, query {i}, key {j}").format(b=b, i=i, j=j)


def _first_row(where: torch.Tensor) -> str:
    b, head, i = (int(index) for index in where.nonzero()[0])
    return _("sentence {b}, head {head}, query {i}").format(b=b, head=head, i=i)


def _check_combined_mask(answer):
    # seq_len longer than every sentence: the padding must come from seq_len, not max(lengths).
    # then a larger batch with sentences of every kind (full, one token, in between) and one
    # sentence alone: no batch size, length or seq_len written in passes.
    for lengths, seq_len in (([4, 2, 3], 4), ([3, 1], 5), ([7, 1, 12, 4, 9], 12), ([6], 9)):
        try:
            result = attempt(answer, list(lengths), seq_len)
        except RuntimeError as error:  # typically a shape mismatch
            raise Incorrect(_(
                "with lengths={lengths} and seq_len={seq_len} your code raised RuntimeError: "
                "{error}. A batch can be padded beyond its longest sentence: build the padding "
                "mask with max_len=seq_len").format(
                lengths=lengths, seq_len=seq_len, error=error)
            ) from None
        expected = _combined_mask_reference(lengths, seq_len)
        if not isinstance(result, torch.Tensor) or result.dtype != torch.bool:
            got = result.dtype if isinstance(result, torch.Tensor) else type(result).__name__
            raise Incorrect(_(
                "return a bool tensor (True = may attend), got {got}").format(got=got))
        if tuple(result.shape) == tuple(expected.shape[:1] + expected.shape[2:]):
            raise Incorrect(_(
                "shape {result_shape} is (batch, n_q, n_k): add the heads axis, (batch, 1, "
                "seq_len, seq_len) = {expected_shape}, so that it broadcasts over scores (batch, "
                "heads, n_q, n_k)").format(
                result_shape=tuple(result.shape), expected_shape=tuple(expected.shape)))
        expect_shape(result, expected.shape, _("the mask (batch, 1, seq_len, seq_len)"))
        if torch.equal(result, ~expected):
            raise Incorrect(_(
                "your mask is exactly flipped: True should mean 'may attend' (the convention of "
                "this course and of F.scaled_dot_product_attention), not 'blocked'"))
        future = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(diagonal=1)
        if (result & future).any():
            raise Incorrect(_(
                "a query may see a later key ({first_position}): the causal part is missing, uses "
                "triu where tril belongs, or was combined with `|` instead of `&`").format(
                first_position=_first_position(result & future)))
        padded_keys = ~padding_mask(lengths, max_len=seq_len)[:, None]  # (batch, 1, 1, n_k)
        if (result & padded_keys).any():
            raise Incorrect(_(
                "a padded key is allowed ({first_position}): the padding mask must block keys, "
                "i.e. sit on the last axis, (batch, 1, 1, seq_len)").format(
                first_position=_first_position(result & padded_keys)))
        empty_rows = ~result.any(dim=-1) & expected.any(dim=-1)  # (batch, 1, seq_len)
        real_queries = padding_mask(lengths, max_len=seq_len)  # (batch, 1, seq_len)
        if (empty_rows & real_queries).any():
            b, _head, i = (int(index) for index in (empty_rows & real_queries).nonzero()[0])
            raise Incorrect(_(
                "query {i} of sentence {b} allows no key at all: a token must see itself, so keep "
                "the diagonal (tril(), not tril(diagonal=-1))").format(i=i, b=b))
        if empty_rows.any():
            raise Incorrect(_(
                "the padded query rows allow no key at all: you masked the padded *queries*. A "
                "row with no allowed key gives NaN in a plain softmax; mask only the keys"))
        if not torch.equal(result, expected):
            raise Incorrect(_(
                "your mask blocks a key it should allow ({first_position}); a query sees itself "
                "and every earlier real token").format(
                first_position=_first_position(expected & ~result)))


build_combined_mask = Exercise(
    title=N_("build a causal + padding mask"),
    checker=_check_combined_mask,
    reference=_combined_mask_reference,
    hints=(
        N_(
            "Two masks: causal_mask(seq_len) is (seq_len, seq_len); padding_mask(lengths, "
            "max_len=seq_len) is (batch, 1, seq_len)."),
        N_(
            "The padding mask is about keys, so it sits on the last axis; add the heads axis with "
            "[:, None] to make it (batch, 1, 1, seq_len)."),
        N_("A key is allowed only if both masks allow it: combine with & (or combine_masks)."),
    ),
)


_MASKED_AFTER = N_(
    "rows that have allowed keys do not sum to 1: mask the scores before the softmax, not the "
    "weights after it")
_FLIPPED = N_(
    "the mask is flipped: True means 'may attend', so the blocked keys are where the mask is False")


def _safe_weights_reference(scores, mask):
    """scores (..., n_q, n_k), bool mask broadcastable to it -> weights (..., n_q, n_k).

    Softmax over the allowed keys; a row with no allowed key gets all-zero weights.
    """
    row_has_key = mask.any(dim=-1, keepdim=True)  # (..., n_q, 1)
    # Give the empty rows a finite score (0) so their softmax is not 0/0; zero them after.
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~row_has_key, 0.0)
    weights = torch.softmax(scores, dim=-1)
    return weights.masked_fill(~row_has_key, 0.0)


SHIFTED_SCORES = 30_000.0


def _left_padded_case(generator):
    """Scores (batch, num_heads, n_q, n_k) and a causal + left-padding mask with empty rows."""
    lengths = torch.tensor([6, 3, 1])  # real tokens at the end of each sentence of 6
    real = padding_mask(lengths, max_len=6).flip(-1)  # (3, 1, 6), pads on the left
    mask = causal_mask(6) & real[:, None]  # (3, 1, 6, 6)
    scores = 4 * torch.randn(3, 2, 6, 6, generator=generator)
    scores[0, 0, 3, 2] = 120.0  # exp(120) overflows float32: the row max must come off first
    # A blocked key (a future one, and a padding one) with a huge score: a max taken over every
    # key, blocked ones included, makes exp() of every allowed score underflow to 0.
    scores[0, 1, 2, 5] = 200.0
    scores[1, 0, 4, 0] = 200.0
    # Real scores far below 0: the softmax is the same when a row shifts by one number, but a
    # finite fill such as -1e4 is now above every real score and would take the weight.
    scores[1, 1] -= SHIFTED_SCORES
    return scores, mask


def _cached_case(generator):
    """Non-square: 3 new queries over 7 keys, with rows whose every key is masked."""
    mask = torch.rand(2, 1, 3, 7, generator=generator) < 0.5  # (2, 1, n_q, n_k)
    mask[:, :, :, 0] = True
    mask[0, 0, 1] = False  # an empty row in each sentence
    mask[1, 0, 2] = False
    scores = 3 * torch.randn(2, 4, 3, 7, generator=generator)  # (batch, num_heads, n_q, n_k)
    return scores, mask


def _shifted_case(generator):
    """One sentence, 5 heads, a mask without batch or heads axes (n_q, n_k) with an empty row,
    and whole heads shifted by +30 000 and -2 000: exp() overflows unless the row's maximum (over
    the allowed keys) comes off first, and a finite fill is above every real score."""
    mask = causal_mask(8)[4:]  # (4, 8): queries 4..7 of a causal mask
    mask[1] = False  # an empty row
    scores = 3 * torch.randn(1, 5, 4, 8, generator=generator)  # (batch, num_heads, n_q, n_k)
    scores[0, 2] += SHIFTED_SCORES
    scores[0, 4] -= 2_000.0
    return scores, mask


def _overshadowed(scores, mask):
    """(..., n_q): rows whose largest score is a blocked key's, by more than float32's exp()
    range, so that exp(score - max over every key) is 0 for every allowed key."""
    blocked_max = scores.masked_fill(mask, float("-inf")).amax(dim=-1)
    allowed_max = scores.masked_fill(~mask, float("-inf")).amax(dim=-1)
    return blocked_max > allowed_max + 100


def _weights_of(answer, scores, mask, expected_shape):
    weights = attempt(answer, scores, mask)
    expect_shape(weights, expected_shape, _("weights (batch, num_heads, n_q, n_k)"))
    if not weights.is_floating_point():
        raise Incorrect(_(
            "weights should be floating-point, got dtype {dtype}").format(
            dtype=weights.dtype))
    return weights


def _check_safe_weights(answer):
    generator = torch.Generator().manual_seed(7)
    # First every key allowed (n_q != n_k): only the softmax itself is tested.
    scores = torch.randn(2, 3, 4, 5, generator=generator)
    weights = _weights_of(answer, scores, torch.ones(4, 5, dtype=torch.bool), scores.shape)
    if ((weights == 0) | weights.isnan()).all():
        raise Incorrect(_(
            "with every key allowed (a mask of all True) every weight is 0 or NaN: the mask is "
            "flipped. True means 'may attend', so the blocked keys are where the mask is False"))
    if weights.isfinite().all() and torch.allclose(
            weights.double().sum(dim=-2), torch.ones(2, 3, 5, dtype=torch.float64), atol=1e-4):
        raise Incorrect(_(
            "the softmax runs over the queries (dim=-2): it must normalise each row over the "
            "keys, dim=-1"))
    expect_close(weights, torch.softmax(scores.double(), dim=-1),
                 _("weights with every key allowed (a plain softmax over dim=-1)"),
                 atol=1e-6, rtol=1e-5)

    for scores, mask in (_left_padded_case(generator), _cached_case(generator),
                         _shifted_case(generator)):
        empty = ~mask.any(dim=-1).expand(scores.shape[:-1])  # (..., n_q) no allowed key
        full = mask.all(dim=-1).expand(scores.shape[:-1])  # (..., n_q) every key allowed
        expected = _safe_weights_reference(scores.double(), mask)
        got = _weights_of(answer, scores, mask, expected.shape).double()
        nan_rows = got.isnan().any(dim=-1)
        if nan_rows.any():
            if not (nan_rows & ~empty).any():
                raise Incorrect(_(
                    "the rows with no allowed key are NaN: softmax over a row of -inf is 0/0. "
                    "Give those rows a finite score before the softmax (or replace their NaN), "
                    "then set their weights to 0"))
            if torch.equal(nan_rows, full):
                raise Incorrect(_FLIPPED)
            if not (nan_rows & ~empty & ~_overshadowed(scores, mask)).any():
                raise Incorrect(_(
                    "weights are NaN in the rows where a blocked key has a huge score: the maximum "
                    "you subtract must be taken over the allowed keys only (a max over every key "
                    "makes exp() of every allowed score underflow, and 0 / 0 is NaN). Block the "
                    "scores with -inf first, then take the row max"))
            raise Incorrect(_(
                "weights contain NaN in rows that do have allowed keys: did you subtract each "
                "row's maximum before exp? exp(120) overflows float32"))
        expect_finite(got, _("weights"))
        allowed = mask.expand_as(got)
        if (got[~allowed] != 0).any() and (got[allowed] == 0).all():
            raise Incorrect(_FLIPPED)
        sums = got.sum(dim=-1)  # (..., n_q)
        multiplied = torch.softmax(scores.double() * mask, dim=-1)  # blocked scores become 0
        if any(torch.allclose(got, wrong, atol=1e-6) for wrong in (
                multiplied, multiplied * allowed, multiplied * mask.any(dim=-1, keepdim=True))):
            raise Incorrect(_(
                "you multiplied the scores by the mask: a blocked score becomes 0, an ordinary "
                "score that still takes weight in the softmax. Fill the blocked scores with -inf "
                "instead (scores.masked_fill(~mask, float('-inf')))"))
        if torch.allclose(sums[empty], torch.ones_like(sums[empty]), atol=1e-3):
            raise Incorrect(_(
                "the rows with no allowed key sum to 1: a finite fill such as -1e9 or finfo.min "
                "spreads the weight uniformly over keys that are all blocked. Those rows should "
                "be all zero"))
        if torch.allclose(got, torch.softmax(scores.double(), dim=-1) * allowed, atol=1e-6):
            raise Incorrect(str(_MASKED_AFTER))
        zero_rows = (got == 0).all(dim=-1) & ~empty  # (..., n_q): allowed keys, no weight
        # Rows with allowed keys but none of their weight, and no huge blocked score to blame.
        below_fill = ((got * allowed == 0).all(dim=-1) & ~empty
                      & ~_overshadowed(scores, mask))
        if below_fill.any():
            raise Incorrect(_(
                "a row that has allowed keys gets all-zero weights ({first_row}): its real scores "
                "are all near -{shift:.0f} (a softmax does not change when every score of a row "
                "shifts by the same number), and a finite fill such as -20 or -1e4 is above all "
                "of them, so the blocked keys take the weight. Fill the blocked scores with -inf "
                "(or finfo.min)").format(first_row=_first_row(below_fill), shift=SHIFTED_SCORES))
        if zero_rows.any():
            raise Incorrect(_(
                "a row that has allowed keys gets all-zero weights where a blocked key has a huge "
                "score ({first_row}): the maximum you subtract must be taken over the allowed keys "
                "only. Block the scores with -inf first, then take the row max (or use "
                "torch.softmax on the masked scores)").format(
                first_row=_first_row(zero_rows)))
        if not torch.allclose(sums[~empty], torch.ones_like(sums[~empty]), atol=1e-4):
            raise Incorrect(str(_MASKED_AFTER))
        if (got[~allowed] != 0).any():
            raise Incorrect(_(
                "a blocked key gets weight: set blocked scores to -inf before the softmax"))
        if (got[empty] != 0).any():
            raise Incorrect(_("a row with no allowed key should be all zero"))
        if not torch.allclose(sums[~empty], torch.ones_like(sums[~empty]), atol=1e-6, rtol=0):
            raise Incorrect(_(
                "rows that have allowed keys sum to as little as {smallest:.7f}, not 1: a finite "
                "fill such as -20 lets the blocked keys take weight in the softmax (whenever the "
                "real scores are not far above it), and zeroing them afterwards does not give it "
                "back. Fill the blocked scores with -inf (or finfo.min)").format(
                smallest=sums[~empty].min().item()))
        expect_close(got, expected, _("weights"), atol=1e-6, rtol=1e-5)
    _check_gradient(answer)


def _check_gradient(answer):
    """The NaN must stay out of the backward pass too: gradients finite, as the reference's."""
    generator = torch.Generator().manual_seed(8)
    scores, mask = _left_padded_case(generator)
    upstream = torch.randn(scores.shape, generator=generator)
    leaf = scores.clone().requires_grad_(True)
    # The learner's function gets a clone of the leaf (a non-leaf tensor), so the gradient
    # reaches the leaf through it; writing into the scores was rejected by the first attempt.
    weights = attempt(lambda m: answer(leaf.clone(), m), mask)
    if not weights.requires_grad:
        raise Incorrect(_(
            "the weights carry no gradient: keep every step in torch (no .detach(), numpy or "
            ".tolist()), so a model can train through them"))
    try:
        (grad,) = torch.autograd.grad((weights * upstream).sum(), leaf)
    except RuntimeError as error:
        if "inplace" not in str(error):
            raise
        raise Incorrect(_(
            "the weights are right but the backward pass fails: an in-place operation (a method "
            "ending in _) changed a tensor that autograd needs, such as the softmax's output. Use "
            "the out-of-place version there (masked_fill, not masked_fill_)")) from None
    reference = scores.double().requires_grad_(True)
    (expected,) = torch.autograd.grad(
        (_safe_weights_reference(reference, mask) * upstream.double()).sum(), reference)
    if not torch.isfinite(grad).all():
        raise Incorrect(_(
            "the weights are right but the gradient of the scores contains NaN: a NaN made in the "
            "forward pass (softmax of a row of -inf) comes back in the backward pass even when it "
            "was replaced afterwards, e.g. when -inf was added to the scores. Make sure no row of "
            "the softmax's input is all -inf"))
    expect_close(grad, expected, _("the gradient of the scores"),
                 atol=1e-6, rtol=1e-5)


safe_weights = Exercise(
    title=N_("attention weights without NaN"),
    checker=_check_safe_weights,
    reference=_safe_weights_reference,
    hints=(
        N_("Find the empty rows first: mask.any(dim=-1, keepdim=True) is False exactly there."),
        N_(
            "Block the disallowed keys with -inf as usual, but give the empty rows a finite score "
            "(any number, e.g. 0) before the softmax, so it never sees a row of only -inf."),
        N_("After the softmax, set the empty rows' weights to 0 with masked_fill."),
    ),
)
