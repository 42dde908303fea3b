"""Lesson 08 exercises: fix two broken attention functions, with diagnose() as the judge.

Each exercise starts from a buggy function (printed in the notebook) with two bugs. The
checker runs :func:`course_utils.diagnostics.diagnose` on the learner's fix and reports the
probes that still fail (its float64 probes allow 1e-6), then compares output and weights
with the course's attention within 1e-5 + 1e-4·|expected| on two masked inputs:
``(batch, n_q, d_k)`` with a causal mask, and ``(batch, num_heads, n_q, d_k)`` with
n_q ≠ n_k, d_v ≠ d_k and a key padding mask.
"""

from __future__ import annotations

import math

import torch

from course_utils.diagnostics import SEE_SHAPES, diagnose
from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_stable,
    far_from_zero,
    reject_half_precision,
)
from course_utils.language import N_, _
from course_utils.learner_code import raised_by_learner
from course_utils.nn.attention import scaled_dot_product_attention
from course_utils.nn.masks import causal_mask, expand_padding_mask, padding_mask


def buggy_encoder_attention(q, k, v, mask=None):
    """Attention for a padded encoder batch, copied from code with other conventions.

    q ``(batch, n_q, d_k)``, k ``(batch, n_k, d_k)``, v ``(batch, n_k, d_v)``, mask bool
    broadcastable to ``(batch, n_q, n_k)``, True = may attend. Two bugs: run diagnose() on it.

    Used in lesson 08.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=1)
    return weights @ v, weights


def buggy_half_precision_attention(q, k, v, mask=None):
    """Attention that works in float32 on (batch, seq_len, d_k) and nowhere else.

    It should also work with a heads axis, (batch, heads, seq_len, d_k), and in float16.
    Two bugs: run diagnose() on it.

    Used in lesson 08.
    """
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _fixed_encoder_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, n_q, n_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # True = may attend: fill the False
    weights = torch.softmax(scores, dim=-1)  # over the keys, the last axis
    return weights @ v, weights


def _fixed_half_precision_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # last two axes, heads or not
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # -inf exists in every float dtype
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _comparison_cases():
    generator = torch.Generator().manual_seed(8)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    yield (N_("under a causal mask, (batch, n_q, d_k) inputs"),
           (draw(2, 6, 8), draw(2, 6, 8), draw(2, 6, 12)), causal_mask(6))
    yield (N_("under a padding mask, (batch, num_heads, n_q, d_k) inputs with n_q ≠ n_k"),
           (draw(2, 3, 5, 8), draw(2, 3, 7, 8), draw(2, 3, 7, 12)),
           expand_padding_mask(padding_mask([7, 4])))
    # Scores in the thousands, positive and negative (each row shifted by its own offset):
    # exp() without the row's max overflows, and a finite fill such as -30 or -1e4 sits above
    # the real scores of the rows shifted down. Other batches, head counts and lengths.
    q, k = far_from_zero(draw(3, 4, 5, 6), draw(3, 4, 5, 6))
    yield (N_("with scores in the thousands under a causal mask, (batch, num_heads, n_q, d_k) "
              "inputs"), (q, k, draw(3, 4, 5, 7)), causal_mask(5))
    q, k = far_from_zero(draw(1, 9, 4), draw(1, 9, 4))
    yield (N_("with scores in the thousands under a padding mask, one sequence (batch, n_q, d_k)"),
           (q, k, draw(1, 9, 3)), padding_mask([6], max_len=9))


def _require_probes_pass(answer):
    failures = diagnose(answer).failures
    if not failures:
        return
    # Probes that failed only because the shapes probe did are named, not repeated.
    echoes = [f.probe for f in failures if f.message.endswith(str(SEE_SHAPES))]
    listed = " ".join(f"[{f.title}] {f.message}" for f in failures if f.probe not in echoes)
    if echoes:
        listed += _(" [{probes}] right without heads, raised with a heads axis (see shapes)."
                    ).format(probes=_(", ").join(echoes))
    still_failing = (_("1 probe of diagnose() still fails: {listed}") if len(failures) == 1
                     else _("{count} probes of diagnose() still fail: {listed}"))
    raise Incorrect(still_failing.format(count=len(failures), listed=listed))


def _check_with_diagnostics(answer):
    cases = list(_comparison_cases())
    _case, (q, k, v), mask = cases[0]
    try:
        result = attempt(answer, q, k, v, mask=mask)
    except Exception as error:
        if raised_by_learner(error):
            _require_probes_pass(answer)  # their findings say more than the bare exception
        raise
    if isinstance(result, torch.Tensor):
        raise Incorrect(_(
            "your function returned one tensor of shape {result_shape}; return the pair: return "
            "weights @ v, weights").format(result_shape=tuple(result.shape)))
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise Incorrect(_("return two tensors: return weights @ v, weights"))
    # float16 out of float64 in: rounding, which the probes would report as other mistakes.
    for value, expected, what in zip(result, scaled_dot_product_attention(q, k, v, mask=mask),
                                     (_("the output"), _("the weights")), strict=True):
        reject_half_precision(value, expected, what)
    _require_probes_pass(answer)
    for what, (q, k, v), mask in cases:
        output, weights = attempt(answer, q, k, v, mask=mask)
        expected_output, expected_weights = scaled_dot_product_attention(q, k, v, mask=mask)
        expect_stable(weights, _("the weights {case}").format(case=what))
        blocked = ~mask.expand(expected_weights.shape)
        if isinstance(weights, torch.Tensor) and weights.shape == expected_weights.shape \
                and bool((weights.detach().double()[blocked].abs() > 1e-6).any()):
            raise Incorrect(_(
                "a blocked key gets weight {case}: a finite fill (such as -30 or -1e4) is not "
                "below every real score once the scores are far from 0. Fill with float('-inf'), "
                "which every float dtype has").format(case=what))
        expect_close(weights, expected_weights, _("the weights {case}").format(case=what))
        expect_close(output, expected_output, _("the output {case}").format(case=what))


fix_encoder_attention = Exercise(
    title=N_("fix the encoder attention"),
    checker=_check_with_diagnostics,
    reference=_fixed_encoder_attention,
    hints=(
        N_("Run print(diagnose(buggy_encoder_attention)) and read the failing probes one by one."),
        N_(
            "For scores (batch, n_q, n_k), which axis holds the keys? The softmax must run over "
            "it."),
        N_("masked_fill fills where its mask is True; in this course True means 'may attend'."),
    ),
)

fix_half_precision_attention = Exercise(
    title=N_("fix the attention for heads and float16"),
    checker=_check_with_diagnostics,
    reference=_fixed_half_precision_attention,
    hints=(
        N_(
            "Run print(diagnose(buggy_half_precision_attention)): read the 'shapes' and 'float16 "
            "masking' probes; the others fail only because the shapes one does."),
        N_("With a heads axis, k is (batch, heads, seq_len, d_k): what does transpose(1, 2) swap?"),
        N_("torch.finfo(torch.float16).max is 65504: -1e9 does not fit, float('-inf') does."),
    ),
)
