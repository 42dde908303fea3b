"""diagnose() catches each gallery bug with the intended probe and passes correct attention."""

from __future__ import annotations

import functools
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils import diagnostics as d
from course_utils import text_layout
from course_utils.diagnostics.probe_registry import probe, registered
from course_utils.diagnostics.report import probe_name
from course_utils.experiments.l08_bug_gallery import (
    BUGS,
    SharedWeightSelfAttention,
    additive_mask_nan_to_num,
    correct_attention,
    torch_attention,
)
from course_utils.language import set_language
from course_utils.nn.attention import (
    MultiHeadAttention,
    SelfAttention,
    scaled_dot_product_attention,
)
from course_utils.nn.masks import causal_mask, expand_padding_mask, padding_mask

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
    "dropout left on at evaluation": "dropout is active at evaluation",
    "q scaled in place": "the caller's q had changed",
    "a finite fill of -1e4": "filled with a finite number",
    "a statistic across positions": "a statistic computed across positions",
    "the mask multiplied into the scores": "multiplied into the scores (scores * mask)",
    "log-probabilities as weights": "the weights are log-probabilities",
    "a softmax in float16": "the size of float16's precision",
    "queries centred over the batch": "the sequences of a batch mix",
    "a mask made by multiplying with -inf": "0 × (-inf) is NaN",
    "padded queries that see no key": "the rows of the padded queries are NaN",
    "dropout on the scores in training": "the dropout acts before the softmax, on the scores",
}
# Bugs that must trip only their own probe: a false alarm elsewhere would send the learner
# to the wrong place.
SINGLE_PROBE_BUGS = {"missing 1/sqrt(d_k) scale", "one shared W for Q, K and V",
                     "-1e9 fill in float16", "q scaled in place",
                     "a finite fill of -1e4", "a statistic across positions",
                     "queries centred over the batch", "dropout on the scores in training"}
# Probes that apply to modules only, skipped for a function.
MODULE_ONLY = {d.SHARED_QKV, d.TRAINING_MODE}


@pytest.mark.parametrize("attention", CORRECT_FUNCTIONS, ids=lambda f: f.__name__)
def test_correct_functions_pass_every_probe(attention):
    report = d.diagnose(attention)
    assert report.passed, str(report)
    statuses = {f.probe: f.status for f in report.findings}
    # Only the module-only probe may be skipped for a function.
    assert statuses == {p: d.SKIP if p in MODULE_ONLY else d.PASS for p in d.PROBES}


@pytest.mark.parametrize("module", [SelfAttention(16, 16, 16), MultiHeadAttention(16, 4)],
                         ids=lambda m: type(m).__name__)
def test_correct_modules_pass_every_probe_they_can_run(module):
    report = d.diagnose(module)
    assert report.passed, str(report)
    assert [f.probe for f in report.skipped] == [d.FINITE_FILL, d.SCORE_SCALE, d.OUTPUT_MIX]


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
    report = english_report(bug.title)
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
    assert all(f.status == d.FAIL for f in report.findings if f.probe not in MODULE_ONLY)


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


# -- with a heads axis, n_q ≠ n_k and d_v ≠ d_k ------------------------------------------
def _attention(scale_of, softmax_dim=-1, transpose=(-2, -1), output_factor=1.0):
    """Attention with one piece swappable: how d_k is read, the softmax axis, the transpose."""
    def attention(q, k, v, mask=None):
        scores = q @ k.transpose(*transpose) / math.sqrt(scale_of(q))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=softmax_dim)
        return output_factor * (weights @ v), weights
    return attention


def _d_k(q):
    return q.shape[-1]


def test_softmax_over_dim_2_is_right_without_heads_and_caught_with_them():
    report = d.diagnose(_attention(_d_k, softmax_dim=2))
    finding = report[d.ROWS_SUM_TO_1]
    assert finding.status == d.FAIL, str(report)
    assert "right on (batch, seq_len, d_k) inputs, but with a heads axis" in finding.message
    assert "columns of the weights sum to 1" in finding.message and "dim=-1" in finding.message


