"""Lesson 15 exercises: a decoder's two masks, the cross-attention step, the alignment score."""

from __future__ import annotations

import math

import torch

from course_utils.data.number_words import DIGITS
from course_utils.exercises import (
    Exercise,
    Incorrect,
    as_number,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
    reject_half_precision,
)
from course_utils.language import N_, _

# --- Exercise 1: the two masks of a decoder block --------------------------------------------

def _decoder_masks_reference(src_padding_mask, n_tgt):
    """src_padding_mask (batch, n_src), True at real source tokens -> (self_mask, cross_mask).

    self_mask (n_tgt, n_tgt): causal, character i reads characters 0..i.
    cross_mask (batch, 1, 1, n_src): every head and every character reads every real word.
    """
    self_mask = torch.ones(n_tgt, n_tgt, dtype=torch.bool).tril()  # (n_tgt, n_tgt)
    cross_mask = src_padding_mask[:, None, None, :]  # (batch, 1, 1, n_src)
    return self_mask, cross_mask


def _padding(lengths, n_src):
    return torch.arange(n_src)[None, :] < torch.tensor(lengths)[:, None]  # (batch, n_src)


def _as_scores_mask(mask, shape, what):
    """The learner's mask broadcast to the scores' ``shape`` (batch, heads, n_q, n_k)."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise Incorrect(_("{what} should be a bool tensor (True = may attend), got {got}").format(
            what=what, got=got))
    if mask.dim() not in (2, 4):
        raise Incorrect(_(
            "{what} has shape {got}: a mask is (n_q, n_k), shared by the batch, or has as many "
            "axes as the scores (batch, heads, n_q, n_k), with 1 where it is shared").format(
            what=what, got=tuple(mask.shape)))
    try:
        return torch.broadcast_to(mask, shape)
    except RuntimeError:
        raise Incorrect(_(
            "{what} has shape {got}, which does not broadcast to the scores (batch, heads, n_q, "
            "n_k) = {shape}").format(what=what, got=tuple(mask.shape), shape=tuple(shape))
        ) from None


def _check_decoder_masks(answer):
    # n_tgt differs from n_src both ways, and the batch's sentences have different lengths.
    for lengths, n_src, n_tgt, heads in (([5, 2, 6], 6, 4, 2), ([3, 1], 3, 7, 3)):
        padding = _padding(lengths, n_src)
        result = attempt(answer, padding.clone(), n_tgt)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise Incorrect(_("return two masks: (self_mask, cross_mask)"))
        want_self, want_cross = _decoder_masks_reference(padding, n_tgt)
        batch = len(lengths)
        self_mask = _as_scores_mask(result[0], (batch, heads, n_tgt, n_tgt),
                                    _("self_mask"))
        if isinstance(result[1], torch.Tensor) and tuple(result[1].shape) == (batch, n_src):
            raise Incorrect(_(
                "cross_mask has shape (batch, n_src) = {got}: the scores are (batch, heads, "
                "n_tgt, n_src), so give it the heads and query axes, (batch, 1, 1, n_src)").format(
                got=tuple(result[1].shape)))
        cross_mask = _as_scores_mask(result[1], (batch, heads, n_tgt, n_src), _("cross_mask"))
        where = _("with n_tgt={n_tgt}, n_src={n_src}, lengths={lengths}").format(
            n_tgt=n_tgt, n_src=n_src, lengths=lengths)
        if torch.equal(self_mask, ~want_self.expand_as(self_mask)):
            raise Incorrect(_("{where} self_mask is flipped: True should mean 'may attend'"
                              ).format(where=where))
        if (self_mask & ~want_self).any():
            raise Incorrect(_(
                "{where} self_mask lets a character read a later one: use the lower triangle "
                "(tril), diagonal included").format(where=where))
        if (~self_mask & want_self).any():
            raise Incorrect(_(
                "{where} self_mask hides a character from one it may read: keep the whole lower "
                "triangle, diagonal included (a character reads itself)").format(where=where))
        want = want_cross.expand_as(cross_mask)
        if torch.equal(cross_mask, ~want):
            raise Incorrect(_(
                "{where} cross_mask is flipped: True should mark the real source words, which "
                "is what src_padding_mask already holds").format(where=where))
        if (cross_mask & ~want).any():
            raise Incorrect(_(
                "{where} cross_mask lets a character read padding: take src_padding_mask, "
                "put on the last axis, (batch, 1, 1, n_src)").format(where=where))
        if (~cross_mask & want).any():
            causal = torch.ones(n_tgt, n_src, dtype=torch.bool).tril()
            if not (cross_mask & ~causal).any():
                raise Incorrect(_(
                    "{where} cross_mask is causal, but the whole source is known before the "
                    "first character is written: cross-attention hides only the padding"
                ).format(where=where))
            raise Incorrect(_(
                "{where} cross_mask hides a real source word from a character: it should be "
                "True wherever src_padding_mask is").format(where=where))


decoder_masks = Exercise(
    title=N_("the two masks of a decoder block"),
    checker=_check_decoder_masks,
    reference=_decoder_masks_reference,
    hints=(
        N_("Self-attention in the decoder is causal: a lower triangle (n_tgt, n_tgt). "
           "Cross-attention has no causal part: only the source's padding is hidden."),
        N_("The scores of cross-attention are (batch, heads, n_tgt, n_src): index the padding "
           "mask as src_padding_mask[:, None, None, :]."),
    ),
)


# --- Exercise 2: the cross-attention step ----------------------------------------------------

def _cross_attention_reference(q, k, v, src_padding_mask):
    """q (batch, heads, n_tgt, d_k) from the decoder; k, v (batch, heads, n_src, d_k) from the
    encoder; src_padding_mask (batch, n_src), True at real words -> (output, weights)."""
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (batch, heads, n_tgt, n_src)
    mask = src_padding_mask[:, None, None, :]  # (batch, 1, 1, n_src)
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # each character's row sums to 1 over the words
    return weights @ v, weights  # (batch, heads, n_tgt, d_k), (batch, heads, n_tgt, n_src)


def _cross_inputs(batch, heads, n_tgt, n_src, d_k, lengths, generator, spread):
    q = torch.randn(batch, heads, n_tgt, d_k, generator=generator) * spread
    k = torch.randn(batch, heads, n_src, d_k, generator=generator)
    v = torch.randn(batch, heads, n_src, d_k, generator=generator)
    return q, k, v, _padding(lengths, n_src)


def _weights_with(q, k, padding, scale, causal=False, dim=-1):
    scores = q @ k.transpose(-2, -1) * scale
    keep = padding[:, None, None, :].expand_as(scores)
    if causal:
        keep = keep & torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=dim)


def _same(value, expected) -> bool:
    """``value`` equals ``expected`` to the checker's tolerance, NaN where it has NaN."""
    if not (isinstance(value, torch.Tensor) and value.is_floating_point()
            and value.shape == expected.shape):
        return False
    return torch.allclose(value.detach().double().nan_to_num(-1.0),
                          expected.double().nan_to_num(-1.0), atol=1e-5, rtol=1e-4)


