"""The attention sizes of real models, each number with its source, and what they cache.

Every configuration is copied from the model's published ``config.json`` on the Hugging Face
Hub (the file a loader reads, so the numbers are the ones that run), cross-checked with the
paper or model card named beside it. Only what the key/value cache depends on is kept:
layers, heads, key/value heads, head width, MLA's latent and RoPE widths, and **per layer**
the attention span (``None`` = every earlier token; an int = a window of that many tokens),
so that sliding-window and chunked caches can be counted too: lesson 18 counts the cache of
full attention, lesson 17 what the windows save at a given context.

A number in a cache means one stored element; ``bytes_per_number`` is 2 for bfloat16, the
dtype every model here ships its weights in.
"""

from __future__ import annotations

from dataclasses import dataclass

from course_utils.checks import require_instance, require_one_of, require_positive_int
from course_utils.language import _

WINDOW_KINDS = ("sliding", "chunked")


@dataclass(frozen=True)
class ModelConfig:
    """One model's attention sizes and the source of each (``sources``: field -> where).

    ``num_kv_heads`` is the number of key/value heads a layer caches (``num_heads`` for
    multi-head attention, 1 for multi-query); ``kv_latent_dim`` and ``rope_dim`` are set for
    multi-head latent attention only, which caches ``kv_latent_dim + rope_dim`` numbers per
    token and layer instead. ``layer_windows[i]`` is layer ``i``'s span: ``None`` for full
    attention, else the window (``window_kind`` "sliding": the last N tokens; "chunked":
    the tokens of the same N-token chunk).

    Used in lesson 18.
    """

    name: str
    num_layers: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_context: int
    layer_windows: tuple
    sources: dict
    kv_latent_dim: int | None = None
    rope_dim: int | None = None
    window_kind: str | None = None

    def __post_init__(self):
        require_instance("name", self.name, str, _("a str"))
        for field in ("num_layers", "d_model", "num_heads", "num_kv_heads", "head_dim",
                      "max_context"):
            require_positive_int(field, getattr(self, field))
        if self.num_heads % self.num_kv_heads:
            raise ValueError(_(
                "num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}: each "
                "key/value head serves a whole group"
            ).format(num_heads=self.num_heads, num_kv_heads=self.num_kv_heads))
        if (self.kv_latent_dim is None) != (self.rope_dim is None):
            raise ValueError(_(
                "kv_latent_dim and rope_dim go together (latent attention) or are both None, got "
                "{kv_latent_dim} and {rope_dim}"
            ).format(kv_latent_dim=self.kv_latent_dim, rope_dim=self.rope_dim))
        if self.kv_latent_dim is not None:
            require_positive_int("kv_latent_dim", self.kv_latent_dim)
            require_positive_int("rope_dim", self.rope_dim)
        require_instance("layer_windows", self.layer_windows, tuple, _("a tuple"))
        if len(self.layer_windows) != self.num_layers:
            raise ValueError(_(
                "layer_windows should hold one entry per layer ({num_layers}), got "
                "{n_layer_windows}"
            ).format(num_layers=self.num_layers, n_layer_windows=len(self.layer_windows)))
        for window in self.layer_windows:
            if window is not None:
                require_positive_int(_("a window of layer_windows"), window)
        if self.window_kind is not None:
            require_one_of("window_kind", self.window_kind, WINDOW_KINDS)
        if any(w is not None for w in self.layer_windows) and self.window_kind is None:
            raise ValueError(_(
                "window_kind should say what the windows of layer_windows are, one of "
                "{WINDOW_KINDS}, got None"
            ).format(WINDOW_KINDS=WINDOW_KINDS))
        require_instance("sources", self.sources, dict, _("a dict of field -> source"))

    @property
    def uses_latent(self) -> bool:
        """Whether the layers cache a latent (multi-head latent attention)."""
        return self.kv_latent_dim is not None


def _full(num_layers: int) -> tuple:
    return (None,) * num_layers


