"""Lesson 18's experiment: the three attentions really share the cache budget, and a tiny run."""

from __future__ import annotations

import pytest
import torch

from course_utils.experiments.l18_cache_budget import (
    VARIANTS,
    budget_attention,
    budget_gpt,
    train_at_budget,
    validation_loss,
)
from course_utils.nn.kv_cache import KVCache


def test_gqa_and_mla_cache_the_same_bytes_per_token_and_mha_twice_as_many():
    per_token = {}
    for variant in VARIANTS:
        model = budget_gpt(variant, 7, seed=0)
        cache = KVCache()
        with torch.no_grad():
            model(torch.zeros(1, 5, dtype=torch.long), cache=cache)
        per_token[variant] = cache.nbytes // 5
    assert per_token["GQA"] == per_token["MLA"] == 2 * 64 * 4  # 2 layers of 64 float32 numbers
    assert per_token["MHA"] == 2 * per_token["GQA"]


def test_a_tiny_run_trains_every_variant_with_the_same_batches():
    tokens = torch.arange(200) % 5
    losses = train_at_budget(tokens[:150], tokens[150:], 5, (0, 1), steps=3, batch_size=2)
    assert set(losses) == set(VARIANTS) and all(len(v) == 2 for v in losses.values())
    assert all(0 < loss < 10 for v in losses.values() for loss in v)


BAD_INPUTS = [
    pytest.param(budget_attention, ("MQA",), {}, ValueError, ("variant", "'GQA'", "'MQA'"),
                 id="budget_attention: unknown variant"),
    pytest.param(budget_attention, ("MLA",), {"num_kv_heads": 1, "rope_dim": 32}, ValueError,
                 ("budget", "32", "rope_dim=32"), id="budget_attention: no room for a latent"),
    pytest.param(budget_gpt, ("MLA", 7, -1), {}, ValueError, ("seed", "-1"),
                 id="budget_gpt: negative seed"),
    pytest.param(validation_loss, (torch.nn.Linear(2, 2), torch.arange(40)), {}, TypeError,
                 ("model", "GPT", "Linear"), id="validation_loss: not a GPT"),
    pytest.param(validation_loss, (budget_gpt("MHA", 7, 0), torch.arange(10)), {}, ValueError,
                 ("tokens", "shorter than one window", "33"), id="validation_loss: too short"),
    pytest.param(train_at_budget, (torch.arange(100) % 5, torch.arange(40) % 5, 5, (), 3), {},
                 ValueError, ("run_seeds", "at least one", "none"),
                 id="train_at_budget: no seeds"),
    pytest.param(train_at_budget, (torch.arange(100) % 5, torch.arange(40) % 5, 5, (0,), 0), {},
                 ValueError, ("steps", "positive int", "0"), id="train_at_budget: zero steps"),
]