def _check_cross_attention(answer):
    generator = torch.Generator().manual_seed(15)
    # scores in the hundreds in the last case: a softmax without care would overflow
    for batch, heads, n_tgt, n_src, d_k, lengths, spread in (
            (3, 2, 4, 6, 8, [6, 3, 5], 1.0), (2, 4, 7, 5, 4, [2, 5], 1.0),
            (1, 3, 3, 4, 16, [4], 60.0)):
        q, k, v, padding = _cross_inputs(batch, heads, n_tgt, n_src, d_k, lengths, generator,
                                         spread)
        result = attempt(answer, q, k, v, padding)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise Incorrect(_("return (output, weights), two tensors"))
        output, weights = result
        want_out, want_w = _cross_attention_reference(q, k, v, padding)
        where = _("for batch={batch}, heads={heads}, n_tgt={n_tgt}, n_src={n_src}").format(
            batch=batch, heads=heads, n_tgt=n_tgt, n_src=n_src)
        if isinstance(weights, torch.Tensor) and tuple(weights.shape) == (
                batch, heads, n_src, n_tgt) and n_src != n_tgt:
            raise Incorrect(_(
                "{where} weights are (batch, heads, n_src, n_tgt): one row per character, one "
                "column per source word, (batch, heads, n_tgt, n_src)").format(where=where))
        expect_shape(weights, want_w.shape, _("the weights (batch, heads, n_tgt, n_src)"))
        expect_shape(output, want_out.shape, _("the output (batch, heads, n_tgt, d_k)"))
        scale = 1 / math.sqrt(d_k)
        unnormalised = torch.softmax(q @ k.transpose(-2, -1) * scale, -1) * padding[
            :, None, None, :]
        known = (
            (_weights_with(q, k, padding, 1.0),
             _("{where} the scores are not divided by sqrt(d_k)")),
            (_weights_with(q, k, torch.ones_like(padding), scale),
             _("{where} padded source words get weight: mask them before the softmax")),
            (_weights_with(q, k, padding, scale, causal=True),
             _("{where} you applied a causal mask, but cross-attention has none: every "
               "character may read every real source word")),
            (_weights_with(q, k, ~padding, scale),
             _("{where} the padding mask is flipped: src_padding_mask is True at real words")),
            (_weights_with(q, k, padding, scale, dim=-2),
             _("{where} the softmax runs over the characters (dim=-2): each character's row "
               "should sum to 1 over the source words, dim=-1")),
            (_weights_with(q, k, padding, 1 / math.sqrt(d_k * heads)),
             _("{where} the scale is 1/sqrt(d_model); each head compares d_k-wide vectors, "
               "so divide by sqrt(d_k)")),
            (unnormalised,
             _("{where} padding was zeroed after the softmax, so the rows no longer sum to 1: "
               "fill the masked scores with -inf before it")),
        )
        for wrong, message in known:  # NaN (a row with no key) compared as NaN
            if not _same(want_w, wrong) and _same(weights, wrong):
                raise Incorrect(message.format(where=where))
        expect_finite(weights, _("the weights"))
        reject_half_precision(weights, want_w, _("the weights"))
        expect_close(weights, want_w, _("the weights"))
        expect_close(output, want_out, _("the output"))