def test_scaling_by_q_shape_2_is_caught_with_a_heads_axis():
    finding = d.diagnose(_attention(lambda q: q.shape[2]))[d.SCORE_SCALE]
    assert finding.status == d.FAIL
    assert "divided by sqrt(n_q)" in finding.message and "q.shape[-1]" in finding.message


@pytest.mark.parametrize(("scale_of", "words"), [
    (lambda q: v_width(q), "divided by sqrt(d_v)"),
    (lambda q: q.shape[-2], "divided by sqrt(n_q)"),
    (lambda q: 1.0, "not divided by sqrt(d_k)"),
    (lambda q: q.shape[-1] ** 2, "divided by d_k instead of sqrt(d_k)"),
])
def test_the_scale_probe_names_the_size_that_was_used(scale_of, words):
    finding = d.diagnose(_attention(scale_of))[d.SCORE_SCALE]
    assert finding.status == d.FAIL and words in finding.message, finding.message


def v_width(q):
    # The probes use d_v = 40 for d_k = 64 in the scale probe and 12 for d_k = 8 elsewhere.
    return {64: 40, 8: 12}[q.shape[-1]]


def test_k_transposed_from_the_front_of_a_heads_layout_is_caught_without_heads():
    finding = d.diagnose(_attention(_d_k, transpose=(2, 3)))[d.SHAPES]
    assert finding.status == d.FAIL and "works with a heads axis, but" in finding.message


def test_an_output_divided_again_by_sqrt_d_k_is_caught_by_the_output_probe():
    report = d.diagnose(_attention(_d_k, output_factor=1 / math.sqrt(8)))
    assert [f.probe for f in report.failures] == [d.OUTPUT_MIX], str(report)
    assert "times 0.354" in report[d.OUTPUT_MIX].message
    assert "scale belongs on the scores" in report[d.OUTPUT_MIX].message


def test_an_output_not_made_from_the_returned_weights_is_caught():
    def other_weights(q, k, v, mask=None):
        output, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return scaled_dot_product_attention(q, k, v, mask=mask, scale=1.0)[0], weights

    finding = d.diagnose(other_weights)[d.OUTPUT_MIX]
    assert finding.status == d.FAIL and "differs from weights @ v" in finding.message


@pytest.mark.parametrize(("result", "words"), [
    (lambda o, w: o, "returned one tensor of shape"),
    (lambda o, w: (o, w, w), "a tuple of 3 items instead of the pair (output, weights)"),
    (lambda o, w: {"output": o}, "returned dict instead of the pair"),
    (lambda o, w: (o, w.tolist()), "returned (Tensor, list) instead of two tensors"),
])
def test_a_function_that_does_not_return_the_pair_is_told_exactly_that(result, words):
    def attention(q, k, v, mask=None):
        return result(*scaled_dot_product_attention(q, k, v, mask=mask))

    report = d.diagnose(attention)
    ran = [f for f in report.findings if f.status != d.SKIP]
    assert all(f.status == d.FAIL and words in f.message for f in ran), str(report)


def test_in_place_edits_of_the_inputs_fail_their_own_probe_and_fool_no_other():
    def in_place(q, k, v, mask=None):
        q.div_(math.sqrt(q.shape[-1]))  # correct, but it edits the caller's tensor
        weights = torch.softmax((q @ k.mT).masked_fill(~mask, float("-inf")) if mask is not None
                                else q @ k.mT, dim=-1)
        return weights @ v, weights

    report = d.diagnose(in_place)  # only the probe that looks for it sees it
    assert [f.probe for f in report.failures] == [d.INPUTS_UNCHANGED], str(report)


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"seed": "1"}, TypeError, "seed should be an int from 0 to 2**32 - 1, got str '1'"),
    ({"seed": 1.5}, TypeError, "seed should be an int from 0 to 2**32 - 1, got float"),
    ({"seed": True}, TypeError, "got bool"),
    ({"seed": -1}, ValueError, "seed should be an int from 0 to 2**32 - 1, got -1"),
    ({"seed": 2**32}, ValueError, "got 4294967296"),
])
def test_bad_arguments_of_diagnose_itself_raise_and_blame_nobody_else(kwargs, error, words):
    with pytest.raises(error, match=words.replace("*", r"\*")):
        d.diagnose(correct_attention, **kwargs)


