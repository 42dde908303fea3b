"""Three small sequence readers that answer at the last position: RNN, LSTM, attention.

Each reads tokens ``(batch, seq_len)`` and returns logits ``(batch, num_classes)``
computed from the last position only, so they can be compared on one task
(see ``course_utils.experiments.l01_distance``). The recurrent ones must carry information
there one step
at a time; the attention one looks at every position directly.
"""

from __future__ import annotations

from torch import nn

from course_utils.checks import (
    require_instance,
    require_one_of,
    require_positive_int,
    require_token_ids,
)
from course_utils.language import _
from course_utils.nn.attention import SelfAttention


class RecurrentReader(nn.Module):
    """Embedding, then a one-layer ``nn.RNN`` (tanh) or ``nn.LSTM``, then a linear readout.

    ``cell`` is ``"rnn"`` or ``"lstm"``. Shapes: tokens ``(batch, seq_len)`` ->
    embeddings ``(batch, seq_len, d_embed)`` -> hidden states
    ``(batch, seq_len, d_hidden)`` -> logits ``(batch, num_classes)`` from the last one.

    Used in lesson 01.
    """

    def __init__(self, cell: str, vocab_size: int, num_classes: int, d_embed: int,
                 d_hidden: int):
        super().__init__()
        recurrent = {"rnn": nn.RNN, "lstm": nn.LSTM}
        require_one_of("cell", cell, recurrent)
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, d_embed)
        self.recurrent = recurrent[cell](d_embed, d_hidden, batch_first=True)
        self.readout = nn.Linear(d_hidden, num_classes)

    def forward(self, tokens):
        tokens = require_token_ids("tokens", tokens, self.vocab_size)
        states, _last = self.recurrent(self.embed(tokens))  # (batch, seq_len, d_hidden)
        return self.readout(states[:, -1])  # (batch, num_classes)


class AttentionReader(nn.Module):
    """Embedding, one ``SelfAttention`` head, then a linear readout at the last position.

    No positional encoding: the layer cannot even tell how far away a token is, which
    is the point here (lesson 11 adds order back). Shapes: tokens ``(batch, seq_len)``
    -> x ``(batch, seq_len, d_model)`` -> output ``(batch, seq_len, d_model)`` and
    weights ``(batch, seq_len, seq_len)`` -> logits ``(batch, num_classes)``.

    Used in lesson 01.
    """

    def __init__(self, vocab_size: int, num_classes: int, d_model: int):
        super().__init__()
        self.vocab_size = require_positive_int("vocab_size", vocab_size)
        require_positive_int("num_classes", num_classes)
        self.embed = nn.Embedding(vocab_size, require_positive_int("d_model", d_model))
        self.attention = SelfAttention(d_model, d_model, d_model)
        self.readout = nn.Linear(d_model, num_classes)

    def forward(self, tokens, return_weights: bool = False):
        """Logits ``(batch, num_classes)``; with ``return_weights`` also the last
        query's attention weights ``(batch, seq_len)``."""
        tokens = require_token_ids("tokens", tokens, self.vocab_size)
        output, weights = self.attention(self.embed(tokens))  # (batch, seq_len, d_model)
        logits = self.readout(output[:, -1])  # (batch, num_classes)
        return (logits, weights[:, -1]) if return_weights else logits


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters.

    Used in lessons 01, 04, 07 and 10.
    """
    require_instance("model", model, nn.Module, _("a torch.nn.Module"))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
