"""Lesson 18's exercises: reference checks and lesson cells (the mutation table is
tests/mutations/l18.py)."""

from __future__ import annotations

import pytest

from course_utils.data.model_configs import MODEL_CONFIGS, cache_bytes_per_token
from course_utils.exercises.l18 import attention_parameters, cache_bytes
from course_utils.language import set_language
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.latent_attention import MultiHeadLatentAttention
from tests.support.lesson_cells import exercise_cells, run_alone


@pytest.mark.parametrize("source", exercise_cells("18_latent_attention.ipynb"))
def test_every_exercise_cell_of_lesson_18_works_on_its_own(source):
    assert run_alone(source).startswith("… Not attempted")


@pytest.mark.parametrize("source", exercise_cells("zh-CN/18_latent_attention.ipynb"))
def test_every_exercise_cell_of_the_chinese_lesson_18_works_on_its_own_in_chinese(source):
    set_language("zh-CN")
    try:
        assert run_alone(source).startswith("… 尚未作答")
    finally:
        set_language("en")


def test_the_references_agree_with_the_package():
    for config in MODEL_CONFIGS.values():
        assert cache_bytes.reference(config, 2) == cache_bytes_per_token(config, 2)
    gqa, mla = attention_parameters.reference(64, 4, 2, 56, 8)
    assert gqa == sum(p.numel() for p in MultiHeadAttention(64, 4, bias=False,
                                                            num_kv_heads=2).parameters())
    assert mla == sum(p.numel() for p in MultiHeadLatentAttention(64, 4, 56, 8).parameters())