@pytest.mark.parametrize(("d_model", "error"), [(0, ValueError), (-3, ValueError),
                                                (2.0, TypeError), ("16", TypeError)])
def test_a_bad_d_model_for_a_module_names_d_model(d_model, error):
    with pytest.raises(error, match="d_model should be a positive int"):
        d.diagnose(SelfAttention(16, 16, 16), d_model=d_model)


@pytest.mark.parametrize("seed", [1, 123])
def test_any_seed_gives_the_same_verdicts(seed):
    for name in ("correct", *(bug.title for bug in BUGS)):
        statuses = [f.status for f in d.diagnose(LEARNER_SUBJECTS[name], seed=seed).findings]
        assert statuses == [f.status for f in english_report(name).findings], name


def test_results_of_the_wrong_shape_are_reported_not_raised():
    def flat_weights(q, k, v, mask=None):
        output, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        return output, weights.flatten(-2)  # (..., n_q * n_k)

    report = d.diagnose(flat_weights)
    assert report[d.SHAPES].status == d.FAIL and "the weights are" in report[d.SHAPES].message
    assert "could not check what it returned" in report[d.MASKED_WEIGHTS].message


def test_score_asymmetry_tells_a_shared_projection_from_separate_ones():
    x = torch.randn(4, 6, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, shared = SharedWeightSelfAttention(16, 16)(x)
        _, separate = SelfAttention(16, 16, 16)(x)
    assert d.score_asymmetry(shared).shape == (4,)
    assert (d.score_asymmetry(shared) < 1e-5).all()
    assert (d.score_asymmetry(separate) > 1e-2).all()
    with pytest.raises(ValueError, match="square attention weights"):
        d.score_asymmetry(torch.rand(2, 3, 4))


def test_the_verdict_counts_what_ran_and_names_what_was_skipped():
    report = d.diagnose(correct_attention)
    assert report.verdict() == ("all 14 probes that ran passed; skipped: shared Q/K/V weights, "
                                "training mode")
    report = d.diagnose(SelfAttention(16, 16, 16))
    assert report.verdict().endswith(
        "skipped: fill below every score, score scale, output = weights @ v")


def test_the_backward_only_bug_passes_the_forward_probes_and_poisons_the_gradients():
    assert d.diagnose(additive_mask_nan_to_num).passed
    q = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(0), requires_grad=True)
    real = padding_mask([4, 2]).reshape(2, 4)
    both = real[:, :, None] & real[:, None, :]  # padded queries see no key at all
    output, _ = additive_mask_nan_to_num(q, q, q, mask=both)
    assert output.isfinite().all()
    output[real].sum().backward()
    assert q.grad.isnan().any(), "the NaN is born in the backward pass"
    q.grad = None
    scaled_dot_product_attention(q, q, q, mask=both)[0][real].sum().backward()
    assert q.grad.isfinite().all()


@pytest.mark.parametrize(("weights", "error", "words"), [
    ([[0.5, 0.5]], TypeError, "weights should be a torch.Tensor"),
    (torch.ones(3, dtype=torch.long), TypeError, "floating-point"),
    (torch.rand(4), ValueError, "at least"),
])
def test_score_asymmetry_rejects_what_is_not_a_weight_matrix(weights, error, words):
    with pytest.raises(error, match=words):
        d.score_asymmetry(weights)


# -- the Chinese edition -------------------------------------------------------------------
CJK = re.compile(r"[\u4e00-\u9fff]")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")  # as tools/editions.py counts them