LLAMA_3_8B = ModelConfig(
    name="Llama 3 8B", num_layers=32, d_model=4096, num_heads=32, num_kv_heads=8,
    head_dim=128, max_context=8192, layer_windows=_full(32),
    sources={
        "config": "meta-llama/Meta-Llama-3-8B, config.json: num_hidden_layers 32, hidden_size "
                  "4096, num_attention_heads 32, num_key_value_heads 8, "
                  "max_position_embeddings 8192 (head_dim = 4096 / 32 = 128)",
        "paper": "Grattafiori et al. (2024), The Llama 3 Herd of Models, Table 3 "
                 "(8B: 32 layers, 4096 wide, 32 heads, 8 key/value heads)",
    },
)

LLAMA_3_70B = ModelConfig(
    name="Llama 3 70B", num_layers=80, d_model=8192, num_heads=64, num_kv_heads=8,
    head_dim=128, max_context=8192, layer_windows=_full(80),
    sources={
        "config": "meta-llama/Meta-Llama-3-70B, config.json: num_hidden_layers 80, hidden_size "
                  "8192, num_attention_heads 64, num_key_value_heads 8, "
                  "max_position_embeddings 8192 (head_dim = 8192 / 64 = 128)",
        "paper": "Grattafiori et al. (2024), The Llama 3 Herd of Models, Table 3 "
                 "(70B: 80 layers, 8192 wide, 64 heads, 8 key/value heads)",
    },
)

SMOLLM2_135M = ModelConfig(
    name="SmolLM2-135M", num_layers=30, d_model=576, num_heads=9, num_kv_heads=3,
    head_dim=64, max_context=8192, layer_windows=_full(30),
    sources={
        "config": "HuggingFaceTB/SmolLM2-135M, config.json: num_hidden_layers 30, hidden_size "
                  "576, num_attention_heads 9, num_key_value_heads 3, "
                  "max_position_embeddings 8192 (head_dim = 576 / 9 = 64); the same numbers "
                  "are in the GGUF file lesson 14 loads",
    },
)

DEEPSEEK_V3 = ModelConfig(
    name="DeepSeek-V3", num_layers=61, d_model=7168, num_heads=128, num_kv_heads=128,
    head_dim=128, max_context=163840, layer_windows=_full(61), kv_latent_dim=512, rope_dim=64,
    sources={
        "config": "deepseek-ai/DeepSeek-V3, config.json: num_hidden_layers 61, hidden_size "
                  "7168, num_attention_heads 128, num_key_value_heads 128, kv_lora_rank 512, "
                  "qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128, "
                  "max_position_embeddings 163840",
        "paper": "DeepSeek-AI (2024), DeepSeek-V3 Technical Report, section 4.2 (d_c = 512, "
                 "d_h^R = 64, 128 heads of 128, 61 layers)",
    },
)

GEMMA_3_27B = ModelConfig(
    name="Gemma 3 27B", num_layers=62, d_model=5376, num_heads=32, num_kv_heads=16,
    head_dim=128, max_context=131072, window_kind="sliding",
    # Five local layers, then one global: layer i is global when (i + 1) % 6 == 0.
    layer_windows=tuple(None if (i + 1) % 6 == 0 else 1024 for i in range(62)),
    sources={
        "config": "google/gemma-3-27b-it, config.json (text_config): num_hidden_layers 62, "
                  "hidden_size 5376, num_attention_heads 32, num_key_value_heads 16, "
                  "head_dim 128, sliding_window 1024, sliding_window_pattern 6, "
                  "max_position_embeddings 131072",
        "paper": "Gemma Team (2025), Gemma 3 Technical Report, section 2 (5 local layers of a "
                 "1024-token window per global layer, 128K context)",
    },
)

