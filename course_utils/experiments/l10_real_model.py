"""Reading a real pretrained encoder (lesson 10): every head's attention for a text.

Weights are ``(num_layers, num_heads, n, n)``; heads are switched off with
:func:`course_utils.nn.ablation.ablated`.
"""

from __future__ import annotations

import torch

from course_utils.checks import require_instance
from course_utils.models.minilm import MiniLM, Tokenizer


def attention_maps(model: MiniLM, tokenizer: Tokenizer, text: str):
    """The tokens of ``text`` and every head's attention weights for it.

    Returns ``(tokens, weights)``: ``tokens`` a list of n strings (``[CLS]`` ... ``[SEP]``),
    ``weights`` a tensor ``(num_layers, num_heads, n, n)`` = (6, 12, n, n) whose
    ``[layer, head, i, j]`` is how much token i attends to token j; each row sums to 1.

    Used in lesson 10.
    """
    require_instance("model", model, MiniLM, "the MiniLM of load_minilm()")
    require_instance("tokenizer", tokenizer, Tokenizer, "the Tokenizer of load_minilm()")
    tokens = tokenizer.tokens(text)
    input_ids = torch.tensor([tokenizer.encode(text)])  # (1, n)
    with torch.no_grad():
        output = model(input_ids)
    return tokens, torch.stack(output.attentions)[:, 0]  # (num_layers, num_heads, n, n)