def _one_tensor(q, k, v, mask=None):
    return scaled_dot_product_attention(q, k, v, mask=mask)[0]


def _three_items(q, k, v, mask=None):
    return (*scaled_dot_product_attention(q, k, v, mask=mask), q)


def _not_tensors(q, k, v, mask=None):
    return 1.0, 2.0


def _raises(q, k, v, mask=None):
    raise RuntimeError("boom")


def _no_mask(q, k, v, mask=None):
    return scaled_dot_product_attention(q, k, v)


def _upcast(q, k, v, mask=None):
    return tuple(t.float() for t in scaled_dot_product_attention(q, k, v, mask=mask))


def _cpu_mask(q, k, v, mask=None):
    n = q.shape[-2]
    return scaled_dot_product_attention(q, k, v, mask=torch.ones(n, n, dtype=torch.bool).tril())


def _half_weights(q, k, v, mask=None):
    output, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    return output, weights / 2


# Between them these reach every message diagnose() writes about an implementation.
LEARNER_SUBJECTS = {
    "correct": correct_attention, "SelfAttention": SelfAttention(16, 16, 16),
    **{bug.title: bug.build() for bug in BUGS},
    "heads-only transpose": _attention(_d_k, transpose=(2, 3)),
    "softmax over dim 2": _attention(_d_k, softmax_dim=2),
    "scaled by n_q": _attention(lambda q: q.shape[-2]),
    "scaled by d_k": _attention(lambda q: q.shape[-1] ** 2),
    "odd scale": _attention(lambda q: 7.0),
    "output scaled again": _attention(_d_k, output_factor=1 / math.sqrt(8)),
    "output scaled": _attention(_d_k, output_factor=2.0),
    "one tensor": _one_tensor, "three items": _three_items, "not tensors": _not_tensors,
    "raises": _raises, "ignores the mask": _no_mask, "upcasts": _upcast,
    "mask made on the CPU": _cpu_mask, "rows sum to 0.5": _half_weights,
}


@pytest.fixture
def chinese():
    set_language("zh-CN")
    yield
    set_language("en")


@functools.cache  # three tests read each gallery bug's report at the default seed
def english_report(name: str) -> d.Report:
    """diagnose() of ``LEARNER_SUBJECTS[name]`` at the default seed, in English."""
    set_language("en")
    return d.diagnose(LEARNER_SUBJECTS[name])


@pytest.mark.parametrize("name", LEARNER_SUBJECTS)
def test_in_chinese_every_finding_reads_chinese_with_the_same_numbers(name):
    english = english_report(name)
    set_language("zh-CN")
    try:
        chinese = d.diagnose(LEARNER_SUBJECTS[name])
    finally:
        set_language("en")
    assert [(f.probe, f.status) for f in chinese.findings] == [
        (f.probe, f.status) for f in english.findings]
    for en, zh in zip(english.findings, chinese.findings, strict=True):
        assert CJK.search(zh.message), f"{name}, {zh.probe}: no Chinese in {zh.message!r}"
        # The two editions' stored outputs must hold the same numbers (tools/editions.py).
        assert sorted(NUMBER.findall(zh.message)) == sorted(NUMBER.findall(en.message)), (
            f"{name}, {zh.probe}:\n{en.message}\n{zh.message}")
    set_language("zh-CN")
    try:
        verdict, shown = chinese.verdict(), str(chinese)
    finally:
        set_language("en")
    assert CJK.search(verdict)
    # Line breaks in Chinese never cut a number in two.
    assert sorted(NUMBER.findall(shown)) == sorted(NUMBER.findall(str(english)))


def test_in_chinese_every_probe_is_named_in_chinese(chinese):
    titles = {name: d.Finding(name, d.PASS, "").title for name in d.PROBES}
    assert all(CJK.search(title) for name, title in titles.items() if name != d.NAN_INF), titles
    report = d.diagnose(next(b for b in BUGS if b.caught_by == d.SHAPES).build())
    heads = [line[4:] for line in str(report).splitlines()[1:] if not line.startswith("    ")]
    assert all(head.startswith(f.title) for head, f in zip(heads, report.findings, strict=True))


