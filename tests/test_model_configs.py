"""Real models' attention sizes: the cache each keeps per token, and the data's own checks."""

from __future__ import annotations

import dataclasses

import pytest

from course_utils.data.model_configs import (
    DEEPSEEK_V3,
    GEMMA_3_27B,
    GPT_OSS_120B,
    LLAMA_3_8B,
    LLAMA_4_SCOUT,
    MODEL_CONFIGS,
    SMOLLM2_135M,
    ModelConfig,
    cache_bytes_per_token,
    cache_numbers_per_token,
)
from course_utils.models.smollm2.loading import SmolLM2Config


def test_bytes_per_token_of_the_lessons_models():
    assert cache_bytes_per_token(LLAMA_3_8B) == 128 * 1024  # 2 · 32 · 8 · 128 · 2
    assert cache_bytes_per_token(SMOLLM2_135M) == 2 * 30 * 3 * 64 * 2
    assert cache_bytes_per_token(DEEPSEEK_V3) == 61 * (512 + 64) * 2
    assert cache_bytes_per_token(DEEPSEEK_V3, bytes_per_number=1) == 61 * 576
    assert cache_numbers_per_token(dataclasses.replace(
        DEEPSEEK_V3, kv_latent_dim=None, rope_dim=None)) == 61 * 2 * 128 * 128


def test_every_config_is_consistent_and_sourced():
    for config in MODEL_CONFIGS.values():
        assert config.num_heads * config.head_dim >= config.d_model // 2
        assert config.sources and all(isinstance(s, str) and s for s in config.sources.values())
        assert len(config.layer_windows) == config.num_layers


def test_the_window_layouts():
    def full(config):
        return sum(window is None for window in config.layer_windows)

    assert full(GEMMA_3_27B) == 10 and set(GEMMA_3_27B.layer_windows) == {None, 1024}
    assert GEMMA_3_27B.layer_windows[5] is None and GEMMA_3_27B.layer_windows[4] == 1024
    assert full(GPT_OSS_120B) == 18 and GPT_OSS_120B.layer_windows[:2] == (128, None)
    assert full(LLAMA_4_SCOUT) == 12 and LLAMA_4_SCOUT.layer_windows[:4] == (8192,) * 3 + (None,)
    assert LLAMA_4_SCOUT.window_kind == "chunked" and GEMMA_3_27B.window_kind == "sliding"


def test_smollm2_matches_the_config_lesson_14_reads_from_its_gguf_file():
    fields = {f.name for f in dataclasses.fields(SmolLM2Config)}
    assert {"num_layers", "num_heads", "num_kv_heads", "d_k"} <= fields


_GOOD = dict(name="toy", num_layers=2, d_model=8, num_heads=2, num_kv_heads=1, head_dim=4,
             max_context=16, layer_windows=(None, None), sources={"made up": "here"})

BAD_INPUTS = [
    pytest.param(ModelConfig, (), {**_GOOD, "num_kv_heads": 3}, ValueError,
                 ("num_heads=2", "num_kv_heads=3"), id="kv heads do not divide"),
    pytest.param(ModelConfig, (), {**_GOOD, "num_layers": 0}, ValueError,
                 ("num_layers", "positive int", "0"), id="no layers"),
    pytest.param(ModelConfig, (), {**_GOOD, "layer_windows": (None,)}, ValueError,
                 ("layer_windows", "one entry per layer (2)", "got 1"), id="windows too few"),
    pytest.param(ModelConfig, (), {**_GOOD, "layer_windows": [None, None]}, TypeError,
                 ("layer_windows", "tuple", "list"), id="windows a list"),
    pytest.param(ModelConfig, (), {**_GOOD, "layer_windows": (4, None)}, ValueError,
                 ("window_kind", "sliding", "None"), id="windows of no kind"),
    pytest.param(ModelConfig, (), {**_GOOD, "layer_windows": (4, None), "window_kind": "local"},
                 ValueError, ("window_kind", "sliding", "local"), id="unknown window kind"),
    pytest.param(ModelConfig, (), {**_GOOD, "kv_latent_dim": 8}, ValueError,
                 ("kv_latent_dim and rope_dim", "8 and None"), id="latent without rope"),
    pytest.param(ModelConfig, (), {**_GOOD, "sources": "a paper"}, TypeError,
                 ("sources", "dict", "str"), id="sources a str"),
    pytest.param(cache_numbers_per_token, ({"num_layers": 2},), {}, TypeError,
                 ("config", "ModelConfig", "dict"), id="numbers: a dict"),
    pytest.param(cache_bytes_per_token, (LLAMA_3_8B, 0), {}, ValueError,
                 ("bytes_per_number", "positive int", "0"), id="bytes: zero bytes"),
]
