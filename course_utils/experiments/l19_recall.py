"""Lesson 19's experiment: associative recall (MQAR) at a fixed state size.

Multi-query associative recall (Arora et al., 2023) shows a sequence of key-value pairs, then
asks for the values of some of the keys again. Here each pair is one position (the sum of a
key embedding and a value embedding) and each question is a position that shows only its key
(with the value "?"), so a single layer of any token mixer can answer it and no positions are
needed: what is measured is how many pairs a mixer can hold, not whether it can find them.

``RecallModel`` stacks pre-norm residual layers of one mixer each (no feed-forward layers):
softmax attention, linear attention, the delta rule, the gated delta rule. Every non-softmax
layer carries a state of ``num_heads · d_k · d_k`` numbers, whatever the sequence length;
a softmax layer keeps every key and value. ``MODELS`` lists the five stacks the lesson trains.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import (
    require_generator,
    require_instance,
    require_int_in_range,
    require_one_of,
    require_positive_int,
    require_positive_number,
)
from course_utils.language import _
from course_utils.nn.linear_attention import delta_rule, linear_attention
from course_utils.nn.training import fit

MIXERS = ("softmax", "linear", "delta", "gated delta")
# The five stacks of four layers the lesson compares: one kind of mixer each, and a hybrid
# with one softmax layer in four (the last).
MODELS = {
    "softmax": ("softmax",) * 4,
    "linear": ("linear",) * 4,
    "delta rule": ("delta",) * 4,
    "gated delta": ("gated delta",) * 4,
    "hybrid 3:1": ("gated delta",) * 3 + ("softmax",),
}
MAX_QUERIES = 16


def mqar_batch(batch_size: int, num_pairs: int, num_keys: int = 64, num_values: int = 64,
               generator: torch.Generator | None = None):
    """A batch of recall problems: ``num_pairs`` pairs, then ``min(num_pairs, 16)`` questions.

    Keys are distinct within a sequence; each question asks a different one of its keys.
    Returns ``(key_ids, value_ids, targets)``: key_ids and value_ids ``(batch, seq_len)`` with
    ``seq_len = num_pairs + num_queries``, value id ``num_values`` meaning "?" (a question),
    and targets ``(batch, num_queries)``, the values asked for.

    Used in lesson 19.
    """
    require_positive_int("batch_size", batch_size)
    require_positive_int("num_values", num_values)
    require_positive_int("num_keys", num_keys)
    require_int_in_range("num_pairs", num_pairs, 1, num_keys)
    require_generator("generator", generator)
    num_queries = min(num_pairs, MAX_QUERIES)
    keys = torch.rand(batch_size, num_keys, generator=generator).argsort(-1)[:, :num_pairs]
    values = torch.randint(num_values, (batch_size, num_pairs), generator=generator)
    asked = torch.rand(batch_size, num_pairs, generator=generator).argsort(-1)[:, :num_queries]
    key_ids = torch.cat([keys, keys.gather(1, asked)], dim=1)  # (batch, seq_len)
    value_ids = torch.cat([values, torch.full((batch_size, num_queries), num_values)], dim=1)
    return key_ids, value_ids, values.gather(1, asked)


class Mixer(nn.Module):
    """One token-mixing layer: softmax attention, linear attention, or the (gated) delta rule.

    ``kind`` is one of ``MIXERS``. For the three fixed-state kinds q and k are scaled to unit
    length per head; the delta rule's write strength is ``β_t = sigmoid(w_β · x_t)`` and the
    gated form's decay ``α_t = sigmoid(w_α · x_t + b)``, starting near 0.95. Input and output
    ``(batch, seq_len, d_model)``.

    Used in lesson 19.
    """

    def __init__(self, kind: str, d_model: int, num_heads: int, d_k: int):
        super().__init__()
        self.kind = require_one_of("kind", kind, MIXERS)
        self.num_heads = require_positive_int("num_heads", num_heads)
        self.d_k = require_positive_int("d_k", d_k)
        require_positive_int("d_model", d_model)
        self.w_qkv = nn.Linear(d_model, 3 * num_heads * d_k, bias=False)
        self.w_o = nn.Linear(num_heads * d_k, d_model, bias=False)
        self.gates = nn.Linear(d_model, 2 * num_heads)  # β and α, one per head
        with torch.no_grad():
            self.gates.bias[num_heads:] = 3.0  # α = sigmoid(3) ≈ 0.95 at the start

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, n, _d_model = x.shape
        q, k, v = self.w_qkv(x).view(batch, n, 3, self.num_heads, self.d_k).permute(2, 0, 3, 1, 4)
        if self.kind == "softmax":  # q, k, v: (batch, heads, seq_len, d_k)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            beta, alpha = self.gates(x).transpose(1, 2).sigmoid().chunk(2, dim=1)  # (b, h, n)
            if self.kind == "linear":
                out = linear_attention(q, k, v)
            else:
                out = delta_rule(q, k, v, beta, alpha if self.kind == "gated delta" else None,
                                 form="parallel")
        return self.w_o(out.transpose(1, 2).reshape(batch, n, -1))  # (batch, seq_len, d_model)


class RecallModel(nn.Module):
    """Key and value embeddings, pre-norm residual mixer layers, a readout of the values.

    ``layers`` names one mixer per layer (``MIXERS``). ``forward(key_ids, value_ids,
    num_queries)`` returns the logits over the values at the last ``num_queries`` positions,
    ``(batch, num_queries, num_values)``.

    Used in lesson 19.
    """

    def __init__(self, layers, num_keys: int = 64, num_values: int = 64, d_model: int = 64,
                 num_heads: int = 1, d_k: int = 8):
        super().__init__()
        require_instance("layers", layers, (tuple, list), _("a tuple of mixer kinds"))
        if not layers:
            raise ValueError(_("layers should name at least one mixer, got an empty tuple"))
        for kind in layers:
            require_one_of(_("every entry of layers"), kind, MIXERS)
        self.layers = tuple(layers)
        self.key_embedding = nn.Embedding(require_positive_int("num_keys", num_keys), d_model)
        self.value_embedding = nn.Embedding(require_positive_int("num_values", num_values) + 1,
                                            d_model)  # the last one is "?"
        self.mixers = nn.ModuleList(Mixer(kind, d_model, num_heads, d_k) for kind in layers)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _layer in layers)
        self.readout = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, num_values))

    def state_numbers(self) -> int:
        """Numbers each sequence's fixed state holds (every non-softmax layer's heads·d_k·d_k)."""
        return sum(m.num_heads * m.d_k * m.d_k for m in self.mixers if m.kind != "softmax")

    def forward(self, key_ids, value_ids, num_queries: int) -> torch.Tensor:
        x = self.key_embedding(key_ids) + self.value_embedding(value_ids)  # (b, n, d_model)
        for norm, mixer in zip(self.norms, self.mixers, strict=True):
            x = x + mixer(norm(x))
        return self.readout(x[:, -num_queries:])  # (batch, num_queries, num_values)


def train_recall(layers, seed: int, pairs=(4, 8, 16, 32), steps: int = 200,
                 batch_size: int = 32, lr: float = 3e-3) -> RecallModel:
    """Train a ``RecallModel(layers)`` on MQAR with ``steps`` Adam steps, from ``seed``.

    The steps take turns over the numbers of pairs in ``pairs``, so one model learns them all;
    the weights and the batches both follow ``seed``.

    Used in lesson 19.
    """
    require_int_in_range("seed", seed, 0)
    pairs = _require_pairs(pairs)
    require_positive_int("steps", steps)
    require_positive_int("batch_size", batch_size)
    require_positive_number("lr", lr)
    torch.manual_seed(seed)
    model = RecallModel(layers)
    generator = torch.Generator().manual_seed(seed)

    def loss_at_step(step):
        key_ids, value_ids, targets = mqar_batch(batch_size, pairs[step % len(pairs)],
                                                 generator=generator)
        logits = model(key_ids, value_ids, targets.shape[1])
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    fit(model, loss_at_step, steps, lr=lr)
    return model


def _require_pairs(pairs) -> tuple[int, ...]:
    require_instance("pairs", pairs, (tuple, list), _("a tuple of numbers of pairs"))
    if not pairs:
        raise ValueError(_("pairs should hold at least one number of pairs, got an empty tuple"))
    return tuple(require_int_in_range(_("every entry of pairs"), p, 1, 64) for p in pairs)


def recall_accuracy(model: RecallModel, pairs=(4, 8, 16, 32), batch_size: int = 256,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """Fraction of questions answered right, for each number of pairs: ``(len(pairs),)``.

    Used in lesson 19.
    """
    require_instance("model", model, RecallModel, _("a RecallModel"))
    pairs = _require_pairs(pairs)
    require_positive_int("batch_size", batch_size)
    require_generator("generator", generator)
    accuracies = []
    with torch.no_grad():
        for num_pairs in pairs:
            key_ids, value_ids, targets = mqar_batch(batch_size, num_pairs, generator=generator)
            answers = model(key_ids, value_ids, targets.shape[1]).argmax(-1)
            accuracies.append((answers == targets).float().mean())
    return torch.stack(accuracies)