def test_chinese_report_lines_stay_within_100_columns(chinese):
    report = d.diagnose(next(b for b in BUGS if b.caught_by == d.SHAPES).build())
    for line in str(report).splitlines()[1:]:
        # a closing punctuation mark may overhang
        assert text_layout.display_width(line) <= 102, line


def test_the_english_report_is_unchanged_by_the_chinese_edition():
    report = d.diagnose(correct_attention)
    assert str(report).startswith("diagnose(correct_attention): all 14 probes that ran passed")
    assert "every query's weights sum to 1" in report[d.ROWS_SUM_TO_1].message


def test_gallery_titles_follow_the_language(chinese):
    assert all(CJK.search(bug.title) for bug in BUGS)
    assert len({bug.title for bug in BUGS}) == len(BUGS)


def test_every_probe_is_declared_once_and_probes_lists_them_in_report_order():
    probes = registered()
    assert d.PROBES == tuple(p.name for p in probes)
    assert len(set(d.PROBES)) == len(d.PROBES)
    assert [p.order for p in probes] == sorted(p.order for p in probes)
    assert [f.probe for f in d.diagnose(correct_attention).findings] == list(d.PROBES)


@pytest.mark.parametrize("name, order, words", [
    (d.SHAPES, 999, "already registered"),
    ("a new probe", registered()[0].order, "is taken by"),
])
def test_a_probe_name_or_place_cannot_be_registered_twice(name, order, words):
    with pytest.raises(ValueError, match=words):
        probe(name, order)(lambda probing: None)
    assert d.PROBES == tuple(p.name for p in registered())


def _attention_with(fill=float("-inf"), dropout=None, edit=None):
    """Correct attention but for one thing: the fill value, a dropout, an in-place edit."""

    def attention(q, k, v, mask=None):
        if edit is not None:
            edit(q, k, v, mask)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, fill)
        weights = torch.softmax(scores, dim=-1)
        if dropout is not None:
            weights = dropout(weights)
        return weights @ v, weights

    return attention


def test_dropout_at_eval_gives_one_report_and_is_named_not_taken_for_a_leak():
    bug = next(b for b in BUGS if b.caught_by == d.DETERMINISM).build()
    state = torch.random.get_rng_state()
    first, second = d.diagnose(bug), d.diagnose(bug)
    assert str(first) == str(second)
    assert torch.equal(torch.random.get_rng_state(), state), "the global random state moved"
    assert [f.probe for f in first.failures] == [d.DETERMINISM, d.ROWS_SUM_TO_1]
    assert "dropout" in first[d.ROWS_SUM_TO_1].message
    assert first[d.CAUSAL_LEAK].passed and first[d.PADDING_LEAK].passed


class _DropoutAttention(nn.Module):
    """SelfAttention with dropout on the weights: nn.Dropout, or F.dropout left on."""

    def __init__(self, functional: bool):
        super().__init__()
        self.d_model, self.functional = 16, functional
        self.inner, self.dropout = SelfAttention(16, 16, 16), nn.Dropout(0.1)

    def forward(self, x, mask=None):
        q, k, v = self.inner.w_q(x), self.inner.w_k(x), self.inner.w_v(x)
        drop = (lambda w: F.dropout(w, 0.1)) if self.functional else self.dropout
        return _attention_with(dropout=drop)(q, k, v, mask)


def test_other_randomness_is_caught_and_nn_dropout_in_an_eval_module_is_not():
    def noisy(q, k, v, mask=None):
        return _attention_with()(q + 1e-3 * torch.randn_like(q), k, v, mask)

    report = d.diagnose(noisy)
    assert report[d.DETERMINISM].status == d.FAIL
    assert "something random runs inside" in report[d.DETERMINISM].message
    assert d.diagnose(_DropoutAttention(functional=False))[d.DETERMINISM].passed
    functional = d.diagnose(_DropoutAttention(functional=True))
    assert "dropout is active at evaluation" in functional[d.DETERMINISM].message