cross_attention_step = Exercise(
    title=N_("the cross-attention step"),
    checker=_check_cross_attention,
    reference=_cross_attention_reference,
    hints=(
        N_("It is lesson 02's formula with q from the decoder and k, v from the encoder: "
           "softmax(q kᵀ / sqrt(d_k)) v."),
        N_("Before the softmax, fill the scores of padded words with -inf, using "
           "src_padding_mask[:, None, None, :]; no causal mask here."),
    ),
)


# --- Exercise 3: the alignment score ---------------------------------------------------------

def _alignment_score_reference(weights, links):
    """weights (n_chars, n_src), one cross-attention row per character; links[t] the index of
    the word that produced character t, or None (the zero, which no word says).
    -> the share of linked characters whose row peaks at their word."""
    scored = [(t, word) for t, word in enumerate(links) if word is not None]
    hits = sum(int(weights[t].argmax()) == word for t, word in scored)
    return hits / len(scored)


def _alignment_cases(generator):
    cases = []
    # no more characters than words, so a row index is also a column index
    for n_chars, n_src, links, right_rows in ((6, 8, [0, 0, 0, 0, 3, 3], (0, 1, 2, 3)),
                                              (7, 7, [0, 0, 3, 3, None, 6, 6], (0, 2)),
                                              (5, 9, [2, None, 2, 8, 5], (0, 2, 3, 4))):
        scores = torch.randn(n_chars, n_src, generator=generator) * 3
        for t in right_rows:  # these rows peak at their word; the others wherever they fall
            scores[t, links[t]] += 10
        cases.append((torch.softmax(scores, -1), links))
    return cases


def _check_alignment_score(answer):
    generator = torch.Generator().manual_seed(151)
    for weights, links in _alignment_cases(generator):
        got = as_number(attempt(answer, weights.clone(), list(links)), _("the score"))
        want = _alignment_score_reference(weights, links)
        if math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9):
            continue
        where = _("for links={links}").format(links=links)
        peaks = weights.argmax(-1).tolist()
        scored = [(t, w) for t, w in enumerate(links) if w is not None]
        hits = sum(peaks[t] == w for t, w in scored)
        column_peaks = weights.argmax(0).tolist()
        if math.isclose(got, hits):
            raise Incorrect(_("{where} you return the count {got:.0f}; return the share, "
                              "hits / characters with a word").format(where=where, got=got))
        if math.isclose(got, hits / len(links)):
            raise Incorrect(_(
                "{where} you divided by every character, {zero} included; {zero} has no word "
                "(None) and is left out of the score").format(where=where, zero=DIGITS[0]))
        if math.isclose(got, sum(float(weights[t, w]) for t, w in scored) / len(scored)):
            raise Incorrect(_(
                "{where} you averaged the weight on the right word; the score asks whether the "
                "row's strongest word (argmax) is the right one").format(where=where))
        if math.isclose(got, sum(int(weights[t].argmin()) == w for t, w in scored)
                        / len(scored)):
            raise Incorrect(_("{where} use argmax (the strongest word), not argmin").format(
                where=where))
        if math.isclose(got, sum(column_peaks[t] == w for t, w in scored) / len(scored)):
            raise Incorrect(_(
                "{where} you took the argmax over the characters (dim 0); a character's "
                "strongest word is the argmax of its row, dim=-1").format(where=where))
        raise Incorrect(_("{where} your score is {got:.3g}; the share is {want:.3g}").format(
            where=where, got=got, want=want))


alignment_score = Exercise(
    title=N_("the alignment score"),
    checker=_check_alignment_score,
    reference=_alignment_score_reference,
    hints=(
        N_("Skip the characters whose link is None; for the others, compare "
           "weights[t].argmax() with links[t]."),
        N_("Return hits / (number of characters with a link), a float between 0 and 1."),
    ),
)
