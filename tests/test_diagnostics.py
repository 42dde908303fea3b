"""diagnose() catches each gallery bug with the intended probe and passes correct attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import diagnostics as d
from course_utils.attention import MultiHeadAttention, SelfAttention, scaled_dot_product_attention
from course_utils.attention_bugs import (
    BUGS,
    SharedWeightSelfAttention,
    correct_attention,
    torch_attention,
)
from course_utils.exercises import CORRECT, NOT_ATTEMPTED
from course_utils.exercises.debugging import (
    buggy_encoder_attention,
    buggy_half_precision_attention,
    fix_encoder_attention,
    fix_half_precision_attention,
)
from course_utils.masks import causal_mask, expand_padding_mask, padding_mask
from tests.exercise_checks import assert_incorrect

CORRECT_FUNCTIONS = [correct_attention, torch_attention, scaled_dot_product_attention]

# What each bug's intended finding must say: the words that send the learner to the cause.
EXPECTED_ADVICE = {
    "softmax over the wrong dim": "columns of the weights sum to 1",
    "mask applied after the softmax": "zeroed after the softmax",
    "missing 1/sqrt(d_k) scale": "not divided by sqrt(d_k)",
    "one shared W for Q, K and V": "score(i, j) = score(j, i)",
    "mask broadcast over the wrong axis": "broadcast over the wrong axis",
    "K transposed on the wrong dims": "k.transpose(-2, -1)",
    "inverted padding mask": "read the other way round",
    "-1e9 fill in float16": "does not fit in float16",
    "hand-written softmax": "exp() overflowed",
}
# Bugs that must trip only their own probe: a false alarm elsewhere would send the learner
# to the wrong place.
SINGLE_PROBE_BUGS = {"missing 1/sqrt(d_k) scale", "one shared W for Q, K and V",
                     "K transposed on the wrong dims", "-1e9 fill in float16",
                     "hand-written softmax"}


@pytest.mark.parametrize("attention", CORRECT_FUNCTIONS, ids=lambda f: f.__name__)
def test_correct_functions_pass_every_probe(attention):
    report = d.diagnose(attention)
    assert report.passed, str(report)
    statuses = {f.probe: f.status for f in report.findings}
    # Only the module-only probe may be skipped for a function.
    assert statuses == {p: d.SKIP if p == d.SHARED_QKV else d.PASS for p in d.PROBES}


@pytest.mark.parametrize("module", [SelfAttention(16, 16, 16), MultiHeadAttention(16, 4)],
                         ids=lambda m: type(m).__name__)
def test_correct_modules_pass_every_probe_they_can_run(module):
    report = d.diagnose(module)
    assert report.passed, str(report)
    assert [f.probe for f in report.findings if f.status == d.SKIP] == [d.SCORE_SCALE]


def test_torch_wrapper_matches_torch_and_course_attention():
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=generator, dtype=torch.float64)
               for _ in range(3))
    mask = expand_padding_mask(padding_mask([5, 2])) & causal_mask(5)  # (2, 1, 5, 5)
    output, weights = torch_attention(q, k, v, mask=mask)
    torch.testing.assert_close(output, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    expected_output, expected_weights = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(output, expected_output)
    torch.testing.assert_close(correct_attention(q, k, v, mask=mask)[1], expected_weights)


def test_the_gallery_has_the_eight_bugs_of_the_issue_and_more():
    assert len(BUGS) >= 8
    assert {bug.title for bug in BUGS} == set(EXPECTED_ADVICE)
    assert all(bug.implementation.__doc__ for bug in BUGS), "every bug says what is wrong"


@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.title)
def test_each_bug_is_caught_by_its_probe_with_advice(bug):
    report = d.diagnose(bug.build())
    finding = report[bug.caught_by]
    assert finding.status == d.FAIL, str(report)
    assert EXPECTED_ADVICE[bug.title] in finding.message, finding.message
    if bug.title in SINGLE_PROBE_BUGS:
        assert [f.probe for f in report.failures] == [bug.caught_by], str(report)


def test_mask_after_softmax_also_leaks_the_future_though_its_masked_weights_are_zero():
    report = d.diagnose(next(b for b in BUGS if b.title.startswith("mask applied")).build())
    assert report[d.MASKED_WEIGHTS].passed
    assert report[d.CAUSAL_LEAK].status == d.FAIL
    assert "information flows from the future" in report[d.CAUSAL_LEAK].message


def test_scale_probe_recognises_division_by_d_k():
    def divided_by_d_k(q, k, v, mask=None):
        return scaled_dot_product_attention(q, k, v, mask=mask, scale=1 / q.shape[-1])

    finding = d.diagnose(divided_by_d_k)[d.SCORE_SCALE]
    assert finding.status == d.FAIL and "divided by d_k instead of sqrt(d_k)" in finding.message


def test_dtype_and_device_probe_catches_a_cpu_tensor_and_an_upcast():
    def mask_made_on_cpu(q, k, v, mask=None):
        n = q.shape[-2]
        own_causal = torch.ones(n, n, dtype=torch.bool).tril()  # no device=q.device
        return scaled_dot_product_attention(q, k, v, mask=own_causal)

    def upcast(q, k, v, mask=None):
        output, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return output.float(), weights.float()

    finding = d.diagnose(mask_made_on_cpu)[d.DTYPE_DEVICE]
    assert finding.status == d.FAIL and "device=q.device" in finding.message
    finding = d.diagnose(upcast)[d.DTYPE_DEVICE]
    assert finding.status == d.FAIL and "float64 inputs the output is torch.float32" in (
        finding.message)


def test_a_function_that_raises_everywhere_fails_every_probe_without_raising():
    def broken(q, k, v, mask=None):
        raise RuntimeError("boom")

    report = d.diagnose(broken)
    assert not report.passed
    assert report[d.SHAPES].status == d.FAIL and "raised RuntimeError" in report[d.SHAPES].message
    assert all(f.status == d.FAIL for f in report.findings if f.probe != d.SHARED_QKV)


def test_diagnose_leaves_the_module_and_the_global_random_state_alone():
    module = SharedWeightSelfAttention(16, 16)
    before = {name: p.clone() for name, p in module.state_dict().items()}
    state = torch.get_rng_state()
    d.diagnose(module)
    assert torch.equal(torch.get_rng_state(), state)
    for name, p in module.state_dict().items():
        assert p.dtype == torch.float32 and p.device.type == "cpu"
        assert torch.equal(p, before[name])


def test_bad_subjects_get_a_message():
    with pytest.raises(TypeError, match="needs an instance"):
        d.diagnose(SelfAttention)
    with pytest.raises(TypeError, match="expects an attention function"):
        d.diagnose(42)

    class NoWidth(torch.nn.Module):
        def forward(self, x, mask=None):
            return x, x

    with pytest.raises(ValueError, match="pass it: diagnose"):
        d.diagnose(NoWidth())
    with pytest.raises(ValueError, match="only for modules"):
        d.diagnose(correct_attention, d_model=8)


def test_report_reads_one_line_per_probe_and_looks_up_by_name():
    report = d.diagnose(BUGS[0].build())
    text = str(report)
    assert text.startswith(f"diagnose({BUGS[0].implementation.__name__}): ")
    for finding in report.findings:
        assert finding.probe in text
    assert "✗ rows sum to 1" in text and "✓ shapes" in text
    with pytest.raises(KeyError, match="no probe named"):
        report["speed"]


def test_the_fixed_reference_equals_attention_math():
    generator = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(3, 4, 8, generator=generator, dtype=torch.float64) for _ in range(3))
    weights = torch.softmax(q @ k.mT / math.sqrt(8), dim=-1)
    torch.testing.assert_close(correct_attention(q, k, v)[1], weights)


# -- exercises -----------------------------------------------------------------------------
@pytest.mark.parametrize("exercise", [fix_encoder_attention, fix_half_precision_attention],
                         ids=lambda e: e.title)
def test_reference_solutions_pass(exercise):
    verdict = exercise.evaluate(exercise.reference)
    assert verdict.status == CORRECT, verdict.message


@pytest.mark.parametrize("exercise", [fix_encoder_attention, fix_half_precision_attention],
                         ids=lambda e: e.title)
def test_stub_is_not_attempted(exercise):
    def stub(q, k, v, mask=None):
        raise NotImplementedError

    assert exercise.evaluate(stub).status == NOT_ATTEMPTED


def _half_fixed_encoder(q, k, v, mask=None):  # softmax fixed, mask still inverted
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _finite_fill_too_small(q, k, v, mask=None):  # transpose fixed, a float32-only fill
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _transpose_still_wrong(q, k, v, mask=None):  # fill fixed, transpose still from the front
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _forgot_the_scale(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


@pytest.mark.parametrize("exercise, answer, expected", [
    (fix_encoder_attention, buggy_encoder_attention, "columns of the weights sum to 1"),
    (fix_encoder_attention, buggy_encoder_attention, "read the other way round"),
    (fix_encoder_attention, _half_fixed_encoder, "read the other way round"),
    (fix_encoder_attention, _forgot_the_scale, "not divided by sqrt(d_k)"),
    (fix_half_precision_attention, buggy_half_precision_attention,
     "2 probes of diagnose() still fail"),
    (fix_half_precision_attention, _finite_fill_too_small, "does not fit in float16"),
    (fix_half_precision_attention, _transpose_still_wrong, "k.transpose(-2, -1)"),
])
def test_typical_wrong_answers_get_the_intended_message(exercise, answer, expected):
    assert_incorrect(exercise, answer, expected)


def test_a_silent_wrong_output_is_caught_after_the_probes():
    def half_the_output(q, k, v, mask=None):
        output, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return output / 2, weights

    assert_incorrect(fix_encoder_attention, half_the_output, "output = weights @ v")