@pytest.mark.parametrize("edit, names", [
    (lambda q, k, v, mask: q.div_(2.0), "q"),
    (lambda q, k, v, mask: v.mul_(2.0), "v"),
    (lambda q, k, v, mask: k[..., 0, :].zero_(), "k"),
    (lambda q, k, v, mask: mask is not None and mask[..., -1].fill_(True), "mask"),
], ids=["q.div_", "v.mul_", "k[...] =", "mask filled"])
def test_any_input_edited_in_place_is_named(edit, names):
    report = d.diagnose(_attention_with(edit=edit))
    assert report[d.INPUTS_UNCHANGED].status == d.FAIL, str(report)
    assert f"the caller's {names} had changed" in report[d.INPUTS_UNCHANGED].message


@pytest.mark.parametrize("fill", [-20.0, -1e4])
def test_a_finite_fill_is_caught_when_real_scores_fall_below_it(fill):
    report = d.diagnose(_attention_with(fill=fill))
    assert [f.probe for f in report.failures] == [d.FINITE_FILL], str(report)


@pytest.mark.parametrize("fill", [-1e9, torch.finfo(torch.float64).min, float("-inf")])
def test_a_fill_below_every_real_score_passes_the_fill_probe(fill):
    assert d.diagnose(_attention_with(fill=fill))[d.FINITE_FILL].passed


def test_a_small_finite_fill_is_named_by_the_score_it_acts_as():
    report = d.diagnose(_attention_with(fill=-1.0))
    assert "as a score of -1 would" in report[d.MASKED_WEIGHTS].message, str(report)
    assert report[d.FINITE_FILL].status == d.SKIP


def test_a_statistic_across_positions_is_not_told_to_fill_with_minus_inf():
    report = d.diagnose(next(b for b in BUGS if b.caught_by == d.CAUSAL_LEAK).build())
    assert "-inf" not in report[d.CAUSAL_LEAK].message
    # The textbook leak keeps its own advice.
    leak = d.diagnose(next(b for b in BUGS if b.title == "mask applied after the softmax").build())
    assert "Block the future scores with -inf" in leak[d.CAUSAL_LEAK].message


class _NoWidth(nn.Module):
    def forward(self, x, mask=None):
        return x, x


BAD_INPUTS = [
    pytest.param(probe_name, (None,), {}, TypeError, ("english", "str", "None"),
                 id="probe_name: None"),
    pytest.param(d.diagnose, (MultiHeadAttention,), {}, TypeError,
                 ("needs an instance", "MultiHeadAttention"), id="diagnose: a class"),
    pytest.param(d.diagnose, ("attention",), {}, TypeError,
                 ("attention function", "got str"), id="diagnose: not callable"),
    pytest.param(d.diagnose, (scaled_dot_product_attention,), {"d_model": 8}, ValueError,
                 ("d_model", "only for modules"), id="diagnose: d_model with a function"),
    pytest.param(d.diagnose, (_NoWidth(),), {}, ValueError,
                 ("d_model", "diagnose(module, d_model=...)"), id="diagnose: no d_model"),
    pytest.param(d.diagnose, (_NoWidth(),), {"d_model": 0}, ValueError,
                 ("d_model", "positive", "0"), id="diagnose: d_model 0"),
    pytest.param(d.diagnose, (scaled_dot_product_attention,), {"seed": 1.5}, TypeError,
                 ("seed", "1.5"), id="diagnose: float seed"),
    pytest.param(d.score_asymmetry, ([[0.5, 0.5], [0.5, 0.5]],), {}, TypeError,
                 ("weights", "torch.Tensor", "list"), id="score_asymmetry: a list"),
    pytest.param(d.score_asymmetry, (torch.full((2, 3), 1 / 3),), {}, ValueError,
                 ("square", "(2, 3)"), id="score_asymmetry: not square"),
]


