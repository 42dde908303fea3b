"""Lesson 08 exercises: fix two broken attention functions, with diagnose() as the judge.

Each exercise starts from a buggy function (printed in the notebook) with two bugs. The
checker runs :func:`course_utils.diagnostics.diagnose` on the learner's fix and reports the
probes that still fail, then compares with the course's attention on a masked input.
"""

from __future__ import annotations

import math

import torch

from course_utils.attention import scaled_dot_product_attention
from course_utils.diagnostics import diagnose
from course_utils.exercises import Exercise, Incorrect, attempt, expect_close
from course_utils.masks import causal_mask


def buggy_encoder_attention(q, k, v, mask=None):
    """Attention for a padded encoder batch, copied from code with other conventions.

    q ``(batch, n_q, d_k)``, k ``(batch, n_k, d_k)``, v ``(batch, n_k, d_v)``, mask bool
    broadcastable to ``(batch, n_q, n_k)``, True = may attend. Two bugs: run diagnose() on it.
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


def _check_with_diagnostics(answer):
    generator = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 6, 8, generator=generator, dtype=torch.float64) for _ in range(3))
    mask = causal_mask(6)
    result = attempt(answer, q, k, v, mask=mask)
    if not isinstance(result, tuple) or len(result) != 2:
        raise Incorrect("return two tensors: return output, weights")
    failures = diagnose(answer).failures
    if failures:
        listed = " ".join(f"[{f.probe}] {f.message}" for f in failures)
        count = f"{len(failures)} probe{'s' if len(failures) > 1 else ''}"
        raise Incorrect(f"{count} of diagnose() still fail{'s' if len(failures) == 1 else ''}: "
                        f"{listed}")
    output, weights = result
    expected_output, expected_weights = scaled_dot_product_attention(q, k, v, mask=mask)
    expect_close(weights, expected_weights, "weights under a causal mask")
    expect_close(output, expected_output, "output = weights @ v")


fix_encoder_attention = Exercise(
    title="fix the encoder attention",
    checker=_check_with_diagnostics,
    reference=_fixed_encoder_attention,
    hints=(
        "Run print(diagnose(buggy_encoder_attention)) and read the failing probes one by one.",
        "For scores (batch, n_q, n_k), which axis holds the keys? The softmax must run over it.",
        "masked_fill fills where its mask is True; in this course True means 'may attend'.",
    ),
)

fix_half_precision_attention = Exercise(
    title="fix the attention for heads and float16",
    checker=_check_with_diagnostics,
    reference=_fixed_half_precision_attention,
    hints=(
        "Run print(diagnose(buggy_half_precision_attention)): two probes fail.",
        "With a heads axis, k is (batch, heads, seq_len, d_k): what does transpose(1, 2) swap?",
        "torch.finfo(torch.float16).max is 65504: -1e9 does not fit, float('-inf') does.",
    ),
)
