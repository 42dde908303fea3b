"""Models the tests build: small, random, and far from uniform."""

from __future__ import annotations

import torch

from course_utils.models.gpt import GPT
from course_utils.models.translator import Translator


def scaled_up_gpt(vocab_size: int, seed: int, max_len: int = 32, num_layers: int = 2,
                  num_heads: int = 4, d_ff: int | None = None) -> GPT:
    """A randomly initialised GPT with embeddings at N(0, 1), so its attention rows and
    next-token probabilities are far from uniform (GPT's own 0.02 start makes them flat)."""
    torch.manual_seed(seed)
    model = GPT(vocab_size, max_len=max_len, d_model=64, num_heads=num_heads,
                num_layers=num_layers, d_ff=d_ff)
    with torch.no_grad():
        model.token_embedding.weight.normal_()
        model.position_embedding.weight.normal_()
    return model.eval()


def scaled_up_translator(seed: int, d_model: int = 32, num_heads: int = 4, num_layers: int = 2,
                         **sizes) -> Translator:
    """A randomly initialised Translator whose matrices are drawn at N(0, 0.4), so its
    attention rows are far from uniform and its greedy choices far from ties."""
    torch.manual_seed(seed)
    model = Translator(d_model=d_model, num_heads=num_heads, num_layers=num_layers, **sizes)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 0.4)
    return model.eval()
