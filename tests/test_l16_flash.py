"""Lesson 16's experiments (course_utils.experiments.l16_flash), on small sizes."""

from __future__ import annotations

import pytest
import torch

from course_utils.experiments.l16_flash import (
    gpt_logits,
    naive_attention,
    saved_bytes,
    tile_share,
    train_with_attention,
    training_flops,
)
from course_utils.gpt import GPT
from course_utils.nn.flash_attention import flash_attention


def test_saved_bytes_naive_grows_like_n_squared_flash_like_n():
    kept = saved_bytes([64, 128], num_heads=1, d_k=8)
    assert kept["flash"][1] == 2 * kept["flash"][0]
    assert kept["naive"][1] > 3 * kept["naive"][0]


def test_flash_backward_recomputes_one_q_k_product_per_tile():
    counts = training_flops(64, d_k=8, block_size=16)
    assert counts["flash"]["forward"] == counts["naive"]["forward"]
    # naive backward: four products; flash: the same four plus Q Kᵀ again (a quarter more).
    assert counts["flash"]["backward"] * 4 == counts["naive"]["backward"] * 5


def test_tile_share_without_with_causal_and_window():
    assert tile_share(64, 16) == 1.0
    assert tile_share(64, 16, causal=True) == 10 / 16
    assert tile_share(64, 16, causal=True, window=16) == 7 / 16


def _tiny_gpt():
    torch.manual_seed(0)
    return GPT(vocab_size=11, max_len=12, d_model=8, num_heads=2, num_layers=1)


def test_gpt_logits_with_naive_attention_is_the_models_own_forward():
    model = _tiny_gpt()
    tokens = torch.randint(0, 11, (2, 12))
    logits = gpt_logits(model, tokens, lambda q, k, v: naive_attention(q, k, v, causal=True))
    torch.testing.assert_close(logits, model(tokens))


def test_training_with_either_attention_gives_the_same_losses():
    model, tokens = _tiny_gpt(), torch.randint(0, 11, (200,))
    before = [p.clone() for p in model.parameters()]
    naive = train_with_attention(model, tokens, 3, 0, lambda q, k, v: naive_attention(
        q, k, v, causal=True), batch_size=2)
    flash = train_with_attention(model, tokens, 3, 0, lambda q, k, v: flash_attention(
        q, k, v, causal=True, block_size=5), batch_size=2)
    assert naive == pytest.approx(flash, rel=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


_model = _tiny_gpt()

BAD_INPUTS = [
    pytest.param(naive_attention, (torch.zeros(1, 1, 2, 4),) * 3, {"causal": "yes"}, TypeError,
                 ("causal", "True or False", "str"), id="naive_attention: causal a str"),
    pytest.param(saved_bytes, ([64, 0],), {}, ValueError,
                 ("every length", "positive int", "got 0"), id="saved_bytes: zero length"),
    pytest.param(training_flops, (64,), {"seed": -1}, ValueError,
                 ("seed", "0 to 2**32 - 1", "-1"), id="training_flops: negative seed"),
    pytest.param(tile_share, (64, 0), {}, ValueError, ("block_size", "positive int", "got 0"),
                 id="tile_share: block 0"),
    pytest.param(gpt_logits, (_model, torch.zeros(1, 4, dtype=torch.long), "flash"), {},
                 TypeError, ("attention", "function", "str"), id="gpt_logits: not callable"),
    pytest.param(gpt_logits, ("model", torch.zeros(1, 4, dtype=torch.long), print), {},
                 TypeError, ("model", "GPT", "str"), id="gpt_logits: not a GPT"),
    pytest.param(train_with_attention, (_model, torch.full((50,), 11), 3, 0, print), {},
                 ValueError, ("tokens", "0..10", "11"), id="train_with_attention: token id"),
    pytest.param(train_with_attention, (_model, torch.zeros(50, dtype=torch.long), 0, 0, print),
                 {}, ValueError, ("steps", "positive int", "got 0"),
                 id="train_with_attention: 0 steps"),
    pytest.param(train_with_attention, (_model, torch.zeros(50, dtype=torch.long), 3, 0, None),
                 {}, TypeError, ("attention", "function", "NoneType"),
                 id="train_with_attention: no attention"),
]