# -- raw results, batches of different sequences, training mode, the real cause -------------
def einsum_attention(q, k, v, mask=None):
    """Correct, written differently: einsum, a fill of the dtype's lowest number."""
    scores = torch.einsum("...qd,...kd->...qk", q, k) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    return torch.einsum("...qk,...kv->...qv", weights, v), weights


def additive_where_attention(q, k, v, mask=None):
    """Correct, written differently: the mask added as 0 / -inf made with torch.where."""
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + torch.where(mask, 0.0, float("-inf")).to(scores.dtype)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def logsumexp_attention(q, k, v, mask=None):
    """Correct, written differently: weights = exp(scores - logsumexp(scores))."""
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = (scores - scores.logsumexp(dim=-1, keepdim=True)).exp()
    return weights @ v, weights


def float32_softmax_attention(q, k, v, mask=None):
    """Correct, written differently: the softmax in float32, as mixed precision does it."""
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return weights @ v, weights


class _TrainingDropoutAttention(nn.Module):
    """Correct, with nn.Dropout where it belongs: on the weights, or on the output."""

    def __init__(self, on: str):
        super().__init__()
        self.d_model, self.on = 16, on
        self.inner, self.dropout = SelfAttention(16, 16, 16), nn.Dropout(0.2)

    def forward(self, x, mask=None):
        q, k, v = self.inner.w_q(x), self.inner.w_k(x), self.inner.w_v(x)
        scores = q @ k.mT / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if self.on == "weights":
            weights = self.dropout(weights)
        output = weights @ v
        return (self.dropout(output) if self.on == "output" else output), weights


CORRECT_WRITTEN_DIFFERENTLY = [einsum_attention, additive_where_attention, logsumexp_attention,
                               float32_softmax_attention]


@pytest.mark.parametrize("attention", CORRECT_WRITTEN_DIFFERENTLY, ids=lambda f: f.__name__)
def test_correct_functions_written_differently_get_no_false_alarm(attention):
    report = d.diagnose(attention)
    assert report.passed, str(report)
    assert {f.probe for f in report.skipped} == MODULE_ONLY


@pytest.mark.parametrize("module", [_TrainingDropoutAttention("weights"),
                                    _TrainingDropoutAttention("output"),
                                    MultiHeadAttention(16, 4)],
                         ids=["dropout on the weights", "dropout on the output", "heads"])
def test_correct_modules_with_dropout_pass_in_training_mode_too(module):
    report = d.diagnose(module)
    assert report.passed, str(report)
    assert report[d.TRAINING_MODE].passed


def test_every_probe_layout_has_a_batch_of_at_least_two_different_sequences():
    seen = []

    def recording(q, k, v, mask=None):
        if q.device.type != "meta":
            seen.append(q)
        return correct_attention(q, k, v, mask=mask)

    d.diagnose(recording)
    assert seen and all(q.shape[0] >= 2 for q in seen)
    assert all(not torch.equal(q[0], q[1]) for q in seen), "the sequences of a batch differ"


def test_nan_is_judged_raw_not_cleaned_away_first():
    # NaN at the keys a mask allows: every probe that masks sees it, none calls it a zero.
    report = d.diagnose(next(b for b in BUGS if b.title.startswith("a mask made by")).build())
    for name in (d.MASKED_WEIGHTS, d.ROWS_SUM_TO_1, d.CAUSAL_LEAK, d.PADDING_LEAK, d.NAN_INF):
        assert report[name].status == d.FAIL and "NaN" in report[name].message, str(report)
    # NaN only in the padded queries' rows of a module: was invisible to every probe.
    module = next(b for b in BUGS if b.title.startswith("padded queries")).build()
    report = d.diagnose(module)
    assert report[d.MASKED_WEIGHTS].status == d.FAIL, str(report)
    assert report[d.NAN_INF].status == d.FAIL


