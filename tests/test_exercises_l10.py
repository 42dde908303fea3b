"""Lesson 10's exercises: their reference solutions and lesson cells (the mutation
table is tests/mutations/l10.py)."""

from __future__ import annotations

import pytest
import torch

from course_utils.exercises.l10 import one_head_weights, previous_token_head
from course_utils.experiments.l10_real_model import attention_maps
from course_utils.models.minilm import load_minilm


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


def test_one_head_reference_equals_the_real_models_attention(minilm):
    model, tokenizer = minilm
    input_ids, attention_mask = tokenizer.batch(["The kitten chased the ball.", "A short one"])
    with torch.no_grad():
        output = model(input_ids, attention_mask)
        for layer in (0, 3, 5):
            for head in (0, 1, 11):
                weights = one_head_weights.reference(
                    output.hidden_states[layer], attention_mask, model.blocks[layer].self_attn,
                    head)
                torch.testing.assert_close(weights, output.attentions[layer][:, head],
                                           atol=1e-6, rtol=0)


def test_previous_token_head_of_the_real_model_is_layer_0_head_2(minilm):
    model, tokenizer = minilm
    _, weights = attention_maps(model, tokenizer, "The kitten chased the ball because it was "
                                                  "playful")
    assert previous_token_head.reference(weights) == (0, 2)
