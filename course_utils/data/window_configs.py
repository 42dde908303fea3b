"""The attention layouts of four real decoders, as their published configuration files give them.

Each entry holds only what the size of the KV cache depends on, copied from the model's
``config.json`` on the Hugging Face Hub (the URL is in ``source``; the field names in the
comments are that file's), and the layout of its layers written out one entry per layer:
``None`` for a global layer (it attends to every earlier position), an int W for a
sliding window of W positions, ``("chunk", C)`` for chunked attention (a position sees the
earlier positions of its own block of C).

- Gemma 3 27B: 62 layers, ``sliding_window_pattern: 6``, so every sixth layer is global and
  the other five see a window of ``sliding_window: 1024``;
- gpt-oss-120b: 36 layers, ``layer_types`` alternating ``sliding_attention`` (window
  ``sliding_window: 128``) and ``full_attention``, starting with a sliding one;
- Llama 4 Scout: 48 layers; every fourth (``no_rope_layer_interval: 4``) is a global layer
  without RoPE, the others attend within chunks of ``attention_chunk_size: 8192``;
- Llama 3.1 8B, the dense reference: 32 global layers.

Keys and values are counted in bfloat16 (2 bytes), as these models are served.
"""

from __future__ import annotations

from course_utils.checks import require_one_of


def _every(num_layers: int, period: int, local, global_=None) -> tuple:
    """``num_layers`` entries: ``global_`` at every ``period``-th layer (1-based), else
    ``local``."""
    return tuple(global_ if (layer + 1) % period == 0 else local for layer in range(num_layers))


WINDOW_CONFIGS = {
    "Gemma 3 27B": {
        "source": "https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json",
        "num_layers": 62,       # text_config.num_hidden_layers
        "num_kv_heads": 16,     # text_config.num_key_value_heads
        "head_dim": 128,        # text_config.head_dim
        "layers": _every(62, 6, 1024),  # sliding_window 1024, sliding_window_pattern 6
    },
    "gpt-oss-120b": {
        "source": "https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json",
        "num_layers": 36,       # num_hidden_layers
        "num_kv_heads": 8,      # num_key_value_heads
        "head_dim": 64,         # head_dim
        "layers": _every(36, 2, 128),  # layer_types: sliding, full, sliding, ...; window 128
    },
    "Llama 4 Scout": {
        "source": "https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E/blob/main/config.json",
        "num_layers": 48,       # text_config.num_hidden_layers
        "num_kv_heads": 8,      # text_config.num_key_value_heads
        "head_dim": 128,        # text_config.head_dim
        "layers": _every(48, 4, ("chunk", 8192)),  # attention_chunk_size 8192, NoPE every 4th
    },
    "Llama 3.1 8B": {
        "source": "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
        "num_layers": 32,       # num_hidden_layers
        "num_kv_heads": 8,      # num_key_value_heads
        "head_dim": 128,        # hidden_size 4096 / num_attention_heads 32
        "layers": (None,) * 32,
    },
}

BYTES_PER_NUMBER = 2  # bfloat16


def window_config(name: str) -> dict:
    """The entry of ``WINDOW_CONFIGS`` named ``name`` (a copy, safe to change).

    Used in lesson 17.
    """
    require_one_of("name", name, WINDOW_CONFIGS)
    return dict(WINDOW_CONFIGS[name])