GPT_OSS_120B = ModelConfig(
    name="gpt-oss-120b", num_layers=36, d_model=2880, num_heads=64, num_kv_heads=8,
    head_dim=64, max_context=131072, window_kind="sliding",
    # layer_types: ["sliding_attention", "full_attention"] * 18
    layer_windows=tuple(128 if i % 2 == 0 else None for i in range(36)),
    sources={
        "config": "openai/gpt-oss-120b, config.json: num_hidden_layers 36, hidden_size 2880, "
                  "num_attention_heads 64, num_key_value_heads 8, head_dim 64, "
                  "sliding_window 128, layer_types alternating sliding_attention and "
                  "full_attention, max_position_embeddings 131072",
        "model card": "OpenAI (2025), gpt-oss-120b & gpt-oss-20b Model Card (alternating "
                      "banded-window layers of 128 tokens and dense layers, GQA with 8 "
                      "key/value heads)",
    },
)

LLAMA_4_SCOUT = ModelConfig(
    name="Llama 4 Scout", num_layers=48, d_model=5120, num_heads=40, num_kv_heads=8,
    head_dim=128, max_context=10485760, window_kind="chunked",
    # no_rope_layers = [1, 1, 1, 0] * 12: three chunked RoPE layers, then one full NoPE layer.
    layer_windows=tuple(None if i % 4 == 3 else 8192 for i in range(48)),
    sources={
        "config": "meta-llama/Llama-4-Scout-17B-16E, config.json (text_config): "
                  "num_hidden_layers 48, hidden_size 5120, num_attention_heads 40, "
                  "num_key_value_heads 8, head_dim 128, attention_chunk_size 8192, "
                  "no_rope_layers [1, 1, 1, 0] * 12, max_position_embeddings 10485760",
        "model card": "Meta (2025), Llama 4 model card and blog post (iRoPE: interleaved "
                      "attention layers without positional embeddings, 10M context)",
    },
)

MODEL_CONFIGS = {config.name: config for config in (
    LLAMA_3_8B, LLAMA_3_70B, SMOLLM2_135M, DEEPSEEK_V3, GEMMA_3_27B, GPT_OSS_120B,
    LLAMA_4_SCOUT)}


def cache_numbers_per_token(config: ModelConfig) -> int:
    """Numbers one token adds to the cache of full attention, summed over the layers.

    ``num_layers · 2 · num_kv_heads · head_dim`` (a key and a value per key/value head), or
    ``num_layers · (kv_latent_dim + rope_dim)`` for multi-head latent attention. Windows
    are ignored: this is what a context shorter than every window keeps.

    Used in lesson 18.
    """
    require_instance("config", config, ModelConfig, _("a course_utils.data.model_configs"
                     ".ModelConfig"))
    if config.uses_latent:
        return config.num_layers * (config.kv_latent_dim + config.rope_dim)
    return config.num_layers * 2 * config.num_kv_heads * config.head_dim


def cache_bytes_per_token(config: ModelConfig, bytes_per_number: int = 2) -> int:
    """Bytes one token adds to the cache of full attention: :func:`cache_numbers_per_token`
    times ``bytes_per_number`` (2 for bfloat16 or float16, 1 for an 8-bit cache).

    Used in lessons 17 and 18.
    """
    require_positive_int("bytes_per_number", bytes_per_number)
    return cache_numbers_per_token(config) * bytes_per_number


def cache_bytes_per_token_at(config: ModelConfig, context: int,
                             bytes_per_number: int = 2) -> float:
    """Bytes of cache per token of context once ``context`` tokens are cached, windows counted.

    A layer keeps every position if it is global, at most W of a window of W, at most C of
    chunks of C (the worst moment, a chunk's last token). Summed over the layers and divided
    by ``context``; for a model without windows it equals :func:`cache_bytes_per_token`.

    Used in lesson 17.
    """
    require_instance("config", config, ModelConfig, _("a course_utils.data.model_configs"
                     ".ModelConfig"))
    require_positive_int("context", context)
    require_positive_int("bytes_per_number", bytes_per_number)
    kept = sum(context if window is None else min(window, context)
               for window in config.layer_windows)  # positions held, over all layers
    per_position = cache_numbers_per_token(config) // config.num_layers  # one layer's
    return kept * per_position * bytes_per_number / context
