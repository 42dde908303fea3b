"""Lesson 14's ablation: each variant reverts its one part only, and a run is deterministic."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_utils.experiments.l14_ablation import (
    BASELINE,
    VARIANTS,
    ablation_model,
    llama_changes_ablation,
    swiglu_width,
)
from course_utils.models.gpt import GPT
from course_utils.nn.blocks import EncoderBlock, FeedForward
from course_utils.nn.llama_parts import RMSNorm, SwiGLUFeedForward

pytestmark = pytest.mark.unit
VOCAB = 11


def _models(seed=0):
    return {variant: ablation_model(variant, VOCAB, seed) for variant in VARIANTS}


def _kinds(model, kind):
    return [name for name, module in model.named_modules() if isinstance(module, kind)]


def test_the_baseline_is_a_llama_pre_rmsnorm_swiglu_rope():
    model = ablation_model(BASELINE, VOCAB, 0)
    assert model.position_embedding is None
    assert all(block.norm_first and block.self_attn.rope_base == 10000.0
               and isinstance(block.ffn, SwiGLUFeedForward) for block in model.blocks)
    assert len(_kinds(model, RMSNorm)) == 5 and not _kinds(model, nn.LayerNorm)


def test_swiglu_matches_the_mlp_budget_within_one_percent():
    assert swiglu_width(64) == 171
    swiglu = sum(p.numel() for p in SwiGLUFeedForward(64, swiglu_width(64)).parameters())
    mlp = sum(p.numel() for p in FeedForward(64, 256, "gelu").parameters())
    assert abs(swiglu - mlp) / mlp < 0.01


def test_post_norm_has_the_baselines_very_weights_and_only_the_order_differs():
    models, tokens = _models(), torch.arange(20).remainder(VOCAB)[None]
    baseline, post = models[BASELINE].state_dict(), models["post-norm"].state_dict()
    assert baseline.keys() == post.keys()
    assert all(torch.equal(baseline[key], post[key]) for key in baseline)
    assert not any(block.norm_first for block in models["post-norm"].blocks)
    with torch.no_grad():
        assert not torch.allclose(models[BASELINE](tokens), models["post-norm"](tokens))


def test_layernorm_adds_only_norm_biases_and_keeps_every_other_weight():
    models = _models()
    baseline, layer = models[BASELINE].state_dict(), models["LayerNorm"].state_dict()
    assert all(torch.equal(baseline[key], layer[key]) for key in baseline)
    extra = set(layer) - set(baseline)
    assert extra and all(key.endswith("norm1.bias") or key.endswith("norm2.bias")
                         or key == "final_norm.bias" for key in extra)
    assert len(_kinds(models["LayerNorm"], nn.LayerNorm)) == 5
    assert not _kinds(models["LayerNorm"], RMSNorm)


def test_gelu_mlp_changes_only_the_feed_forward():
    model = _models()["GELU MLP"]
    assert all(isinstance(block.ffn, FeedForward) and isinstance(block.ffn.activation, nn.GELU)
               and block.ffn.linear1.out_features == 4 * 64 for block in model.blocks)
    assert all(block.norm_first and block.self_attn.rope_base == 10000.0
               and isinstance(block.norm1, RMSNorm) for block in model.blocks)
    assert model.position_embedding is None


def test_learned_positions_replace_rope_and_nothing_else():
    model = _models()["learned positions"]
    assert isinstance(model.position_embedding, nn.Embedding)
    assert all(block.self_attn.rope_base is None and isinstance(block.ffn, SwiGLUFeedForward)
               and block.norm_first and isinstance(block.norm1, RMSNorm)
               for block in model.blocks)
    counts = {variant: sum(p.numel() for p in m.parameters()) for variant, m in _models().items()}
    assert counts["learned positions"] - counts[BASELINE] == 32 * 64  # max_len · d_model


def test_the_model_maps_tokens_to_logits_and_leaves_the_global_random_state_alone():
    state = torch.random.get_rng_state()
    model = ablation_model("post-norm", VOCAB, 3)
    assert torch.equal(state, torch.random.get_rng_state())
    with torch.no_grad():
        assert model(torch.zeros(2, 7, dtype=torch.long)).shape == (2, 7, VOCAB)


def test_a_run_is_deterministic_per_seed_and_changes_with_it():
    first, again, other = (llama_changes_ablation(seed, steps=2) for seed in (0, 0, 1))
    assert first == again and first != other
    assert set(first) == set(VARIANTS)
    assert all(0 < losses["validation"] < 10 and 0 < losses["train"] < 10
               for losses in first.values())


def test_the_gpt_defaults_build_gpt2s_block():
    model = GPT(VOCAB, 8, 16, 2, 1)
    block = model.blocks[0]
    assert isinstance(model.position_embedding, nn.Embedding)
    assert isinstance(block, EncoderBlock) and block.norm_first
    assert isinstance(block.norm1, nn.LayerNorm) and isinstance(model.final_norm, nn.LayerNorm)
    assert isinstance(block.ffn, FeedForward) and block.self_attn.rope_base is None


BAD_INPUTS = [
    pytest.param(ablation_model, ("RMSNorm", VOCAB, 0), {}, ValueError,
                 ("variant", "'post-norm'", "'RMSNorm'"), id="ablation_model: unknown variant"),
    pytest.param(ablation_model, (BASELINE, VOCAB, -1), {}, ValueError, ("seed", "-1"),
                 id="ablation_model: negative seed"),
    pytest.param(swiglu_width, (0,), {}, ValueError, ("d_model", "positive int", "0"),
                 id="swiglu_width: zero width"),
    pytest.param(llama_changes_ablation, (0,), {"steps": 0}, ValueError,
                 ("steps", "positive int", "0"), id="llama_changes_ablation: zero steps"),
    pytest.param(llama_changes_ablation, (0,), {"text": "wikipedia"}, ValueError,
                 ("text", "'shakespeare'", "'wikipedia'"),
                 id="llama_changes_ablation: unknown text"),
    pytest.param(llama_changes_ablation, (1.5,), {}, TypeError, ("seed", "int", "1.5"),
                 id="llama_changes_ablation: float seed"),
    pytest.param(GPT, (VOCAB, 8, 16, 2, 1), {"norm": "batch"}, ValueError,
                 ("norm", "'rms'", "'batch'"), id="GPT: unknown norm"),
    pytest.param(GPT, (VOCAB, 8, 16, 2, 1), {"activation": "relu"}, ValueError,
                 ("activation", "'swiglu'", "'relu'"), id="GPT: activation not gelu or swiglu"),
    pytest.param(EncoderBlock, (16, 2, 32), {"norm": "batch"}, ValueError,
                 ("norm", "'rms'", "'batch'"), id="EncoderBlock: unknown norm"),
]