def test_log_weights_are_named_as_such_not_as_rows_that_do_not_sum_to_1():
    report = d.diagnose(next(b for b in BUGS if b.title.startswith("log-prob")).build())
    for finding in report.failures:
        assert "rows sum to between" not in finding.message
        assert "log-probabilities" in finding.message, str(report)


def test_a_float16_softmax_is_a_precision_issue_printed_to_the_digits_that_show_it():
    message = d.diagnose(next(b for b in BUGS if b.title == "a softmax in float16").build())[
        d.ROWS_SUM_TO_1].message
    low, high = (float(x) for x in re.findall(r"between ([0-9.]+) and ([0-9.]+)", message)[0])
    assert low < 1 < high, message  # not "between 1.00 and 1.00"
    assert "float16" in message and "eps is 0.00098" in message
    # bfloat16 is named too
    def bfloat16_softmax(q, k, v, mask=None):
        scores = q @ k.mT / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return None, torch.softmax(scores.bfloat16(), -1).to(q.dtype)

    def attention(q, k, v, mask=None):
        weights = bfloat16_softmax(q, k, v, mask)[1]
        return weights @ v, weights

    assert "bfloat16's precision" in d.diagnose(attention)[d.ROWS_SUM_TO_1].message


def test_mixing_the_batch_is_named_as_such_not_as_a_statistic_across_positions():
    report = d.diagnose(next(b for b in BUGS if b.caught_by == d.BATCH_APART).build())
    assert all("across positions" not in f.message for f in report.findings), str(report)

    def standardised_scores(q, k, v, mask=None):  # statistics of the whole tensor
        scores = q @ k.mT / math.sqrt(q.shape[-1])
        scores = (scores - scores.mean()) / scores.std()
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return weights @ v, weights

    report = d.diagnose(standardised_scores)
    assert report[d.BATCH_APART].status == d.FAIL
    assert "sequences of the batch" in report[d.CAUSAL_LEAK].message, str(report)


def test_dropout_on_the_weights_in_eval_and_on_the_scores_in_training_are_told_apart():
    functional = d.diagnose(_DropoutAttention(functional=True))
    assert functional[d.DETERMINISM].status == d.FAIL
    report = d.diagnose(next(b for b in BUGS if b.caught_by == d.TRAINING_MODE).build())
    assert [f.probe for f in report.failures] == [d.TRAINING_MODE]
    assert "weights = self.dropout(torch.softmax(scores, dim=-1))" in (
        report[d.TRAINING_MODE].message)


def test_a_training_only_nan_is_named():
    class MaskedScoreDropout(_TrainingDropoutAttention):
        def forward(self, x, mask=None):
            q, k, v = self.inner.w_q(x), self.inner.w_k(x), self.inner.w_v(x)
            scores = q @ k.mT / math.sqrt(q.shape[-1])
            if mask is not None:  # -inf times a dropped 0 is NaN, in training only
                scores = self.dropout(scores.masked_fill(~mask, float("-inf"))) * (
                    1 - self.dropout.p)
            weights = torch.softmax(scores, dim=-1)
            return weights @ v, weights

    finding = d.diagnose(MaskedScoreDropout("none"))[d.TRAINING_MODE]
    assert finding.status == d.FAIL and "-inf × 0 = NaN" in finding.message, finding.message


@pytest.mark.parametrize(("value", "text"), [(0.19, "0.19"), (0.0004, "0.0004"), (2.5, "2.50"),
                                             (0.0, "0.00"), (float("inf"), "inf")])
def test_sizes_in_findings_keep_two_significant_digits(value, text):
    from course_utils.diagnostics.probing import shown
    assert shown(value) == text


@pytest.mark.parametrize(("value", "text"), [(0.99951, "0.99951"), (1.00049, "1.00049"),
                                             (0.5, "0.50"), (1.0, "1.00"), (0.9996, "0.99960")])
def test_sums_near_1_are_printed_with_the_digits_that_tell_them_from_1(value, text):
    from course_utils.diagnostics.probing import near
    assert near(value) == text
