"""Lesson 15's translator: built from the course's blocks, cached decoding equals uncached,
its cross-attention step equals MultiHeadAttention's, the measurements behave."""

from __future__ import annotations

import pytest
import torch

from course_utils.data.number_words import chinese_numerals
from course_utils.experiments.l15_translation import (
    ABLATION_MODES,
    ablated_exact_match,
    alignment_agreement,
    beam_translations,
    character_accuracy,
    cross_weights_of,
    exact_match,
    greedy_translations,
    mean_reads,
    score_alignment,
    teacher_forced_exact_match,
)
from course_utils.models.translator import (
    BOS,
    EOS,
    Translator,
    characters,
    source_batch,
    target_batch,
    train_translator,
)
from course_utils.nn.attention import MultiHeadAttention, merge_heads, split_heads
from course_utils.nn.cross_attention import cross_attention, decoder_masks, memory_keys_values
from tests.support.models import scaled_up_translator

NUMBERS = [5, 12300, 3005, 101010, 77777777, 40]


@pytest.fixture(scope="module")
def model():
    return scaled_up_translator(4)  # larger weights than at initialisation: rows far from uniform


def test_forward_equals_the_blocks_own_forward(model):
    src, mask = source_batch(NUMBERS)
    tgt, _ = target_batch(NUMBERS)
    logits, cross = model(src, tgt, mask)
    memory, _ = model.encode(src, mask)
    x = model.tgt_embedding(tgt) + model.tgt_positions(torch.arange(tgt.shape[1]))
    weights = []
    for block in model.decoder:
        x, _, w = block(x, memory, memory_padding_mask=mask)
        weights.append(w)
    expected = model.readout(model.decoder_norm(x))
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cross, torch.stack(weights, 1), atol=1e-6, rtol=1e-5)
    assert cross.shape == (6, 2, 4, tgt.shape[1], src.shape[1])
    padding = ~mask[:, None, None, None, :].expand_as(cross)
    assert cross[padding].abs().max() == 0


def test_cached_greedy_equals_rereading_every_step(model):
    src, mask = source_batch(NUMBERS)
    out, weights = model.translate(src, mask, max_new_tokens=8)
    fed = out[:, :-1]
    logits, cross = model(src, fed, mask)
    alive = torch.ones_like(fed, dtype=torch.bool)
    for t in range(1, fed.shape[1]):
        alive[:, t] = alive[:, t - 1] & (fed[:, t] != EOS)
    picked = logits.argmax(-1)
    assert torch.equal(picked[alive], out[:, 1:][alive])
    torch.testing.assert_close(weights, cross, atol=1e-5, rtol=1e-4)
    assert (out[:, 0] == BOS).all()


def test_cross_attention_step_equals_multihead_attention():
    torch.manual_seed(2)
    attn = MultiHeadAttention(24, 3)
    x, memory = torch.randn(2, 5, 24), torch.randn(2, 7, 24)
    padding = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    k, v = memory_keys_values(attn, memory)
    q = split_heads(attn.w_q(x), 3)
    heads, weights = cross_attention(q, k, v, padding)
    expected, expected_weights = attn(x, memory, memory, mask=padding[:, None, None, :])
    torch.testing.assert_close(attn.w_o(merge_heads(heads)), expected)
    torch.testing.assert_close(weights, expected_weights)
    self_mask, cross_mask = decoder_masks(padding, 5)
    assert self_mask.shape == (5, 5) and cross_mask.shape == (2, 1, 1, 7)
    assert torch.equal(self_mask, torch.ones(5, 5, dtype=torch.bool).tril())


def test_measurements_run_and_agree(model):
    wrote = greedy_translations(model, NUMBERS)
    em = exact_match(model, NUMBERS)
    assert em == sum(w == chinese_numerals(n) for w, n in zip(wrote, NUMBERS,
                                                                strict=True)) / 6
    assert teacher_forced_exact_match(model, NUMBERS) == pytest.approx(em)
    assert 0 <= character_accuracy(model, NUMBERS, False) <= 1
    assert 0 <= character_accuracy(model, NUMBERS, True) <= 1
    agree, chance = alignment_agreement(model, NUMBERS)
    assert agree.shape == (2, 4) and 0 < chance < 1
    weights = cross_weights_of(model, 12300)
    assert weights.shape == (2, 4, 6, 5)
    assert score_alignment(torch.eye(5)[[0, 0, 0, 0, 3, 3]], [0, 0, 0, 0, 3, 3]) == 1
    assert score_alignment(torch.eye(5)[[0, 1, 0, 0, 3, 3]], [0, 0, 0, 0, None, 3]) == 0.8
    assert mean_reads(model, NUMBERS).shape == (2, 32)
    for mode in ABLATION_MODES:
        assert 0 <= ablated_exact_match(model, NUMBERS, mode) <= 1
    assert len(beam_translations(model, NUMBERS[:2], 2)) == 2
    assert beam_translations(model, NUMBERS, 1) == wrote  # a beam of one is greedy
    assert characters(torch.tensor([BOS, 4, 13, EOS, 5])) == "一十"


def test_a_short_training_run_learns_something():
    torch.manual_seed(0)
    model = Translator(d_model=32, num_heads=2, num_layers=1)
    losses = train_translator(model, list(range(1, 200)), 40, torch.Generator().manual_seed(0),
                              batch_size=16)
    assert losses[-1] < losses[0] * 0.7


_MODEL = Translator(d_model=16, num_heads=2, num_layers=1)
_SRC, _MASK = source_batch([12, 3005])

BAD_INPUTS = [
    pytest.param(Translator, (), {"d_model": 0}, ValueError, ("d_model", "positive int", "0"),
                 id="Translator: zero width"),
    pytest.param(_MODEL, (_SRC.float(), _SRC), {}, TypeError, ("src", "integer", "float32"),
                 id="Translator: float src"),
    pytest.param(_MODEL, (_SRC, _SRC), {"cross_reads": "half"}, ValueError,
                 ("cross_reads", "'zero'", "'half'"), id="Translator: unknown cross_reads"),
    pytest.param(source_batch, (12,), {}, TypeError, ("items", "list", "int"),
                 id="source_batch: one int"),
    pytest.param(target_batch, ([],), {}, TypeError, ("numbers", "non-empty list"),
                 id="target_batch: empty"),
    pytest.param(train_translator, (torch.nn.Linear(2, 2), [1], 1, torch.Generator()), {},
                 TypeError, ("model", "Translator", "Linear"), id="train_translator: model"),
    pytest.param(cross_attention, (torch.zeros(2, 3, 4), torch.zeros(2, 3, 5, 4),
                                   torch.zeros(2, 3, 5, 4)), {}, ValueError,
                 ("q", "(batch, heads, n_tgt, d_k)", "(2, 3, 4)"), id="cross_attention: 3-D q"),
    pytest.param(cross_attention, (torch.zeros(2, 3, 4, 8), torch.zeros(2, 3, 5, 8),
                                   torch.zeros(2, 3, 5, 8), torch.ones(2, 5)), {}, TypeError,
                 ("src_padding_mask", "bool", "float32"), id="cross_attention: float mask"),
    pytest.param(decoder_masks, (torch.ones(2, 5, dtype=torch.bool), 0), {}, ValueError,
                 ("n_tgt", "positive int", "0"), id="decoder_masks: n_tgt 0"),
    pytest.param(decoder_masks, (torch.ones(2, 1, 5, dtype=torch.bool), 3), {}, ValueError,
                 ("src_padding_mask", "(batch, n_src)", "(2, 1, 5)"),
                 id="decoder_masks: 3-D padding"),
    pytest.param(memory_keys_values, (torch.nn.Linear(2, 2), torch.zeros(1, 2, 2)), {},
                 TypeError, ("attention", "MultiHeadAttention"), id="memory_keys_values: Linear"),
    pytest.param(characters, (None,), {}, TypeError, ("ids", "NoneType"),
                 id="characters: None"),
    pytest.param(exact_match, (_MODEL, 5), {}, TypeError, ("numbers", "list", "int"),
                 id="exact_match: one int"),
    pytest.param(greedy_translations, (None, [5]), {}, TypeError, ("model", "Translator"),
                 id="greedy_translations: no model"),
    pytest.param(teacher_forced_exact_match, (_MODEL, []), {}, TypeError, ("numbers",),
                 id="teacher_forced_exact_match: empty"),
    pytest.param(character_accuracy, (_MODEL, [5], 1), {}, TypeError,
                 ("teacher_forced", "True or False", "1"), id="character_accuracy: int flag"),
    pytest.param(alignment_agreement, (_MODEL, "12"), {}, TypeError, ("numbers",),
                 id="alignment_agreement: str"),
    pytest.param(cross_weights_of, (_MODEL, 0), {}, ValueError, ("n", "1..100000000"),
                 id="cross_weights_of: zero"),
    pytest.param(score_alignment, (torch.zeros(3), [0]), {}, ValueError,
                 ("weights", "(n_chars, n_src)"), id="score_alignment: 1-D"),
    pytest.param(score_alignment, (torch.zeros(2, 3), [0]), {}, ValueError,
                 ("links", "one entry per row", "1"), id="score_alignment: short links"),
    pytest.param(mean_reads, (_MODEL, None), {}, TypeError, ("numbers",),
                 id="mean_reads: None"),
    pytest.param(beam_translations, (_MODEL, [5], 0), {}, ValueError,
                 ("beam", "positive int", "0"), id="beam_translations: beam 0"),
    pytest.param(ablated_exact_match, (_MODEL, [5], "half"), {}, ValueError,
                 ("mode", "zero", "'half'"), id="ablated_exact_match: unknown mode"),
]
